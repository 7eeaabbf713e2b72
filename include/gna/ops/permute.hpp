// CPU token permutation and its inverse (see gna/core/permutation.hpp for the layout).
#pragma once

#include "gna/core/permutation.hpp"
#include "gna/tensor.hpp"

namespace gna {

// Validates tiles (>= 1) and dilations (>= 1) against the extents, naming axis and value.
void validate_permutation_plan(const PermutationPlan& plan);

// src: [B, X, (Y, (Z)), H, D] (any strides, last contiguous); dst: [B * groups,
// tokens_per_group, H, D]. Padding positions of dst are zeroed. Host tensors, any dtype.
void permute_tokens(const PermutationPlan& plan, const TensorRef& src, TensorRef& dst);
// Inverse: dst heads-last, every real position written from src.
void unpermute_tokens(const PermutationPlan& plan, const TensorRef& src, TensorRef& dst);

}  // namespace gna
