// The epilogue of a forward work item in a consumer warpgroup, shared by the one-item and the
// persistent kernels: O normalised by the row sums, staged in the input dtype (XOR-swizzled
// 16-byte chunks, the tile layout of a 16-bit Q tile) in the warpgroup's own rows of a Q buffer,
// then stored to the heads-last output in 16-byte stores; LSE = (m + log2 l) ln 2. Rows beyond
// the image are skipped. e4m3 (the FP8 scheme): O also times v_scale per channel, l counts P
// times 448, and the LSE gets lse_bias.
#pragma once

#include <cstdint>

#include "kernels/hopper/device_util.cuh"
#include "kernels/hopper/forward_params.hpp"
#include "kernels/hopper/forward_softmax.cuh"
#include "kernels/hopper/ptx.cuh"

namespace gna::hopper {

// This thread's O accumulators times the rows' 1 / l (and, given col_scale, its columns'
// scales), in the output dtype (OutTag), into the staging rows (tile layout and swizzle of a
// 16-bit Q tile): rows r0 and r0 + 8, columns quad * 2 + 8 j.
template <int D, typename OutTag>
__device__ __forceinline__ void stage_o_rows(const float (&o)[D / 2], const float (&inv)[2],
                                             const float* col_scale, uint8_t* rows, int r0,
                                             int quad) {
  using L = TileLayout<D>;
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    float cs[2] = {1.f, 1.f};
    if (col_scale != nullptr) {
      const float2 v = *reinterpret_cast<const float2*>(col_scale + j * 8 + quad * 2);
      cs[0] = v.x;
      cs[1] = v.y;
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = r0 + 8 * i;
      const int col = j * 8 + quad * 2;
      const int box = col / L::kBoxCols;
      const int cc = col % L::kBoxCols;
      const int chunk = (cc / 8) ^ (r % L::kChunksPerRow);
      uint8_t* dst = rows + box * L::kBoxBytes + r * L::kRowBytes + chunk * 16 + (cc % 8) * 2;
      *reinterpret_cast<uint32_t*>(dst) = pack2<OutTag>(o[j * 4 + i * 2] * inv[i] * cs[0],
                                                        o[j * 4 + i * 2 + 1] * inv[i] * cs[1]);
    }
  }
}

// The consumer warpgroup's 64 rows of O, staged (normalised, in the input dtype) in `rows` with
// the tile layout's swizzle, to the heads-last output in 16-byte stores; rows beyond the image
// are skipped.
template <int D>
__device__ __forceinline__ void store_o_rows(const FwdParams& p, const uint8_t* rows, int consumer,
                                             int batch, int head, const int (&qt)[kAxes]) {
  using L = TileLayout<D>;
  constexpr int kChunks = D * 2 / 16;  // 16-byte chunks per output row
  const int tid = threadIdx.x % 128;
  for (int idx = tid; idx < 64 * kChunks; idx += 128) {
    const int r = consumer * 64 + idx / kChunks;
    const int ch = idx % kChunks;
    int64_t off = batch * p.o_batch_stride + head * p.o_head_stride + ch * 8;
    if (!tile_row_offset(p.rows.q_begin, p.rows.q_end, qt, p.q_tile, r, p.o_axis_stride, off))
      continue;
    const int box = ch / L::kChunksPerRow;
    const int chunk = (ch % L::kChunksPerRow) ^ (r % L::kChunksPerRow);
    const uint4 val =
        *reinterpret_cast<const uint4*>(rows + box * L::kBoxBytes + r * L::kRowBytes + chunk * 16);
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.o) + off) = val;
  }
}

// The whole epilogue of the warpgroup's 64 rows of Q tile qt: m and l are the thread's running
// row maxima (log2 domain, scaled) and partial row sums (summed over the row's threads here, in
// place); `stage_rows` is the Q buffer whose rows the warpgroup no longer reads (e4m3: the
// staging area beside the Q tile).
template <int D, typename Tag>
__device__ __forceinline__ void write_output_rows(const FwdParams& p, const float (&o)[D / 2],
                                                  const float (&m)[2], float (&l)[2],
                                                  uint8_t* stage_rows, int consumer, int row_in_wg,
                                                  int quad, const int (&qt)[kAxes], int head,
                                                  int batch) {
  float inv[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = l[i];
    sum += __shfl_xor_sync(0xffffffff, sum, 1);
    sum += __shfl_xor_sync(0xffffffff, sum, 2);
    l[i] = sum;
    inv[i] = sum > 0.f ? 1.f / sum : 0.f;
  }
  constexpr bool kFp8 = OperandOf<Tag>::kFp8;
  const float* col_scale = nullptr;
  if constexpr (kFp8)
    col_scale = p.fp8.v_scale + (p.batch_offset + batch) * p.fp8.v_scale_batch_stride +
                head / p.heads_per_kv * p.fp8.v_scale_head_stride;
  stage_o_rows<D, typename OperandOf<Tag>::Out>(o, inv, col_scale, stage_rows,
                                                consumer * 64 + row_in_wg, quad);
  if (p.lse != nullptr && quad == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = consumer * 64 + row_in_wg + 8 * i;
      int64_t off = batch * p.lse_batch_stride + head * p.lse_head_stride;
      if (!tile_row_offset(p.rows.q_begin, p.rows.q_end, qt, p.q_tile, r, p.lse_axis_stride, off))
        continue;
      float lse = -INFINITY;
      if (l[i] > 0.f) {
        const float log2_l = kFp8 ? __log2f(l[i]) - kLog2E4m3Max : __log2f(l[i]);
        lse = (m[i] + log2_l) * 0.69314718056f;
        if constexpr (kFp8) lse += token_row_value(p, p.fp8.lse_bias, qt, r, head, batch, 0.f);
      }
      p.lse[off] = lse;
    }
  }
  named_barrier_sync(1 + consumer, 128);
  store_o_rows<D>(p, stage_rows, consumer, batch, head, qt);
}

}  // namespace gna::hopper
