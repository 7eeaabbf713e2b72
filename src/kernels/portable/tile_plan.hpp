// Choice of the multi-dimensional Q and KV tile shapes of the portable fused kernels (host only,
// no CUDA), by the core's tile chooser (gna/core/tile_choice.hpp): every shape of power-of-two
// sides with the kernel's row count is scored by the KV tiles its Q tiles visit (partial pairs
// weighted for their mask cost), and the cheapest wins.
#pragma once

#include "gna/core/kernel_tiles.hpp"
#include "gna/core/problem.hpp"
#include "gna/core/tile_choice.hpp"
#include "gna/core/tiling.hpp"

namespace gna::portable {

// Rows of the backward kernel's tiles (its CTA keeps a KV tile and walks 64-row Q tiles); the
// variant for devices with 99 KB of shared memory per block keeps 64-key KV tiles (the core's,
// gna/core/kernel_tiles.hpp).
constexpr int kBackwardRowsQ = kPortableBackwardRowsQ, kBackwardRowsKV = kPortableBackwardRowsKV,
              kBackwardRowsKVSmall = kPortableBackwardRowsKVSmall;

struct TilePlan {
  TileShape q;
  TileShape kv;
  // Where a Q tile's KV tiles start (the forward; tiling.hpp, kv_tile_run), or a KV tile's Q
  // tiles (the backward; q_tile_run).
  KvPlacement placement = KvPlacement::grid;
  // The forward's K/V buffers: 2 (double-buffered), or 1 where the device's shared memory per
  // block holds no second stage (forward_tiles decides).
  int kv_stages = 2;
  double visited_pairs = 0;  // (Q tile, KV tile) pairs visited in one dilation group
  double partial_pairs = 0;
  double cost = 0;  // the tile chooser's cost (gna::tile_cost)
};

// Visited and partial pair counts of one tile choice (dilation group 0).
TilePlan score_tiles(const Problem& p, const TileShape& q, const TileShape& kv);

// Best shapes with exactly rows_q and rows_kv tokens (powers of two).
TilePlan choose_tiles(const Problem& p, int rows_q, int rows_kv);

// Forward tiles: the best 64-row and, where its kernel fits (wide_fits), the best 128-row Q shape
// (64-token KV tiles), the cheaper once each pair's cost is scaled by its Q rows and the 128-row
// kernel's measured speed-up, each with the cheaper of the KV tile placements `placements`
// allows. Forced tiles (q_tile, kv_tile; all zeros: chosen) are honoured: Q tiles of at most 128
// tokens, KV tiles of exactly 64; others are an error naming the option.
TilePlan choose_forward_tiles(const Problem& p, const TileShape& q_tile = kNoForcedTile,
                              const TileShape& kv_tile = kNoForcedTile, bool wide_fits = true,
                              KvPlacements placements = KvPlacements::either);

// Backward tiles with KV tiles of kv_rows keys (kBackwardRowsKV or kBackwardRowsKVSmall), each
// with the cheaper of the Q tile placements `placements` allows. Forced tiles are honoured: Q
// tiles of at most 64 tokens, KV tiles of at most 128; others are an error naming the option.
TilePlan choose_backward_tiles(const Problem& p, int kv_rows, const TileShape& q_tile,
                               const TileShape& kv_tile,
                               KvPlacements placements = KvPlacements::either);
// The backward's tiles and kernel (the core's portable_backward_tile_choice: 128-key tiles, or
// 64-key ones where small_kernel and the 128-key kernel does not fit (wide_fits false) or leaves
// many partial pairs).
TilePlan choose_backward_tiles(const Problem& p, const TileShape& q_tile, const TileShape& kv_tile,
                               bool wide_fits, bool small_kernel, KvPlacements placements);

}  // namespace gna::portable
