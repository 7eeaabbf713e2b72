// The unfused operators' view of the rule (docs/rule.md section 6): each query's window as prod(K)
// slots, row-major over axes, where a key's slot on an axis is its distance from the window's
// first key (coordinates inside the dilation group). The window comes from the core's rule
// (key_window, query_window); stride is 1. A causal window keeps K slots; those past the query
// hold no key (invalid). Relative positional bias is indexed per axis by K-1 + (key' - query').
#pragma once

#include "gna/core/axis_rule.hpp"

namespace gna {

// One query's window on one axis.
struct AxisWindow {
  int group = 0;  // dilation group of the query
  int start = 0;  // first key (group coordinate), the key in slot 0
  int valid = 0;  // slots [0, valid) hold keys: K, or fewer for a causal query near the start
};

GNA_HD AxisWindow axis_window(const AxisRule& a, int i) {
  const int g = dilation_group(a, i);
  const Range keys = key_window(a, group_length(a, g), index_in_group(a, i));
  return AxisWindow{g, keys.begin, keys.size()};
}

// Full coordinate of the key in slot s (s < valid).
GNA_HD int key_of_slot(const AxisRule& a, const AxisWindow& w, int s) {
  return coordinate_of(a, w.group, w.start + s);
}

// Slot of key jg in the window of query ig (group coordinates, group of length n); only
// meaningful when the key is attended.
GNA_HD int slot_in_window(const AxisRule& a, int n, int ig, int jg) {
  return jg - window_start(a, n, ig);
}

// Queries attending one key on one axis, by the inverse rule.
struct AxisQueries {
  int group = 0;
  int n = 0;      // length of the dilation group
  Range queries;  // group coordinates
};

GNA_HD AxisQueries axis_queries(const AxisRule& a, int j) {
  const int g = dilation_group(a, j);
  const int n = group_length(a, g);
  return AxisQueries{g, n, query_window(a, n, index_in_group(a, j))};
}

// Relative positional bias: entries per axis and the entry of (query i, key j) in full
// coordinates of the same dilation group.
GNA_HD int rpb_extent(const AxisRule& a) { return 2 * a.window - 1; }
GNA_HD int rpb_index(const AxisRule& a, int i, int j) {
  return a.window - 1 + index_in_group(a, j) - index_in_group(a, i);
}

// Slots of a window over every axis: prod(K).
GNA_HD int window_slots(const AxisRule* axes, int rank) {
  int s = 1;
  for (int a = 0; a < rank; ++a) s *= axes[a].window;
  return s;
}

// Row-major flat slot of per-axis slots, and back.
GNA_HD int flat_slot(const AxisRule* axes, int rank, const int* slot) {
  int s = 0;
  for (int a = 0; a < rank; ++a) s = s * axes[a].window + slot[a];
  return s;
}
GNA_HD void split_slot(const AxisRule* axes, int rank, int flat, int* slot) {
  for (int a = rank - 1; a >= 0; --a) {
    slot[a] = flat % axes[a].window;
    flat /= axes[a].window;
  }
}

}  // namespace gna
