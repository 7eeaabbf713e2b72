// Halo backward, key side: one CTA per (box of 64 keys, dilation group) and a run of (batch item,
// key head) slices. Once per CTA it works out the box's halo of queries (those whose windows hold
// its keys, by the core's inverse rule), the warps' walk tables and row tables. Per slice it
// loads K and V of its keys and, for each query head of the key head's group, the Q / dO halo
// with its LSE and delta; each warp walks the queries of its 16-key patch's sub-box and
// accumulates
//   dV = sum_q P^T dO,  dK = scale * sum_q dS^T Q,  dS = P (dP - delta),
// with P recomputed from LSE. Every dK / dV row is written once: no atomics.
#pragma once

#include "kernels/halo/cta.cuh"

namespace gna::halo {

// Layout of the dK / dV pass's shared memory (bytes; dkdv_shared_bytes in plan.cpp agrees). The
// streamed kernel keeps one walk table per warp for every slab (build_slab_table) and, with
// kv_registers, no K / V tiles (their fragments come from global memory into registers once per
// slice, load_a_global).
template <int D>
struct DkdvLayout {
  static constexpr int kTile = kBoxTokens * D * 2;
  int v, q, d_o, stats, coords, offsets, tables, masks, warp_masks, bytes;
  __device__ __host__ DkdvLayout(const Geometry& g, bool streamed, bool kv_registers) {
    const int table_rows = streamed ? g.slab_table_rows : g.walk_rows;
    warp_masks = streamed ? walk_mask_bytes(g.walk_rows + kChunk, g.segments) : walk_mask_bytes(g.walk_rows, g.segments);
    const bool kv_tiles = !streamed || !kv_registers;
    v = kv_tiles ? kTile : 0;
    q = kv_tiles ? 2 * kTile : 0;
    d_o = q + g.tile_rows * D * 2;
    stats = d_o + g.tile_rows * D * 2;  // (LSE in log2 units, delta) per row of the tiles
    coords = stats + g.tile_rows * 8;
    offsets = coords + kWarps * table_rows * 4;
    tables = offsets + kWarps * table_rows * 4;  // K, V (box); Q, dO, LSE, token (halo)
    masks = tables + 2 * kBoxTokens * 4 + 4 * g.halo_rows * 4;
    bytes = masks + kWarps * warp_masks;
  }
};

// CTAs per SM the registers must allow (as many as the kernel had: 128 registers at head dim 32,
// 168 at 64).
constexpr int dkdv_blocks_per_sm(int d) { return d == 32 ? 4 : 3; }

// Streamed: the query halo comes in slabs (plan.hpp), each loaded after the walks of the last.
// KvRegisters (streamed only): K / V fragments from global memory, no K / V tiles (Plan::kv_registers).
template <typename T, int D, bool Streamed, bool KvRegisters = false>
__global__ void __launch_bounds__(kWarps * 32, dkdv_blocks_per_sm(D))
    halo_dkdv_kernel(const __grid_constant__ DkdvParams<T> P) {
  extern __shared__ __align__(128) char smem[];
  const Problem& p = P.p;
  Slice s;
  if (!decode_slice(P.geo, p, Side::queries_of_keys, s)) return;
  static_assert(Streamed || !KvRegisters, "K / V in registers is a streamed layout");
  const DkdvLayout<D> L(P.geo, Streamed, KvRegisters);
  const uint32_t k_tile = smem_address(smem);
  const uint32_t v_tile = k_tile + L.v, q_tile = k_tile + L.q, do_tile = k_tile + L.d_o;
  float2* stats = reinterpret_cast<float2*>(smem + L.stats);
  int* k_table = reinterpret_cast<int*>(smem + L.tables);
  int* v_table = k_table + kBoxTokens;
  int* q_table = v_table + kBoxTokens;
  int* do_table = q_table + P.geo.halo_rows;
  int* lse_table = do_table + P.geo.halo_rows;
  int* token_table = lse_table + P.geo.halo_rows;
  box_row_table(P.k, p, P.geo, s, k_table);
  box_row_table(P.v, p, P.geo, s, v_table);
  halo_row_table(P.q, p, s, q_table);
  halo_row_table(P.d_o, p, s, do_table);
  halo_row_table(P.lse, p, s, lse_table);
  halo_token_table(p, s, token_table);
  if constexpr (Streamed) {
    // Tile rows that no slab of this box loads stay finite: the masked padding of a walk may
    // point at them (slab_walk).
    for (int i = threadIdx.x; i < (L.coords - L.q) / 8; i += kWarps * 32)
      reinterpret_cast<uint2*>(smem + L.q)[i] = make_uint2(0, 0);
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const WarpBox w = warp_box(P.geo, p, s, warp, Side::queries_of_keys);
  const int table_rows = Streamed ? P.geo.slab_table_rows : P.geo.walk_rows;
  uint32_t* coords = reinterpret_cast<uint32_t*>(smem + L.coords) + warp * table_rows;
  uint32_t* offsets = reinterpret_cast<uint32_t*>(smem + L.offsets) + warp * table_rows;
  const int slab_planes = Streamed ? P.geo.slab_planes : s.halo_side[0];
  const int slabs = Streamed ? slab_count(s, slab_planes) : 1;
  uint32_t* masks = reinterpret_cast<uint32_t*>(smem + L.masks + warp * L.warp_masks);
  int chunks = 0;
  if constexpr (Streamed) {
    if (!w.empty) build_slab_table<D>(w, s, p.rank, slab_planes, table_rows, coords, offsets);
    build_slab_walk_masks(w, s, slab_planes, coords, row_windows(P.geo, p, s, w, Side::queries_of_keys), masks);
  } else {
    chunks = w.empty ? 0 : build_walk_table<D>(w, s, p.rank, slab_planes, coords, offsets);
    build_walk_masks(w, s, slab_planes, coords, row_windows(P.geo, p, s, w, Side::queries_of_keys), masks);
  }
  int dk_off[2], dv_off[2];
  for_lane_rows(P.geo, w, p.rank, lane, [&](int r, bool valid, const int* ig) {
    dk_off[r] = valid ? static_cast<int>(token_offset(P.dk, p, s, ig)) : -1;
    dv_off[r] = valid ? static_cast<int>(token_offset(P.dv, p, s, ig)) : -1;
  });
  __syncthreads();

  const int group_heads = p.heads_q / p.heads_kv;
  const int64_t tokens = p.tokens();
  const float scale_log2 = P.scale_log2;
  const int t = lane % 4;
  const SliceRange range = slice_range(P.geo.slices_per_cta, p.batch * p.heads_kv);
  for (int slice = range.first; slice < range.last; ++slice) {
    const int b = slice / p.heads_kv, hk = slice % p.heads_kv;
    uint32_t kf[D / 16][4], vf[D / 16][4];
    constexpr bool kv_registers = KvRegisters;
    if constexpr (kv_registers) {
      // In flight while the first slab loads.
      if (!w.empty) {
        load_a_global<T, D>(kf, slice_base(P.k, b, hk), k_table + warp * kWarpTokens);
        load_a_global<T, D>(vf, slice_base(P.v, b, hk), v_table + warp * kWarpTokens);
      }
    } else {
      load_rows<T, D>(slice_base(P.k, b, hk), k_table, kBoxTokens, k_tile);
      load_rows<T, D>(slice_base(P.v, b, hk), v_table, kBoxTokens, v_tile);
    }
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) dk[i][j] = dv[i][j] = 0.f;
    for (int hq = hk * group_heads; hq < (hk + 1) * group_heads; ++hq) {
      Segment seg;
      for (int k = 0; k < slabs; ++k) {
        const SlabRows rows = slab_rows(s, slab_planes, k);
        load_rows<T, D, false>(slice_base(P.q, b, hq), q_table + rows.first, rows.count, q_tile);
        load_rows<T, D, false>(slice_base(P.d_o, b, hq), do_table + rows.first, rows.count, do_tile);
        cp_async_commit();
        const float* lse = slice_base(P.lse, b, hq);
        for (int r = threadIdx.x; r < rows.count; r += kWarps * 32) {
          stats[r] = make_float2(lse[lse_table[rows.first + r]] * 1.4426950408889634f,
                                 P.delta[(b * tokens + token_table[rows.first + r]) * p.heads_q + hq]);
        }
        cp_async_wait<0>();
        __syncthreads();
        const SlabWalk sw = Streamed ? slab_walk(w, s, slab_planes, k) : SlabWalk{seg.chunk * kChunk, 0, 0, chunks};
        const int n = w.empty ? 0 : sw.chunks;
        if (n > 0) {
          const uint32_t* seg_offsets = offsets + sw.first;
          if constexpr (!kv_registers) {
            load_a<D>(kf, k_tile, warp * kWarpTokens);
            load_a<D>(vf, v_tile, warp * kWarpTokens);
          }
          walk_chunks(masks + seg.word * 32, n, [&](int c, uint32_t mask) {
            float st[2][4] = {}, dpt[2][4] = {};
            const uint32_t off_nt = lane_nt(seg_offsets, c);
            mma_abt<T, D>(st, kf, q_tile, off_nt);
            mma_abt<T, D>(dpt, vf, do_tile, off_nt);
            float pt[2][4];
#pragma unroll
            for (int nb = 0; nb < 2; ++nb) {
              // The tile rows of the lane's two columns 2t, 2t + 1 and their (LSE, delta).
              const uint2 e = *reinterpret_cast<const uint2*>(seg_offsets + c * kChunk + nb * 8 + 2 * t);
              const float2 st2[2] = {stats[walk_row<D>(e.x)], stats[walk_row<D>(e.y)]};
#pragma unroll
              for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                  const float pr = mask_bit(mask, nb, r, j)
                                       ? fast_exp2(fmaf(st[nb][2 * r + j], scale_log2, -st2[j].x))
                                       : 0.f;
                  pt[nb][2 * r + j] = pr;
                  st[nb][2 * r + j] = pr * (dpt[nb][2 * r + j] - st2[j].y);
                }
            }
            const uint32_t off_t = lane_t(seg_offsets, c);
            uint32_t a[4];
            pack_a<T>(a, pt);
            mma_pb<T, D>(dv, a, do_tile, off_t);
            pack_a<T>(a, st);
            mma_pb<T, D>(dk, a, q_tile, off_t);
          });
        }
        seg.advance(n);
        __syncthreads();  // the next loads overwrite the tiles
      }
    }
    if (!w.empty) {
      T* out_k[2];
      T* out_v[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        out_k[r] = dk_off[r] >= 0 ? slice_base(P.dk, b, hk) + dk_off[r] : nullptr;
        out_v[r] = dv_off[r] >= 0 ? slice_base(P.dv, b, hk) + dv_off[r] : nullptr;
      }
      store_rows<T, D>(out_k, dk, P.scale, P.scale);
      store_rows<T, D>(out_v, dv, 1.f, 1.f);
    }
  }
}

}  // namespace gna::halo
