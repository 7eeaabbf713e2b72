// Tiling math shared by kernels and the simulator. Tiles live inside a dilation group: a tile of
// T tokens on an axis covers group coordinates [t*T, (t+1)*T) clipped to the group length n, i.e.
// full coordinates g + d*ig. Multi-dimensional tiles are products of per-axis tiles, and because
// the rule is an AND over axes, every multi-dimensional quantity is a product/combination of
// per-axis ones.
#pragma once

#include <cstdint>

#include "gna/core/axis_rule.hpp"

namespace gna {

// Ordered so that combining axes takes the minimum.
enum class PairClass : uint8_t { empty = 0, partial = 1, full = 2 };

GNA_HD PairClass combine(PairClass a, PairClass b) { return a < b ? a : b; }

GNA_HD int tiles_along(int n, int tile) { return ceil_div(n, tile); }

// Rows of tile t (group coordinates), clipped to the group length.
GNA_HD Range tile_rows(int n, int tile, int t) { return Range{t * tile, min_i((t + 1) * tile, n)}; }

// Union of the key windows of queries q (non-empty, clipped). Starts and ends are monotone in
// the query and consecutive windows overlap or touch, so the union is exactly this interval.
GNA_HD Range union_key_window(const AxisRule& a, int n, Range q) {
  return Range{window_start(a, n, q.begin), key_window(a, n, q.end - 1).end};
}

// Union of the query windows (inverse rule) of keys k (non-empty, clipped).
GNA_HD Range union_query_window(const AxisRule& a, int n, Range k) {
  return Range{query_window(a, n, k.begin).begin, query_window(a, n, k.end - 1).end};
}

// Grid KV tiles [begin, end) covering the union window u.
GNA_HD Range grid_tiles_covering(Range u, int tile_kv) {
  return Range{u.begin / tile_kv, ceil_div(u.end, tile_kv)};
}

// KV tiles [begin, end) that Q tile qt must visit on this axis (static KV tiles).
GNA_HD Range kv_tiles_for_q_tile(const AxisRule& a, int n, int qt, int tile_q, int tile_kv) {
  return grid_tiles_covering(union_key_window(a, n, tile_rows(n, tile_q, qt)), tile_kv);
}

// Where a Q tile's KV tiles start on one axis (docs/rule.md section 7.2): on the fixed grid of the
// KV tile size (static tiles, kv_tiles_for_q_tile), or placed at the first key of the union of its
// queries' windows. The KV-stationary backward places its Q tiles the same way with the roles
// swapped (q_tile_run: grid Q tiles, or placed at the first query of the union of its keys' query
// windows), so one placement type and one chooser serve both walks.
enum class KvPlacement : uint8_t { grid, placed };
// The placements a kernel may choose from (KernelOptions, the tile chooser).
enum class KvPlacements : uint8_t { grid, placed, either };

// The KV tiles a Q tile visits on one axis: `count` tiles of tile_kv keys, tile m starting at key
// first + m * tile_kv (group coordinates). Tiles may run past the group length n (padding).
struct KvTileRun {
  int first = 0;
  int count = 0;
};

// The KV tiles covering the union window u. Placed: ceil(|u| / tile_kv) tiles from u.begin, the
// fewest that cover u. A placed run that ends past n is not shifted left to end at n: its first
// tile would then hold keys no query of the Q tile attends, so the pair stays partial (over random
// axes such a shift gave more partial pairs for 12% of the Q tiles it moved, fewer for 0.1%).
GNA_HD KvTileRun kv_tiles_covering(Range u, int tile_kv, KvPlacement placement) {
  if (placement == KvPlacement::placed) return KvTileRun{u.begin, ceil_div(u.size(), tile_kv)};
  const Range t = grid_tiles_covering(u, tile_kv);
  return KvTileRun{t.begin * tile_kv, t.size()};
}

// The KV tiles of Q tile qt with either placement (the union window computed once).
GNA_HD KvTileRun kv_tile_run(const AxisRule& a, int n, int qt, int tile_q, int tile_kv,
                             KvPlacement placement) {
  return kv_tiles_covering(union_key_window(a, n, tile_rows(n, tile_q, qt)), tile_kv, placement);
}

// Placed KV tiles of Q tile qt.
GNA_HD KvTileRun placed_kv_tiles(const AxisRule& a, int n, int qt, int tile_q, int tile_kv) {
  return kv_tile_run(a, n, qt, tile_q, tile_kv, KvPlacement::placed);
}

// Q tiles [begin, end) whose queries attend KV tile kt on this axis (backward, KV-stationary).
GNA_HD Range q_tiles_for_kv_tile(const AxisRule& a, int n, int kt, int tile_q, int tile_kv) {
  const Range u = union_query_window(a, n, tile_rows(n, tile_kv, kt));
  return Range{u.begin / tile_q, ceil_div(u.end, tile_q)};
}

// Class of the pair (queries q, KV tile starting at k_begin with tile_kv slots) on one axis.
// full: every valid query attends every slot, and every slot is a real key (no padding);
// empty: no valid query attends any real key; partial otherwise (needs the per-element mask).
GNA_HD PairClass classify_axis_pair(const AxisRule& a, int n, Range q, int k_begin, int tile_kv) {
  const int k_end = k_begin + tile_kv;
  const Range real{k_begin, min_i(k_end, n)};
  if (q.empty() || real.empty()) return PairClass::empty;
  const Range u = union_key_window(a, n, q);
  if (u.end <= real.begin || real.end <= u.begin) return PairClass::empty;
  const bool all_real = k_end <= n;
  const bool first_query_reaches_end = key_window(a, n, q.begin).end >= k_end;
  const bool last_query_starts_before = window_start(a, n, q.end - 1) <= k_begin;
  return (all_real && first_query_reaches_end && last_query_starts_before) ? PairClass::full
                                                                          : PairClass::partial;
}

GNA_HD PairClass classify_axis_tiles(const AxisRule& a, int n, int qt, int kt, int tile_q,
                                     int tile_kv) {
  return classify_axis_pair(a, n, tile_rows(n, tile_q, qt), kt * tile_kv, tile_kv);
}

// Class of the pair (Q tile qt, the KV tile of tile_kv keys from key k_begin) on one axis: the
// class of tile m of a KvTileRun with k_begin = first + m * tile_kv.
GNA_HD PairClass classify_q_tile_keys(const AxisRule& a, int n, int qt, int tile_q, int k_begin,
                                      int tile_kv) {
  return classify_axis_pair(a, n, tile_rows(n, tile_q, qt), k_begin, tile_kv);
}

// The tiles m of a KV tile run whose pair with Q tile qt is full on this axis, a range: along the
// run a tile's first key and its end only grow, and the pair is full when the first key is at or
// after the last query's window start and the end at or before the first query's window end and
// n (classify_axis_pair). Every other tile of the run is partial.
GNA_HD Range full_tiles_of_run(const AxisRule& a, int n, int qt, int tile_q, int tile_kv,
                               KvTileRun run) {
  const Range q = tile_rows(n, tile_q, qt);
  const int lo = window_start(a, n, q.end - 1) - run.first;           // first key - run.first >= lo
  const int hi = min_i(key_window(a, n, q.begin).end, n) - run.first;  // end - run.first <= hi
  const int begin = lo <= 0 ? 0 : ceil_div(lo, tile_kv);
  const int end = min_i(hi <= 0 ? 0 : hi / tile_kv, run.count);
  return Range{min_i(begin, end), end};
}

// The Q tiles a KV tile visits on one axis (KV-stationary backward), the mirror of kv_tile_run
// with the roles swapped: `count` tiles of tile_q queries, tile m starting at query
// first + m * tile_q (group coordinates), covering the union query window of KV tile kt (inverse
// rule); on the grid of the Q tile size (the Q tiles of q_tiles_for_kv_tile) or placed at the
// window's first query. Placed tiles may run past n (rows without a query).
using QTileRun = KvTileRun;
GNA_HD QTileRun q_tile_run(const AxisRule& a, int n, int kt, int tile_q, int tile_kv,
                           KvPlacement placement) {
  return kv_tiles_covering(union_query_window(a, n, tile_rows(n, tile_kv, kt)), tile_q, placement);
}

// The tiles of a run (placed: any first row) that meet rows [rows.begin, rows.end): the run
// started at rows.begin where it started before, and cut where it passes rows.end, so that it
// still covers what it covered inside those rows (a slab's own queries: gna/core/slab.hpp). A
// run inside [0, n) clipped to [0, n) is the run itself.
GNA_HD KvTileRun clip_tile_run(KvTileRun run, int tile, Range rows) {
  const int first = max_i(run.first, rows.begin);
  const int end = min_i(run.first + run.count * tile, rows.end);
  return KvTileRun{first, end > first ? ceil_div(end - first, tile) : 0};
}

// Queries of tile m of a Q tile run, clipped to the group length.
GNA_HD Range run_tile_rows(int n, QTileRun run, int m, int tile_q) {
  const int begin = run.first + m * tile_q;
  return Range{begin, min_i(begin + tile_q, n)};
}

// Class of the pair (tile m of Q tile run `run`, KV tile kt) on one axis.
GNA_HD PairClass classify_run_q_tile(const AxisRule& a, int n, QTileRun run, int m, int tile_q,
                                     int kt, int tile_kv) {
  return classify_axis_pair(a, n, run_tile_rows(n, run, m, tile_q), kt * tile_kv, tile_kv);
}

// The tiles m of a Q tile run whose pair with KV tile kt is full on this axis, a range (the
// inverse of full_tiles_of_run): along the run a tile's first query and its last only grow, and
// the pair is full when the first query's window reaches the KV tile's end, the last query's
// window starts at or before its first key and the tile holds only real keys
// (classify_axis_pair). Every other tile of the run is partial.
GNA_HD Range full_q_tiles_of_run(const AxisRule& a, int n, int kt, int tile_q, int tile_kv,
                                 QTileRun run) {
  const int k_begin = kt * tile_kv, k_end = k_begin + tile_kv;
  if (k_end > n || run.count <= 0) return Range{0, 0};
  // First query whose window reaches k_end, and first whose window starts after k_begin.
  const int reach = a.causal ? k_end - 1 : first_query_with_start_at_least(a, n, k_end - a.window);
  const int past = first_query_with_start_at_least(a, n, k_begin + 1);
  const int lo = reach - run.first;  // first query - run.first >= lo
  const int begin = lo <= 0 ? 0 : ceil_div(lo, tile_q);
  // A tile's last query (clipped to n) is below `past`: always when past >= n, else when the
  // tile ends by past.
  const int hi = past - run.first;
  const int end = past >= n ? run.count : min_i(hi <= 0 ? 0 : hi / tile_q, run.count);
  return Range{min_i(begin, end), end};
}

// The grid Q tiles whose pair with KV tile kt is full on this axis, a range (full_q_tiles_of_run
// of the grid run from Q tile 0, without the run's offsets: the grid kernels' setup): every
// other Q tile of q_tiles_for_kv_tile is partial.
GNA_HD Range full_q_tiles_of_kv_tile(const AxisRule& a, int n, int kt, int tile_q, int tile_kv) {
  const int k_begin = kt * tile_kv, k_end = k_begin + tile_kv;
  if (k_end > n) return Range{0, 0};
  const int reach = a.causal ? k_end - 1 : first_query_with_start_at_least(a, n, k_end - a.window);
  const int past = first_query_with_start_at_least(a, n, k_begin + 1);
  const int begin = ceil_div(reach, tile_q);
  const int end = past >= n ? tiles_along(n, tile_q) : past / tile_q;
  return Range{min_i(begin, end), end};
}

// Per-axis tile shape of a multi-dimensional tile (unused axes are 1).
struct TileShape {
  int size[kMaxRank] = {1, 1, 1};
  GNA_HD int64_t volume(int rank) const {
    int64_t v = 1;
    for (int a = 0; a < rank; ++a) v *= size[a];
    return v;
  }
};

}  // namespace gna
