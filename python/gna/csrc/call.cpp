#include "call.h"

#include "library.h"
#include "torch_compat.h"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#ifdef GNA_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <array>
#include <cstdint>

namespace gna_torch {
namespace {

// Where a metadata-only view points: validation refuses null data, and never reads it.
void* const kMetadataOnly = reinterpret_cast<void*>(64);

int32_t int32(int64_t value, const std::string& name) {
  TORCH_CHECK_VALUE(value >= -(int64_t{1} << 31) && value < (int64_t{1} << 31), name,
                    " must be below 2^31 in magnitude (a 32-bit int of the C ABI), got ", value);
  return static_cast<int32_t>(value);
}

std::vector<int64_t> ints(c10::SymIntArrayRef values) {
  std::vector<int64_t> out;
  out.reserve(values.size());
  for (const c10::SymInt& v : values) out.push_back(v.guard_int(__FILE__, __LINE__));
  return out;
}

// dest[:count] = values[:count], count = min(limit, values.size()) (a per-head rule's plain
// parameters take its first `limit` = rank values).
template <typename Values>
size_t fill_axes(int32_t (&dest)[GNA_MAX_RANK], const Values& values, size_t limit,
                 const char* name) {
  const size_t count = std::min(limit, values.size());
  TORCH_CHECK_VALUE(count <= GNA_MAX_RANK, name, ": at most ", GNA_MAX_RANK, " values, got ",
                    count);
  for (size_t i = 0; i < count; ++i) dest[i] = int32(static_cast<int64_t>(values[i]), name);
  return count;
}

gna_params make_params(const Rule& rule, size_t limit) {
  gna_params p{};
  p.rank = static_cast<int32_t>(fill_axes(p.window, rule.window, limit, "window"));
  fill_axes(p.stride, rule.stride, limit, "stride");
  fill_axes(p.dilation, rule.dilation, limit, "dilation");
  fill_axes(p.causal, rule.causal, limit, "causal");
  p.scale = static_cast<float>(rule.scale);
  return p;
}

// gna_head_rules of a per-head rule over `rank` axes; group_map holds its group_of_head array.
gna_head_rules make_head_rules(const Rule& rule, int64_t rank, std::vector<int32_t>& group_map) {
  const int64_t given = static_cast<int64_t>(rule.window.size());
  const int64_t groups = rank > 0 ? given / rank : 0;
  TORCH_CHECK_VALUE(groups >= 1 && groups <= GNA_MAX_HEAD_GROUPS && given == groups * rank,
                    "head rules: groups must be in [1, ", GNA_MAX_HEAD_GROUPS, "] with ", rank,
                    " values each, got ", given, " window values");
  const int64_t heads = static_cast<int64_t>(rule.group_of_head.size());
  TORCH_CHECK_VALUE(heads >= 1 && heads <= GNA_MAX_HEADS_WITH_RULES,
                    "head rules: query heads must be in [1, ", GNA_MAX_HEADS_WITH_RULES,
                    "], got ", heads);
  gna_head_rules r{};
  r.groups = static_cast<int32_t>(groups);
  r.heads = static_cast<int32_t>(heads);
  auto fill = [&](int32_t (&table)[GNA_MAX_HEAD_GROUPS][GNA_MAX_RANK], const auto& values,
                  const char* name) {
    const int64_t count = static_cast<int64_t>(values.size());
    TORCH_CHECK_VALUE(count == groups * rank, "head rules: ", name, " must hold ", groups * rank,
                      " values (", groups, " groups x ", rank, " axes), got ", count);
    for (int64_t i = 0; i < count; ++i) {
      table[i / rank][i % rank] =
          int32(static_cast<int64_t>(values[i]), std::string("head rules: ") + name);
    }
  };
  fill(r.window, rule.window, "window");
  fill(r.stride, rule.stride, "stride");
  fill(r.dilation, rule.dilation, "dilation");
  fill(r.causal, rule.causal, "causal");
  group_map.clear();
  for (int64_t g : rule.group_of_head) group_map.push_back(int32(g, "head rules: group_of_head"));
  r.group_of_head = group_map.data();
  return r;
}

// torch's Python name of a dtype (the ctypes path's messages print it); c10's for the rest.
const char* dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kShort: return "torch.int16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kBool: return "torch.bool";
    case at::kComplexHalf: return "torch.complex32";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    default: return c10::toString(type);
  }
}

int32_t dtype_code(at::ScalarType type, const char* name) {
  // Per-batch counts of additional keys are int32; no other tensor is.
  if (type == at::kInt && std::string(name) == "additional_kv_counts") return GNA_DTYPE_I32;
  switch (type) {
    case at::kFloat: return GNA_DTYPE_F32;
    case at::kDouble: return GNA_DTYPE_F64;
    case at::kHalf: return GNA_DTYPE_F16;
    case at::kBFloat16: return GNA_DTYPE_BF16;
    default:
      TORCH_CHECK_VALUE(false, name, ": dtype must be float32, float64, float16 or bfloat16, got ",
                        dtype_name(type));
  }
  return -1;
}

// A gna_tensor describing t (no copy); data stays null for an absent tensor.
struct View {
  gna_tensor tensor{};
  bool present = false;
  gna_tensor* get() { return present ? &tensor : nullptr; }
};

View view(const Tensor& t, const char* name, bool metadata_only = false) {
  View g;
  if (!t.defined()) return g;
  const int64_t rank = t.dim();
  TORCH_CHECK_VALUE(rank <= GNA_MAX_TENSOR_RANK, name, ": at most ", GNA_MAX_TENSOR_RANK,
                    " dims, got ", rank);
  g.tensor.dtype = dtype_code(t.scalar_type(), name);
  g.tensor.rank = static_cast<int32_t>(rank);
  if (metadata_only) {
    for (int64_t i = 0; i < rank; ++i) {
      g.tensor.shape[i] = t.sym_size(i).guard_int(__FILE__, __LINE__);
      g.tensor.strides[i] = t.sym_stride(i).guard_int(__FILE__, __LINE__);
    }
    g.tensor.data = kMetadataOnly;
    g.tensor.device = -1;
  } else {
    for (int64_t i = 0; i < rank; ++i) {
      g.tensor.shape[i] = t.size(i);
      g.tensor.strides[i] = t.stride(i);
    }
    g.tensor.data = t.data_ptr();
    g.tensor.device = t.is_cuda() ? t.device().index() : -1;
  }
  g.present = true;
  return g;
}

Tensor value_or_undefined(const OptionalTensor& t) { return t.has_value() ? *t : Tensor(); }

// A strided last dim or a broadcast (stride-0) dim: the kernels want a copy.
bool needs_copy(const Tensor& t) {
  if (t.is_contiguous()) return false;
  const int64_t rank = t.dim();
  if (rank > 0 && t.stride(-1) != 1 && t.size(-1) > 1) return true;
  for (int64_t i = 0; i < rank; ++i) {
    if (t.stride(i) == 0 && t.size(i) > 1) return true;
  }
  return false;
}

Tensor kernel_ready(const Tensor& t) {
  return t.defined() && needs_copy(t) ? t.contiguous() : t;
}

// float32 when every given host tensor is float16/bfloat16 of one dtype (the CPU reference
// computes in float32/float64); the tensors' own dtype otherwise.
c10::optional<at::ScalarType> host_compute_dtype(const std::vector<Tensor>& tensors) {
  if (tensors[0].is_cuda()) return c10::nullopt;
  const at::ScalarType type = tensors[0].scalar_type();
  if (type != at::kHalf && type != at::kBFloat16) return c10::nullopt;
  for (const Tensor& t : tensors) {
    if (t.defined() && (t.scalar_type() != type || t.is_cuda())) return c10::nullopt;
  }
  return at::kFloat;
}

// The inputs as the kernels take them: host half tensors in float32, copies where needed.
std::vector<Tensor> prepared(std::vector<Tensor> tensors) {
  const auto host_dtype = host_compute_dtype(tensors);
  for (Tensor& t : tensors) {
    if (t.defined() && host_dtype) t = t.to(*host_dtype);
    t = kernel_ready(t);
  }
  return tensors;
}

gna_options make_options(const Rule& rule, const Tensor& q) {
  gna_options o{};
  if (!rule.backend.empty() && rule.backend != "auto") o.backend = rule.backend.c_str();
  // torch.use_deterministic_algorithms(True) asks for the same bits every run.
  o.deterministic = at::globalContext().deterministicAlgorithms() ? 1 : 0;
  if (q.is_cuda()) {
#ifdef GNA_TORCH_CUDA
    o.stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
#else
    TORCH_CHECK(false, "gna: this torch extension was built without CUDA");
#endif
  }
  return o;
}

// The C structs of a call: gna_params, and gna_head_rules for a per-head rule.
struct RuleStructs {
  gna_params params{};
  gna_head_rules head_rules{};
  std::vector<int32_t> group_map;
  const gna_head_rules* heads() const { return group_map.empty() ? nullptr : &head_rules; }
};

RuleStructs rule_structs(const Rule& rule, const Tensor& q) {
  RuleStructs s;
  if (rule.per_head) {
    const int64_t rank = q.dim() - 3;
    s.params = make_params(rule, static_cast<size_t>(std::max<int64_t>(rank, 0)));
    s.head_rules = make_head_rules(rule, rank, s.group_map);
  } else {
    s.params = make_params(rule, SIZE_MAX);
  }
  return s;
}

at::ScalarType lse_dtype(at::ScalarType type) {
  return type == at::kDouble ? at::kDouble : at::kFloat;
}

}  // namespace

Rule make_rule(c10::SymIntArrayRef window, c10::SymIntArrayRef stride,
               c10::SymIntArrayRef dilation, const c10::List<bool>& causal, double scale,
               c10::string_view backend) {
  Rule r;
  r.window = ints(window);
  r.stride = ints(stride);
  r.dilation = ints(dilation);
  for (bool c : causal) r.causal.push_back(c);
  r.scale = scale;
  r.backend = std::string(backend.data(), backend.size());
  return r;
}

Rule make_head_rule(c10::SymIntArrayRef window, c10::SymIntArrayRef stride,
                    c10::SymIntArrayRef dilation, const c10::List<bool>& causal,
                    c10::SymIntArrayRef group_of_head, double scale, c10::string_view backend) {
  Rule r = make_rule(window, stride, dilation, causal, scale, backend);
  r.group_of_head = ints(group_of_head);
  r.per_head = true;
  return r;
}

std::tuple<Tensor, Tensor> forward(const Rule& rule, const Tensor& query, const Tensor& key,
                                   const Tensor& value, const OptionalTensor& additional_keys,
                                   const OptionalTensor& additional_values,
                                   const Tensor& counts) {
  const at::ScalarType out_dtype = query.scalar_type();
  const std::vector<Tensor> in = prepared({query, key, value,
                                           value_or_undefined(additional_keys),
                                           value_or_undefined(additional_values)});
  const Tensor &q = in[0], &v = in[2];
  // [*q.shape[:-1], v.shape[-1]] (a 0-dim query reaches the library, which names the error)
  std::vector<int64_t> out_shape(q.sizes().begin(), q.sizes().end() - (q.dim() > 0 ? 1 : 0));
  const std::vector<int64_t> lse_shape = out_shape;
  out_shape.push_back(v.size(-1));
  Tensor out = at::empty(out_shape, q.options());
  Tensor lse = at::empty(lse_shape, q.options().dtype(lse_dtype(q.scalar_type())));

  const RuleStructs s = rule_structs(rule, q);
  const Library& lib = library();
  const c10::OptionalDeviceGuard guard(q.device());
  View g[] = {view(in[0], "query"), view(in[1], "key"), view(in[2], "value"),
              view(in[3], "additional_keys"), view(in[4], "additional_values"),
              view(out, "out"), view(lse, "lse")};
  const gna_options opts = make_options(rule, q);
  const Tensor counts_ready = kernel_ready(counts);
  if (counts.defined()) {
    TORCH_CHECK(lib.forward_counts != nullptr,
                "gna: libgna lacks per-batch counts of additional keys (ABI version 7)");
    View c = view(counts_ready, "additional_kv_counts");
    check(lib.forward_counts(&s.params, s.heads(), g[0].get(), g[1].get(), g[2].get(),
                             g[3].get(), g[4].get(), c.get(), g[5].get(), g[6].get(), &opts));
  } else if (rule.per_head) {
    TORCH_CHECK(lib.forward_heads != nullptr, "gna: libgna lacks per-head rules (ABI version 4)");
    check(lib.forward_heads(&s.params, s.heads(), g[0].get(), g[1].get(), g[2].get(), g[3].get(),
                            g[4].get(), g[5].get(), g[6].get(), &opts));
  } else {
    check(lib.forward(&s.params, g[0].get(), g[1].get(), g[2].get(), g[3].get(), g[4].get(),
                      g[5].get(), g[6].get(), &opts));
  }
  if (out.scalar_type() != out_dtype) out = out.to(out_dtype);
  return {out, lse};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> backward(
    const Rule& rule, const Tensor& query, const Tensor& key, const Tensor& value,
    const OptionalTensor& additional_keys, const OptionalTensor& additional_values,
    const Tensor& out, const Tensor& lse, const Tensor& d_out, const Tensor& counts) {
  const at::ScalarType grad_dtype = query.scalar_type();
  const std::vector<Tensor> in = prepared({query, key, value,
                                           value_or_undefined(additional_keys),
                                           value_or_undefined(additional_values), out, d_out});
  const Tensor& q = in[0];
  const Tensor lse_ready = kernel_ready(lse);
  std::array<Tensor, 5> grads;
  for (int i = 0; i < 5; ++i) {
    if (in[i].defined()) grads[i] = at::empty(in[i].sizes(), in[i].options());
  }

  const RuleStructs s = rule_structs(rule, q);
  const Library& lib = library();
  const c10::OptionalDeviceGuard guard(q.device());
  View g[] = {view(in[0], "query"), view(in[1], "key"), view(in[2], "value"),
              view(in[3], "additional_keys"), view(in[4], "additional_values"),
              view(in[5], "out"), view(lse_ready, "lse"), view(in[6], "d_out"),
              view(grads[0], "dq"), view(grads[1], "dk"), view(grads[2], "dv"),
              view(grads[3], "d_additional_keys"), view(grads[4], "d_additional_values")};
  const gna_options opts = make_options(rule, q);
  const Tensor counts_ready = kernel_ready(counts);
  if (counts.defined()) {
    TORCH_CHECK(lib.backward_counts != nullptr,
                "gna: libgna lacks per-batch counts of additional keys (ABI version 7)");
    View c = view(counts_ready, "additional_kv_counts");
    check(lib.backward_counts(&s.params, s.heads(), g[0].get(), g[1].get(), g[2].get(),
                              g[3].get(), g[4].get(), c.get(), g[5].get(), g[6].get(),
                              g[7].get(), g[8].get(), g[9].get(), g[10].get(), g[11].get(),
                              g[12].get(), &opts));
  } else if (rule.per_head) {
    TORCH_CHECK(lib.backward_heads != nullptr, "gna: libgna lacks per-head rules (ABI version 4)");
    check(lib.backward_heads(&s.params, s.heads(), g[0].get(), g[1].get(), g[2].get(),
                             g[3].get(), g[4].get(), g[5].get(), g[6].get(), g[7].get(),
                             g[8].get(), g[9].get(), g[10].get(), g[11].get(), g[12].get(),
                             &opts));
  } else {
    check(lib.backward(&s.params, g[0].get(), g[1].get(), g[2].get(), g[3].get(), g[4].get(),
                       g[5].get(), g[6].get(), g[7].get(), g[8].get(), g[9].get(), g[10].get(),
                       g[11].get(), g[12].get(), &opts));
  }
  for (Tensor& t : grads) {
    if (!t.defined()) {
      t = at::empty({0}, query.options());  // an op returns tensors: empty for absent tokens
    } else if (t.scalar_type() != grad_dtype) {
      t = t.to(grad_dtype);
    }
  }
  return {grads[0], grads[1], grads[2], grads[3], grads[4]};
}

void validate_metadata(const Rule& rule, const Tensor& q, const Tensor& k, const Tensor& v,
                       const OptionalTensor& ak, const OptionalTensor& av) {
  const Tensor tensors[] = {q, k, v, value_or_undefined(ak), value_or_undefined(av)};
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    for (const c10::SymInt& n : t.sym_sizes()) {
      if (!is_concrete(n)) return;
    }
    for (const c10::SymInt& n : t.sym_strides()) {
      if (!is_concrete(n)) return;
    }
  }
  const RuleStructs s = rule_structs(rule, q);
  View g[] = {view(tensors[0], "query", true), view(tensors[1], "key", true),
              view(tensors[2], "value", true), view(tensors[3], "additional_keys", true),
              view(tensors[4], "additional_values", true)};
  const Library& lib = library();
  if (rule.per_head) {
    TORCH_CHECK(lib.validate_heads != nullptr, "gna: libgna lacks per-head rules (ABI version 4)");
    check(lib.validate_heads(&s.params, s.heads(), g[0].get(), g[1].get(), g[2].get(), g[3].get(),
                             g[4].get()));
  } else {
    check(lib.validate(&s.params, g[0].get(), g[1].get(), g[2].get(), g[3].get(), g[4].get()));
  }
}

}  // namespace gna_torch
