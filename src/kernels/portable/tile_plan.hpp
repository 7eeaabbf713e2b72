// Choice of the multi-dimensional Q and KV tile shapes of the portable fused kernels (host only,
// no CUDA): every shape of power-of-two sides with the kernel's row count is scored by the KV
// tiles its Q tiles visit (partial pairs weighted for their mask cost), computed per axis with the
// core's tiling math, and the cheapest wins.
#pragma once

#include <string>

#include "gna/core/problem.hpp"
#include "gna/core/tiling.hpp"

namespace gna::portable {

// Rows of the backward kernel's tiles (its CTA keeps a KV tile and walks 64-row Q tiles); the
// variant for devices with 99 KB of shared memory per block keeps 64-key KV tiles.
constexpr int kBackwardRowsQ = 64, kBackwardRowsKV = 128, kBackwardRowsKVSmall = 64;

struct TilePlan {
  TileShape q;
  TileShape kv;
  double visited_pairs = 0;  // (Q tile, KV tile) pairs visited in one dilation group
  double partial_pairs = 0;
  double cost = 0;           // visited pairs, partial ones weighted for their mask cost
};

// Visited and partial pair counts of one tile choice (dilation group 0).
TilePlan score_tiles(const Problem& p, const TileShape& q, const TileShape& kv);

// Best shapes with exactly rows_q and rows_kv tokens (powers of two).
TilePlan choose_tiles(const Problem& p, int rows_q, int rows_kv);

// Forward tiles: the best 64-row and the best 128-row Q shape (64-token KV tiles), the cheaper
// once each pair's cost is scaled by its Q rows and the 128-row kernel's measured speed-up.
TilePlan choose_forward_tiles(const Problem& p);

// Checks a caller-forced shape: every side >= 1 and <= 1023, the volume at most `rows` (exactly
// `rows` when exact); writes why not.
bool valid_tile(const TileShape& t, int rank, int rows, bool exact, const char* what,
                std::string* why);

}  // namespace gna::portable
