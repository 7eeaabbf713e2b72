// Token permutation on the GPU (layout of gna/core/permutation.hpp; CPU version in
// gna/ops/permute.hpp). Heads-last [B, X, (Y, (Z)), H, D] (or [B, X.., H] for LSE) <->
// permuted [B * groups, tokens_per_group, H, D] (batch-major: index b * groups + g).
// Any element size and strides with a contiguous last dim; copies run in 16-byte vectors
// whenever the per-token rows and their addresses allow it.
#pragma once

#include "gna/core/permutation.hpp"
#include "gna/tensor.hpp"

namespace gna::cuda {

// Padding positions of dst are zeroed. Device tensors; stream is a cudaStream_t (null: default).
void permute_tokens(const PermutationPlan& plan, const TensorRef& src, TensorRef& dst,
                    void* stream = nullptr);
// Inverse: every real position of the heads-last dst is written from src.
void unpermute_tokens(const PermutationPlan& plan, const TensorRef& src, TensorRef& dst,
                      void* stream = nullptr);

}  // namespace gna::cuda
