// GPU reference backend: one warp per output row, plain loops over the attended keys (forward,
// dQ) or the attending queries (dK, dV, by the inverse rule). O(N * keys per query), fp32
// accumulation, any problem the core accepts with head dims up to kMaxHeadDim. The oracle for
// problems too large for the CPU reference.
#pragma once

#include <string>

#include "backend/backend.hpp"

namespace gna::gpu_reference {

constexpr int kMaxHeadDim = 256;

bool supports(const Problem& p, const TensorRef& q, std::string* why);
void forward(const ForwardCall& call);
// The FP8 forward (call.fp8 set; problem.dtype the output's: f32, f16 or bf16).
void forward_fp8(const ForwardCall& call);
void backward(const BackwardCall& call);

}  // namespace gna::gpu_reference
