#include "gna/sim/axis_stats.hpp"

#include <algorithm>

#include "gna/core/tiling.hpp"

namespace gna::sim {

namespace {

// KV tiles visited by the Q tile with rows q on this axis, and how many of them are full.
struct Visit {
  int64_t tiles = 0;
  int64_t full = 0;
};

// Static tiles lie on the grid, dynamic ones are placed at the union window's first key; the
// core's kv_tile_run gives both.
Visit visit(const AxisRule& a, int n, int qt, int q_tile, int kv_tile, KvTiling kv_tiling) {
  const KvTileRun run = kv_tile_run(a, n, qt, q_tile, kv_tile, kv_placement(kv_tiling));
  Visit v;
  v.tiles = run.count;
  for (int m = 0; m < run.count; ++m)
    v.full += classify_q_tile_keys(a, n, qt, q_tile, run.first + m * kv_tile, kv_tile) ==
              PairClass::full;
  return v;
}

}  // namespace

AxisStats axis_tile_stats(const AxisRule& a, int q_tile, int kv_tile, KvTiling kv_tiling) {
  AxisStats s;
  s.extent = a.extent;
  s.dense_kv_tiles = tiles_along(a.extent, kv_tile);
  for (int g = 0; g < a.dilation; ++g) {
    const int n = group_length(a, g);
    const int q_tiles = tiles_along(n, q_tile);
    const int kv_tiles = tiles_along(n, kv_tile);
    s.q_tiles += q_tiles;
    s.kv_tiles += kv_tiles;
    s.same_group_pairs += int64_t{q_tiles} * kv_tiles;
    for (int qt = 0; qt < q_tiles; ++qt) {
      const Visit v = visit(a, n, qt, q_tile, kv_tile, kv_tiling);
      s.max_visited = std::max(s.max_visited, v.tiles);
      s.visited += v.tiles;
      s.full += v.full;
    }
  }
  return s;
}

AxisStats axis_stats(const AxisRule& a, int q_tile, int kv_tile, KvTiling kv_tiling) {
  AxisStats s = axis_tile_stats(a, q_tile, kv_tile, kv_tiling);
  s.attended = axis_attended(a);
  return s;
}

int64_t axis_attended(const AxisRule& a) {
  int64_t total = 0;
  for (int g = 0; g < a.dilation; ++g) {
    const int n = group_length(a, g);
    for (int ig = 0; ig < n; ++ig) total += key_window(a, n, ig).size();
  }
  return total;
}

void finish_result(Result& r, int64_t q_tile_volume, int64_t kv_tile_volume) {
  const double n = static_cast<double>(r.tokens);
  r.mean_keys_per_query = static_cast<double>(r.attended_pairs) / n;
  r.sparsity = 1.0 - r.mean_keys_per_query / n;
  r.flop_speedup = n / r.mean_keys_per_query;
  r.tile_speedup = static_cast<double>(r.dense_kv_tiles) / static_cast<double>(r.max_kv_tiles);
  r.pairs.partial = r.visited_pairs - r.pairs.full;
  r.block_sparse = r.pairs.partial == 0;
  const double computed = static_cast<double>(r.visited_pairs) *
                          static_cast<double>(q_tile_volume) * static_cast<double>(kv_tile_volume);
  r.wasted_flop_fraction = 1.0 - static_cast<double>(r.attended_pairs) / computed;
}

Result combine_axes(const AxisStats* axes, int rank, int64_t q_tile_volume,
                    int64_t kv_tile_volume) {
  Result r;
  r.tokens = 1;
  r.q_tiles = 1;
  r.kv_tiles = 1;
  r.dense_kv_tiles = 1;
  r.max_kv_tiles = 1;
  r.mean_kv_tiles = 1.0;
  r.visited_pairs = 1;
  r.attended_pairs = 1;
  int64_t same_group_pairs = 1;
  r.pairs.full = 1;
  for (int i = 0; i < rank; ++i) {
    const AxisStats& s = axes[i];
    r.tokens *= s.extent;
    r.q_tiles *= s.q_tiles;
    r.kv_tiles *= s.kv_tiles;
    r.dense_kv_tiles *= s.dense_kv_tiles;
    r.max_kv_tiles *= s.max_visited;
    // Q tiles form a product grid, so the mean over them is the product of per-axis means.
    r.mean_kv_tiles *= static_cast<double>(s.visited) / static_cast<double>(s.q_tiles);
    r.visited_pairs *= s.visited;
    r.pairs.full *= s.full;
    same_group_pairs *= s.same_group_pairs;
    r.attended_pairs *= s.attended;
  }
  r.pairs.empty = same_group_pairs - r.visited_pairs;
  finish_result(r, q_tile_volume, kv_tile_volume);
  return r;
}

}  // namespace gna::sim
