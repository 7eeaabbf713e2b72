// Index arithmetic for heads-last tensors on the host, shared by the reference's passes.
#pragma once

#include <algorithm>

#include <cstdint>
#include <vector>

#include "gna/attention_params.hpp"
#include "gna/core/error.hpp"

namespace gna::reference {

// Coordinates of a flat token index (row-major over the problem's axes).
inline void token_coordinates(const Problem& p, int64_t token, int* x) {
  for (int a = p.rank - 1; a >= 0; --a) {
    x[a] = static_cast<int>(token % p.axes[a].extent);
    token /= p.axes[a].extent;
  }
}

// A flat row index over [batch, tokens, heads] (heads fastest), as the passes enumerate rows,
// with the coordinates of its token.
struct Row {
  int64_t b;
  int64_t token;
  int h;
  int x[kMaxRank];
};
inline Row split_row(const Problem& p, int64_t idx, int64_t tokens, int heads) {
  Row row{idx / (int64_t{heads} * tokens), (idx / heads) % tokens, static_cast<int>(idx % heads),
          {}};
  token_coordinates(p, row.token, row.x);
  return row;
}

// Element offset of (b, x, h, 0) in a heads-last tensor of the problem's rank.
inline int64_t token_offset(const TensorRef& t, int rank, int64_t b, const int* x, int64_t h) {
  int64_t off = b * t.strides[0] + h * t.strides[rank + 1];
  for (int a = 0; a < rank; ++a) off += x[a] * t.strides[1 + a];
  return off;
}

// Element offset of (b, i, h, 0) in an additional-KV tensor [B, N, H, D].
inline int64_t extra_offset(const TensorRef& t, int64_t b, int64_t i, int64_t h) {
  return b * t.strides[0] + i * t.strides[1] + h * t.strides[2];
}

// Keys a query attends at most: the window clipped to each axis (the largest of the head-rule
// groups'), plus the additional keys (for choosing how many threads a pass is worth).
inline int64_t keys_per_query_bound(const Problem& p) {
  const auto window_keys = [&](const AxisRule* axes) {
    int64_t keys = 1;
    for (int a = 0; a < p.rank; ++a) keys *= std::min(axes[a].window, axes[a].extent);
    return keys;
  };
  int64_t keys = window_keys(p.axes);
  for (int g = 0; g < p.head_rules.groups; ++g)
    keys = std::max(keys, window_keys(p.head_rules.axes[g]));
  return keys + p.additional_kv;
}

template <typename T>
T* typed(const TensorRef& t) {
  return static_cast<T*>(t.data);
}

// Coordinates of a flat key token index (row-major over the key tensor's extents).
inline void key_token_coordinates(const Problem& p, int64_t token, int* y) {
  for (int a = p.rank - 1; a >= 0; --a) {
    y[a] = static_cast<int>(token % key_extent(p, a));
    token /= key_extent(p, a);
  }
}

inline int64_t key_tokens(const Problem& p) {
  int64_t t = 1;
  for (int a = 0; a < p.rank; ++a) t *= key_extent(p, a);
  return t;
}

// The rule of axis a for query head rules `axes` at global coordinates, and the global
// coordinates of a query's and a key's tensor rows (offset on a slab problem; slabs take no
// head rules, so axes is then p.axes).
inline AxisRule rule_of_axis(const Problem& p, const AxisRule* axes, int a) {
  return p.slab.active ? slab_axis(p, a) : axes[a];
}
inline int query_origin(const Problem& p, int a) {
  return p.slab.active ? p.slab.query_offset[a] : 0;
}
inline int key_origin(const Problem& p, int a) { return p.slab.active ? p.slab.key_offset[a] : 0; }

// Key tensor coordinates of every key (per axis) that query x (query tensor coordinates)
// attends under the per-axis rules `axes` (axes_of_head of the query's head), as per-axis lists
// whose product is the attended set.
inline void attended_keys_per_axis(const Problem& p, const AxisRule* axes, const int* x,
                                   std::vector<int>* keys) {
  for (int a = 0; a < p.rank; ++a) {
    const AxisRule r = rule_of_axis(p, axes, a);
    const int i = x[a] + query_origin(p, a), origin = key_origin(p, a);
    const int g = dilation_group(r, i);
    const Range w = key_window(r, group_length(r, g), index_in_group(r, i));
    keys[a].clear();
    for (int jg = w.begin; jg < w.end; ++jg) keys[a].push_back(coordinate_of(r, g, jg) - origin);
  }
}

// Query tensor coordinates of every query (per axis) attending key y (key tensor coordinates)
// under the per-axis rules `axes`, by the inverse rule; on a slab, only the slab's queries.
inline void attending_queries_per_axis(const Problem& p, const AxisRule* axes, const int* y,
                                       std::vector<int>* queries) {
  for (int a = 0; a < p.rank; ++a) {
    const AxisRule r = rule_of_axis(p, axes, a);
    const int j = y[a] + key_origin(p, a), origin = query_origin(p, a);
    const int g = dilation_group(r, j);
    const Range w = query_window(r, group_length(r, g), index_in_group(r, j));
    queries[a].clear();
    for (int ig = w.begin; ig < w.end; ++ig) {
      const int i = coordinate_of(r, g, ig) - origin;
      if (0 <= i && i < p.axes[a].extent) queries[a].push_back(i);
    }
  }
}

// Calls f(coords) for every element of the product of per-axis coordinate lists.
template <typename F>
void for_each_in_product(int rank, const std::vector<int>* lists, F f) {
  int x[kMaxRank] = {0, 0, 0};
  const size_t n0 = lists[0].size();
  const size_t n1 = rank > 1 ? lists[1].size() : 1;
  const size_t n2 = rank > 2 ? lists[2].size() : 1;
  for (size_t i0 = 0; i0 < n0; ++i0) {
    x[0] = lists[0][i0];
    for (size_t i1 = 0; i1 < n1; ++i1) {
      if (rank > 1) x[1] = lists[1][i1];
      for (size_t i2 = 0; i2 < n2; ++i2) {
        if (rank > 2) x[2] = lists[2][i2];
        f(x);
      }
    }
  }
}

// The additional keys batch item b attends: the first count[b] under per-batch counts (host
// int32, clamped as the core says), else all.
inline int additional_keys_of_item(const Problem& p, const AttentionTensors& in, int64_t b) {
  if (!in.additional_kv_counts) return p.additional_kv;
  const TensorRef& c = *in.additional_kv_counts;
  return gna::attended_additional_keys(static_cast<const int32_t*>(c.data)[b * c.strides[0]],
                                       p.additional_kv);
}

// Calls f(k_row, v_row) for every key query x of batch item b and query head h attends
// through KV head hk: the window's keys (of the head's rule) in order, then the additional keys.
// keys: per-axis scratch lists.
template <typename T, typename F>
void for_each_attended_key_row(const Problem& p, const AttentionTensors& in, int64_t b,
                               const int* x, int h, int hk, std::vector<int>* keys, F f) {
  attended_keys_per_axis(p, axes_of_head(p, h), x, keys);
  for_each_in_product(p.rank, keys, [&](const int* y) {
    f(typed<T>(in.k) + token_offset(in.k, p.rank, b, y, hk),
      typed<T>(in.v) + token_offset(in.v, p.rank, b, y, hk));
  });
  const int additional = additional_keys_of_item(p, in, b);
  for (int j = 0; j < additional; ++j)
    f(typed<T>(*in.additional_k) + extra_offset(*in.additional_k, b, j, hk),
      typed<T>(*in.additional_v) + extra_offset(*in.additional_v, b, j, hk));
}

// LSE is float32 normally, float64 allowed for fp64 inputs.
inline double load_scalar(const TensorRef& t, int64_t off) {
  return t.dtype == DType::f64 ? static_cast<const double*>(t.data)[off]
                               : static_cast<const float*>(t.data)[off];
}
inline void store_scalar(const TensorRef& t, int64_t off, double v) {
  if (t.dtype == DType::f64)
    static_cast<double*>(t.data)[off] = v;
  else
    static_cast<float*>(t.data)[off] = static_cast<float>(v);
}

inline int64_t lse_offset(const TensorRef& t, int rank, int64_t b, const int* x, int64_t h) {
  int64_t off = b * t.strides[0] + h * t.strides[rank + 1];
  for (int a = 0; a < rank; ++a) off += x[a] * t.strides[1 + a];
  return off;
}

// Host-only and float32/float64 checks shared by forward and backward.
inline void check_host_float(const char* name, const TensorRef& t, DType dtype) {
  if (!t.on_host()) fail_invalid("reference: ", name, " must be in host memory, got device ", t.device);
  if (t.dtype != dtype)
    fail_invalid("reference: ", name, " must be ", dtype_name(dtype), ", got ", dtype_name(t.dtype));
}

// A float32/float64 problem, and `t` (its first input) a host tensor of that dtype.
inline void check_host_dtype(const Problem& p, const char* name, const TensorRef& t) {
  if (p.dtype != DType::f32 && p.dtype != DType::f64)
    fail_invalid("reference: dtype must be float32 or float64, got ", dtype_name(p.dtype));
  check_host_float(name, t, p.dtype);
}

}  // namespace gna::reference
