#include "kernels/portable/tile_plan.hpp"

namespace gna::portable {
namespace {

// The forward runs Q tiles of 64 rows (one m-block per warp) or 128 (two) against 64-key KV
// tiles; the 128-row kernel's throughput on dense pairs is kWideForwardSpeedup times the 64-row
// kernel's.
constexpr int kForwardRowsQ = 64, kForwardRowsQWide = 128, kForwardRowsKV = 64;
constexpr double kWideForwardSpeedup = 1.5;

// The kernels as the core's tile chooser sees them; every portable kernel walks per Q tile.
TileKernel tile_kernel(const char* name, int rows_q, int rows_kv) {
  TileKernel k;
  k.name = name;
  k.q_rows = rows_q;
  k.kv_rows = rows_kv;
  k.walk = PairWalk::per_q_tile;
  return k;
}

TileKernel forward_kernel(int rows_q) {
  TileKernel k = tile_kernel("portable forward", rows_q, kForwardRowsKV);
  k.weights.rows = static_cast<double>(rows_q) / kForwardRowsQ;
  k.weights.speedup = rows_q > kForwardRowsQ ? kWideForwardSpeedup : 1;
  k.forced_q = {kForwardRowsQWide, false};
  k.forced_kv = {kForwardRowsKV, true};
  return k;
}

TileKernel backward_kernel(int rows_kv) {
  TileKernel k = tile_kernel("portable backward", kBackwardRowsQ, rows_kv);
  k.forced_q = {kBackwardRowsQ, false};
  k.forced_kv = {kBackwardRowsKV, false};
  return k;
}

TilePlan plan_of(const ScoredTiles& s) {
  TilePlan plan;
  plan.q = s.q;
  plan.kv = s.kv;
  plan.visited_pairs = s.visited_pairs;
  plan.partial_pairs = s.partial_pairs();
  plan.cost = s.cost;
  return plan;
}

}  // namespace

TilePlan score_tiles(const Problem& p, const TileShape& q, const TileShape& kv) {
  return plan_of(
      score_tile_choice(p, tile_kernel("portable", q.volume(p.rank), kv.volume(p.rank)), q, kv));
}

TilePlan choose_tiles(const Problem& p, int rows_q, int rows_kv) {
  return plan_of(
      tile_choice(p, tile_kernel("portable", rows_q, rows_kv), kNoForcedTile, kNoForcedTile));
}

TilePlan choose_forward_tiles(const Problem& p, const TileShape& q_tile, const TileShape& kv_tile,
                              bool wide_fits) {
  const TilePlan narrow = plan_of(tile_choice(p, forward_kernel(kForwardRowsQ), q_tile, kv_tile));
  // A forced Q tile is the only Q candidate of either kernel; its volume picks the kernel.
  if (!wide_fits || tile_forced(q_tile, p.rank)) return narrow;
  const TilePlan wide = plan_of(tile_choice(p, forward_kernel(kForwardRowsQWide), q_tile, kv_tile));
  return wide.cost < narrow.cost ? wide : narrow;
}

TilePlan choose_backward_tiles(const Problem& p, int kv_rows, const TileShape& q_tile,
                               const TileShape& kv_tile) {
  return plan_of(tile_choice(p, backward_kernel(kv_rows), q_tile, kv_tile));
}

}  // namespace gna::portable
