// The GEMMs of one KV tile in a forward consumer warpgroup, shared by the one-item and the
// persistent kernels: S = Q K^T (wgmma SS, both operands K-major in shared memory), O += P V
// (wgmma RS, P from registers, V N-major) and the online rescaling of O. The descriptors are
// built once per CTA; a buffer, stage or k-step only moves their start address (desc_advance).
#pragma once

#include <cstdint>

#include "kernels/hopper/device_util.cuh"
#include "kernels/hopper/forward_wgmma_d256.cuh"
#include "kernels/hopper/ptx.cuh"

namespace gna::hopper {

template <int D>
using KvLayout = TileLayout<D, kv_tile_tokens(D)>;

// Descriptor of a consumer warpgroup's 64 Q rows starting at shared address `rows`.
template <int D>
__device__ __forceinline__ uint64_t q_rows_desc(uint32_t rows) {
  using L = TileLayout<D>;
  return make_smem_desc(rows, 16, 8 * L::kRowBytes, L::kSwizzleMode);
}
// Descriptors of a K tile (B operand of S, K-major) and a V tile (B operand of O, N-major).
template <int D>
__device__ __forceinline__ uint64_t k_tile_desc(uint32_t tile) {
  using KL = KvLayout<D>;
  return make_smem_desc(tile, 16, 8 * KL::kRowBytes, KL::kSwizzleMode);
}
template <int D>
__device__ __forceinline__ uint64_t v_tile_desc(uint32_t tile) {
  using KL = KvLayout<D>;
  return make_smem_desc(tile, KL::kBoxBytes, 8 * KL::kRowBytes, KL::kSwizzleMode);
}

// S = Q K^T over the head dim in k-steps of 16, committed as one wgmma group.
template <int D, typename Tag>
__device__ __forceinline__ void issue_qk(float (&sacc)[kv_tile_tokens(D) / 2], uint64_t q_desc,
                                         uint64_t k_desc) {
  using L = TileLayout<D>;
  using KL = KvLayout<D>;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int box = kk * 16 / L::kBoxCols;
    const int within = (kk * 16 % L::kBoxCols) * 2;
    WgmmaSS<kv_tile_tokens(D), Tag>::run(sacc, desc_advance(q_desc, box * L::kBoxBytes + within),
                                         desc_advance(k_desc, box * KL::kBoxBytes + within),
                                         kk > 0);
  }
  wgmma_commit();
}

// O += P V over the tile's keys in k-steps of 16, committed as one wgmma group.
template <int D, typename Tag>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2],
                                         const uint32_t (&pa)[kv_tile_tokens(D) / 4],
                                         uint64_t v_desc) {
  using KL = KvLayout<D>;
#pragma unroll
  for (int k = 0; k < kv_tile_tokens(D) / 16; ++k)
    WgmmaRS<D, Tag>::run(o, &pa[k * 4], desc_advance(v_desc, k * 16 * KL::kRowBytes));
  wgmma_commit();
}

// O of the thread's two rows times the softmax's correction of their running maxima.
template <int D>
__device__ __forceinline__ void rescale_o(float (&o)[D / 2], const float (&correction)[2]) {
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    o[j * 4 + 0] *= correction[0];
    o[j * 4 + 1] *= correction[0];
    o[j * 4 + 2] *= correction[1];
    o[j * 4 + 3] *= correction[1];
  }
}

}  // namespace gna::hopper
