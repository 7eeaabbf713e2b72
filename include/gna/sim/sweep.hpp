// Stride sweep (docs/rule.md section 8.4): every stride up to the window, the ones worth using, and
// the perfectly block-sparse ones.
#pragma once

#include <vector>

#include "gna/sim/config.hpp"
#include "gna/sim/simulator.hpp"

namespace gna::sim {

struct SweepEntry {
  int stride[kMaxRank] = {1, 1, 1};
  Result result;
  // Beats every smaller stride: its tile-wise bound is strictly higher (fewer KV tiles for the
  // worst Q tile) than that of every stride that is <= it on every axis, itself excluded.
  bool kept = false;
};

// Every stride tuple with 1 <= stride <= window on every axis (the configuration's own strides
// are ignored), ordered by the product of strides, then lexicographically. Multi-dimensional
// tiling costs O(sum over axes of window * extent) plus O(1) per tuple; 1-D tiling runs the
// 1-D simulation for every tuple.
std::vector<SweepEntry> sweep(const Config& c);

// The kept entries, in order.
std::vector<SweepEntry> pruned(const std::vector<SweepEntry>& all);

// The perfectly block-sparse entries (no partial pairs), in order.
std::vector<SweepEntry> block_sparse_strides(const std::vector<SweepEntry>& all);

}  // namespace gna::sim
