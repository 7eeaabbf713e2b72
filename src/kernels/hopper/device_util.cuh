// Small device helpers shared by the Hopper forward and backward kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gna/core/axis_rule.hpp"
#include "gna/core/column_mask.hpp"
#include "kernels/hopper/ptx.cuh"
#include "kernels/hopper/tile_sizes.hpp"

namespace gna::hopper {

// Lane 0's copy of a value that every lane of the warp holds (read from shared memory, say) but
// that the compiler cannot prove uniform: the broadcast lets it keep the value, and whatever is
// derived from it (wgmma descriptors, branch conditions), in uniform registers.
__device__ __forceinline__ int warp_uniform(int v) { return __shfl_sync(0xffffffff, v, 0); }

// The first 1024-byte aligned byte of dynamic shared memory (128-byte swizzled TMA boxes need
// that alignment). Derived from the shared array by pointer arithmetic, not through an integer,
// so that the compiler still knows it points to shared memory and emits shared (not generic)
// loads and stores for everything addressed from it.
__device__ __forceinline__ uint8_t* align_shared_1024(uint8_t* raw) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  return raw + ((1024u - (a & 1023u)) & 1023u);
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A shared-memory wgmma descriptor (make_smem_desc) moved `bytes` further along: only the low
// word changes, since the 14-bit address field cannot carry for addresses below 256 KB.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

// Local coordinates of token r of a tile (row-major over axes 0, 1, 2; sizes are powers of two).
__device__ __forceinline__ void tile_local(int r, const int (&size)[kAxes], int (&local)[kAxes]) {
  const int s2 = log2_of_pow2(size[2]), s1 = log2_of_pow2(size[1]);
  local[2] = r & (size[2] - 1);
  local[1] = (r >> s2) & (size[1] - 1);
  local[0] = r >> (s1 + s2);
}

// Adds to `off` the offset of row r of the tile with tile coordinates t (tiles of `size` tokens)
// in a tensor holding rows [begin, end) of each axis (row c at c - begin; tensor_rows.hpp), with
// the given per-axis strides; false when the row lies outside them (edge tiles, the next batch
// where batches are folded into axis 0, or rows outside a slab).
__device__ __forceinline__ bool tile_row_offset(const int (&begin)[kAxes], const int (&end)[kAxes],
                                                const int (&t)[kAxes], const int (&size)[kAxes],
                                                int r, const int64_t (&axis_stride)[kAxes],
                                                int64_t& off) {
  int local[kAxes];
  tile_local(r, size, local);
  bool valid = true;
#pragma unroll
  for (int a = 0; a < kAxes; ++a) {
    const int c = t[a] * size[a] + local[a];
    valid = valid && c >= begin[a] && c < end[a];
    off += static_cast<int64_t>(c - begin[a]) * axis_stride[a];
  }
  return valid;
}

// Shared-memory image of a [Rows tokens x D] tile of ElemBytes-byte elements: D split into boxes
// of at most 128 bytes (the widest swizzled TMA box), each box Rows rows of kRowBytes, swizzled:
// the TMA box and the wgmma operand layout.
template <int D, int Rows = kTileTokens, int ElemBytes = 2>
struct TileLayout {
  static constexpr int kBoxCols = D * ElemBytes < 128 ? D : 128 / ElemBytes;
  static constexpr int kRowBytes = kBoxCols * ElemBytes;
  static constexpr int kBoxes = D / kBoxCols;
  static constexpr int kBoxBytes = Rows * kRowBytes;
  static constexpr int kTileBytes = kBoxes * kBoxBytes;
  static constexpr uint32_t kSwizzleMode = kRowBytes == 128 ? 1 : (kRowBytes == 64 ? 2 : 3);
  static constexpr int kChunksPerRow = kRowBytes / 16;

  // Byte offset of element (row r, column c) in the tile image: its box, its row, and the TMA
  // swizzle (the 16-byte chunk index XORed with the offset's bits above the 128-byte line, as
  // many bits as a row has chunks).
  __device__ static int offset(int r, int c) {
    const int o = r * kRowBytes + (c % kBoxCols) * ElemBytes;
    return (c / kBoxCols) * kBoxBytes + (o ^ (((o >> 7) & (kChunksPerRow - 1)) << 4));
  }
};

// Two floats rounded to the input dtype, packed as the 32-bit operand register of a wgmma.
template <typename Tag>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<Bf16Tag>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<F16Tag>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Four floats rounded to e4m3 (round to nearest even, saturating to +-448), packed with x0 in
// the lowest byte: one 32-bit register of an 8-bit wgmma A fragment.
__device__ __forceinline__ uint32_t pack4_e4m3(float x0, float x1, float x2, float x3) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
}

}  // namespace gna::hopper
