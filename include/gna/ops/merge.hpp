// Exact merge of attention outputs computed over disjoint key sets, by their logsumexp:
//   lse = log(sum_i exp(lse_i)),  out = sum_i exp(lse_i - lse) * out_i.
#pragma once

#include <vector>

#include "gna/tensor.hpp"

namespace gna {

// outputs[i]: [..., H, D] (same shape, float32 or float64), lses[i]: [..., H] float32 or
// float64 matching. Writes out (may alias outputs[0]) and, if given, lse_out. Host tensors.
void merge_attentions(const std::vector<TensorRef>& outputs, const std::vector<TensorRef>& lses,
                      TensorRef& out, TensorRef* lse_out);

}  // namespace gna
