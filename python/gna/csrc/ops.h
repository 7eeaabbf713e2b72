// The gna ops' C++ signature (every kernel of an op has it: CPU, CUDA, Meta, Autograd) and their
// calls through the dispatcher, so that tracing (torch.compile, fake tensors) sees each call.
#pragma once

#include "call.h"

namespace gna_torch {

using ForwardResult = std::tuple<Tensor, Tensor>;
using BackwardResult = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;
using Ints = c10::SymIntArrayRef;
using Bools = c10::List<bool>;

using ForwardSignature = ForwardResult(const Tensor&, const Tensor&, const Tensor&,
                                       const OptionalTensor&, const OptionalTensor&, Ints, Ints,
                                       Ints, const Bools&, double, c10::string_view, bool);
using BackwardSignature = BackwardResult(const Tensor&, const Tensor&, const Tensor&,
                                         const OptionalTensor&, const OptionalTensor&,
                                         const Tensor&, const Tensor&, const Tensor&, Ints, Ints,
                                         Ints, const Bools&, double, c10::string_view);
// The per-head ops: group_of_head after causal.
using ForwardHeadsSignature = ForwardResult(const Tensor&, const Tensor&, const Tensor&,
                                            const OptionalTensor&, const OptionalTensor&, Ints,
                                            Ints, Ints, const Bools&, Ints, double,
                                            c10::string_view, bool);
using BackwardHeadsSignature = BackwardResult(const Tensor&, const Tensor&, const Tensor&,
                                              const OptionalTensor&, const OptionalTensor&,
                                              const Tensor&, const Tensor&, const Tensor&, Ints,
                                              Ints, Ints, const Bools&, Ints, double,
                                              c10::string_view);

// The ops with per-batch counts of additional keys (joint attention with padded text; the C
// ABI's gna_forward_counts / gna_backward_counts): the additional tokens and the counts (int32
// [B]) after the value, then the rule with group_of_head (empty: one rule for every head). No
// gradient through the logsumexp.
using ForwardCountsSignature = ForwardResult(const Tensor&, const Tensor&, const Tensor&,
                                             const Tensor&, const Tensor&, const Tensor&, Ints,
                                             Ints, Ints, const Bools&, Ints, double,
                                             c10::string_view);
using BackwardCountsSignature = BackwardResult(const Tensor&, const Tensor&, const Tensor&,
                                               const Tensor&, const Tensor&, const Tensor&,
                                               const Tensor&, const Tensor&, const Tensor&, Ints,
                                               Ints, Ints, const Bools&, Ints, double,
                                               c10::string_view);
// The rule of a counts op's arguments (per head where group_of_head is given).
Rule counts_rule(Ints window, Ints stride, Ints dilation, const Bools& causal, Ints group_of_head,
                 double scale, c10::string_view backend);

// gna::na_forward or gna::na_forward_heads (by the rule) through the dispatcher.
ForwardResult dispatch_forward(const Rule& rule, const Tensor& q, const Tensor& k,
                               const Tensor& v, const OptionalTensor& ak,
                               const OptionalTensor& av, bool lse_grad);
// gna::na_backward or gna::na_backward_heads through the dispatcher.
BackwardResult dispatch_backward(const Rule& rule, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const OptionalTensor& ak,
                                 const OptionalTensor& av, const Tensor& out, const Tensor& lse,
                                 const Tensor& d_out);
// gna::na_forward_counts / gna::na_backward_counts through the dispatcher.
ForwardResult dispatch_forward_counts(const Rule& rule, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const Tensor& ak, const Tensor& av,
                                      const Tensor& counts);
BackwardResult dispatch_backward_counts(const Rule& rule, const Tensor& q, const Tensor& k,
                                        const Tensor& v, const Tensor& ak, const Tensor& av,
                                        const Tensor& counts, const Tensor& out,
                                        const Tensor& lse, const Tensor& d_out);

}  // namespace gna_torch
