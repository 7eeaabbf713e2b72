// Per-axis tile statistics of multi-dimensional tiling. The rule is an AND over axes and tiles
// form a product grid, so every multi-dimensional count is a product of these (see
// combine_axes): a stride sweep costs O(sum of extents) per stride.
#pragma once

#include <cstdint>

#include "gna/core/axis_rule.hpp"
#include "gna/sim/config.hpp"
#include "gna/sim/simulator.hpp"

namespace gna::sim {

struct AxisStats {
  int64_t extent = 0;
  int64_t q_tiles = 0;           // sum over dilation groups of tiles_along(n, q_tile)
  int64_t kv_tiles = 0;          // sum over dilation groups of tiles_along(n, kv_tile)
  int64_t same_group_pairs = 0;  // sum over groups of (Q tiles * KV tiles) of that group
  int64_t dense_kv_tiles = 0;    // tiles_along(extent, kv_tile)
  int64_t max_visited = 0;       // most KV tiles a Q tile visits on this axis
  int64_t visited = 0;           // KV tiles visited, summed over Q tiles
  int64_t full = 0;              // visited pairs that are full on this axis
  int64_t attended = 0;          // (query, key) pairs attended on this axis
};

AxisStats axis_stats(const AxisRule& a, int q_tile, int kv_tile, KvTiling kv_tiling);

// The same without `attended` (left 0), for callers that already know it.
AxisStats axis_tile_stats(const AxisRule& a, int q_tile, int kv_tile, KvTiling kv_tiling);

// (query, key) pairs attended on this axis alone: the sum of the key windows' sizes.
int64_t axis_attended(const AxisRule& a);

// The multi-dimensional result from per-axis statistics (rank of them).
Result combine_axes(const AxisStats* axes, int rank, int64_t q_tile_volume,
                    int64_t kv_tile_volume);

// Fills the ratios of `r` from its counts.
void finish_result(Result& r, int64_t q_tile_volume, int64_t kv_tile_volume);

}  // namespace gna::sim
