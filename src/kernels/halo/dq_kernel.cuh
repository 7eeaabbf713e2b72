// Halo backward, query side: one CTA per (box of 64 queries, dilation group) and a run of
// (batch item, head) slices, with the forward's geometry. Per slice it loads Q, dO and O of its
// queries and the K / V halo, writes delta = rowsum(dO * O) of its queries (for the key-side
// pass) and computes dQ = scale * sum_k dS K with dS = P (dP - delta), P recomputed from LSE,
// walking each warp's sub-box as the forward does. dQ goes straight to its tensor: no
// accumulator, no atomics.
#pragma once

#include "kernels/halo/cta.cuh"

namespace gna::halo {

// Layout of the dQ pass's shared memory (bytes; dq_shared_bytes in plan.cpp agrees).
template <int D>
struct DqLayout {
  static constexpr int kTile = kBoxTokens * D * 2;
  int d_o, o, k, v, lse2, delta, coords, offsets, tables, masks, bytes;
  __device__ __host__ explicit DqLayout(const Geometry& g) {
    d_o = kTile;
    o = 2 * kTile;
    k = 3 * kTile;
    v = k + g.tile_rows * D * 2;
    lse2 = v + g.tile_rows * D * 2;
    delta = lse2 + kBoxTokens * 4;
    coords = delta + kBoxTokens * 4;
    offsets = coords + kWarps * g.walk_rows * 4;
    tables = offsets + kWarps * g.walk_rows * 4;  // Q, dO, O, LSE, token (box); K, V (halo)
    masks = tables + 5 * kBoxTokens * 4 + 2 * g.halo_rows * 4;
    bytes = masks + kWarps * walk_mask_bytes(g.walk_rows, g.segments);
  }
};

// Streamed: the halo comes in slabs (plan.hpp), each loaded after the walks of the last.
template <typename T, int D, bool Streamed>
__global__ void __launch_bounds__(kWarps * 32)
    halo_dq_kernel(const __grid_constant__ DqParams<T> P) {
  extern __shared__ __align__(128) char smem[];
  const Problem& p = P.p;
  Slice s;
  if (!decode_slice(P.geo, p, Side::keys_of_queries, s)) return;
  const DqLayout<D> L(P.geo);
  const uint32_t q_tile = smem_address(smem);
  const uint32_t do_tile = q_tile + L.d_o, o_tile = q_tile + L.o;
  const uint32_t k_tile = q_tile + L.k, v_tile = q_tile + L.v;
  float* lse2 = reinterpret_cast<float*>(smem + L.lse2);
  float* delta = reinterpret_cast<float*>(smem + L.delta);
  int* q_table = reinterpret_cast<int*>(smem + L.tables);
  int* do_table = q_table + kBoxTokens;
  int* o_table = do_table + kBoxTokens;
  int* lse_table = o_table + kBoxTokens;
  int* token_table = lse_table + kBoxTokens;
  int* k_table = token_table + kBoxTokens;
  int* v_table = k_table + P.geo.halo_rows;
  box_row_table(P.q, p, P.geo, s, q_table);
  box_row_table(P.d_o, p, P.geo, s, do_table);
  box_row_table(P.o, p, P.geo, s, o_table);
  box_row_table(P.lse, p, P.geo, s, lse_table);
  halo_row_table(P.k, p, s, k_table);
  halo_row_table(P.v, p, s, v_table);
  for (int r = threadIdx.x; r < kBoxTokens; r += kWarps * 32) {  // plain token index (delta)
    int off[kMaxRank], token = 0;
    box_row_offsets(P.geo, p.rank, r, off);
    GNA_HALO_FOR_AXES(a, p.rank)
      token = token * p.axes[a].extent + coordinate_of(p.axes[a], s.group[a], min_i(s.box[a].begin + off[a], s.n[a] - 1));
    token_table[r] = token;
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const WarpBox w = warp_box(P.geo, p, s, warp, Side::keys_of_queries);
  uint32_t* coords = reinterpret_cast<uint32_t*>(smem + L.coords) + warp * P.geo.walk_rows;
  uint32_t* offsets = reinterpret_cast<uint32_t*>(smem + L.offsets) + warp * P.geo.walk_rows;
  const int slab_planes = Streamed ? P.geo.slab_planes : s.halo_side[0];
  const int chunks = w.empty ? 0 : build_walk_table<D>(w, s, p.rank, slab_planes, coords, offsets);
  uint32_t* masks = reinterpret_cast<uint32_t*>(smem + L.masks + warp * walk_mask_bytes(P.geo.walk_rows, P.geo.segments));
  build_walk_masks(w, s, slab_planes, coords, row_windows(P.geo, p, s, w, Side::keys_of_queries), masks);
  int dq_off[2];
  for_lane_rows(P.geo, w, p.rank, lane, [&](int r, bool valid, const int* ig) {
    dq_off[r] = valid ? static_cast<int>(token_offset(P.dq, p, s, ig)) : -1;
  });
  __syncthreads();

  const int group_heads = p.heads_q / p.heads_kv;
  const int64_t tokens = p.tokens();
  const SliceRange range = slice_range(P.geo.slices_per_cta, p.batch * p.heads_q);
  for (int slice = range.first; slice < range.last; ++slice) {
    const int b = slice / p.heads_q, h = slice % p.heads_q, hk = h / group_heads;
    load_rows<T, D>(slice_base(P.q, b, h), q_table, kBoxTokens, q_tile);
    load_rows<T, D>(slice_base(P.d_o, b, h), do_table, kBoxTokens, do_tile);
    load_rows<T, D>(slice_base(P.o, b, h), o_table, kBoxTokens, o_tile);
    const SlabRows rows0 = slab_rows(s, slab_planes, 0);  // the whole halo unless Streamed
    load_rows<T, D, false>(slice_base(P.k, b, hk), k_table, rows0.count, k_tile);
    load_rows<T, D, false>(slice_base(P.v, b, hk), v_table, rows0.count, v_tile);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    // delta and LSE (log2 units) of the box's queries: two threads per row.
    {
      const int r = threadIdx.x / 2, half = threadIdx.x % 2;
      float sum = 0.f;
#pragma unroll
      for (int ch = half * (D / 16); ch < (half + 1) * (D / 16); ++ch) {
        const uint4 dov = *reinterpret_cast<const uint4*>(smem + L.d_o + Rows<D>::offset(r, ch));
        const uint4 ov = *reinterpret_cast<const uint4*>(smem + L.o + Rows<D>::offset(r, ch));
        const T* de = reinterpret_cast<const T*>(&dov);
        const T* oe = reinterpret_cast<const T*>(&ov);
#pragma unroll
        for (int i = 0; i < 8; ++i) sum += cuda::to_float(de[i]) * cuda::to_float(oe[i]);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      if (half == 0) {
        const bool valid = lse_table[r] >= 0;
        if (valid) P.delta[(b * tokens + token_table[r]) * p.heads_q + h] = sum;
        lse2[r] = valid ? slice_base(P.lse, b, h)[lse_table[r]] * 1.4426950408889634f : 0.f;
        delta[r] = valid ? sum : 0.f;
      }
    }
    __syncthreads();

    // Every warp takes part in the slabs' barriers; empty warps walk nothing.
    const int row0 = warp * kWarpTokens + lane / 4;
    const float row_lse[2] = {lse2[row0], lse2[row0 + 8]};
    const float row_delta[2] = {delta[row0], delta[row0 + 8]};
    uint32_t qf[D / 16][4], dof[D / 16][4];
    if (!w.empty) {
      load_a<D>(qf, q_tile, warp * kWarpTokens);
      load_a<D>(dof, do_tile, warp * kWarpTokens);
    }
    float dq[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
    const float scale_log2 = P.scale_log2;
    // dQ += the walk's dS K (chunks >= 1) over the walk table at `offsets`, the masks at `words`.
    const auto walk = [&](const uint32_t* words, const uint32_t* offsets, int chunks) {
      walk_steps(words, chunks, [&](auto n, auto, int c0, uint32_t mask) {
#pragma unroll
        for (int c = 0; c < decltype(n)::value; ++c) {
          float sc[2][4] = {}, dp[2][4] = {};
          const uint32_t off_nt = lane_nt(offsets, c0 + c);
          mma_abt<T, D>(sc, qf, k_tile, off_nt);
          mma_abt<T, D>(dp, dof, v_tile, off_nt);
          for_each_chunk_element([&](int nb, int r, int j) {
            const float pr = mask_bit(mask >> (8 * c), nb, r, j)
                                 ? fast_exp2(fmaf(sc[nb][2 * r + j], scale_log2, -row_lse[r]))
                                 : 0.f;
            sc[nb][2 * r + j] = pr * (dp[nb][2 * r + j] - row_delta[r]);
          });
          uint32_t da[4];
          pack_a<T>(da, sc);
          mma_pb<T, D>(dq, da, k_tile, lane_t(offsets, c0 + c));
        }
      });
    };
    if constexpr (!Streamed) {
      if (!w.empty) walk(masks, offsets, chunks);
    } else {
      Segment seg;
      for (int k = 0; k < slab_count(s, slab_planes); ++k) {
        if (k > 0) {
          __syncthreads();  // the walks of the last slab are done with the tiles
          const SlabRows rows = slab_rows(s, slab_planes, k);
          load_kv_rows<T, D>(P.k, P.v, b, hk, k_table, v_table, rows.first, rows.count, k_tile,
                             v_tile);
        }
        if (w.empty) continue;
        const int n = segment_chunks(w, s, slab_planes, k);
        if (n > 0) walk(masks + seg.word * 32, offsets + seg.chunk * kChunk, n);
        seg.advance(n);
      }
    }
    if (!w.empty) {
      T* out[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) out[r] = dq_off[r] >= 0 ? slice_base(P.dq, b, h) + dq_off[r] : nullptr;
      store_rows<T, D>(out, dq, P.scale, P.scale);
    }
    __syncthreads();  // the next slice's loads overwrite the tiles
  }
}

}  // namespace gna::halo
