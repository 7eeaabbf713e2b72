// The ops' bodies: torch tensors to gna_tensor views, a rule's C structs, and one call of the C
// ABI's forward or backward (what ops.py's _na_forward / _na_backward do on the ctypes path, step
// for step, so that both paths give the same bits).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/List.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/util/Optional.h>
#include <c10/util/string_view.h>

#include <string>
#include <tuple>
#include <vector>

namespace gna_torch {

using at::Tensor;
using OptionalTensor = c10::optional<Tensor>;

// An op's rule arguments. group_of_head is empty for the plain ops; with it (the _heads ops),
// window, stride, dilation and causal hold each group's per-axis values, group-major.
struct Rule {
  std::vector<int64_t> window, stride, dilation, group_of_head;
  std::vector<bool> causal;
  double scale = 0.0;
  std::string backend;
  bool per_head = false;
};

Rule make_rule(c10::SymIntArrayRef window, c10::SymIntArrayRef stride,
               c10::SymIntArrayRef dilation, const c10::List<bool>& causal, double scale,
               c10::string_view backend);
Rule make_head_rule(c10::SymIntArrayRef window, c10::SymIntArrayRef stride,
                    c10::SymIntArrayRef dilation, const c10::List<bool>& causal,
                    c10::SymIntArrayRef group_of_head, double scale, c10::string_view backend);

// (out, lse) through gna_forward / gna_forward_heads, or with `counts` (an int32 tensor [B] of
// additional keys each batch item attends; undefined: none) through gna_forward_counts.
std::tuple<Tensor, Tensor> forward(const Rule& rule, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const OptionalTensor& ak,
                                   const OptionalTensor& av, const Tensor& counts = Tensor());

// (dq, dk, dv, d_additional_keys, d_additional_values) through gna_backward /
// gna_backward_heads (gna_backward_counts with `counts`); the last two are empty (0 elements)
// without additional tokens.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> backward(
    const Rule& rule, const Tensor& q, const Tensor& k, const Tensor& v, const OptionalTensor& ak,
    const OptionalTensor& av, const Tensor& out, const Tensor& lse, const Tensor& d_out,
    const Tensor& counts = Tensor());

// The core's validation on shapes, dtypes and strides alone (meta tensors), when every size and
// stride is a concrete number; symbolic shapes are checked when the call runs.
void validate_metadata(const Rule& rule, const Tensor& q, const Tensor& k, const Tensor& v,
                       const OptionalTensor& ak, const OptionalTensor& av);

}  // namespace gna_torch
