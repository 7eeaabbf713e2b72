// Portable fused forward, f16 instantiations (one per supported head-dim pair).
#include "kernels/portable/forward_launch.cuh"

namespace gna::portable {

void launch_forward_f16(const ForwardCall& call, const TilePlan& plan) {
  const int d = call.problem.dim_qk, dv = call.problem.dim_v;
#define GNA_CASE(D, DV) \
  if (d == D && dv == DV) return launch_forward<__half, D, DV>(call, plan);
  GNA_PORTABLE_HEAD_DIMS(GNA_CASE)
#undef GNA_CASE
  fail(ErrorKind::unsupported, "portable: head dims ", d, "/", dv, " not supported (",
       supported_head_dims(), ")");
}

}  // namespace gna::portable
