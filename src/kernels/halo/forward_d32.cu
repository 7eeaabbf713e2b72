// Halo forward at head dim 32 (fp16 and bf16).
#include "kernels/halo/launch.cuh"

namespace gna::halo {

void launch_forward_d32(const ForwardCall& call, const Plan& keys_plan) {
  if (call.problem.dtype == DType::f16)
    launch_forward<__half, 32>(call, keys_plan);
  else
    launch_forward<__nv_bfloat16, 32>(call, keys_plan);
}

int forward_slabs_d32(const Problem& p, const Plan& keys_whole, int device) {
  return p.dtype == DType::f16 ? forward_slabs<__half, 32>(keys_whole, device)
                               : forward_slabs<__nv_bfloat16, 32>(keys_whole, device);
}

}  // namespace gna::halo
