// The C ABI: converts plain structs to the C++ API and exceptions to status codes + message.
#include "gna/gna.h"

#include <cstring>
#include <string>

#include "api/c_status.hpp"

#include "gna/gna.hpp"

namespace {

thread_local std::string last_error;

template <typename F>
gna_status guarded(F f) {
  return gna::c_abi::guarded(last_error, f);
}

gna::TensorRef to_ref(const gna_tensor* t, const char* name) {
  if (t == nullptr) gna::fail_invalid(name, ": tensor is required, got NULL");
  if (t->rank < 0 || t->rank > GNA_MAX_TENSOR_RANK)
    gna::fail_invalid(name, ": rank must be in [0, ", GNA_MAX_TENSOR_RANK, "], got ", t->rank);
  if (t->dtype < GNA_DTYPE_F32 || t->dtype > GNA_DTYPE_I32)
    gna::fail_invalid(name, ": unknown dtype code ", t->dtype);
  gna::TensorRef r;
  r.data = t->data;
  r.dtype = static_cast<gna::DType>(t->dtype);
  r.rank = t->rank;
  r.device = t->device;
  for (int i = 0; i < t->rank; ++i) {
    r.shape[i] = t->shape[i];
    r.strides[i] = t->strides[i];
  }
  return r;
}

// Per-head rules into params (rank already set). The group map is read only within the limits,
// so a wrong `heads` cannot make the library read past GNA_MAX_HEADS_WITH_RULES entries.
void add_head_rules(const gna_head_rules& r, gna::AttentionParams& a) {
  if (r.groups < 1 || r.groups > GNA_MAX_HEAD_GROUPS)
    gna::fail_invalid("head rules: groups must be in [1, ", GNA_MAX_HEAD_GROUPS, "], got ",
                      r.groups);
  if (r.heads < 1 || r.heads > GNA_MAX_HEADS_WITH_RULES)
    gna::fail_invalid("head rules: heads (entries of group_of_head) must be in [1, ",
                      GNA_MAX_HEADS_WITH_RULES, "], got ", r.heads);
  if (r.group_of_head == nullptr)
    gna::fail_invalid("head rules: group_of_head is required, got NULL");
  a.head_groups.resize(r.groups);
  for (int g = 0; g < r.groups; ++g)
    for (int i = 0; i < a.rank; ++i) {
      gna::HeadGroupRule& rule = a.head_groups[g];
      rule.window[i] = r.window[g][i];
      rule.stride[i] = r.stride[g][i];
      rule.dilation[i] = r.dilation[g][i];
      rule.causal[i] = r.causal[g][i] != 0;
    }
  a.group_of_head.assign(r.group_of_head, r.group_of_head + r.heads);
}

gna::AttentionParams to_params(const gna_params* p, const gna_head_rules* head_rules = nullptr) {
  if (p == nullptr) gna::fail_invalid("params: required, got NULL");
  if (p->rank < 1 || p->rank > GNA_MAX_RANK) gna::fail_invalid("rank must be 1, 2 or 3, got ", p->rank);
  gna::AttentionParams a;
  a.rank = p->rank;
  for (int i = 0; i < p->rank; ++i) {
    a.window[i] = p->window[i];
    a.stride[i] = p->stride[i];
    a.dilation[i] = p->dilation[i];
    a.causal[i] = p->causal[i] != 0;
  }
  a.scale = p->scale;
  if (head_rules) add_head_rules(*head_rules, a);
  return a;
}

gna::AttentionParams with_slab(gna::AttentionParams a, const gna_slab* slab) {
  if (slab == nullptr) return a;
  a.slab.active = true;
  for (int i = 0; i < a.rank; ++i) {
    a.slab.extent[i] = slab->extent[i];
    a.slab.query_offset[i] = slab->query_offset[i];
    a.slab.key_offset[i] = slab->key_offset[i];
  }
  return a;
}

gna::CallOptions to_options(const gna_options* o) {
  gna::CallOptions c;
  if (o == nullptr) return c;
  if (o->backend != nullptr && o->backend[0] != '\0') c.backend = o->backend;
  c.stream = o->stream;
  for (int i = 0; i < GNA_MAX_RANK; ++i) {
    c.kernel.q_tile.size[i] = o->q_tile[i];
    c.kernel.kv_tile.size[i] = o->kv_tile[i];
  }
  c.kernel.autotune = o->autotune != 0;
  c.kernel.deterministic = o->deterministic != 0;
  if (o->precision != GNA_PRECISION_AUTO && o->precision != GNA_PRECISION_FP8)
    gna::fail_invalid("options: precision must be GNA_PRECISION_AUTO (0) or GNA_PRECISION_FP8 "
                      "(1), got ", o->precision);
  c.precision = static_cast<gna::Precision>(o->precision);
  return c;
}

// An optional tensor: a converted view kept alive for the call, or null.
struct OptionalRef {
  gna::TensorRef ref;
  const gna::TensorRef* ptr = nullptr;
  OptionalRef(const gna_tensor* t, const char* name) {
    if (t) {
      ref = to_ref(t, name);
      ptr = &ref;
    }
  }
};

// Holds converted inputs so that AttentionTensors' pointers stay valid during the call.
struct Inputs {
  gna::TensorRef q, k, v, ak, av;
  gna::AttentionTensors t;
  Inputs(const gna_tensor* q_, const gna_tensor* k_, const gna_tensor* v_, const gna_tensor* ak_,
         const gna_tensor* av_)
      : q(to_ref(q_, "query")), k(to_ref(k_, "key")), v(to_ref(v_, "value")) {
    t.q = q;
    t.k = k;
    t.v = v;
    if (ak_) {
      ak = to_ref(ak_, "additional keys");
      t.additional_k = &ak;
    }
    if (av_) {
      av = to_ref(av_, "additional values");
      t.additional_v = &av;
    }
  }
};


// The gradients of a backward call (the additional tokens' where given), as Inputs for its inputs.
struct Gradients {
  gna::TensorRef dak, dav;
  gna::AttentionGradients g;
  Gradients(gna_tensor* dq, gna_tensor* dk, gna_tensor* dv, gna_tensor* dak_, gna_tensor* dav_)
      : g{to_ref(dq, "dq"), to_ref(dk, "dk"), to_ref(dv, "dv")} {
    if (dak_) {
      dak = to_ref(dak_, "d_additional_k");
      g.d_additional_k = &dak;
    }
    if (dav_) {
      dav = to_ref(dav_, "d_additional_v");
      g.d_additional_v = &dav;
    }
  }
  Gradients(const Gradients&) = delete;  // g points into this object
};

}  // namespace

extern "C" {

int32_t gna_abi_version(void) { return GNA_ABI_VERSION; }

const char* gna_last_error(void) { return last_error.c_str(); }

const char* gna_backend_names(void) {
  static std::string names = [] {
    std::string s;
    for (const auto& n : gna::backend_names()) s += (s.empty() ? "" : " ") + n;
    return s;
  }();
  return names.c_str();
}

gna_status gna_validate_heads(const gna_params* params, const gna_head_rules* head_rules,
                              const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                              const gna_tensor* additional_k, const gna_tensor* additional_v) {
  return guarded([&] {
    Inputs in(q, k, v, additional_k, additional_v);
    gna::make_problem(to_params(params, head_rules), in.t);
  });
}

gna_status gna_validate(const gna_params* params, const gna_tensor* q, const gna_tensor* k,
                        const gna_tensor* v, const gna_tensor* additional_k,
                        const gna_tensor* additional_v) {
  return gna_validate_heads(params, nullptr, q, k, v, additional_k, additional_v);
}

gna_status gna_forward_counts(const gna_params* params, const gna_head_rules* head_rules,
                              const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                              const gna_tensor* additional_k, const gna_tensor* additional_v,
                              const gna_tensor* additional_kv_counts, gna_tensor* out,
                              gna_tensor* lse, const gna_options* options) {
  return guarded([&] {
    Inputs in(q, k, v, additional_k, additional_v);
    const OptionalRef counts(additional_kv_counts, "additional_kv_counts");
    in.t.additional_kv_counts = counts.ptr;
    gna::TensorRef o = to_ref(out, "out");
    gna::TensorRef l;
    if (lse) l = to_ref(lse, "lse");
    gna::attention_forward(to_params(params, head_rules), in.t, o, lse ? &l : nullptr,
                           to_options(options));
  });
}

gna_status gna_forward_heads(const gna_params* params, const gna_head_rules* head_rules,
                             const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                             const gna_tensor* additional_k, const gna_tensor* additional_v,
                             gna_tensor* out, gna_tensor* lse, const gna_options* options) {
  return gna_forward_counts(params, head_rules, q, k, v, additional_k, additional_v, nullptr, out,
                            lse, options);
}

gna_status gna_forward(const gna_params* params, const gna_tensor* q, const gna_tensor* k,
                       const gna_tensor* v, const gna_tensor* additional_k,
                       const gna_tensor* additional_v, gna_tensor* out, gna_tensor* lse,
                       const gna_options* options) {
  return gna_forward_heads(params, nullptr, q, k, v, additional_k, additional_v, out, lse,
                           options);
}

gna_status gna_forward_e4m3(const gna_params* params, const gna_head_rules* head_rules,
                            const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                            const gna_tensor* additional_k, const gna_tensor* additional_v,
                            const gna_tensor* q_scale, const gna_tensor* k_scale,
                            const gna_tensor* v_scale, const gna_tensor* additional_k_scale,
                            gna_tensor* out, gna_tensor* lse, const gna_options* options) {
  return guarded([&] {
    Inputs in(q, k, v, additional_k, additional_v);
    const gna::TensorRef qs = to_ref(q_scale, "q_scale"), ks = to_ref(k_scale, "k_scale"),
                         vs = to_ref(v_scale, "v_scale");
    const OptionalRef aks(additional_k_scale, "additional_k_scale");
    in.t.q_scale = &qs;
    in.t.k_scale = &ks;
    in.t.v_scale = &vs;
    in.t.additional_k_scale = aks.ptr;
    if (in.t.q.dtype != gna::DType::e4m3)
      gna::fail_invalid("query: gna_forward_e4m3 takes float8_e4m3fn inputs, got ",
                        gna::dtype_name(in.t.q.dtype));
    gna::TensorRef o = to_ref(out, "out");
    gna::TensorRef l;
    if (lse) l = to_ref(lse, "lse");
    gna::attention_forward(to_params(params, head_rules), in.t, o, lse ? &l : nullptr,
                           to_options(options));
  });
}

gna_status gna_backward_counts(const gna_params* params, const gna_head_rules* head_rules,
                               const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                               const gna_tensor* additional_k, const gna_tensor* additional_v,
                               const gna_tensor* additional_kv_counts, const gna_tensor* out,
                               const gna_tensor* lse, const gna_tensor* d_out, gna_tensor* dq,
                               gna_tensor* dk, gna_tensor* dv, gna_tensor* d_additional_k,
                               gna_tensor* d_additional_v, const gna_options* options) {
  return guarded([&] {
    Inputs in(q, k, v, additional_k, additional_v);
    const OptionalRef counts(additional_kv_counts, "additional_kv_counts");
    in.t.additional_kv_counts = counts.ptr;
    Gradients g(dq, dk, dv, d_additional_k, d_additional_v);
    gna::attention_backward(to_params(params, head_rules), in.t, to_ref(out, "out"),
                            to_ref(lse, "lse"), to_ref(d_out, "d_out"), g.g, to_options(options));
  });
}

gna_status gna_backward_heads(const gna_params* params, const gna_head_rules* head_rules,
                              const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                              const gna_tensor* additional_k, const gna_tensor* additional_v,
                              const gna_tensor* out, const gna_tensor* lse,
                              const gna_tensor* d_out, gna_tensor* dq, gna_tensor* dk,
                              gna_tensor* dv, gna_tensor* d_additional_k,
                              gna_tensor* d_additional_v, const gna_options* options) {
  return gna_backward_counts(params, head_rules, q, k, v, additional_k, additional_v, nullptr,
                             out, lse, d_out, dq, dk, dv, d_additional_k, d_additional_v,
                             options);
}

gna_status gna_backward(const gna_params* params, const gna_tensor* q, const gna_tensor* k,
                        const gna_tensor* v, const gna_tensor* additional_k,
                        const gna_tensor* additional_v, const gna_tensor* out,
                        const gna_tensor* lse, const gna_tensor* d_out, gna_tensor* dq,
                        gna_tensor* dk, gna_tensor* dv, gna_tensor* d_additional_k,
                        gna_tensor* d_additional_v, const gna_options* options) {
  return gna_backward_heads(params, nullptr, q, k, v, additional_k, additional_v, out, lse, d_out,
                            dq, dk, dv, d_additional_k, d_additional_v, options);
}

gna_status gna_select_backend_counts(const gna_params* params, const gna_head_rules* head_rules,
                                     const gna_tensor* q, const gna_tensor* k,
                                     const gna_tensor* v, const gna_tensor* additional_k,
                                     const gna_tensor* additional_v,
                                     const gna_tensor* additional_kv_counts, int32_t backward,
                                     const gna_options* options, char* name, int32_t capacity) {
  return guarded([&] {
    if (name == nullptr || capacity < 1) gna::fail_invalid("name buffer: capacity must be >= 1");
    Inputs in(q, k, v, additional_k, additional_v);
    const OptionalRef counts(additional_kv_counts, "additional_kv_counts");
    in.t.additional_kv_counts = counts.ptr;
    const gna::AttentionParams a = to_params(params, head_rules);
    const std::string chosen =
        backward ? gna::select_backward_backend(a, in.t, to_options(options))
                 : gna::select_forward_backend(a, in.t, to_options(options));
    std::strncpy(name, chosen.c_str(), capacity - 1);
    name[capacity - 1] = '\0';
  });
}

gna_status gna_select_backend_heads(const gna_params* params, const gna_head_rules* head_rules,
                                    const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                                    const gna_tensor* additional_k,
                                    const gna_tensor* additional_v, int32_t backward,
                                    const gna_options* options, char* name, int32_t capacity) {
  return gna_select_backend_counts(params, head_rules, q, k, v, additional_k, additional_v,
                                   nullptr, backward, options, name, capacity);
}

gna_status gna_select_backend(const gna_params* params, const gna_tensor* q, const gna_tensor* k,
                              const gna_tensor* v, const gna_tensor* additional_k,
                              const gna_tensor* additional_v, int32_t backward,
                              const gna_options* options, char* name, int32_t capacity) {
  return gna_select_backend_heads(params, nullptr, q, k, v, additional_k, additional_v, backward,
                                  options, name, capacity);
}

gna_status gna_merge_attentions(int32_t count, const gna_tensor* outputs, const gna_tensor* lses,
                                gna_tensor* out, gna_tensor* lse_out) {
  return guarded([&] {
    if (count < 1) gna::fail_invalid("merge: count must be >= 1, got ", count);
    std::vector<gna::TensorRef> os, ls;
    for (int i = 0; i < count; ++i) {
      os.push_back(to_ref(&outputs[i], "merge: outputs[i]"));
      ls.push_back(to_ref(&lses[i], "merge: lses[i]"));
    }
    gna::TensorRef o = to_ref(out, "merge: out");
    gna::TensorRef l;
    if (lse_out) l = to_ref(lse_out, "merge: lse_out");
    gna::merge_attentions(os, ls, o, lse_out ? &l : nullptr);
  });
}

gna_status gna_release_cached_memory(void) {
  return guarded([&] { gna::release_cached_memory(); });
}

gna_status gna_sta_params(int32_t rank, const int32_t* extent, const int32_t* tile,
                          const int32_t* window, gna_params* params) {
  return guarded([&] {
    if (rank < 1 || rank > GNA_MAX_RANK) gna::fail_invalid("rank must be 1, 2 or 3, got ", rank);
    if (!extent || !tile || !window || !params) gna::fail_invalid("sta: arguments must not be NULL");
    gna_params p{};
    p.rank = rank;
    for (int a = 0; a < rank; ++a) {
      const gna::AxisRule r = gna::sta_axis_rule(gna::StaAxis{extent[a], tile[a], window[a]}, a);
      p.window[a] = r.window;
      p.stride[a] = r.stride;
      p.dilation[a] = 1;
      p.causal[a] = 0;
    }
    *params = p;
  });
}

gna_status gna_na_qk(const gna_params* params, const gna_tensor* q, const gna_tensor* k,
                     const gna_tensor* rpb, gna_tensor* attn, const gna_options* options) {
  return guarded([&] {
    const OptionalRef bias(rpb, "rpb");
    gna::na_qk(to_params(params), to_ref(q, "query"), to_ref(k, "key"), bias.ptr,
               to_ref(attn, "attn"), to_options(options));
  });
}

gna_status gna_na_av(const gna_params* params, const gna_tensor* attn, const gna_tensor* v,
                     gna_tensor* out, const gna_options* options) {
  return guarded([&] {
    gna::na_av(to_params(params), to_ref(attn, "attn"), to_ref(v, "value"), to_ref(out, "out"),
               to_options(options));
  });
}

gna_status gna_na_qk_backward(const gna_params* params, const gna_tensor* q, const gna_tensor* k,
                              const gna_tensor* d_attn, gna_tensor* dq, gna_tensor* dk,
                              gna_tensor* d_rpb, const gna_options* options) {
  return guarded([&] {
    const OptionalRef g_q(dq, "dq"), g_k(dk, "dk"), g_rpb(d_rpb, "d_rpb");
    gna::na_qk_backward(to_params(params), to_ref(q, "query"), to_ref(k, "key"),
                        to_ref(d_attn, "d_attn"), g_q.ptr, g_k.ptr, g_rpb.ptr,
                        to_options(options));
  });
}

gna_status gna_na_av_backward(const gna_params* params, const gna_tensor* attn,
                              const gna_tensor* v, const gna_tensor* d_out, gna_tensor* d_attn,
                              gna_tensor* dv, const gna_options* options) {
  return guarded([&] {
    const OptionalRef g_attn(d_attn, "d_attn"), g_v(dv, "dv");
    gna::na_av_backward(to_params(params), to_ref(attn, "attn"), to_ref(v, "value"),
                        to_ref(d_out, "d_out"), g_attn.ptr, g_v.ptr, to_options(options));
  });
}

gna_status gna_key_range(const gna_params* params, int32_t axis, int32_t extent,
                         int32_t query_begin, int32_t query_end, int32_t* key_begin,
                         int32_t* key_end) {
  return guarded([&] {
    const gna::AttentionParams a = to_params(params);
    if (axis < 0 || axis >= a.rank)
      gna::fail_invalid("axis must be in [0, ", a.rank, "), got ", axis);
    if (key_begin == nullptr || key_end == nullptr)
      gna::fail_invalid("key_begin, key_end: required, got NULL");
    gna::AxisRule rule;
    rule.extent = extent;
    rule.window = a.window[axis];
    rule.stride = a.stride[axis];
    rule.dilation = a.dilation[axis];
    rule.causal = a.causal[axis];
    gna::Problem p;
    p.axes[0] = rule;
    gna::validate(p);  // the axis's rule on its extent, with the core's messages
    if (query_begin < 0 || query_end > extent || query_begin >= query_end)
      gna::fail_invalid("queries [", query_begin, ", ", query_end,
                        ") must be a non-empty range inside [0, ", extent, ")");
    const gna::Range keys = gna::key_range(rule, gna::Range{query_begin, query_end});
    *key_begin = keys.begin;
    *key_end = keys.end;
  });
}

gna_status gna_forward_slab(const gna_params* params, const gna_slab* slab, const gna_tensor* q,
                            const gna_tensor* k, const gna_tensor* v,
                            const gna_tensor* additional_k, const gna_tensor* additional_v,
                            gna_tensor* out, gna_tensor* lse, const gna_options* options) {
  return guarded([&] {
    Inputs in(q, k, v, additional_k, additional_v);
    gna::TensorRef o = to_ref(out, "out");
    gna::TensorRef l;
    if (lse) l = to_ref(lse, "lse");
    gna::attention_forward(with_slab(to_params(params), slab), in.t, o, lse ? &l : nullptr,
                           to_options(options));
  });
}

gna_status gna_backward_slab(const gna_params* params, const gna_slab* slab, const gna_tensor* q,
                             const gna_tensor* k, const gna_tensor* v,
                             const gna_tensor* additional_k, const gna_tensor* additional_v,
                             const gna_tensor* out, const gna_tensor* lse,
                             const gna_tensor* d_out, gna_tensor* dq, gna_tensor* dk,
                             gna_tensor* dv, gna_tensor* d_additional_k,
                             gna_tensor* d_additional_v, const gna_options* options) {
  return guarded([&] {
    Inputs in(q, k, v, additional_k, additional_v);
    Gradients g(dq, dk, dv, d_additional_k, d_additional_v);
    gna::attention_backward(with_slab(to_params(params), slab), in.t, to_ref(out, "out"),
                            to_ref(lse, "lse"), to_ref(d_out, "d_out"), g.g, to_options(options));
  });
}

gna_status gna_select_backend_slab(const gna_params* params, const gna_slab* slab,
                                   const gna_tensor* q, const gna_tensor* k, const gna_tensor* v,
                                   const gna_tensor* additional_k,
                                   const gna_tensor* additional_v, int32_t backward,
                                   const gna_options* options, char* name, int32_t capacity) {
  return guarded([&] {
    if (name == nullptr || capacity < 1) gna::fail_invalid("name buffer: capacity must be >= 1");
    Inputs in(q, k, v, additional_k, additional_v);
    const gna::AttentionParams a = with_slab(to_params(params), slab);
    const std::string chosen =
        backward ? gna::select_backward_backend(a, in.t, to_options(options))
                 : gna::select_forward_backend(a, in.t, to_options(options));
    std::strncpy(name, chosen.c_str(), capacity - 1);
    name[capacity - 1] = '\0';
  });
}

}  // extern "C"
