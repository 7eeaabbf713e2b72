// Portable fused backend ("portable"): mma.sync kernels for every sm_80+ GPU, fp16/bf16, head
// dims 32/64/128 (V head dim may differ), indexing the heads-last tensors with multi-dimensional
// tiles (no token permutation pass).
#pragma once

#include <string>

#include "api/backend.hpp"
#include "kernels/portable/tile_plan.hpp"

namespace gna::portable {

// The (dim_qk, dim_v) pairs with compiled kernels.
bool head_dims_supported(int dim_qk, int dim_v);
const char* supported_head_dims();

bool supports_forward(const ForwardCall& call, std::string* why);
bool supports_backward(const BackwardCall& call, std::string* why);

// Tile shapes used for a call: the caller's (options) or choose_tiles'.
TilePlan forward_tiles(const Problem& p, const KernelOptions& options);
TilePlan backward_tiles(const Problem& p, const KernelOptions& options);

void forward(const ForwardCall& call);
void backward(const BackwardCall& call);

// Per (dtype, head dims) launchers, defined in the instantiation files.
void launch_forward_f16(const ForwardCall& call, const TilePlan& plan);
void launch_forward_bf16(const ForwardCall& call, const TilePlan& plan);
void launch_backward_f16(const BackwardCall& call, const TilePlan& plan);
void launch_backward_bf16(const BackwardCall& call, const TilePlan& plan);

}  // namespace gna::portable
