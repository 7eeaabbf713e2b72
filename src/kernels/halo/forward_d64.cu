// Halo forward at head dim 64 (fp16 and bf16).
#include "kernels/halo/launch.cuh"

namespace gna::halo {

void launch_forward_d64(const ForwardCall& call, const Plan& keys_plan) {
  if (call.problem.dtype == DType::f16)
    launch_forward<__half, 64>(call, keys_plan);
  else
    launch_forward<__nv_bfloat16, 64>(call, keys_plan);
}

int forward_slabs_d64(const Problem& p, const Plan& keys_whole, int device) {
  return p.dtype == DType::f16 ? forward_slabs<__half, 64>(keys_whole, device)
                               : forward_slabs<__nv_bfloat16, 64>(keys_whole, device);
}

}  // namespace gna::halo
