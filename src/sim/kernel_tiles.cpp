#include "gna/sim/kernel_tiles.hpp"

#include <cmath>

#include "gna/core/error.hpp"
#include "gna/core/kernel_tiles.hpp"
#include "gna/core/tile_candidates.hpp"
#include "gna/core/tile_choice.hpp"

namespace gna::sim {

namespace {

std::string normalized(const std::string& name) {
  std::string s = name;
  for (char& ch : s)
    if (ch == '_' || ch == ' ') ch = '-';
  return s;
}

// The chooser memoizes pair statistics per axis and (Q side, KV side, placement), scoring a
// second placement only on axes where it can differ (placement_can_differ). Per combination, a
// per_q_tile walk classifies every KV tile of every Q tile's run: about the work of simulating it.
// A per_kv_tile walk takes each KV tile's run and its full Q tiles in closed form
// (full_q_tiles_of_run): a few steps per KV tile.
double choice_steps(const Config& c, const TileKernel& k) {
  double steps = 0;
  for (int a = 0; a < c.rank; ++a) {
    const AxisRule& rule = c.axes[a];
    const int n = group_length(rule, 0);
    const int placements =
        k.kv_placements == KvPlacements::either && placement_can_differ(rule, n) ? 2 : 1;
    // On one axis the tiles are the rows; on more, each axis takes every power of two up to them.
    const int q_min = c.rank == 1 ? k.q_rows : 1, kv_min = c.rank == 1 ? k.kv_rows : 1;
    for (int q = q_min; q <= k.q_rows; q *= 2)
      for (int kv = kv_min; kv <= k.kv_rows; kv *= 2) {
        double walk = 0;
        if (k.walk == PairWalk::per_kv_tile) {
          walk = 1 + tiles_along(n, kv);
        } else {
          Config one;
          one.rank = 1;
          one.axes[0] = rule;
          one.q_tile[0] = q;
          one.kv_tile[0] = kv;
          walk = simulation_steps(one);
        }
        steps += placements * walk;
      }
  }
  return steps;
}

}  // namespace

const char* kernel_name(TiledKernel k) {
  switch (k) {
    case TiledKernel::hopper_forward: return "hopper-forward";
    case TiledKernel::hopper_backward: return "hopper-backward";
    case TiledKernel::portable_forward: return "portable-forward";
    case TiledKernel::portable_backward: return "portable-backward";
    case TiledKernel::portable_forward_99kb: return "portable-forward-99kb";
    case TiledKernel::portable_backward_99kb: return "portable-backward-99kb";
  }
  return "?";
}

const std::vector<TiledKernel>& tiled_kernels() {
  static const std::vector<TiledKernel> all = {
      TiledKernel::hopper_forward,        TiledKernel::hopper_backward,
      TiledKernel::portable_forward,      TiledKernel::portable_backward,
      TiledKernel::portable_forward_99kb, TiledKernel::portable_backward_99kb};
  return all;
}

bool parse_kernel(const std::string& name, TiledKernel* k) {
  for (TiledKernel t : tiled_kernels())
    if (normalized(name) == kernel_name(t)) {
      *k = t;
      return true;
    }
  return false;
}

std::string kernel_names() {
  std::string s;
  for (TiledKernel t : tiled_kernels()) s += (s.empty() ? "" : ", ") + std::string(kernel_name(t));
  return s;
}

namespace {

// The kernel's family: the 99 KB variants choose and run the same tiles' kernels.
TiledKernel family(TiledKernel k) {
  return k == TiledKernel::portable_forward_99kb    ? TiledKernel::portable_forward
         : k == TiledKernel::portable_backward_99kb ? TiledKernel::portable_backward
                                                    : k;
}
bool on_99kb(TiledKernel k) {
  return k == TiledKernel::portable_forward_99kb || k == TiledKernel::portable_backward_99kb;
}

// The kernel's tile description at its default options (KernelOptions): grid or placed tiles,
// whichever is cheaper, where the kernel has both; `rows` picks the portable forward's variant by
// its Q rows and the portable backward's by its KV rows (the widest where the chooser scores it
// before a choice).
TileKernel tile_kernel(TiledKernel k, int head_dim, int rows = 0) {
  switch (family(k)) {
    case TiledKernel::hopper_forward:
      if (!hopper_forward_head_dim(head_dim))
        fail_invalid("head_dim: the hopper forward runs 32, 64, 128 or 256, got ", head_dim);
      return hopper_forward_tile_kernel(head_dim, KvPlacements::either);
    case TiledKernel::hopper_backward:
      if (!hopper_backward_head_dim(head_dim))
        fail_invalid("head_dim: the hopper backward runs 32, 64 or 128, got ", head_dim);
      return hopper_backward_tile_kernel(head_dim, KvPlacements::either);
    case TiledKernel::portable_forward:
      if (!portable_forward_head_dim(head_dim))
        fail_invalid("head_dim: the portable forward runs 32, 64 or 128, got ", head_dim);
      return portable_forward_tile_kernel(rows > 0 ? rows : kPortableForwardRowsQWide,
                                          KvPlacements::either);
    case TiledKernel::portable_backward:
      if (!portable_backward_head_dim(head_dim))
        fail_invalid("head_dim: the portable backward runs 32, 64 or 128, got ", head_dim);
      return portable_backward_tile_kernel(rows > 0 ? rows : kPortableBackwardRowsKV,
                                           KvPlacements::either);
    default: break;
  }
  fail_invalid("kernel must be one of ", kernel_names(), ", got id ", static_cast<int>(k));
}

}  // namespace

Config kernel_tiles(const Config& c, TiledKernel kernel_id, int head_dim) {
  const TiledKernel k = family(kernel_id);
  Config out = c;
  out.tiling = Tiling::multi_dim;
  out.kv_tiling = KvTiling::static_tiles;
  for (int a = 0; a < kMaxRank; ++a) out.q_tile[a] = out.kv_tile[a] = 1;
  validate(out);  // the rule (the core's messages) and the token count
  const TileKernel kernel = tile_kernel(k, head_dim);
  double steps = choice_steps(out, kernel);
  if (k == TiledKernel::portable_forward)  // its narrow variant is scored too
    steps += choice_steps(out, tile_kernel(k, head_dim, kPortableForwardRowsQ));
  const bool small_backward = portable_backward_small_head_dims(head_dim, head_dim);
  if (k == TiledKernel::portable_backward && small_backward)  // its 64-key variant too
    steps += choice_steps(out, tile_kernel(k, head_dim, kPortableBackwardRowsKVSmall));
  if (steps > kMaxSimulationSteps)
    fail_invalid("the ", kernel.name, " tile choice would take about ",
                 steps < 1e15 ? std::to_string(std::llround(steps)) : std::to_string(steps),
                 " steps, more than the ", std::llround(kMaxSimulationSteps),
                 " the simulator takes on");
  Problem p = to_problem(out);
  p.dim_qk = p.dim_v = head_dim;
  // The portable kernels' choice of variant as on a device where their widest kernels fit (an
  // H100, where the cost models were fitted), or on a 99 KB device: there the forward's 128-row
  // kernel always fits (with one K/V stage at head dims 128/128) and the backward's 128-key one
  // only where it has no 64-key variant.
  const bool wide_backward_fits = !on_99kb(kernel_id) || !small_backward;
  const ScoredTiles s =
      k == TiledKernel::portable_forward
          ? portable_forward_tile_choice(p, kNoForcedTile, kNoForcedTile, true, KvPlacements::either)
      : k == TiledKernel::portable_backward
          ? portable_backward_tile_choice(p, kNoForcedTile, kNoForcedTile, wide_backward_fits,
                                          small_backward, KvPlacements::either)
          : tile_choice(p, kernel, kNoForcedTile, kNoForcedTile);
  for (int a = 0; a < out.rank; ++a) {
    out.q_tile[a] = s.q.size[a];
    out.kv_tile[a] = s.kv.size[a];
  }
  // The backward places its Q tiles, not its KV tiles: its KV tiles stay on the grid.
  const bool placed_kv =
      kernel.walk == PairWalk::per_q_tile && s.placement == KvPlacement::placed;
  out.kv_tiling = placed_kv ? KvTiling::dynamic_tiles : KvTiling::static_tiles;
  return out;
}

KernelPrediction predict(const Config& tiles, const Result& r, TiledKernel kernel_id,
                         int head_dim) {
  const TiledKernel k = family(kernel_id);
  const bool portable = k == TiledKernel::portable_forward;
  const bool portable_backward = k == TiledKernel::portable_backward;
  int rows_q = 1, rows_kv = 1;
  for (int a = 0; a < tiles.rank; ++a) {
    rows_q *= tiles.q_tile[a];
    rows_kv *= tiles.kv_tile[a];
  }
  const TileKernel kernel = tile_kernel(k, head_dim, portable_backward ? rows_kv : rows_q);
  const bool per_q_tile = kernel.walk == PairWalk::per_q_tile;
  const KernelCostModel& model = portable            ? kPortableForwardCost
                                 : portable_backward ? portable_backward_cost(rows_kv)
                                 : per_q_tile        ? kHopperForwardCost
                                                     : kHopperBackwardCost;
  // Costs in pairs of the chosen tiles: the portable forward's rows and speed-up weights go into
  // the time per pair instead.
  const TileCostWeights weights{model.partial, 1, 1};
  const bool single_stage =
      on_99kb(kernel_id) && portable && portable_forward_single_stage(head_dim, head_dim, rows_q);
  const double pair_ns = model.pair_ns * (portable ? portable_forward_pair_scale(rows_q) : 1.0) *
                         (single_stage ? kPortableSingleStageForwardSlowdown : 1.0);
  // Dense attention over the same tokens in row-major runs of the kernel's tile rows, without
  // padding (what a dense kernel such as cuDNN's runs), every pair full.
  const double tokens = static_cast<double>(r.tokens);
  const double q_tiles = tokens / kernel.q_rows, kv_tiles = tokens / kernel.kv_rows;
  KernelPrediction p;
  p.cost = tile_cost(static_cast<double>(r.visited_pairs), static_cast<double>(r.pairs.full),
                     weights) +
           model.item_pairs * static_cast<double>(per_q_tile ? r.q_tiles : r.kv_tiles);
  p.dense_cost = tile_cost(q_tiles * kv_tiles, q_tiles * kv_tiles, weights) +
                 model.item_pairs * (per_q_tile ? q_tiles : kv_tiles);
  p.speedup = p.dense_cost / p.cost;
  if (head_dim == kCostModelHeadDim) p.ns_per_head = p.cost * pair_ns;
  return p;
}

}  // namespace gna::sim
