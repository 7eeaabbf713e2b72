// Halo backward, query side: one CTA per (box of 64 queries, head, batch item, dilation group)
// loads Q, dO and O of its queries and the K / V halo of the box, writes delta = rowsum(dO * O)
// of its queries (for the key-side pass) and computes dQ = scale * sum_k dS K with
// dS = P (dP - delta), P recomputed from LSE, walking each warp's sub-box as the forward does.
// dQ goes straight to its tensor: no accumulator, no atomics.
#pragma once

#include "kernels/halo/cta.cuh"

namespace gna::halo {

template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    halo_dq_kernel(const __grid_constant__ DqParams<T> P) {
  extern __shared__ __align__(128) char smem[];
  const Problem& p = P.p;
  Slice s;
  if (!decode_slice(P.geo, p, Side::keys_of_queries, s)) return;
  const int hk = s.h / (p.heads_q / p.heads_kv);
  constexpr int kTile = kBoxTokens * D * 2;
  const uint32_t q_tile = smem_address(smem);
  const uint32_t do_tile = q_tile + kTile;
  const uint32_t o_tile = do_tile + kTile;
  const uint32_t k_tile = o_tile + kTile;
  const uint32_t v_tile = k_tile + P.geo.halo_rows * D * 2;
  char* after_halo = smem + 3 * kTile + 2 * P.geo.halo_rows * D * 2;
  float* lse2 = reinterpret_cast<float*>(after_halo);
  float* delta = lse2 + kBoxTokens;
  char* tables = after_halo + 2 * kBoxTokens * 4;
  load_box<T, D>(P.q, p, P.geo, s, s.h, q_tile);
  load_box<T, D>(P.d_o, p, P.geo, s, s.h, do_tile);
  load_box<T, D>(P.o, p, P.geo, s, s.h, o_tile);
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

  // delta and LSE (log2 units) of the box's queries: two threads per row.
  {
    const int r = threadIdx.x / 2, half = threadIdx.x % 2;
    int off[kMaxRank], ig[kMaxRank] = {0, 0, 0};
    box_row_offsets(P.geo, p.rank, r, off);
    bool valid = true;
    GNA_HALO_FOR_AXES(a, p.rank) {
      ig[a] = s.box[a].begin + off[a];
      valid = valid && ig[a] < s.box[a].end;
    }
    float sum = 0.f;
    const char* base = smem;
#pragma unroll
    for (int ch = half * (D / 16); ch < (half + 1) * (D / 16); ++ch) {
      const uint4 dov = *reinterpret_cast<const uint4*>(base + kTile + Rows<D>::offset(r, ch));
      const uint4 ov = *reinterpret_cast<const uint4*>(base + 2 * kTile + Rows<D>::offset(r, ch));
      const T* de = reinterpret_cast<const T*>(&dov);
      const T* oe = reinterpret_cast<const T*>(&ov);
#pragma unroll
      for (int i = 0; i < 8; ++i) sum += cuda::to_float(de[i]) * cuda::to_float(oe[i]);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (half == 0) {
      float l2 = 0.f;
      if (valid) {
        int x[kMaxRank] = {0, 0, 0};
        int64_t token = 0;
        GNA_HALO_FOR_AXES(a, p.rank) {
          x[a] = coordinate_of(p.axes[a], s.group[a], ig[a]);
          token = token * p.axes[a].extent + x[a];
        }
        l2 = *P.lse.at(s.b, x, p.rank, s.h) * 1.4426950408889634f;
        P.delta[(s.b * p.tokens() + token) * p.heads_q + s.h] = sum;
      }
      lse2[r] = l2;
      delta[r] = valid ? sum : 0.f;
    }
  }
  __syncthreads();
  if (w.empty) return;

  const RowWindows rw = row_windows(P.geo, p, s, w, Side::keys_of_queries);
  const int row0 = warp * kWarpTokens + lane / 4;
  const float row_lse[2] = {lse2[row0], lse2[row0 + 8]};
  const float row_delta[2] = {delta[row0], delta[row0 + 8]};
  uint32_t qf[D / 16][4], dof[D / 16][4];
  load_a<D>(qf, q_tile, warp * kWarpTokens);
  load_a<D>(dof, do_tile, warp * kWarpTokens);
  float dq[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
  const float scale_log2 = P.scale_log2;

  for (int c = 0; c < chunks; ++c) {
    float sc[2][4] = {}, dp[2][4] = {};
    const int row_nt = rows[c * kChunk + row_lane_nt()];
    mma_abt<T, D>(sc, qf, k_tile, row_nt);
    mma_abt<T, D>(dp, dof, v_tile, row_nt);
    uint32_t e[2][2];
    chunk_columns(coords, c, e);
#pragma unroll
    for (int nb = 0; nb < 2; ++nb)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float pr = attends(rw, r, e[nb][j])
                               ? fast_exp2(fmaf(sc[nb][2 * r + j], scale_log2, -row_lse[r]))
                               : 0.f;
          sc[nb][2 * r + j] = pr * (dp[nb][2 * r + j] - row_delta[r]);
        }
    uint32_t da[4];
    pack_a<T>(da, sc);
    mma_pb<T, D>(dq, da, k_tile, rows[c * kChunk + row_lane_t()]);
  }

  T* out[2];
  const int64_t base = s.b * P.dq.stride_batch + s.h * P.dq.stride_head;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int ig[kMaxRank];
    const bool valid = patch_token(P.geo, w, p.rank, lane / 4 + 8 * r, ig);
    out[r] = valid ? P.dq.data + base + token_offset(P.dq, p, s, ig) : nullptr;
  }
  store_rows<T, D>(out, dq, P.scale, P.scale);
}

}  // namespace gna::halo
