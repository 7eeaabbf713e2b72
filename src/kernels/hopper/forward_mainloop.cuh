// A forward consumer warpgroup's work per KV tile, shared by the one-item and the persistent
// kernels: S = Q K^T (wgmma SS, both operands K-major in shared memory), O += P V (wgmma RS, P
// from registers, V N-major; e4m3: V transposed to K-major by the producer warpgroup), the online
// rescaling of O, and the software pipeline over a run of KV tiles that orders them with the mask
// and softmax. The descriptors are built once per CTA; a
// buffer, stage or k-step only moves their start address (desc_advance).
#pragma once

#include <cstdint>

#include "kernels/hopper/device_util.cuh"
#include "kernels/hopper/forward_softmax.cuh"
#include "kernels/hopper/forward_wgmma_d256.cuh"
#include "kernels/hopper/ptx.cuh"

namespace gna::hopper {

// Shared-memory images of the Q and KV tiles in the GEMMs' operand type (Tag).
template <int D, typename Tag>
using QLayout = TileLayout<D, kTileTokens, OperandOf<Tag>::kBytes>;
template <int D, typename Tag>
using KvLayout = TileLayout<D, kv_tile_tokens(D), OperandOf<Tag>::kBytes>;
// e4m3: a V tile transposed (V^T, the K-major B operand of O += P V): D rows of the tile's 128
// keys (128 bytes, 128-byte swizzle), keys in the order of P's register fragment (vt_key_slot).
template <int D>
struct VtLayout {
  static constexpr int kRowBytes = kTileTokens;
  static constexpr int kTileBytes = D * kRowBytes;
};
// Where key k of a 16-key group sits in a V^T row. The S accumulators give a thread the keys
// 2q, 2q + 1, 2q + 8, 2q + 9 of each 16-key group (q: its quad) in each of its rows, and an 8-bit
// wgmma A register holds the k-slots 4q..4q + 3 of a row: the thread's P packs as it is when
// V^T's slots 4q..4q + 3 hold those keys.
__host__ __device__ constexpr int vt_key_slot(int k) {
  return 4 * ((k % 8) / 2) + 2 * (k / 8) + k % 2;
}
// 32-bit P registers per thread for one KV tile (the A operand of O += P V).
template <int D, typename Tag>
constexpr int kPRegs = kv_tile_tokens(D) * OperandOf<Tag>::kBytes / 8;

// Descriptor of a consumer warpgroup's 64 Q rows starting at shared address `rows`.
template <int D, typename Tag>
__device__ __forceinline__ uint64_t q_rows_desc(uint32_t rows) {
  using L = QLayout<D, Tag>;
  return make_smem_desc(rows, 16, 8 * L::kRowBytes, L::kSwizzleMode);
}
// Descriptors of a K tile (B operand of S, K-major) and a V tile (B operand of O: N-major, or
// e4m3's V^T, K-major with 128-byte rows).
template <int D, typename Tag>
__device__ __forceinline__ uint64_t k_tile_desc(uint32_t tile) {
  using KL = KvLayout<D, Tag>;
  return make_smem_desc(tile, 16, 8 * KL::kRowBytes, KL::kSwizzleMode);
}
template <int D, typename Tag>
__device__ __forceinline__ uint64_t v_tile_desc(uint32_t tile) {
  using KL = KvLayout<D, Tag>;
  if constexpr (OperandOf<Tag>::kFp8)
    return make_smem_desc(tile, 16, 8 * VtLayout<D>::kRowBytes, 1);
  else
    return make_smem_desc(tile, KL::kBoxBytes, 8 * KL::kRowBytes, KL::kSwizzleMode);
}

// S = Q K^T over the head dim in k-steps of 32 bytes (16 elements, e4m3 32), committed as one
// wgmma group.
template <int D, typename Tag>
__device__ __forceinline__ void issue_qk(float (&sacc)[kv_tile_tokens(D) / 2], uint64_t q_desc,
                                         uint64_t k_desc) {
  using L = QLayout<D, Tag>;
  using KL = KvLayout<D, Tag>;
  constexpr int kBytes = OperandOf<Tag>::kBytes;
  constexpr int kStep = 32 / kBytes;
#pragma unroll
  for (int kk = 0; kk < D / kStep; ++kk) {
    const int box = kk * kStep / L::kBoxCols;
    const int within = (kk * kStep % L::kBoxCols) * kBytes;
    const uint64_t a = desc_advance(q_desc, box * L::kBoxBytes + within);
    const uint64_t b = desc_advance(k_desc, box * KL::kBoxBytes + within);
    if constexpr (OperandOf<Tag>::kFp8)
      WgmmaSSE4m3<kv_tile_tokens(D)>::run(sacc, a, b, kk > 0);
    else
      WgmmaSS<kv_tile_tokens(D), Tag>::run(sacc, a, b, kk > 0);
  }
  wgmma_commit();
}

// O += P V over the tile's keys in k-steps of 32 bytes of P, committed as one wgmma group.
template <int D, typename Tag>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const uint32_t (&pa)[kPRegs<D, Tag>],
                                         uint64_t v_desc) {
  using KL = KvLayout<D, Tag>;
  if constexpr (OperandOf<Tag>::kFp8) {
#pragma unroll
    for (int k = 0; k < kv_tile_tokens(D) / 32; ++k)
      WgmmaRSE4m3<D>::run(o, &pa[k * 4], desc_advance(v_desc, k * 32));
  } else {
#pragma unroll
    for (int k = 0; k < kv_tile_tokens(D) / 16; ++k)
      WgmmaRS<D, Tag>::run(o, &pa[k * 4], desc_advance(v_desc, k * 16 * KL::kRowBytes));
  }
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

// The pipeline over a run of KV tiles. Ping-pong: the two consumer warpgroups take turns issuing
// their GEMMs (named barriers my_turn and other_turn), so that one warpgroup's softmax runs while
// the other's GEMMs hold the tensor cores. Inside a warpgroup, S(n) = Q K(n)^T is issued together
// with O += P(n-1) V(n-1), and the softmax of S(n) runs while P(n-1) V(n-1) is on the tensor
// cores. What differs between the kernels comes in as hooks: issue_s(sacc) and issue_o(pa) (their
// buffers and stages), overlap() (work done while the GEMMs run), mask_s(sacc) (masks S and
// releases its K stage).

// The first KV tile of a run: S(0) alone, then P(0).
template <int D, typename Tag, typename IssueS, typename Overlap, typename MaskS>
__device__ __forceinline__ void consumer_first_tile(float (&sacc)[kv_tile_tokens(D) / 2],
                                                    uint32_t (&pa)[kPRegs<D, Tag>],
                                                    float (&row_max)[2], float (&row_sum)[2],
                                                    const float (&row_scale)[2], int my_turn,
                                                    int other_turn,
                                                    IssueS&& issue_s, Overlap&& overlap,
                                                    MaskS&& mask_s) {
  constexpr int kKv = kv_tile_tokens(D);
  named_barrier_sync(my_turn, 256);
  wgmma_fence();
  issue_s(sacc);
  named_barrier_arrive(other_turn, 256);
  overlap();
  wgmma_wait<0>();
  fence_regs(sacc);
  mask_s(sacc);
  float correction[2];  // O is still zero
  online_softmax<kKv, OperandOf<Tag>::kFp8>(sacc, row_max, row_sum, row_scale, correction);
  pack_p<kKv, Tag>(sacc, pa);
}

// A later KV tile n: S(n) with P(n-1) V(n-1), whose V stage (v_empty) is released once done;
// then O is rescaled, unless item_done() takes over (true: the persistent kernel's first tile of
// a new item, where O holds the finished item and goes to its epilogue instead).
template <int D, typename Tag, typename IssueS, typename IssueO, typename Overlap, typename MaskS,
          typename ItemDone>
__device__ __forceinline__ void consumer_next_tile(float (&sacc)[kv_tile_tokens(D) / 2],
                                                   uint32_t (&pa)[kPRegs<D, Tag>],
                                                   float (&o)[D / 2], float (&row_max)[2],
                                                   float (&row_sum)[2],
                                                   const float (&row_scale)[2],
                                                   int my_turn, int other_turn, int lane,
                                                   uint64_t* v_empty, IssueS&& issue_s,
                                                   IssueO&& issue_o, Overlap&& overlap,
                                                   MaskS&& mask_s, ItemDone&& item_done) {
  constexpr int kKv = kv_tile_tokens(D);
  named_barrier_sync(my_turn, 256);
  wgmma_fence();
  issue_s(sacc);
  issue_o(pa);
  named_barrier_arrive(other_turn, 256);
  overlap();
  wgmma_wait<1>();
  fence_regs(sacc);
  mask_s(sacc);
  float correction[2];
  online_softmax<kKv, OperandOf<Tag>::kFp8>(sacc, row_max, row_sum, row_scale, correction);
  wgmma_wait<0>();
  fence_regs(o);
  if (lane == 0) mbar_arrive(v_empty);
  // Most tiles leave every row max of the warp unchanged: skip the multiplies.
  if (!item_done() && __any_sync(0xffffffff, correction[0] != 1.f || correction[1] != 1.f))
    rescale_o<D>(o, correction);
  pack_p<kKv, Tag>(sacc, pa);
}

// The last P V of a run, once its V stage has landed (v_full, phase).
template <int D, typename Tag, typename IssueO>
__device__ __forceinline__ void consumer_last_pv(float (&o)[D / 2],
                                                 const uint32_t (&pa)[kPRegs<D, Tag>],
                                                 int my_turn, int other_turn, int lane,
                                                 uint64_t* v_full, uint32_t phase,
                                                 uint64_t* v_empty, IssueO&& issue_o) {
  mbar_wait(v_full, phase);
  named_barrier_sync(my_turn, 256);
  wgmma_fence();
  issue_o(pa);
  named_barrier_arrive(other_turn, 256);
  wgmma_wait<0>();
  fence_regs(o);
  if (lane == 0) mbar_arrive(v_empty);
}

}  // namespace gna::hopper
