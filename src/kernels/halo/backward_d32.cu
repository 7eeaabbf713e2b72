// Halo backward (dQ pass, then dK / dV pass) at head dim 32 (fp16 and bf16).
#include "kernels/halo/launch.cuh"

namespace gna::halo {

void launch_backward_d32(const BackwardCall& call, const Plan& keys_plan, const Plan& queries_plan) {
  if (call.problem.dtype == DType::f16)
    launch_backward<__half, 32>(call, keys_plan, queries_plan);
  else
    launch_backward<__nv_bfloat16, 32>(call, keys_plan, queries_plan);
}

int backward_slabs_d32(const Problem& p, const Plan& whole, Pass pass, int device) {
  return p.dtype == DType::f16 ? backward_slabs<__half, 32>(whole, pass, device)
                               : backward_slabs<__nv_bfloat16, 32>(whole, pass, device);
}

}  // namespace gna::halo
