// Halo forward at head dim 32 (fp16 and bf16).
#include "kernels/halo/launch.cuh"

namespace gna::halo {

void launch_forward_d32(const ForwardCall& call, const Plan& keys_plan) {
  if (call.problem.dtype == DType::f16)
    launch_forward<__half, 32>(call, keys_plan);
  else
    launch_forward<__nv_bfloat16, 32>(call, keys_plan);
}

}  // namespace gna::halo
