// The ops' Autograd kernels: a C++ autograd node per call, so that neither the forward nor the
// backward of an eager training step runs Python. The backward is the one ops.py registers on
// the ctypes path (_backward and _add_lse_gradient), op for op.
#include "ops.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/zeros_like.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>

namespace gna_torch {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void save_rule(AutogradContext* ctx, const Rule& rule) {
  auto& d = ctx->saved_data;
  d["window"] = rule.window;
  d["stride"] = rule.stride;
  d["dilation"] = rule.dilation;
  d["group_of_head"] = rule.group_of_head;
  c10::List<bool> causal;
  for (bool c : rule.causal) causal.push_back(c);
  d["causal"] = causal;
  d["scale"] = rule.scale;
  d["backend"] = rule.backend;
  d["per_head"] = rule.per_head;
}

Rule saved_rule(AutogradContext* ctx) {
  auto& d = ctx->saved_data;
  Rule rule;
  rule.window = d["window"].toIntVector();
  rule.stride = d["stride"].toIntVector();
  rule.dilation = d["dilation"].toIntVector();
  rule.group_of_head = d["group_of_head"].toIntVector();
  for (bool c : d["causal"].toBoolList()) rule.causal.push_back(c);
  rule.scale = d["scale"].toDouble();
  rule.backend = d["backend"].toStringRef();
  rule.per_head = d["per_head"].toBool();
  return rule;
}

OptionalTensor optional(const Tensor& t) {
  return t.defined() ? OptionalTensor(t) : OptionalTensor();
}

// The gradient through lse: d lse_i / d s_ij = P_ij, so with g = d lse and scores
// s = scale * q.k, dq_i += scale * g_i * sum_j P_ij k_j (attention with values = keys) and
// dk_j += sum_i P_ij (scale * g_i * q_i) (the value gradient of a backward with values = keys
// and incoming gradient scale * g * q).
void add_lse_gradient(const Rule& rule, const Tensor& q, const Tensor& k, const Tensor& ak,
                      const Tensor& lse, const Tensor& d_lse, Tensor& dq, Tensor& dk,
                      Tensor& dak) {
  const double c = rule.scale > 0
                       ? rule.scale
                       : 1.0 / std::sqrt(static_cast<double>(
                                   q.sym_size(-1).guard_int(__FILE__, __LINE__)));
  const Tensor g = (d_lse.to(at::kFloat) * c).unsqueeze(-1);
  const Tensor out_k = std::get<0>(dispatch_forward(rule, q, k, k, optional(ak), optional(ak),
                                                    false));
  dq = dq + (g * out_k.to(at::kFloat)).to(dq.scalar_type());
  const Tensor d_out_k = (g * q.to(at::kFloat)).to(q.scalar_type());
  const BackwardResult extra = dispatch_backward(rule, q, k, k, optional(ak), optional(ak), out_k,
                                                 lse, d_out_k);
  dk = dk + std::get<2>(extra);
  if (ak.defined()) dak = dak + std::get<4>(extra);
}

struct Attention : public torch::autograd::Function<Attention> {
  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k,
                               const Tensor& v, const OptionalTensor& ak,
                               const OptionalTensor& av, const Rule& rule, bool lse_grad) {
    ctx->set_materialize_grads(false);  // unused outputs' gradients arrive undefined
    Tensor out, lse;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      std::tie(out, lse) = dispatch_forward(rule, q, k, v, ak, av, lse_grad);
    }
    ctx->save_for_backward({q, k, v, ak.value_or(Tensor()), av.value_or(Tensor()), out, lse});
    save_rule(ctx, rule);
    ctx->saved_data["lse_grad"] = lse_grad;
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &q = saved[0], &k = saved[1], &v = saved[2], &ak = saved[3], &av = saved[4],
                 &out = saved[5], &lse = saved[6];
    const Rule rule = saved_rule(ctx);
    Tensor d_out = grads[0];
    const Tensor& d_lse = grads[1];
    if (!d_out.defined()) d_out = at::zeros_like(out);
    Tensor dq, dk, dv, dak, dav;
    std::tie(dq, dk, dv, dak, dav) =
        dispatch_backward(rule, q, k, v, optional(ak), optional(av), out, lse, d_out);
    if (ctx->saved_data["lse_grad"].toBool() && d_lse.defined()) {
      add_lse_gradient(rule, q, k, ak, lse, d_lse, dq, dk, dak);
    }
    if (!ak.defined()) dak = dav = Tensor();
    return {dq, dk, dv, dak, dav, Tensor(), Tensor()};
  }
};

// The backward op's autograd: it runs, but its own gradient is refused (double backward).
struct AttentionBackward : public torch::autograd::Function<AttentionBackward> {
  static variable_list forward(AutogradContext*, const Tensor& q, const Tensor& k,
                               const Tensor& v, const OptionalTensor& ak,
                               const OptionalTensor& av, const Tensor& out, const Tensor& lse,
                               const Tensor& d_out, const Rule& rule) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    Tensor dq, dk, dv, dak, dav;
    std::tie(dq, dk, dv, dak, dav) = dispatch_backward(rule, q, k, v, ak, av, out, lse, d_out);
    return {dq, dk, dv, dak, dav};
  }

  static variable_list backward(AutogradContext*, variable_list) {
    TORCH_CHECK(false, "gna: trying to differentiate twice: the attention backward has no "
                       "gradient of its own (double backward is not supported)");
    return {};
  }
};

// The counts op's autograd: gradients of query, key, value and the additional tokens (those past
// a batch item's count come out zero); the logsumexp is an output without a gradient.
struct CountedAttention : public torch::autograd::Function<CountedAttention> {
  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& ak, const Tensor& av,
                               const Tensor& counts, const Rule& rule) {
    ctx->set_materialize_grads(false);
    Tensor out, lse;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      std::tie(out, lse) = dispatch_forward_counts(rule, q, k, v, ak, av, counts);
    }
    ctx->mark_non_differentiable({lse});
    ctx->save_for_backward({q, k, v, ak, av, counts, out, lse});
    save_rule(ctx, rule);
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& out = saved[6];
    Tensor d_out = grads[0];
    if (!d_out.defined()) d_out = at::zeros_like(out);
    Tensor dq, dk, dv, dak, dav;
    std::tie(dq, dk, dv, dak, dav) =
        dispatch_backward_counts(saved_rule(ctx), saved[0], saved[1], saved[2], saved[3],
                                 saved[4], saved[5], out, saved[7], d_out);
    return {dq, dk, dv, dak, dav, Tensor(), Tensor()};
  }
};

// The counts backward op's autograd: it runs, but its own gradient is refused.
struct CountedAttentionBackward
    : public torch::autograd::Function<CountedAttentionBackward> {
  static variable_list forward(AutogradContext*, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& ak, const Tensor& av,
                               const Tensor& counts, const Tensor& out, const Tensor& lse,
                               const Tensor& d_out, const Rule& rule) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    Tensor dq, dk, dv, dak, dav;
    std::tie(dq, dk, dv, dak, dav) =
        dispatch_backward_counts(rule, q, k, v, ak, av, counts, out, lse, d_out);
    return {dq, dk, dv, dak, dav};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return AttentionBackward::backward(ctx, grads);
  }
};

ForwardResult forward_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                               const OptionalTensor& ak, const OptionalTensor& av, Ints window,
                               Ints stride, Ints dilation, const Bools& causal, double scale,
                               c10::string_view backend, bool lse_grad) {
  const variable_list out = Attention::apply(
      q, k, v, ak, av, make_rule(window, stride, dilation, causal, scale, backend), lse_grad);
  return {out[0], out[1]};
}

ForwardResult forward_heads_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const OptionalTensor& ak, const OptionalTensor& av,
                                     Ints window, Ints stride, Ints dilation,
                                     const Bools& causal, Ints group_of_head, double scale,
                                     c10::string_view backend, bool lse_grad) {
  const variable_list out = Attention::apply(
      q, k, v, ak, av,
      make_head_rule(window, stride, dilation, causal, group_of_head, scale, backend), lse_grad);
  return {out[0], out[1]};
}

BackwardResult result_of(const variable_list& g) { return {g[0], g[1], g[2], g[3], g[4]}; }

BackwardResult backward_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const OptionalTensor& ak, const OptionalTensor& av,
                                 const Tensor& out, const Tensor& lse, const Tensor& d_out,
                                 Ints window, Ints stride, Ints dilation, const Bools& causal,
                                 double scale, c10::string_view backend) {
  return result_of(AttentionBackward::apply(
      q, k, v, ak, av, out, lse, d_out,
      make_rule(window, stride, dilation, causal, scale, backend)));
}

BackwardResult backward_heads_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const OptionalTensor& ak, const OptionalTensor& av,
                                       const Tensor& out, const Tensor& lse,
                                       const Tensor& d_out, Ints window, Ints stride,
                                       Ints dilation, const Bools& causal, Ints group_of_head,
                                       double scale, c10::string_view backend) {
  return result_of(AttentionBackward::apply(
      q, k, v, ak, av, out, lse, d_out,
      make_head_rule(window, stride, dilation, causal, group_of_head, scale, backend)));
}

ForwardResult forward_counts_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& ak, const Tensor& av, const Tensor& counts,
                                      Ints window, Ints stride, Ints dilation,
                                      const Bools& causal, Ints group_of_head, double scale,
                                      c10::string_view backend) {
  const variable_list out = CountedAttention::apply(
      q, k, v, ak, av, counts,
      counts_rule(window, stride, dilation, causal, group_of_head, scale, backend));
  return {out[0], out[1]};
}

BackwardResult backward_counts_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& ak, const Tensor& av, const Tensor& counts,
                                        const Tensor& out, const Tensor& lse,
                                        const Tensor& d_out, Ints window, Ints stride,
                                        Ints dilation, const Bools& causal, Ints group_of_head,
                                        double scale, c10::string_view backend) {
  return result_of(CountedAttentionBackward::apply(
      q, k, v, ak, av, counts, out, lse, d_out,
      counts_rule(window, stride, dilation, causal, group_of_head, scale, backend)));
}

}  // namespace
}  // namespace gna_torch

TORCH_LIBRARY_IMPL(gna, Autograd, m) {
  m.impl("na_forward", TORCH_FN(gna_torch::forward_autograd));
  m.impl("na_backward", TORCH_FN(gna_torch::backward_autograd));
  m.impl("na_forward_heads", TORCH_FN(gna_torch::forward_heads_autograd));
  m.impl("na_backward_heads", TORCH_FN(gna_torch::backward_heads_autograd));
  m.impl("na_forward_counts", TORCH_FN(gna_torch::forward_counts_autograd));
  m.impl("na_backward_counts", TORCH_FN(gna_torch::backward_counts_autograd));
}
