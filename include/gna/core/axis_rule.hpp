// The attention rule of one axis (docs/rule.md section 2; the inverse rule: section 3): the single
// definition used by the reference, every kernel, the simulator and the Python package. Coordinates
// named with a trailing "g" (ig, jg) are positions inside a dilation group; n is that group's
// length.
#pragma once

#include "gna/core/hd.hpp"

namespace gna {

struct AxisRule {
  int extent = 1;    // L
  int window = 2;    // K
  int dilation = 1;  // d
  int stride = 1;    // s
  bool causal = false;
};

GNA_HD int dilation_group(const AxisRule& a, int i) { return i % a.dilation; }
GNA_HD int index_in_group(const AxisRule& a, int i) { return i / a.dilation; }
GNA_HD int coordinate_of(const AxisRule& a, int group, int ig) { return group + ig * a.dilation; }
// n = ceil((L - g) / d) for a group g < d <= L; n >= K whenever K * d <= L. Written without
// L + d, which overflows for extents near 2^31.
GNA_HD int group_length(const AxisRule& a, int group) {
  return (a.extent - group - 1) / a.dilation + 1;
}

// First key (group coordinate) of query ig's window. Monotone non-decreasing in ig, which the
// inverse rule and the tiling math rely on.
GNA_HD int window_start(const AxisRule& a, int n, int ig) {
  const int s = a.stride, K = a.window;
  const int group_base = (ig / s) * s;
  if (a.causal) {
    const int leader = min_i(group_base + s - 1, n - 1);  // last query of the stride group
    return max_i(leader - K + 1, 0);
  }
  const int leader = min_i(group_base + s / 2, n - 1);  // centre (right-centre for even s)
  return clamp_i(leader - K / 2, 0, n - K);
}

// Keys [begin, end) attended by query ig (group coordinates). Non-causal: exactly K keys.
GNA_HD Range key_window(const AxisRule& a, int n, int ig) {
  const int start = window_start(a, n, ig);
  return Range{start, a.causal ? ig + 1 : start + a.window};
}

// Smallest query ig in [0, n] with window_start(ig) >= v (n if none): closed form of the
// monotone start function, the building block of the inverse rule.
GNA_HD int first_query_with_start_at_least(const AxisRule& a, int n, int v) {
  const int s = a.stride, K = a.window;
  if (v <= 0) return 0;
  if (v > n - K) return n;  // starts never exceed n - K
  // Here the clamps are inactive, so start >= v iff leader >= v + (K - 1 - back), where the
  // leader sits s/2 (non-causal) or s - 1 (causal) after the stride group's first query.
  const int need = a.causal ? v + K - 1 : v + K / 2;
  const int lead_offset = a.causal ? s - 1 : s / 2;
  const int group_index = ceil_div(need - lead_offset, s);  // need - lead_offset >= 1
  return min_i(group_index * s, n);
}

// Inverse rule: queries [begin, end) (group coordinates) whose window contains key jg.
GNA_HD Range query_window(const AxisRule& a, int n, int jg) {
  const int end = first_query_with_start_at_least(a, n, jg + 1);
  const int begin = a.causal ? jg : first_query_with_start_at_least(a, n, jg - a.window + 1);
  return Range{begin, end};
}

// Whether query i attends key j on this axis (full coordinates, both in [0, L)).
GNA_HD bool axis_attends(const AxisRule& a, int i, int j) {
  const int g = dilation_group(a, i);
  if (dilation_group(a, j) != g) return false;
  return key_window(a, group_length(a, g), index_in_group(a, i)).contains(index_in_group(a, j));
}

}  // namespace gna
