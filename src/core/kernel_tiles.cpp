#include "gna/core/kernel_tiles.hpp"

namespace gna {

bool hopper_forward_head_dim(int d) { return d == 32 || d == 64 || d == 128 || d == 256; }
bool hopper_backward_head_dim(int d) { return d == 32 || d == 64 || d == 128; }

TileKernel hopper_forward_tile_kernel(int head_dim, KvPlacements placements) {
  TileKernel k;
  k.name = "hopper forward";
  k.q_rows = kHopperTileTokens;
  k.kv_rows = hopper_kv_tile_tokens(head_dim);
  k.walk = PairWalk::per_q_tile;
  k.forced_q = {k.q_rows, true};
  k.forced_kv = {k.kv_rows, true};
  k.kv_placements = placements;
  k.weights.partial = kHopperPartialPairWeight;
  return k;
}

TileKernel hopper_backward_tile_kernel(int head_dim, KvPlacements q_placements) {
  TileKernel k;
  k.name = "hopper backward";
  k.q_rows = kHopperBwdQRows;
  k.kv_rows = kHopperBwdKvRows;
  k.walk = PairWalk::per_kv_tile;
  k.forced_q = {kHopperBwdQRows, true};
  k.forced_kv = {kHopperBwdKvRows, true};
  k.kv_placements =
      hopper_backward_placed_q_head_dim(head_dim) ? q_placements : KvPlacements::grid;
  k.weights.partial = kHopperPartialPairWeight;
  return k;
}

TileKernel portable_tile_kernel(const char* name, int rows_q, int rows_kv) {
  TileKernel k;
  k.name = name;
  k.q_rows = rows_q;
  k.kv_rows = rows_kv;
  k.walk = PairWalk::per_q_tile;
  return k;
}

TileKernel portable_forward_tile_kernel(int rows_q, KvPlacements placements) {
  TileKernel k = portable_tile_kernel("portable forward", rows_q, kPortableForwardRowsKV);
  k.kv_placements = placements;
  k.weights.rows = static_cast<double>(rows_q) / kPortableForwardRowsQ;
  k.weights.speedup = rows_q > kPortableForwardRowsQ ? kPortableWideForwardSpeedup : 1;
  k.forced_q = {kPortableForwardRowsQWide, false};
  k.forced_kv = {kPortableForwardRowsKV, true};
  return k;
}

bool portable_forward_head_dim(int d) { return d == 32 || d == 64 || d == 128; }

ScoredTiles portable_forward_tile_choice(const Problem& p, const TileShape& forced_q,
                                         const TileShape& forced_kv, bool wide_fits,
                                         KvPlacements placements) {
  const ScoredTiles narrow = tile_choice(
      p, portable_forward_tile_kernel(kPortableForwardRowsQ, placements), forced_q, forced_kv);
  if (!wide_fits || tile_forced(forced_q, p.rank)) return narrow;
  const ScoredTiles wide = tile_choice(
      p, portable_forward_tile_kernel(kPortableForwardRowsQWide, placements), forced_q, forced_kv);
  return wide.cost < narrow.cost ? wide : narrow;
}

TileKernel portable_backward_tile_kernel(int rows_kv, KvPlacements q_placements) {
  TileKernel k = portable_tile_kernel("portable backward", kPortableBackwardRowsQ, rows_kv);
  k.walk = PairWalk::per_kv_tile;
  k.kv_placements = q_placements;
  k.forced_q = {kPortableBackwardRowsQ, false};
  k.forced_kv = {kPortableBackwardRowsKV, false};
  return k;
}

bool portable_backward_head_dim(int d) { return d == 32 || d == 64 || d == 128; }

ScoredTiles portable_backward_tile_choice(const Problem& p, const TileShape& forced_q,
                                          const TileShape& forced_kv, bool wide_fits,
                                          bool small_kernel, KvPlacements placements) {
  const ScoredTiles wide = tile_choice(
      p, portable_backward_tile_kernel(kPortableBackwardRowsKV, placements), forced_q, forced_kv);
  if (tile_forced(forced_kv, p.rank) || !small_kernel) return wide;
  if (wide_fits && wide.partial_pairs() < kPortableBackwardSmallPartialShare * wide.visited_pairs)
    return wide;
  return tile_choice(p, portable_backward_tile_kernel(kPortableBackwardRowsKVSmall, placements),
                     forced_q, forced_kv);
}

}  // namespace gna
