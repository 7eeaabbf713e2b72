#include "gna/attention_params.hpp"

#include <climits>
#include <cstdint>

#include "gna/core/error.hpp"

namespace gna {

TensorRef contiguous_tensor(void* data, DType dtype, const int64_t* shape, int rank, int device) {
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = rank;
  for (int d = 0; d < rank; ++d) t.shape[d] = shape[d];
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

int token_tensor_shape(const Problem& p, int heads, int dim, int64_t* shape) {
  shape[0] = p.batch;
  for (int a = 0; a < p.rank; ++a) shape[1 + a] = p.axes[a].extent;
  shape[1 + p.rank] = heads;
  shape[2 + p.rank] = dim;
  return p.rank + 3;
}

int key_tensor_shape(const Problem& p, int heads, int dim, int64_t* shape) {
  const int n = token_tensor_shape(p, heads, dim, shape);
  for (int a = 0; a < p.rank; ++a) shape[1 + a] = key_extent(p, a);
  return n;
}

int output_shape(const Problem& p, int64_t* shape) {
  return token_tensor_shape(p, p.heads_q, p.dim_v, shape);
}

int lse_shape(const Problem& p, int64_t* shape) {
  token_tensor_shape(p, p.heads_q, 1, shape);
  return p.rank + 2;
}

static void print_shape(std::ostringstream& os, const int64_t* s, int rank) {
  os << "[";
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << s[i];
  os << "]";
}

static std::string shape_text(const int64_t* s, int rank) {
  std::ostringstream os;
  print_shape(os, s, rank);
  return os.str();
}

void check_layout(const char* name, const TensorRef& t) {
  if (t.rank < 0 || t.rank > kMaxTensorRank)
    fail_invalid(name, ": rank must be in [0, ", kMaxTensorRank, "], got ", t.rank);
  const int element = dtype_size(t.dtype);
  if (element == 0) fail_invalid(name, ": unknown dtype code ", static_cast<int>(t.dtype));
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0) fail_invalid(name, ": size of dim ", i, " must be >= 0, got ", t.shape[i]);
    if (t.strides[i] < 0)
      fail_invalid(name, ": stride of dim ", i, " must be >= 0, got ", t.strides[i]);
  }
  int64_t count = 1;
  for (int i = 0; i < t.rank; ++i)
    if (__builtin_mul_overflow(count, t.shape[i], &count))
      fail_invalid(name, ": the number of elements of shape ", shape_text(t.shape, t.rank),
                   " overflows 64 bits");
  if (count == 0) return;  // nothing is read or written
  // Bytes from the first element to one past the last must fit in 63 bits.
  int64_t last = 0;
  for (int i = 0; i < t.rank; ++i) {
    int64_t step = 0;
    if (__builtin_mul_overflow(t.shape[i] - 1, t.strides[i], &step) ||
        __builtin_add_overflow(last, step, &last))
      last = INT64_MAX;
  }
  int64_t bytes = 0;
  if (last == INT64_MAX || __builtin_mul_overflow(last + 1, int64_t{element}, &bytes))
    fail_invalid(name, ": shape ", shape_text(t.shape, t.rank), " with strides ",
                 shape_text(t.strides, t.rank), " reaches past 2^63 bytes");
  if (t.data == nullptr)
    fail_invalid(name, ": data pointer is null, got ", count, " elements of shape ",
                 shape_text(t.shape, t.rank));
  if (reinterpret_cast<uintptr_t>(t.data) % element != 0)
    fail_invalid(name, ": data pointer ", t.data, " is not aligned to its ", element,
                 "-byte ", dtype_name(t.dtype), " elements");
}

void check_tensor(const char* name, const TensorRef& t, const int64_t* shape, int rank,
                  DType dtype, int device) {
  check_layout(name, t);
  bool same = t.rank == rank;
  for (int i = 0; same && i < rank; ++i) same = t.shape[i] == shape[i];
  if (!same) {
    std::ostringstream os;
    os << name << ": expected shape ";
    print_shape(os, shape, rank);
    os << ", got ";
    print_shape(os, t.shape, t.rank);
    throw Error(ErrorKind::invalid_argument, os.str());
  }
  if (t.dtype != dtype)
    fail_invalid(name, ": expected dtype ", dtype_name(dtype), ", got ", dtype_name(t.dtype));
  if (t.device != device)
    fail_invalid(name, ": expected device ", device, " (-1 = host), got ", t.device);
  if (rank > 0 && t.strides[rank - 1] != 1 && t.shape[rank - 1] > 1)
    fail_invalid(name, ": last dimension must be contiguous (stride 1), got stride ",
                 t.strides[rank - 1]);
}

namespace {

// Bytes [begin, end) from the first element to one past the last (of a checked layout).
struct Span {
  uintptr_t begin = 0, end = 0;
};

Span memory_span(const TensorRef& t) {
  if (t.numel() == 0) return {};
  int64_t last = 0;
  for (int i = 0; i < t.rank; ++i) last += (t.shape[i] - 1) * t.strides[i];
  const auto begin = reinterpret_cast<uintptr_t>(t.data);
  return {begin, begin + static_cast<uintptr_t>((last + 1) * dtype_size(t.dtype))};
}

}  // namespace

void check_output(const NamedTensor& output, const NamedTensor* others, size_t count) {
  const TensorRef& t = *output.tensor;
  // Distinct elements at distinct addresses: with the dims of size > 1 in increasing stride
  // order, each stride must step past everything the smaller ones reach.
  int dims[kMaxTensorRank];
  int n = 0;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 2) continue;
    int j = n++;
    for (; j > 0 && t.strides[dims[j - 1]] > t.strides[i]; --j) dims[j] = dims[j - 1];
    dims[j] = i;
  }
  int64_t reach = 0;
  for (int j = 0; j < n; ++j) {
    const int i = dims[j];
    if (t.strides[i] <= reach)
      fail_invalid(output.name, ": elements overlap in memory (shape ", shape_text(t.shape, t.rank),
                   ", strides ", shape_text(t.strides, t.rank), "); an output needs one address "
                   "per element");
    reach += (t.shape[i] - 1) * t.strides[i];
  }
  const Span s = memory_span(t);
  for (size_t i = 0; i < count; ++i) {
    const NamedTensor& other = others[i];
    if (other.tensor == nullptr || other.tensor == output.tensor) continue;
    const Span o = memory_span(*other.tensor);
    if (other.tensor->device == t.device && s.begin < s.end && o.begin < o.end &&
        s.begin < o.end && o.begin < s.end)
      fail_invalid(output.name, ": shares memory with ", other.name,
                   " (outputs must not overlap inputs or other outputs)");
  }
}

int checked_size(const char* name, const TensorRef& t, int dim, const char* what) {
  if (t.shape[dim] > INT32_MAX)
    fail_invalid(name, ": size of dim ", dim, " (", what, ") must be < 2^31, got ", t.shape[dim]);
  return static_cast<int>(t.shape[dim]);
}

namespace {

// Problem::head_rules from params' head groups (the layout's extents already in p.axes), and
// Problem::axes with group 0's rule. What the fixed-size HeadRules cannot hold is refused here;
// the rules themselves are validated by the core.
void set_head_rules(const AttentionParams& params, Problem& p) {
  const size_t groups = params.head_groups.size();
  if (groups == 0) {
    if (!params.group_of_head.empty())
      fail_invalid("head rules: group_of_head must be empty without head groups, got ",
                   params.group_of_head.size(), " entries");
    return;
  }
  if (groups > static_cast<size_t>(kMaxHeadGroups))
    fail_invalid("head rules: groups must be in [1, ", kMaxHeadGroups, "], got ", groups);
  if (p.heads_q > kMaxHeadsWithRules)
    fail_invalid("head rules: query heads must be <= ", kMaxHeadsWithRules,
                 " with head rules, got ", p.heads_q);
  if (params.group_of_head.size() != static_cast<size_t>(p.heads_q))
    fail_invalid("head rules: group_of_head must hold one group per query head (", p.heads_q,
                 "), got ", params.group_of_head.size(), " entries");
  HeadRules& rules = p.head_rules;
  rules.groups = static_cast<int>(groups);
  for (size_t g = 0; g < groups; ++g) {
    const HeadGroupRule& rule = params.head_groups[g];
    for (int a = 0; a < p.rank; ++a) {
      AxisRule& axis = rules.axes[g][a];
      axis.extent = p.axes[a].extent;
      axis.window = rule.window[a];
      axis.stride = rule.stride[a];
      axis.dilation = rule.dilation[a];
      axis.causal = rule.causal[a];
    }
  }
  for (int h = 0; h < p.heads_q; ++h) {
    const int g = params.group_of_head[h];
    if (g < 0 || g >= rules.groups)
      fail_invalid("head rules: group of head ", h, " must be in [0, ", rules.groups, "), got ", g);
    rules.group_of_head[h] = static_cast<uint8_t>(g);
  }
  // Each group's rule alone first, so that an error names its group (the core's validation
  // reports group 0's as Problem::axes'). Too many tokens are the layout's error, left to it.
  double tokens = 1;
  for (int a = 0; a < p.rank; ++a) tokens *= p.axes[a].extent;
  for (int g = 0; g < rules.groups && tokens <= INT32_MAX; ++g) {
    Problem alone;
    alone.rank = p.rank;
    for (int a = 0; a < p.rank; ++a) alone.axes[a] = rules.axes[g][a];
    try {
      validate(alone);
    } catch (const Error& e) {
      fail_invalid("head rules: group ", g, " ", e.what());
    }
  }
  for (int a = 0; a < p.rank; ++a) p.axes[a] = rules.axes[0][a];
}

}  // namespace

Problem make_problem(const AttentionParams& params, const AttentionTensors& t) {
  if (params.rank < 1 || params.rank > kMaxRank)
    fail_invalid("rank must be 1, 2 or 3, got ", params.rank);
  const int r = params.rank;
  if (t.q.rank != r + 3)
    fail_invalid("query: expected ", r + 3, " dims [batch, ", r, " spatial dims, heads, dim], got ",
                 t.q.rank, " dims");
  if (t.k.rank != r + 3) fail_invalid("key: expected ", r + 3, " dims, got ", t.k.rank, " dims");
  if (t.v.rank != r + 3) fail_invalid("value: expected ", r + 3, " dims, got ", t.v.rank, " dims");
  check_layout("query", t.q);
  check_layout("key", t.k);
  check_layout("value", t.v);
  if (t.q.dtype == DType::i32)
    fail_invalid("query: int32 is the dtype of additional_kv_counts only, got int32 inputs");
  // Sizes become 32-bit problem fields: larger ones are refused, not truncated.
  const auto narrow = checked_size;
  Problem p;
  p.rank = r;
  p.batch = narrow("query", t.q, 0, "batch");
  for (int a = 0; a < r; ++a) {
    p.axes[a].extent = narrow("query", t.q, 1 + a, "extent");
    p.axes[a].window = params.window[a];
    p.axes[a].stride = params.stride[a];
    p.axes[a].dilation = params.dilation[a];
    p.axes[a].causal = params.causal[a];
  }
  p.heads_q = narrow("query", t.q, r + 1, "heads");
  set_head_rules(params, p);
  p.dim_qk = narrow("query", t.q, r + 2, "head dim");
  p.heads_kv = narrow("key", t.k, r + 1, "heads");
  p.dim_v = narrow("value", t.v, r + 2, "head dim");
  p.dtype = t.q.dtype;
  p.scale = params.scale;
  if (params.slab.active) {
    p.slab = params.slab;
    for (int a = 0; a < r; ++a) p.slab.key_extent[a] = narrow("key", t.k, 1 + a, "extent");
  }
  if ((t.additional_k == nullptr) != (t.additional_v == nullptr))
    fail_invalid("additional keys and additional values must be given together");
  if (t.additional_k) {
    if (t.additional_k->rank != 4)
      fail_invalid("additional keys: expected 4 dims [batch, tokens, heads, dim], got ",
                   t.additional_k->rank, " dims");
    check_layout("additional keys", *t.additional_k);
    p.additional_kv = narrow("additional keys", *t.additional_k, 1, "tokens");
  }
  validate(p);

  int64_t shape[kMaxTensorRank];
  const int dev = t.q.device;
  int n = token_tensor_shape(p, p.heads_q, p.dim_qk, shape);
  check_tensor("query", t.q, shape, n, p.dtype, dev);
  n = key_tensor_shape(p, p.heads_kv, p.dim_qk, shape);
  check_tensor("key", t.k, shape, n, p.dtype, dev);
  n = key_tensor_shape(p, p.heads_kv, p.dim_v, shape);
  check_tensor("value", t.v, shape, n, p.dtype, dev);
  if (t.additional_k) {
    int64_t ks[4] = {p.batch, p.additional_kv, p.heads_kv, p.dim_qk};
    int64_t vs[4] = {p.batch, p.additional_kv, p.heads_kv, p.dim_v};
    check_tensor("additional keys", *t.additional_k, ks, 4, p.dtype, dev);
    check_tensor("additional values", *t.additional_v, vs, 4, p.dtype, dev);
  }
  if (t.additional_kv_counts) {
    if (!t.additional_k)
      fail_invalid("additional_kv_counts: given without additional keys and values");
    const int64_t cs[1] = {p.batch};
    check_tensor("additional_kv_counts", *t.additional_kv_counts, cs, 1, DType::i32, dev);
  }
  return p;
}

}  // namespace gna
