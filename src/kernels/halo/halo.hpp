// Halo backend ("halo"): neighborhood-tile kernels for small windows (mma.sync, sm_80+, fp16 /
// bf16, head dims 32 and 64). Declarations shared by the backend and the per-head-dim
// instantiation files.
#pragma once

#include "backend/backend.hpp"
#include "kernels/halo/plan.hpp"

namespace gna::halo {

// Per head dim, both dtypes (forward_d<D>.cu, backward_d<D>.cu), from the whole halos' plans
// (each pass launches the whole halo or slabs of it, launch_plan).
void launch_forward_d32(const ForwardCall& call, const Plan& keys_plan);
void launch_forward_d64(const ForwardCall& call, const Plan& keys_plan);
void launch_backward_d32(const BackwardCall& call, const Plan& keys_plan, const Plan& queries_plan);
void launch_backward_d64(const BackwardCall& call, const Plan& keys_plan, const Plan& queries_plan);
// Slabs of the halo that a pass of the problem launches on the device (1: the whole halo), from
// the whole halo's plan (keys for the forward and dQ pass, queries for dK / dV); for tests.
int launched_slabs(const Problem& p, const Plan& whole, Pass pass, int device);
int forward_slabs_d32(const Problem& p, const Plan& keys_whole, int device);
int forward_slabs_d64(const Problem& p, const Plan& keys_whole, int device);
int backward_slabs_d32(const Problem& p, const Plan& whole, Pass pass, int device);
int backward_slabs_d64(const Problem& p, const Plan& whole, Pass pass, int device);

}  // namespace gna::halo
