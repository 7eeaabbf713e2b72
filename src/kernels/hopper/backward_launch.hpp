// Host side of the Hopper backward kernel: support check, tile choice, scratch buffers, the
// row pass before it (LSE in the log2 domain, delta = rowsum(dO * O); kernels/common), one
// launch per dilation-group combination (plus one for the additional keys) and the dQ
// conversion after it.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "gna/core/tile_choice.hpp"
#include "gna/core/tiling.hpp"
#include "kernels/hopper/backward_params.hpp"

namespace gna::hopper {

// Q tiles of kBwdQRows and KV tiles of kBwdKvRows tokens, chosen by the core's tile chooser; a
// tile forced in options is honoured, or an error when it is not a tile of the backward.
// ScoredTiles::placement is that of the walked Q tiles, where each KV tile's Q tiles start (the
// core's q_tile_run): on the grid of the Q tile, or placed at the first query of the KV tile's
// union query window (a kernel of its own).
ScoredTiles choose_backward_tiles(const Problem& p, const KernelOptions& options);
// The tiles a call runs (call.problem and call.options are read): choose_backward_tiles', or on
// a slab tiles that start on the slab's first rows (slab_tiles.hpp); false with the reason when
// a slab has none.
bool backward_call_tiles(const BackwardCall& call, ScoredTiles* tiles, std::string* why);
// The backward's description for the chooser under these options: the Q tile placements of
// KernelOptions::q_placements where the head dim has placed kernels
// (hopper_backward_placed_q_head_dim), grid only in deterministic mode.
TileKernel backward_tile_kernel(const Problem& p, const KernelOptions& options);

bool supports_backward(const BackwardCall& call, std::string* why);
void backward(const BackwardCall& call);

// A backward with head rules runs as one call per head-rule group, each on views of its heads
// with its own tile choice, instead of one launch per dilation group for every group when the
// groups' own tile choices cost, summed over their heads, kSplitMargin less than the one shape
// they would share (backward_splits_by_group: no GQA, no additional keys). backward_group_calls
// gives those calls, or none where the split does not pay or cannot run (a group's heads not
// evenly spaced, a view the kernel does not read): then one launch runs every group.
constexpr double kSplitMargin = 0.01;
bool backward_splits_by_group(const Problem& p, const KernelOptions& options);
std::vector<BackwardCall> backward_group_calls(const BackwardCall& call);

// Test hook: backward main-kernel launches of this process so far (the additional keys' launches
// included), and those of them that ran per-head rules (one per dilation group and batch run,
// whatever the number of head-rule groups), and those that ran placed Q tiles.
struct BackwardLaunchCount {
  int64_t launches = 0;
  int64_t with_head_rules = 0;
  int64_t placed_q = 0;
};
BackwardLaunchCount backward_launch_count();

// Kernel launchers per head dim (backward_d*.cu). maps: q, dO, k, v, dQ accumulator, dK and dV tensor maps (the last two
// read only when BwdParams::store_by_tma). q_placement picks the grid or the placed kernel
// (placed only where hopper_backward_placed_q_head_dim).
void launch_backward_d32(bool bf16, KvPlacement q_placement, const void* maps, const BwdParams& p,
                         int grid, void* stream);
void launch_backward_d64(bool bf16, KvPlacement q_placement, const void* maps, const BwdParams& p,
                         int grid, void* stream);
void launch_backward_d128(bool bf16, KvPlacement q_placement, const void* maps,
                          const BwdParams& p, int grid, void* stream);

}  // namespace gna::hopper
