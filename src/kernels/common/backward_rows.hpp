// Row passes around every fused backward kernel (portable and Hopper), over the rows (b, token, h)
// of [B, tokens, Hq] in plain token order:
//   before: delta[row] = rowsum(dO * O), and LSE * log2(e) for kernels that want it;
//   after:  dq = scale * accumulator (fp32 [B, tokens, Hq, Dqk]) in dq's dtype and strides.
// Both are memory-bound; the kernels read 16 bytes per load where the tensors allow it and
// split a row index into (b, token, h) once per row, not per element.
#pragma once

#include "gna/core/problem.hpp"
#include "gna/tensor.hpp"

namespace gna::cuda {

// lse2 may be null (then only delta is written).
void launch_backward_delta(const Problem& p, const TensorRef& out, const TensorRef& d_out,
                           const TensorRef& lse, float* delta, float* lse2, void* stream);

void launch_dq_from_accumulator(const Problem& p, const float* accum, const TensorRef& dq,
                                float scale, void* stream);

}  // namespace gna::cuda
