// Portable fused backward, bf16, dim_qk 32 (one file per dim keeps each compile short).
#include "kernels/portable/backward_launch.cuh"

namespace gna::portable {

bool launch_backward_bf16_d32(const BackwardCall& call, const TilePlan& plan) {
  const int dv = call.problem.dim_v;
  if (dv == 32) { launch_backward_variant<__nv_bfloat16, 32, 32>(call, plan); return true; }
  return false;
}

}  // namespace gna::portable
