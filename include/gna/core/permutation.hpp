// Token permutation plan (SPEC section 2, item 5): pad each axis to a multiple of tile*dilation,
// fold dilation groups into the batch, and lay tokens out tile by tile so that every
// multi-dimensional tile is a contiguous run. Heads-last [B, X, (Y, (Z)), H, D] becomes
// [B * groups, tokens_per_group, H, D]; within a group, tiles are in row-major order over axes
// and tokens inside a tile are row-major too. Full coordinate on axis a:
//   x = g + d * (t * T + u)    (group g, tile t, offset u inside the tile)
// Positions with x >= extent are padding (zero on permute, skipped on the inverse).
#pragma once

#include <cstdint>

#include "gna/core/hd.hpp"

namespace gna {

struct PermutationPlan {
  int rank = 1;
  int extent[kMaxRank] = {1, 1, 1};
  int tile[kMaxRank] = {1, 1, 1};
  int dilation[kMaxRank] = {1, 1, 1};

  // Padded extent of one dilation group (a multiple of the tile).
  GNA_HD int padded_group_length(int a) const {
    const int td = tile[a] * dilation[a];
    return ceil_div(extent[a], td) * td / dilation[a];
  }
  GNA_HD int tiles_per_group(int a) const { return padded_group_length(a) / tile[a]; }
  GNA_HD int groups() const {
    int g = 1;
    for (int a = 0; a < rank; ++a) g *= dilation[a];
    return g;
  }
  GNA_HD int64_t tokens_per_group() const {
    int64_t n = 1;
    for (int a = 0; a < rank; ++a) n *= padded_group_length(a);
    return n;
  }
  GNA_HD int64_t tile_volume() const {
    int64_t v = 1;
    for (int a = 0; a < rank; ++a) v *= tile[a];
    return v;
  }

  // Full coordinates of permuted position (group, token); returns false for padding.
  GNA_HD bool original_coordinates(int group, int64_t token, int* x) const {
    int64_t tile_index = token / tile_volume();
    int64_t offset = token % tile_volume();
    bool inside = true;
    for (int a = rank - 1; a >= 0; --a) {
      const int u = static_cast<int>(offset % tile[a]);
      offset /= tile[a];
      const int t = static_cast<int>(tile_index % tiles_per_group(a));
      tile_index /= tiles_per_group(a);
      const int g = group % dilation[a];
      group /= dilation[a];
      x[a] = g + dilation[a] * (t * tile[a] + u);
      inside = inside && x[a] < extent[a];
    }
    return inside;
  }

  // Permuted position of full coordinates x (each inside its extent).
  GNA_HD void permuted_position(const int* x, int* group, int64_t* token) const {
    int g = 0;
    int64_t tile_index = 0, offset = 0;
    for (int a = 0; a < rank; ++a) {
      const int ig = x[a] / dilation[a];
      g = g * dilation[a] + x[a] % dilation[a];
      tile_index = tile_index * tiles_per_group(a) + ig / tile[a];
      offset = offset * tile[a] + ig % tile[a];
    }
    *group = g;
    *token = tile_index * tile_volume() + offset;
  }
};

}  // namespace gna
