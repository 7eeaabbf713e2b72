// Work items of the Hopper forward kernels: a (128-token Q tile, head, batch) triple, the Q tile
// given by its linear index inside the image.
#pragma once

#include "kernels/hopper/forward_params.hpp"

namespace gna::hopper {

// Q tile coordinates (on the group's grid) of a linear tile index (row-major over axes 0, 1, 2
// of the launch's Q tiles, which start at rows.q_first_tile).
__device__ __forceinline__ void tile_coords(const FwdParams& p, int tile, int (&qt)[kAxes]) {
  qt[2] = tile % p.q_tiles[2] + p.rows.q_first_tile[2];
  qt[1] = (tile / p.q_tiles[2]) % p.q_tiles[1] + p.rows.q_first_tile[1];
  qt[0] = tile / (p.q_tiles[2] * p.q_tiles[1]) + p.rows.q_first_tile[0];
}

// Work item k: tiles of an image run fastest (concurrent CTAs share K/V in L2); within an image
// and head the host's order (longest first) when given, with head rules the order of the head's
// group.
template <bool kRules>
__device__ __forceinline__ void decode_item(const FwdParams& p, int k, int& tile, int& head_batch) {
  const int r = k % p.q_tiles_per_image;
  head_batch = k / p.q_tiles_per_image;
  if constexpr (kRules) {
    if (p.tile_order == nullptr) {
      tile = r;
    } else {
      const int row = p.rules.group_of_head[head_batch % p.heads_q];
      tile = __ldg(p.tile_order + row * p.q_tiles_per_image + r);
    }
  } else {
    tile = p.tile_order != nullptr ? __ldg(p.tile_order + r) : r;
  }
}

}  // namespace gna::hopper
