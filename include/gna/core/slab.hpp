// Slabs (context parallelism): the rule of the whole layout evaluated at global coordinates for
// a local slab of queries and a local slab of keys, so that a rank computes only its own queries
// against exactly the key rows they attend. Per axis, the query tensor holds global coordinates
// [query_offset, query_offset + its extent) and the key and value tensors [key_offset,
// key_offset + key_extent); every query's window must lie inside the key slab.
#pragma once

#include "gna/core/axis_rule.hpp"

namespace gna {

struct Slab {
  bool active = false;
  int extent[kMaxRank] = {1, 1, 1};        // the whole layout per axis: the rule's extents
  int query_offset[kMaxRank] = {0, 0, 0};  // global coordinate of the query tensor's first row
  int key_offset[kMaxRank] = {0, 0, 0};    // global coordinate of the key tensor's first row
  int key_extent[kMaxRank] = {1, 1, 1};    // rows of the key and value tensors (from their shape)
};

// Keys [begin, end) (full coordinates) attended by the queries [queries.begin, queries.end) of
// one axis (non-empty, inside the axis), by the rule: per dilation group, window starts and
// ends grow with the query (axis_rule.hpp), so the group's first and last queries bound it.
GNA_HD Range key_range(const AxisRule& a, Range queries) {
  Range keys{a.extent, 0};
  for (int g = 0; g < a.dilation; ++g) {
    const int first = queries.begin + ((g - queries.begin % a.dilation) + a.dilation) % a.dilation;
    if (first >= queries.end) continue;
    const int last = first + (queries.end - 1 - first) / a.dilation * a.dilation;
    const int n = group_length(a, g);
    const Range low = key_window(a, n, index_in_group(a, first));
    const Range high = key_window(a, n, index_in_group(a, last));
    keys.begin = min_i(keys.begin, coordinate_of(a, g, low.begin));
    keys.end = max_i(keys.end, coordinate_of(a, g, high.end - 1) + 1);
  }
  return keys;
}

// The rows of a tensor slab inside one dilation group of an axis, for kernels that run each
// dilation group on its own (group coordinates, dilation 1): the slab holds global coordinates
// [offset, offset + rows) of an axis under rule a; its rows in group g are tensor rows first,
// first + d, first + 2d, ... (count of them), at group coordinates begin, begin + 1, ...
// Without a slab (offset 0, rows = extent) they are the whole group: first g, begin 0, count
// group_length.
struct SlabGroupRows {
  int first = 0;  // tensor row of the slab's first row in the group
  int begin = 0;  // its group coordinate
  int count = 0;  // the slab's rows in the group (0: none)
};
GNA_HD SlabGroupRows slab_group_rows(const AxisRule& a, int group, int offset, int rows) {
  const int d = a.dilation;
  SlabGroupRows r;
  r.first = ((group - offset) % d + d) % d;
  r.begin = index_in_group(a, offset + r.first);
  r.count = r.first < rows ? (rows - r.first + d - 1) / d : 0;
  return r;
}

}  // namespace gna
