// Per-thread walks over one query's window slots (NN) and over the queries attending one key
// (IN), by the core's rule and inverse rule, for a compile-time rank.
#pragma once

#include "gna/core/neighborhood.hpp"
#include "gna/core/problem.hpp"

namespace gna::unfused {

// f(y, flat slot) for every slot of query x's window that holds a key (y: key coordinates).
template <int Rank, typename F>
__device__ __forceinline__ void for_each_key_slot(const Problem& p, const int* x, F&& f) {
  AxisWindow w[kMaxRank];
#pragma unroll
  for (int a = 0; a < Rank; ++a) w[a] = axis_window(p.axes[a], x[a]);
  const int n1 = Rank > 1 ? w[1].valid : 1, n2 = Rank > 2 ? w[2].valid : 1;
  int s[kMaxRank] = {0, 0, 0}, y[kMaxRank] = {0, 0, 0};
  for (s[0] = 0; s[0] < w[0].valid; ++s[0]) {
    y[0] = key_of_slot(p.axes[0], w[0], s[0]);
    for (s[1] = 0; s[1] < n1; ++s[1]) {
      if (Rank > 1) y[1] = key_of_slot(p.axes[1], w[1], s[1]);
      for (s[2] = 0; s[2] < n2; ++s[2]) {
        if (Rank > 2) y[2] = key_of_slot(p.axes[2], w[2], s[2]);
        f(y, flat_slot(p.axes, Rank, s));
      }
    }
  }
}

// f(xq, flat slot of key y in xq's window) for every query xq attending key y.
template <int Rank, typename F>
__device__ __forceinline__ void for_each_attending_query(const Problem& p, const int* y, F&& f) {
  AxisQueries q[kMaxRank];
  int jg[kMaxRank] = {0, 0, 0};
#pragma unroll
  for (int a = 0; a < Rank; ++a) {
    q[a] = axis_queries(p.axes[a], y[a]);
    jg[a] = index_in_group(p.axes[a], y[a]);
  }
  const Range r1 = Rank > 1 ? q[1].queries : Range{0, 1};
  const Range r2 = Rank > 2 ? q[2].queries : Range{0, 1};
  int s[kMaxRank] = {0, 0, 0}, xq[kMaxRank] = {0, 0, 0};
  for (int i0 = q[0].queries.begin; i0 < q[0].queries.end; ++i0) {
    s[0] = slot_in_window(p.axes[0], q[0].n, i0, jg[0]);
    xq[0] = coordinate_of(p.axes[0], q[0].group, i0);
    for (int i1 = r1.begin; i1 < r1.end; ++i1) {
      if (Rank > 1) {
        s[1] = slot_in_window(p.axes[1], q[1].n, i1, jg[1]);
        xq[1] = coordinate_of(p.axes[1], q[1].group, i1);
      }
      for (int i2 = r2.begin; i2 < r2.end; ++i2) {
        if (Rank > 2) {
          s[2] = slot_in_window(p.axes[2], q[2].n, i2, jg[2]);
          xq[2] = coordinate_of(p.axes[2], q[2].group, i2);
        }
        f(xq, flat_slot(p.axes, Rank, s));
      }
    }
  }
}

}  // namespace gna::unfused
