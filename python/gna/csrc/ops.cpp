// The gna ops' schemas (those the torch.library registrations of ops.py give them) and their
// CPU, CUDA and Meta kernels; autograd.cpp registers their Autograd kernels.
#include "ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "torch_compat.h"

namespace gna_torch {
namespace {

ForwardResult forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v,
                             const OptionalTensor& ak, const OptionalTensor& av, Ints window,
                             Ints stride, Ints dilation, const Bools& causal, double scale,
                             c10::string_view backend, bool /*lse_grad: read by autograd*/) {
  return forward(make_rule(window, stride, dilation, causal, scale, backend), q, k, v, ak, av);
}

ForwardResult forward_heads_kernel(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const OptionalTensor& ak, const OptionalTensor& av,
                                   Ints window, Ints stride, Ints dilation, const Bools& causal,
                                   Ints group_of_head, double scale, c10::string_view backend,
                                   bool /*lse_grad*/) {
  return forward(make_head_rule(window, stride, dilation, causal, group_of_head, scale, backend),
                 q, k, v, ak, av);
}

BackwardResult backward_kernel(const Tensor& q, const Tensor& k, const Tensor& v,
                               const OptionalTensor& ak, const OptionalTensor& av,
                               const Tensor& out, const Tensor& lse, const Tensor& d_out,
                               Ints window, Ints stride, Ints dilation, const Bools& causal,
                               double scale, c10::string_view backend) {
  return backward(make_rule(window, stride, dilation, causal, scale, backend), q, k, v, ak, av,
                  out, lse, d_out);
}

BackwardResult backward_heads_kernel(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const OptionalTensor& ak, const OptionalTensor& av,
                                     const Tensor& out, const Tensor& lse, const Tensor& d_out,
                                     Ints window, Ints stride, Ints dilation,
                                     const Bools& causal, Ints group_of_head, double scale,
                                     c10::string_view backend) {
  return backward(make_head_rule(window, stride, dilation, causal, group_of_head, scale, backend),
                  q, k, v, ak, av, out, lse, d_out);
}

ForwardResult forward_counts_kernel(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& ak, const Tensor& av, const Tensor& counts,
                                    Ints window, Ints stride, Ints dilation, const Bools& causal,
                                    Ints group_of_head, double scale, c10::string_view backend) {
  return forward(counts_rule(window, stride, dilation, causal, group_of_head, scale, backend), q,
                 k, v, ak, av, counts);
}

BackwardResult backward_counts_kernel(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& ak, const Tensor& av, const Tensor& counts,
                                      const Tensor& out, const Tensor& lse, const Tensor& d_out,
                                      Ints window, Ints stride, Ints dilation,
                                      const Bools& causal, Ints group_of_head, double scale,
                                      c10::string_view backend) {
  return backward(counts_rule(window, stride, dilation, causal, group_of_head, scale, backend),
                  q, k, v, ak, av, out, lse, d_out, counts);
}

// Meta: the outputs' shapes, dtypes and strides (those the kernels return), and the core's
// validation where the shapes are concrete, so that tracing reports the errors a run would.
ForwardResult meta_outputs(const Tensor& q, const Tensor& v) {
  std::vector<c10::SymInt> shape(q.sym_sizes().begin(),
                                 q.sym_sizes().end() - (q.dim() > 0 ? 1 : 0));
  Tensor lse = at::empty_symint(
      shape, q.options().dtype(q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
  shape.push_back(v.sym_size(-1));
  return {at::empty_symint(shape, q.options()), lse};
}

ForwardResult forward_meta(const Tensor& q, const Tensor& k, const Tensor& v,
                           const OptionalTensor& ak, const OptionalTensor& av, Ints window,
                           Ints stride, Ints dilation, const Bools& causal, double scale,
                           c10::string_view backend, bool /*lse_grad*/) {
  validate_metadata(make_rule(window, stride, dilation, causal, scale, backend), q, k, v, ak, av);
  return meta_outputs(q, v);
}

ForwardResult forward_heads_meta(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const OptionalTensor& ak, const OptionalTensor& av, Ints window,
                                 Ints stride, Ints dilation, const Bools& causal,
                                 Ints group_of_head, double scale, c10::string_view backend,
                                 bool /*lse_grad*/) {
  validate_metadata(
      make_head_rule(window, stride, dilation, causal, group_of_head, scale, backend), q, k, v,
      ak, av);
  return meta_outputs(q, v);
}

BackwardResult backward_meta(const Tensor& q, const Tensor& k, const Tensor& v,
                             const OptionalTensor& ak, const OptionalTensor& av, const Tensor&,
                             const Tensor&, const Tensor&, Ints, Ints, Ints, const Bools&,
                             double, c10::string_view) {
  auto like = [&](const OptionalTensor& t) {
    return t.has_value() ? at::empty_symint(t->sym_sizes(), t->options())
                         : at::empty({0}, q.options());
  };
  return {like(q), like(k), like(v), like(ak), like(av)};
}

BackwardResult backward_heads_meta(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const OptionalTensor& ak, const OptionalTensor& av,
                                   const Tensor& out, const Tensor& lse, const Tensor& d_out,
                                   Ints window, Ints stride, Ints dilation, const Bools& causal,
                                   Ints, double scale, c10::string_view backend) {
  return backward_meta(q, k, v, ak, av, out, lse, d_out, window, stride, dilation, causal, scale,
                       backend);
}

ForwardResult forward_counts_meta(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& ak, const Tensor& av, const Tensor& /*counts*/,
                                  Ints window, Ints stride, Ints dilation, const Bools& causal,
                                  Ints group_of_head, double scale, c10::string_view backend) {
  validate_metadata(counts_rule(window, stride, dilation, causal, group_of_head, scale, backend),
                    q, k, v, ak, av);
  return meta_outputs(q, v);
}

BackwardResult backward_counts_meta(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& ak, const Tensor& av, const Tensor& /*counts*/,
                                    const Tensor& out, const Tensor& lse, const Tensor& d_out,
                                    Ints window, Ints stride, Ints dilation, const Bools& causal,
                                    Ints, double scale, c10::string_view backend) {
  return backward_meta(q, k, v, ak, av, out, lse, d_out, window, stride, dilation, causal, scale,
                       backend);
}

c10::List<bool> bool_list(const std::vector<bool>& values) {
  c10::List<bool> list;
  for (bool b : values) list.push_back(b);
  return list;
}

}  // namespace

Rule counts_rule(Ints window, Ints stride, Ints dilation, const Bools& causal, Ints group_of_head,
                 double scale, c10::string_view backend) {
  return group_of_head.empty()
             ? make_rule(window, stride, dilation, causal, scale, backend)
             : make_head_rule(window, stride, dilation, causal, group_of_head, scale, backend);
}

ForwardResult dispatch_forward(const Rule& rule, const Tensor& q, const Tensor& k,
                               const Tensor& v, const OptionalTensor& ak,
                               const OptionalTensor& av, bool lse_grad) {
  const c10::List<bool> causal = bool_list(rule.causal);
  if (rule.per_head) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("gna::na_forward_heads", "")
                               .typed<ForwardHeadsSignature>();
    return op.call(q, k, v, ak, av, sym_ints(rule.window), sym_ints(rule.stride),
                   sym_ints(rule.dilation), causal, sym_ints(rule.group_of_head), rule.scale,
                   rule.backend, lse_grad);
  }
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gna::na_forward", "")
                             .typed<ForwardSignature>();
  return op.call(q, k, v, ak, av, sym_ints(rule.window), sym_ints(rule.stride),
                 sym_ints(rule.dilation), causal, rule.scale, rule.backend, lse_grad);
}

BackwardResult dispatch_backward(const Rule& rule, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const OptionalTensor& ak,
                                 const OptionalTensor& av, const Tensor& out, const Tensor& lse,
                                 const Tensor& d_out) {
  const c10::List<bool> causal = bool_list(rule.causal);
  if (rule.per_head) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("gna::na_backward_heads", "")
                               .typed<BackwardHeadsSignature>();
    return op.call(q, k, v, ak, av, out, lse, d_out, sym_ints(rule.window), sym_ints(rule.stride),
                   sym_ints(rule.dilation), causal, sym_ints(rule.group_of_head), rule.scale,
                   rule.backend);
  }
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gna::na_backward", "")
                             .typed<BackwardSignature>();
  return op.call(q, k, v, ak, av, out, lse, d_out, sym_ints(rule.window), sym_ints(rule.stride),
                 sym_ints(rule.dilation), causal, rule.scale, rule.backend);
}

ForwardResult dispatch_forward_counts(const Rule& rule, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const Tensor& ak, const Tensor& av,
                                      const Tensor& counts) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gna::na_forward_counts", "")
                             .typed<ForwardCountsSignature>();
  return op.call(q, k, v, ak, av, counts, sym_ints(rule.window), sym_ints(rule.stride),
                 sym_ints(rule.dilation), bool_list(rule.causal), sym_ints(rule.group_of_head),
                 rule.scale, rule.backend);
}

BackwardResult dispatch_backward_counts(const Rule& rule, const Tensor& q, const Tensor& k,
                                        const Tensor& v, const Tensor& ak, const Tensor& av,
                                        const Tensor& counts, const Tensor& out,
                                        const Tensor& lse, const Tensor& d_out) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gna::na_backward_counts", "")
                             .typed<BackwardCountsSignature>();
  return op.call(q, k, v, ak, av, counts, out, lse, d_out, sym_ints(rule.window),
                 sym_ints(rule.stride), sym_ints(rule.dilation), bool_list(rule.causal),
                 sym_ints(rule.group_of_head), rule.scale, rule.backend);
}

}  // namespace gna_torch

TORCH_LIBRARY(gna, m) {
  m.def("na_forward(Tensor query, Tensor key, Tensor value, Tensor? additional_keys, "
        "Tensor? additional_values, SymInt[] window, SymInt[] stride, SymInt[] dilation, "
        "bool[] causal, float scale, str backend, bool lse_grad) -> (Tensor, Tensor)");
  m.def("na_backward(Tensor query, Tensor key, Tensor value, Tensor? additional_keys, "
        "Tensor? additional_values, Tensor out, Tensor lse, Tensor d_out, SymInt[] window, "
        "SymInt[] stride, SymInt[] dilation, bool[] causal, float scale, str backend) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("na_forward_heads(Tensor query, Tensor key, Tensor value, Tensor? additional_keys, "
        "Tensor? additional_values, SymInt[] window, SymInt[] stride, SymInt[] dilation, "
        "bool[] causal, SymInt[] group_of_head, float scale, str backend, bool lse_grad) -> "
        "(Tensor, Tensor)");
  m.def("na_backward_heads(Tensor query, Tensor key, Tensor value, Tensor? additional_keys, "
        "Tensor? additional_values, Tensor out, Tensor lse, Tensor d_out, SymInt[] window, "
        "SymInt[] stride, SymInt[] dilation, bool[] causal, SymInt[] group_of_head, "
        "float scale, str backend) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("na_forward_counts(Tensor query, Tensor key, Tensor value, Tensor additional_keys, "
        "Tensor additional_values, Tensor additional_kv_counts, SymInt[] window, "
        "SymInt[] stride, SymInt[] dilation, bool[] causal, SymInt[] group_of_head, "
        "float scale, str backend) -> (Tensor, Tensor)");
  m.def("na_backward_counts(Tensor query, Tensor key, Tensor value, Tensor additional_keys, "
        "Tensor additional_values, Tensor additional_kv_counts, Tensor out, Tensor lse, "
        "Tensor d_out, SymInt[] window, SymInt[] stride, SymInt[] dilation, bool[] causal, "
        "SymInt[] group_of_head, float scale, str backend) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor)");
}

// CPU tensors run the CPU reference and CUDA tensors the kernels: one body, libgna dispatches.
#define GNA_TORCH_KERNELS(m)                                          \
  m.impl("na_forward", TORCH_FN(gna_torch::forward_kernel));          \
  m.impl("na_backward", TORCH_FN(gna_torch::backward_kernel));        \
  m.impl("na_forward_heads", TORCH_FN(gna_torch::forward_heads_kernel)); \
  m.impl("na_backward_heads", TORCH_FN(gna_torch::backward_heads_kernel)); \
  m.impl("na_forward_counts", TORCH_FN(gna_torch::forward_counts_kernel)); \
  m.impl("na_backward_counts", TORCH_FN(gna_torch::backward_counts_kernel))

TORCH_LIBRARY_IMPL(gna, CPU, m) { GNA_TORCH_KERNELS(m); }

#ifdef GNA_TORCH_CUDA
TORCH_LIBRARY_IMPL(gna, CUDA, m) { GNA_TORCH_KERNELS(m); }
#endif

TORCH_LIBRARY_IMPL(gna, Meta, m) {
  m.impl("na_forward", TORCH_FN(gna_torch::forward_meta));
  m.impl("na_backward", TORCH_FN(gna_torch::backward_meta));
  m.impl("na_forward_heads", TORCH_FN(gna_torch::forward_heads_meta));
  m.impl("na_backward_heads", TORCH_FN(gna_torch::backward_heads_meta));
  m.impl("na_forward_counts", TORCH_FN(gna_torch::forward_counts_meta));
  m.impl("na_backward_counts", TORCH_FN(gna_torch::backward_counts_meta));
}
