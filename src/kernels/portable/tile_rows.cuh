// Multi-dimensional tiles of the fused kernels, indexed directly in the heads-last tensors: row r
// of a tile is the r-th token of the tile's box in row-major order over axes. A shared-memory
// table maps each row to its per-axis offsets once per CTA, so address and mask arithmetic is
// adds and compares only.
#pragma once

#include <cstdint>

#include "gna/core/tiling.hpp"

namespace gna::portable {

constexpr uint32_t kPaddingRow = 1u << 30;  // row beyond the tile's volume

// Loops over the axes of a problem with compile-time indices (so that per-axis arrays stay in
// registers): body runs for a = 0 .. rank-1, or in reverse order.
#define GNA_FOR_AXES(a, rank) \
  _Pragma("unroll") for (int a = 0; a < kMaxRank; ++a) if (a < (rank))
#define GNA_FOR_AXES_REVERSE(a, rank) \
  _Pragma("unroll") for (int a = kMaxRank - 1; a >= 0; --a) if (a < (rank))

// Packs the per-axis offsets of row r of a tile (10 bits per axis).
__device__ __forceinline__ uint32_t pack_row(const int* tile, int rank, int r, int volume) {
  if (r >= volume) return kPaddingRow;
  uint32_t packed = 0;
  for (int a = rank - 1; a >= 0; --a) {
    packed |= static_cast<uint32_t>(r % tile[a]) << (10 * a);
    r /= tile[a];
  }
  return packed;
}

__device__ __forceinline__ int row_offset(uint32_t packed, int a) {
  return static_cast<int>((packed >> (10 * a)) & 1023u);
}

// The per-axis situation of one (batch, head, dilation group) slice.
struct GroupGeometry {
  int rank;
  int group[kMaxRank];  // dilation group per axis
  int n[kMaxRank];      // group length per axis

  // Group coordinates of row `packed` of the tile whose first row is at `base`; false when the
  // row is padding or outside the group.
  __device__ __forceinline__ bool coordinates(uint32_t packed, const int* base, int* ig) const {
    if (packed & kPaddingRow) return false;
    bool inside = true;
#pragma unroll
    for (int a = 0; a < kMaxRank; ++a) {
      ig[a] = a < rank ? base[a] + row_offset(packed, a) : 0;
      inside = inside && (a >= rank || ig[a] < n[a]);
    }
    return inside;
  }
};

}  // namespace gna::portable
