// Portable fused forward, bf16, dim_qk 32 (one file per dim keeps each compile short).
#include "kernels/portable/forward_launch.cuh"

namespace gna::portable {

bool launch_forward_bf16_d32(const ForwardCall& call, const TilePlan& plan) {
  const int dv = call.problem.dim_v;
  if (dv == 32) { launch_forward<__nv_bfloat16, 32, 32>(call, plan); return true; }
  return false;
}

}  // namespace gna::portable
