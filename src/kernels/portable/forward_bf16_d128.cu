// Portable fused forward, bf16, dim_qk 128 (one file per dim keeps each compile short).
#include "kernels/portable/forward_launch.cuh"

namespace gna::portable {

bool launch_forward_bf16_d128(const ForwardCall& call, const TilePlan& plan) {
  const int dv = call.problem.dim_v;
  if (dv == 128) { launch_forward<__nv_bfloat16, 128, 128>(call, plan); return true; }
  if (dv == 64) { launch_forward<__nv_bfloat16, 128, 64>(call, plan); return true; }
  return false;
}

}  // namespace gna::portable
