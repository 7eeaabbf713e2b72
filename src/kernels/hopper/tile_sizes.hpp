// Sizes the Hopper kernels (forward and backward) and their host side share. Kernel axes are
// right-aligned to three: for rank < 3 the leading axes are unit placeholders (extent 1, window
// 1), which the core's rule and tiling math treat as "every query attends the one key". The tile
// sizes are the core's (gna/core/kernel_tiles.hpp), where the tile chooser and the simulator read
// them too.
#pragma once

#include "gna/core/kernel_tiles.hpp"

namespace gna::hopper {

constexpr int kAxes = 3;
// Forward Q tile rows (and KV tile keys up to head dim 128).
constexpr int kTileTokens = kHopperTileTokens;

// Keys per forward KV tile: 64 for head dim 256, else kTileTokens (kernel_tiles.hpp says why).
constexpr int kv_tile_tokens(int head_dim) { return hopper_kv_tile_tokens(head_dim); }

}  // namespace gna::hopper
