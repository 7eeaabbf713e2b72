// The pass before every fused backward kernel (portable and Hopper), over the rows (b, token, h)
// of [B, tokens, Hq]: delta[row] = rowsum(dO * O), and LSE * log2(e) for the kernels that want
// it. Memory-bound (row_pass.cuh).
#pragma once

#include "gna/core/problem.hpp"
#include "gna/tensor.hpp"

namespace gna::cuda {

// delta and lse2: one float per row, in plain row order; lse2 may be null (then only delta is
// written).
void launch_backward_prepass(const Problem& p, const TensorRef& out, const TensorRef& d_out,
                             const TensorRef& lse, float* delta, float* lse2, void* stream);

}  // namespace gna::cuda
