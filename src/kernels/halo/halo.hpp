// Halo backend ("halo"): neighborhood-tile kernels for small windows (mma.sync, sm_80+, fp16 /
// bf16, head dims 32 and 64). Declarations shared by the backend and the per-head-dim
// instantiation files.
#pragma once

#include "backend/backend.hpp"
#include "kernels/halo/plan.hpp"

namespace gna::halo {

// Per head dim D (32 or 64), both dtypes, from the whole halos' plans (each pass launches the
// whole halo or slabs of it, launch_plan). Defined in launch.cuh and instantiated in
// forward_d<D>.cu and backward_d<D>.cu, one translation unit per head dim.
template <int D>
void launch_forward_for_dtype(const ForwardCall& call, const Plan& keys_plan);
template <int D>
void launch_backward_for_dtype(const BackwardCall& call, const Plan& keys_plan, const Plan& queries_plan);
// What a pass of the problem launches on the device, from the whole halo's plan (keys for the
// forward and dQ pass, queries for dK / dV): slabs of the halo (1: the whole halo), planes per
// slab, whether dK / dV keeps K / V in registers (Plan::kv_registers), shared memory per CTA and
// resident CTAs per SM; for tests.
struct Launched {
  int slabs = 1;
  int slab_planes = 1;
  bool kv_registers = false;
  int bytes = 0;
  int ctas_per_sm = 0;
};
Launched launched_plan(const Problem& p, const Plan& whole, Pass pass, int device);
inline int launched_slabs(const Problem& p, const Plan& whole, Pass pass, int device) {
  return launched_plan(p, whole, pass, device).slabs;
}
template <int D>
Launched forward_launched_for_dtype(const Problem& p, const Plan& keys_whole, int device);
template <int D>
Launched backward_launched_for_dtype(const Problem& p, const Plan& whole, Pass pass, int device);

}  // namespace gna::halo
