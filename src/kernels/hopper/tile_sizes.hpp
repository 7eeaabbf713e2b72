// Sizes the Hopper kernels (forward and backward) and their host side share. Kernel axes are
// right-aligned to three: for rank < 3 the leading axes are unit placeholders (extent 1, window
// 1), which the core's rule and tiling math treat as "every query attends the one key".
#pragma once

namespace gna::hopper {

constexpr int kAxes = 3;
constexpr int kTileTokens = 128;  // forward Q tile rows (and KV tile keys up to head dim 128)

// Keys per forward KV tile: head dim 256 takes 64-key tiles, so that K and V stay double-buffered
// next to the 64 KB Q tile in shared memory and O (128 registers per thread) fits beside S.
constexpr int kv_tile_tokens(int head_dim) { return head_dim > 128 ? 64 : kTileTokens; }

}  // namespace gna::hopper
