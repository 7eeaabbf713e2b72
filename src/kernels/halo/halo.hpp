// Halo backend ("halo"): neighborhood-tile kernels for small windows (mma.sync, sm_80+, fp16 /
// bf16, head dims 32 and 64). Declarations shared by the backend and the per-head-dim
// instantiation files.
#pragma once

#include "backend/backend.hpp"
#include "kernels/halo/plan.hpp"

namespace gna::halo {

// Per head dim, both dtypes (forward_d<D>.cu, backward_d<D>.cu).
void launch_forward_d32(const ForwardCall& call, const Plan& keys_plan);
void launch_forward_d64(const ForwardCall& call, const Plan& keys_plan);
void launch_backward_d32(const BackwardCall& call, const Plan& keys_plan, const Plan& queries_plan);
void launch_backward_d64(const BackwardCall& call, const Plan& keys_plan, const Plan& queries_plan);

}  // namespace gna::halo
