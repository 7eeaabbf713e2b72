// The pass after the fused backward kernels, which add dQ into an fp32 accumulator: dq = scale *
// accumulator (fp32 [B, tokens, Hq, Dqk], plain row order) in dq's dtype and strides.
// Memory-bound (row_pass.cuh).
#pragma once

#include "gna/core/problem.hpp"
#include "gna/tensor.hpp"

namespace gna::cuda {

void launch_backward_postpass(const Problem& p, const float* accum, const TensorRef& dq,
                              float scale, void* stream);

}  // namespace gna::cuda
