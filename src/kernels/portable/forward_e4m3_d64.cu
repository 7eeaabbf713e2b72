// Portable fused forward with e4m3 operands (the FP8 forward, sm_89+), head dims 64/64, output
// in bf16 or fp16 (one file per head dim keeps each compile short).
#include "kernels/portable/forward_launch.cuh"

namespace gna::portable {

bool launch_forward_e4m3_d64(const ForwardCall& call, const TilePlan& plan) {
  if (call.problem.dim_v != 64) return false;
  if (call.problem.dtype == DType::bf16)
    launch_forward<__nv_bfloat16, 64, 64, E4m3>(call, plan);
  else
    launch_forward<__half, 64, 64, E4m3>(call, plan);
  return true;
}

}  // namespace gna::portable
