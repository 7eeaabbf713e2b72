// Portable fused backward, bf16, dim_qk 64 (one file per dim keeps each compile short).
#include "kernels/portable/backward_launch.cuh"

namespace gna::portable {

bool launch_backward_bf16_d64(const BackwardCall& call, const TilePlan& plan) {
  const int dv = call.problem.dim_v;
  if (dv == 64) { launch_backward_variant<__nv_bfloat16, 64, 64>(call, plan); return true; }
  if (dv == 128) { launch_backward_variant<__nv_bfloat16, 64, 128>(call, plan); return true; }
  return false;
}

}  // namespace gna::portable
