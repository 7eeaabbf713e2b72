// The forward producer's TMA load of one tile, shared by the one-item and the persistent kernels.
#pragma once

#include <cstdint>

#include "kernels/hopper/ptx.cuh"

namespace gna::hopper {

// A Q or KV tile (Layout: its shared-memory image) into dst, one box per 64 columns of the head
// dim at tensor coordinates (column, head, c2, c3, c4), completing on `full`, which the caller
// has armed with Layout::kTileBytes (before the coordinates are computed, as the kernels were
// measured).
template <typename Layout>
__device__ __forceinline__ void load_tile(uint8_t* dst, const CUtensorMap* map, uint64_t* full,
                                          int head, int c2, int c3, int c4) {
#pragma unroll
  for (int box = 0; box < Layout::kBoxes; ++box)
    tma_load_5d(dst + box * Layout::kBoxBytes, map, full, box * Layout::kBoxCols, head, c2, c3,
                c4);
}

}  // namespace gna::hopper
