#include "kernels/portable/tile_plan.hpp"

namespace gna::portable {
namespace {

TilePlan plan_of(const ScoredTiles& s) {
  TilePlan plan;
  plan.q = s.q;
  plan.kv = s.kv;
  plan.placement = s.placement;
  plan.visited_pairs = s.visited_pairs;
  plan.partial_pairs = s.partial_pairs();
  plan.cost = s.cost;
  return plan;
}

}  // namespace

TilePlan score_tiles(const Problem& p, const TileShape& q, const TileShape& kv) {
  const TileKernel k = portable_tile_kernel("portable", q.volume(p.rank), kv.volume(p.rank));
  return plan_of(score_tile_choice(p, k, q, kv));
}

TilePlan choose_tiles(const Problem& p, int rows_q, int rows_kv) {
  const TileKernel k = portable_tile_kernel("portable", rows_q, rows_kv);
  return plan_of(tile_choice(p, k, kNoForcedTile, kNoForcedTile));
}

TilePlan choose_forward_tiles(const Problem& p, const TileShape& q_tile, const TileShape& kv_tile,
                              bool wide_fits, KvPlacements placements) {
  return plan_of(portable_forward_tile_choice(p, q_tile, kv_tile, wide_fits, placements));
}

TilePlan choose_backward_tiles(const Problem& p, int kv_rows, const TileShape& q_tile,
                               const TileShape& kv_tile, KvPlacements placements) {
  return plan_of(
      tile_choice(p, portable_backward_tile_kernel(kv_rows, placements), q_tile, kv_tile));
}

TilePlan choose_backward_tiles(const Problem& p, const TileShape& q_tile, const TileShape& kv_tile,
                               bool wide_fits, bool small_kernel, KvPlacements placements) {
  return plan_of(
      portable_backward_tile_choice(p, q_tile, kv_tile, wide_fits, small_kernel, placements));
}

}  // namespace gna::portable
