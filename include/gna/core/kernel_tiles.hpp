// The tile descriptions of the tiled kernels (host only): what each kernel's tiles hold and how it
// walks them, as the core's tile chooser (tile_choice.hpp) takes them. The kernels' launch code
// and the simulator (gna_sim_kernel_tiles, gna-sim --kernel) read the same descriptions, so that
// the tiles the simulator models are the tiles the kernels run.
#pragma once

#include "gna/core/tile_choice.hpp"
#include "gna/core/tiling.hpp"

namespace gna {

// Hopper forward: Q tiles of kHopperTileTokens rows; KV tiles of hopper_kv_tile_tokens(head dim)
// keys (head dim 256 takes 64-key tiles, so that K and V stay double-buffered next to the 64 KB
// Q tile in shared memory and O, 128 registers per thread, fits beside S).
constexpr int kHopperTileTokens = 128;
constexpr int hopper_kv_tile_tokens(int head_dim) {
  return head_dim > 128 ? 64 : kHopperTileTokens;
}
// Hopper backward: Q tiles of 64 rows, KV tiles of 128 keys (64 per consumer warpgroup).
constexpr int kHopperBwdQRows = 64;
constexpr int kHopperBwdKvRows = 128;

// How the tile chooser ranks the Hopper kernels' candidates: pairs, a partial pair at 1.40 full
// pairs (TileCostWeights::partial). Partial pairs cost less than that since their masks are
// built from per-row bounds (column_mask.hpp; the cost model below), but ranking at the fitted
// weights chose tiles that measured slower (same-run A/B, H100: hunyuan 30x40x40 backward +7.8%,
// cosmos 16x24x16 forward +1.1%, wan 15x27x48 +0.2 / +0.5%; docs/performance.md), so the
// ranking keeps the weight it was measured with.
constexpr double kHopperPartialPairWeight = 0.40;

// A tiled kernel's time, measured on an H100 (bf16, head dim kCostModelHeadDim) by a
// least-squares fit of kernel times against the simulator's pair and tile counts, in units of
// one full tile pair of one head: a partial pair costs 1 + `partial`, a work item (Q tile of a
// forward, KV tile of the backward, with its loads before the first pair and its epilogue)
// `item_pairs`; a full pair takes `pair_ns`. The simulator's prediction reads it.
struct KernelCostModel {
  double partial;
  double item_pairs;
  double pair_ns;
};
constexpr int kCostModelHeadDim = 128;
// The Hopper kernels, fitted to the video cases, long 1-D sequences and dense attention
// (docs/performance.md, "What a Hopper kernel's time is made of"); a pair is 128 x 128 (forward)
// or 64 x 128 (backward). The chooser does not read them (ranking by the item cost chose slower
// tiles on small problems: a 64x6 layout's backward 22% slower, measured).
constexpr KernelCostModel kHopperForwardCost{0.08, 3.6, 13.64};
constexpr KernelCostModel kHopperBackwardCost{0.02, 5.5, 23.11};

// Head dims the Hopper kernels run (forward 32, 64, 128, 256; backward 32, 64, 128).
bool hopper_forward_head_dim(int head_dim);
bool hopper_backward_head_dim(int head_dim);

// The Hopper forward: Q tiles of kHopperTileTokens, KV tiles of hopper_kv_tile_tokens(head dim),
// each Q tile walking its box of KV tiles, grid or placed as `placements` allows (the kernel runs
// both from a launch parameter; KernelOptions::kv_placements, `either` by default). Forced tiles
// hold exactly the kernel's rows.
TileKernel hopper_forward_tile_kernel(int head_dim, KvPlacements placements);

// Head dims at which the Hopper backward has kernels with placed Q tiles (their own
// instantiations, so that the grid kernels carry no placement code); others run grid Q tiles.
constexpr bool hopper_backward_placed_q_head_dim(int head_dim) { return head_dim == 128; }

// The Hopper backward: Q tiles of kHopperBwdQRows, KV tiles of kHopperBwdKvRows, each KV tile
// walking the box of Q tiles that attend to it, grid or placed as `q_placements` allows where
// the head dim has placed kernels (hopper_backward_placed_q_head_dim), else grid
// (KernelOptions::q_placements, `either` by default; deterministic mode runs grid Q tiles).
// Forced tiles hold exactly the rows.
TileKernel hopper_backward_tile_kernel(int head_dim, KvPlacements q_placements);

// The portable kernels (the backward walks per KV tile over grid or placed Q tiles, the forward
// per Q tile over grid or placed KV tiles, each a launch parameter). The forward runs Q tiles of
// kPortableForwardRowsQ rows (one m-block per warp) or kPortableForwardRowsQWide (two) against
// kPortableForwardRowsKV-key KV tiles; the wide kernel's throughput on dense pairs is
// kPortableWideForwardSpeedup times the narrow one's. The backward keeps a KV tile of
// kPortableBackwardRowsKV keys (kPortableBackwardRowsKVSmall on devices with 99 KB of shared
// memory per block) and walks kPortableBackwardRowsQ-row Q tiles.
constexpr int kPortableForwardRowsQ = 64, kPortableForwardRowsQWide = 128,
              kPortableForwardRowsKV = 64;
constexpr double kPortableWideForwardSpeedup = 1.5;
// The portable forward's time per 128 x 64 pair of the wide kernel (a 64 x 64 pair of the narrow
// one takes kPortableForwardRowsQ / kPortableForwardRowsQWide * kPortableWideForwardSpeedup of
// it), fitted to six forward times on an H100 (docs/performance.md, "Portable kernels": the two
// block-sparse cases give the full pair, 13.46 and 13.76 ns; the four neighborhood cases a
// partial pair's extra, 0.14 to 0.20, pooled 0.17; a work item was not resolved by the fit and
// counts nothing). The chooser keeps its own partial weight (TileCostWeights): any weight from
// 0.25 to 0.45 picks the same tiles for those cases.
constexpr KernelCostModel kPortableForwardCost{0.17, 0, 13.68};
// The portable forward with one K/V stage (its kernel where two do not fit a device's shared
// memory per block: 128-row Q tiles at head dims 128/128 on 99 KB devices): its time per pair
// over the double-buffered kernel's, the ratio of the six neighborhood and block-sparse cases'
// summed times (hunyuan NA, s16x8x8, flux4k NA, s16x16, wan, cosmos; 1.094 to 1.129 each) under
// GNA_MAX_SHARED_MEMORY_BYTES=101376 against the same run without it (docs/performance.md,
// "Portable kernels": an H200, 2026-11-28).
constexpr double kPortableSingleStageForwardSlowdown = 1.113;
constexpr bool portable_forward_single_stage(int dim_qk, int dim_v, int rows_q) {
  return dim_qk == 128 && dim_v == 128 && rows_q == kPortableForwardRowsQWide;
}
constexpr int kPortableBackwardRowsQ = 64, kPortableBackwardRowsKV = 128,
              kPortableBackwardRowsKVSmall = 64;

// A portable kernel's candidates without weights or forced tiles (scoring a given shape).
TileKernel portable_tile_kernel(const char* name, int rows_q, int rows_kv);
// The portable forward with Q tiles of rows_q (kPortableForwardRowsQ or ...Wide): pairs weighted
// by rows and the wide kernel's speed-up; forced Q tiles of at most the wide rows, forced KV
// tiles of exactly kPortableForwardRowsKV; KV tiles grid or placed as `placements` allows
// (KernelOptions::kv_placements).
TileKernel portable_forward_tile_kernel(int rows_q, KvPlacements placements = KvPlacements::either);
// Head dims the portable forward runs (query/key and value alike: 32, 64, 128).
bool portable_forward_head_dim(int head_dim);
// The portable forward's choice: the cheapest 64-row and, where its kernel fits (wide_fits), the
// cheapest 128-row Q shape, the cheaper of the two by their costs (rows and the wide kernel's
// speed-up weighed in); a forced Q tile (forced_q; kNoForcedTile: chosen) is the only candidate
// and its volume picks the kernel.
ScoredTiles portable_forward_tile_choice(const Problem& p, const TileShape& forced_q,
                                         const TileShape& forced_kv, bool wide_fits,
                                         KvPlacements placements);
// A wide (128-row) or narrow Q tile's pair time relative to one of the wide kernel's pairs.
constexpr double portable_forward_pair_scale(int rows_q) {
  return rows_q > kPortableForwardRowsQ
             ? 1.0
             : static_cast<double>(kPortableForwardRowsQ) / kPortableForwardRowsQWide *
                   kPortableWideForwardSpeedup;
}
// The portable backward's time per 64 x 128 pair (kPortableBackwardCost, the 128-key kernel) and
// per 64 x 64 pair (kPortableBackwardSmallCost, the 64-key one), fitted to six backward times on
// an H100 (docs/performance.md, "Portable kernels"), counted on grid Q tiles as the simulator
// walks them: the two block-sparse cases (128-key tiles, no partial pairs) give the 128-key
// kernel's full pair, 41.21 ns (hunyuan s16x8x8 41.65, flux4k s16x16 40.76; a work item was not
// resolved there and counts nothing); the four neighborhood cases (64-key tiles) the 64-key
// kernel's full pair, a partial pair's extra and a work item (a KV tile: its K / V load, tables
// and dK / dV stores) by least squares, each case within 3.6%. The 128-key kernel's partial pair
// was not measured apart (no case runs it with partial pairs): it takes the 64-key kernel's.
constexpr KernelCostModel kPortableBackwardCost{0.42, 0, 41.21};
constexpr KernelCostModel kPortableBackwardSmallCost{0.42, 7.6, 20.05};
// The share of the 128-key kernel's best tiles' pairs that are partial from which the backward
// runs its 64-key kernel where it has one (the 1-D window 2048 problem, 10% partial, is the
// smallest share measured to run faster there; causal dense attention, 1.5%, ran slower).
constexpr double kPortableBackwardSmallPartialShare = 0.1;
// Head dims (query/key, value) at which the portable backward has its 64-key kernel: those whose
// 128-key kernel needs more than 99 KB of shared memory per block.
constexpr bool portable_backward_small_head_dims(int dim_qk, int dim_v) {
  return (dim_qk == 128 && (dim_v == 128 || dim_v == 64)) ||
         (dim_qk == 64 && (dim_v == 128 || dim_v == 64));
}
// Head dims the portable backward runs (query/key and value alike: 32, 64, 128).
bool portable_backward_head_dim(int head_dim);

// The portable backward with KV tiles of rows_kv keys, each KV tile walking the box of Q tiles
// that attend to it, grid or placed as `q_placements` allows (KernelOptions::q_placements):
// forced Q tiles of at most kPortableBackwardRowsQ, forced KV tiles of at most
// kPortableBackwardRowsKV.
TileKernel portable_backward_tile_kernel(int rows_kv, KvPlacements q_placements = KvPlacements::either);
// The portable backward's choice: the cheapest 128-key tiles, or the cheapest 64-key ones where
// the head dims have that kernel (small_kernel) and the 128-key kernel does not fit (wide_fits
// false) or leaves at least kPortableBackwardSmallPartialShare of its pairs partial. A forced KV
// tile is the 128-key kernel's candidate (its volume picks the kernel that runs it).
ScoredTiles portable_backward_tile_choice(const Problem& p, const TileShape& forced_q,
                                          const TileShape& forced_kv, bool wide_fits,
                                          bool small_kernel, KvPlacements placements);
// The cost model of the portable backward kernel that runs KV tiles of kv_volume keys.
constexpr const KernelCostModel& portable_backward_cost(int kv_volume) {
  return kv_volume > kPortableBackwardRowsKVSmall ? kPortableBackwardCost
                                                  : kPortableBackwardSmallCost;
}

}  // namespace gna
