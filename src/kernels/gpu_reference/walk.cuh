// Enumeration of the keys a query attends (and the queries a key is attended by) as a product of
// per-axis ranges, taken from the core's rule. Shared by the reference kernels.
#pragma once

#include "gna/core/axis_rule.hpp"
#include "gna/core/problem.hpp"

namespace gna::gpu_reference {

// Per-axis coordinate ranges (full coordinates: g + d * [begin, end)).
struct AxisRanges {
  int rank = 1;
  int group[kMaxRank] = {0, 0, 0};
  int dilation[kMaxRank] = {1, 1, 1};
  Range r[kMaxRank];

  __device__ int count() const {
    int c = 1;
    for (int a = 0; a < rank; ++a) c *= r[a].size();
    return c;
  }
  // Full coordinates of the idx-th element (row-major over axes).
  __device__ void coordinates(int idx, int* x) const {
    for (int a = rank - 1; a >= 0; --a) {
      const int size = r[a].size();
      x[a] = group[a] + dilation[a] * (r[a].begin + idx % size);
      idx /= size;
    }
  }
};

// Per-axis ranges around full coordinates x under the rules `axes` (a head's: axes_of_head), each
// axis's range given by window(rule, n, ig) in group coordinates (the core's key_window or
// query_window).
template <typename Window>
__device__ inline AxisRanges ranges_around(const AxisRule* axes, int rank, const int* x,
                                           Window window) {
  AxisRanges out;
  out.rank = rank;
  for (int a = 0; a < rank; ++a) {
    const AxisRule& rule = axes[a];
    const int g = dilation_group(rule, x[a]);
    out.group[a] = g;
    out.dilation[a] = rule.dilation;
    out.r[a] = window(rule, group_length(rule, g), index_in_group(rule, x[a]));
  }
  return out;
}

// Keys attended by the query of head h at full coordinates x.
__device__ inline AxisRanges keys_of_query(const Problem& p, int h, const int* x) {
  return ranges_around(axes_of_head(p, h), p.rank, x,
                       [](const AxisRule& r, int n, int ig) { return key_window(r, n, ig); });
}

// Queries of head h attending the key at full coordinates x (inverse rule).
__device__ inline AxisRanges queries_of_key(const Problem& p, int h, const int* x) {
  return ranges_around(axes_of_head(p, h), p.rank, x,
                       [](const AxisRule& r, int n, int jg) { return query_window(r, n, jg); });
}

// Row-major token index -> full coordinates.
__device__ inline void token_coordinates(const Problem& p, int64_t token, int* x) {
  for (int a = p.rank - 1; a >= 0; --a) {
    x[a] = static_cast<int>(token % p.axes[a].extent);
    token /= p.axes[a].extent;
  }
}

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace gna::gpu_reference
