// Halo backward, key side: one CTA per (box of 64 keys, key head, batch item, dilation group)
// loads K and V of its keys and, for each query head of the key head's group, the Q / dO halo
// of the box (the queries whose windows hold its keys, by the core's inverse rule) with their
// LSE and delta; each warp walks the queries of its 16-key patch's sub-box and accumulates
//   dV = sum_q P^T dO,  dK = scale * sum_q dS^T Q,  dS = P (dP - delta),
// with P recomputed from LSE. Every dK / dV row is written once: no atomics.
#pragma once

#include "kernels/halo/cta.cuh"

namespace gna::halo {

template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    halo_dkdv_kernel(const __grid_constant__ DkdvParams<T> P) {
  extern __shared__ __align__(128) char smem[];
  const Problem& p = P.p;
  Slice s;
  if (!decode_slice(P.geo, p, Side::queries_of_keys, s)) return;
  const int hk = s.h;  // the grid's heads are key heads here
  const int group_heads = p.heads_q / p.heads_kv;
  constexpr int kTile = kBoxTokens * D * 2;
  const uint32_t k_tile = smem_address(smem);
  const uint32_t v_tile = k_tile + kTile;
  const uint32_t q_tile = v_tile + kTile;
  const uint32_t do_tile = q_tile + P.geo.halo_rows * D * 2;
  char* after_halo = smem + 2 * kTile + 2 * P.geo.halo_rows * D * 2;
  float* lse2 = reinterpret_cast<float*>(after_halo);
  float* delta = lse2 + P.geo.halo_rows;
  char* tables = after_halo + 2 * P.geo.halo_rows * 4;
  load_box<T, D>(P.k, p, P.geo, s, hk, k_tile);
  load_box<T, D>(P.v, p, P.geo, s, hk, v_tile);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const WarpBox w = warp_box(P.geo, p, s, warp, Side::queries_of_keys);
  uint32_t* coords = reinterpret_cast<uint32_t*>(tables) + warp * P.geo.walk_rows;
  uint16_t* rows = reinterpret_cast<uint16_t*>(tables + kWarps * P.geo.walk_rows * 4) + warp * P.geo.walk_rows;
  const int chunks = w.empty ? 0 : build_walk_table(w, s, p.rank, coords, rows);
  const RowWindows rw = row_windows(P.geo, p, s, w, Side::queries_of_keys);

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) dk[i][j] = dv[i][j] = 0.f;
  const float scale_log2 = P.scale_log2;
  const int t = lane % 4;

  for (int hq = hk * group_heads; hq < (hk + 1) * group_heads; ++hq) {
    load_halo<T, D>(P.q, p, s, hq, q_tile);
    load_halo<T, D>(P.d_o, p, s, hq, do_tile);
    cp_async_commit();
    load_halo_scalars(P.lse, P.delta, p.tokens(), p.heads_q, p, s, hq, lse2, delta);
    cp_async_wait<0>();
    __syncthreads();
    if (!w.empty) {
      uint32_t kf[D / 16][4], vf[D / 16][4];
      load_a<D>(kf, k_tile, warp * kWarpTokens);
      load_a<D>(vf, v_tile, warp * kWarpTokens);
      for (int c = 0; c < chunks; ++c) {
        float st[2][4] = {}, dpt[2][4] = {};
        const int row_nt = rows[c * kChunk + row_lane_nt()];
        mma_abt<T, D>(st, kf, q_tile, row_nt);
        mma_abt<T, D>(dpt, vf, do_tile, row_nt);
        uint32_t e[2][2];
        chunk_columns(coords, c, e);
        float pt[2][4];
#pragma unroll
        for (int nb = 0; nb < 2; ++nb)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int q_row = rows[c * kChunk + nb * 8 + 2 * t + j];
            const float l2 = lse2[q_row], dl = delta[q_row];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const float pr = attends(rw, r, e[nb][j])
                                   ? fast_exp2(fmaf(st[nb][2 * r + j], scale_log2, -l2))
                                   : 0.f;
              pt[nb][2 * r + j] = pr;
              st[nb][2 * r + j] = pr * (dpt[nb][2 * r + j] - dl);
            }
          }
        const int row_t = rows[c * kChunk + row_lane_t()];
        uint32_t a[4];
        pack_a<T>(a, pt);
        mma_pb<T, D>(dv, a, do_tile, row_t);
        pack_a<T>(a, st);
        mma_pb<T, D>(dk, a, q_tile, row_t);
      }
    }
    __syncthreads();  // the next query head's loads overwrite the halo
  }
  if (w.empty) return;

  T* out_k[2];
  T* out_v[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int ig[kMaxRank];
    const bool valid = patch_token(P.geo, w, p.rank, lane / 4 + 8 * r, ig);
    out_k[r] = valid ? P.dk.data + s.b * P.dk.stride_batch + hk * P.dk.stride_head + token_offset(P.dk, p, s, ig) : nullptr;
    out_v[r] = valid ? P.dv.data + s.b * P.dv.stride_batch + hk * P.dv.stride_head + token_offset(P.dv, p, s, ig) : nullptr;
  }
  store_rows<T, D>(out_k, dk, P.scale, P.scale);
  store_rows<T, D>(out_v, dv, 1.f, 1.f);
}

}  // namespace gna::halo
