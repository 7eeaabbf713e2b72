// Tiles for a slab problem (gna/core/slab.hpp) on the Hopper kernels. The kernels address the
// query and key tensors at rows c - q_begin / c - k_begin (tensor_rows.hpp) and never start a TMA
// box before a tensor's first row: a slab runs only tiles that start on its tensors' first rows
// where the walk places tiles on a grid (forward: Q tiles, and KV tiles unless placed; backward:
// KV tiles, and Q tiles unless placed; placed tiles start inside the slab's rows by
// construction). The choice is the whole layout's where it fits, else the cheapest candidate that
// fits (tiles of one row on a sliced axis always do); none fitting is a refusal with the reason.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gna/core/problem.hpp"
#include "gna/core/tile_choice.hpp"

namespace gna {
struct KernelOptions;
}

namespace gna::hopper {

// Per problem axis, the largest power of two (at most 128) that divides the group coordinate of
// the slab's first query row (q) and first key row (k) in every dilation group; 128 without a
// slab.
struct SlabAlignment {
  int q[kMaxRank] = {128, 128, 128};
  int k[kMaxRank] = {128, 128, 128};
};
SlabAlignment slab_alignment(const Problem& p);

// Which of a launch's tiles the walk places on a grid that must start on the slab's first rows.
enum class SlabWalk { forward, backward };

// Whether tiles t start on the slab's first rows wherever the walk puts them on a grid.
bool slab_tiles_fit(const ScoredTiles& t, const SlabAlignment& align, int rank, SlabWalk walk);

// The tiles of slab problem p: `chosen` (the whole layout's choice) where it fits, else the
// cheapest of `ranked(placements)` (every candidate, best first, with those KV / Q placements)
// that fits, trying the options' placements, then placed tiles. Cached per rule, slab alignment
// and `key`. False (and the reason in why) when none fits.
bool slab_tiles(const Problem& p, SlabWalk walk, const ScoredTiles& chosen,
                const std::function<std::vector<ScoredTiles>(KvPlacements)>& ranked,
                KvPlacements placements, const std::vector<int>& key, ScoredTiles* out,
                std::string* why);

}  // namespace gna::hopper
