// Halo forward: one CTA of 4 warps per (box of 64 queries, head, batch item, dilation group)
// loads its queries and the K / V halo of the box (the union of its queries' windows) into
// shared memory with one round of cp.async, then each warp walks only the keys of its 16-query
// patch's sub-box, 16 keys per MMA chunk gathered by per-lane ldmatrix rows, with the rule's
// exact mask and an online softmax every kStepChunks chunks. Many small CTAs per SM keep the
// loads of some in flight while others compute.
#pragma once

#include <cmath>

#include "kernels/halo/cta.cuh"

namespace gna::halo {

constexpr int kStepChunks = 4;  // chunks per online-softmax step (64 keys, 32 score registers)
// CTAs per SM the registers must allow (many small CTAs keep loads in flight while others
// compute): at head dim 32, 96 registers (24 bytes of setup spilled), at 64, 168.
constexpr int forward_blocks_per_sm(int d) { return d == 32 ? 5 : 3; }

template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32, forward_blocks_per_sm(D))
    halo_forward_kernel(const __grid_constant__ ForwardParams<T> P) {
  extern __shared__ __align__(128) char smem[];
  const Problem& p = P.p;
  Slice s;
  if (!decode_slice(P.geo, p, Side::keys_of_queries, s)) return;
  const int hk = s.h / (p.heads_q / p.heads_kv);
  const uint32_t q_tile = smem_address(smem);
  const uint32_t k_tile = q_tile + kBoxTokens * D * 2;
  const uint32_t v_tile = k_tile + P.geo.halo_rows * D * 2;
  char* tables = smem + kBoxTokens * D * 2 + 2 * P.geo.halo_rows * D * 2;
  load_box<T, D>(P.q, p, P.geo, s, s.h, q_tile);
  load_halo<T, D>(P.k, p, s, hk, k_tile);
  load_halo<T, D>(P.v, p, s, hk, v_tile);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const WarpBox w = warp_box(P.geo, p, s, warp, Side::keys_of_queries);
  uint32_t* coords = reinterpret_cast<uint32_t*>(tables) + warp * P.geo.walk_rows;
  uint16_t* rows = reinterpret_cast<uint16_t*>(tables + kWarps * P.geo.walk_rows * 4) + warp * P.geo.walk_rows;
  const int chunks = w.empty ? 0 : build_walk_table(w, s, p.rank, coords, rows);
  cp_async_wait<0>();
  __syncthreads();
  if (w.empty) return;

  const RowWindows rw = row_windows(P.geo, p, s, w, Side::keys_of_queries);
  // Where the lane's rows go: O and LSE = (m + log2 l) * ln 2 (natural log, as every backend
  // writes it); worked out before the walk so that the slice's geometry is dead during it.
  T* out[2];
  float* lse_out[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int ig[kMaxRank];
    const bool valid = patch_token(P.geo, w, p.rank, lane / 4 + 8 * r, ig);
    out[r] = valid ? P.o.data + s.b * P.o.stride_batch + s.h * P.o.stride_head + token_offset(P.o, p, s, ig) : nullptr;
    lse_out[r] = valid && P.write_lse ? P.lse.data + s.b * P.lse.stride_batch + s.h * P.lse.stride_head +
                                            token_offset(P.lse, p, s, ig)
                                      : nullptr;
  }
  uint32_t qf[D / 16][4];
  load_a<D>(qf, q_tile, warp * kWarpTokens);
  float acc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const float scale_log2 = P.scale_log2;

  for (int c0 = 0; c0 < chunks; c0 += kStepChunks) {
    float sc[kStepChunks][2][4];
#pragma unroll
    for (int c = 0; c < kStepChunks; ++c) {
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) sc[c][nb][0] = sc[c][nb][1] = sc[c][nb][2] = sc[c][nb][3] = 0.f;
      if (c0 + c < chunks) mma_abt<T, D>(sc[c], qf, k_tile, rows[(c0 + c) * kChunk + row_lane_nt()]);
    }
    // The rule's mask (chunks past the walk are all padding, masked by their coordinates).
#pragma unroll
    for (int c = 0; c < kStepChunks; ++c) {
      constexpr uint32_t pad = kPaddingEntry | kGuardBits;
      uint32_t e[2][2] = {{pad, pad}, {pad, pad}};
      if (c0 + c < chunks) chunk_columns(coords, c0 + c, e);
#pragma unroll
      for (int nb = 0; nb < 2; ++nb)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int j = 0; j < 2; ++j)
            if (!attends(rw, r, e[nb][j])) sc[c][nb][2 * r + j] = -INFINITY;
    }
    // Online softmax in the log2 domain.
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < kStepChunks; ++c)
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) mx = fmaxf(mx, fmaxf(sc[c][nb][2 * r], sc[c][nb][2 * r + 1]));
      mx = quad_max(mx) * scale_log2;
      const float m_new = fmaxf(m[r], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      correction[r] = fast_exp2(m[r] - m_use);
      m[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < kStepChunks; ++c)
#pragma unroll
        for (int nb = 0; nb < 2; ++nb)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            float& x = sc[c][nb][2 * r + j];
            x = fast_exp2(fmaf(x, scale_log2, -m_use));
            sum += x;
          }
      l[r] = l[r] * correction[r] + sum;
    }
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      acc[i][0] *= correction[0];
      acc[i][1] *= correction[0];
      acc[i][2] *= correction[1];
      acc[i][3] *= correction[1];
    }
#pragma unroll
    for (int c = 0; c < kStepChunks; ++c) {
      if (c0 + c >= chunks) continue;
      uint32_t pa[4];
      pack_a<T>(pa, sc[c]);
      mma_pb<T, D>(acc, pa, v_tile, rows[(c0 + c) * kChunk + row_lane_t()]);
    }
  }

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(l[r]);
    inv[r] = 1.f / sum;
    if (lse_out[r] && lane % 4 == 0) *lse_out[r] = (m[r] + log2f(sum)) * 0.69314718055994531f;
  }
  store_rows<T, D>(out, acc, inv[0], inv[1]);
}

}  // namespace gna::halo
