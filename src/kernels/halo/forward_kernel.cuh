// Halo forward: one CTA of 4 warps per (box of 64 queries, dilation group) and a run of
// (batch item, head) slices. Once per CTA it works out the geometry of its box: the K / V halo
// (the union of its queries' windows), each warp's walk table over its 16-query patch's sub-box,
// the lanes' windows and row tables of element offsets. Per slice it loads the queries and the
// halo with one round of cp.async and each warp walks only the keys of its sub-box, 16 keys per
// MMA chunk gathered by per-lane ldmatrix rows, with the rule's exact mask and an online softmax
// every kStepChunks chunks. Several CTAs per SM keep the loads of some in flight while others
// compute.
#pragma once

#include <cmath>

#include "kernels/halo/cta.cuh"

namespace gna::halo {

constexpr int kStepChunks = 4;  // chunks per online-softmax step (64 keys, 32 score registers)
static_assert(kStepChunks == kMaskChunks, "a step takes one mask word");
// CTAs per SM the registers must allow (many small CTAs keep loads in flight while others
// compute): 96 registers at head dim 32, 168 at 64.
constexpr int forward_blocks_per_sm(int d) { return d == 32 ? 5 : 3; }
// The running maximum before any attended key: the lowest finite float, at or below every finite
// score whatever the scale, and finite, so that the correction exp2(m - m_new) needs no guard (0
// once a key is attended, 1 while none is).
constexpr float kNoMax = -3.40282347e38f;

// Layout of the forward's shared memory (bytes; forward_shared_bytes in plan.cpp agrees).
template <int D>
struct ForwardLayout {
  int v, k, coords, offsets, q_table, k_table, v_table, masks, bytes;
  __device__ __host__ explicit ForwardLayout(const Geometry& g) {
    v = kBoxTokens * D * 2;  // V before K: both tiles' ldmatrix addresses then take their base as an operand
    k = v + g.tile_rows * D * 2;
    coords = k + g.tile_rows * D * 2;
    offsets = coords + kWarps * g.walk_rows * 4;
    q_table = offsets + kWarps * g.walk_rows * 4;
    k_table = q_table + kBoxTokens * 4;
    v_table = k_table + g.halo_rows * 4;
    masks = v_table + g.halo_rows * 4;
    bytes = masks + kWarps * walk_mask_bytes(g.walk_rows, g.segments);
  }
};

// One online-softmax step of a warp's walk over chunks [c0, c0 + N), all inside the walk (mask:
// their mask bytes, chunk c0 + c in byte c): S for all N chunks, the rule's mask, one row max and
// rescale, P V. First: the walk's first step (acc and l are zero, nothing to rescale).
template <typename T, int D, int N, bool First>
__device__ __forceinline__ void forward_step(const uint32_t (&qf)[D / 16][4], uint32_t k_tile, uint32_t v_tile,
                                             const uint32_t* offsets, int c0, uint32_t mask,
                                             float scale_log2, float (&acc)[D / 8][4],
                                             float (&m)[2], float (&l)[2]) {
  float sc[N][2][4];
#pragma unroll
  for (int c = 0; c < N; ++c) {
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) sc[c][nb][0] = sc[c][nb][1] = sc[c][nb][2] = sc[c][nb][3] = 0.f;
    mma_abt<T, D>(sc[c], qf, k_tile, lane_nt(offsets, c0 + c));
  }
#pragma unroll
  for (int c = 0; c < N; ++c)
    for_each_chunk_element([&](int nb, int r, int j) {
      if (!mask_bit(mask >> (8 * c), nb, r, j)) sc[c][nb][2 * r + j] = -INFINITY;
    });
  // Online softmax in the log2 domain.
  float correction[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = fmaxf(sc[0][0][2 * r], sc[0][0][2 * r + 1]);
#pragma unroll
    for (int c = 0; c < N; ++c)
#pragma unroll
      for (int nb = 0; nb < 2; ++nb)
        if (c + nb > 0) mx = fmaxf(mx, fmaxf(sc[c][nb][2 * r], sc[c][nb][2 * r + 1]));
    const float m_new = fmaxf(m[r], quad_max(mx) * scale_log2);
    correction[r] = First ? 0.f : fast_exp2(m[r] - m_new);
    m[r] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < N; ++c)
#pragma unroll
      for (int nb = 0; nb < 2; ++nb)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float& x = sc[c][nb][2 * r + j];
          x = fast_exp2(fmaf(x, scale_log2, -m_new));
          sum = c + nb + j == 0 ? x : sum + x;
        }
    l[r] = First ? sum : l[r] * correction[r] + sum;
  }
  if (!First) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      acc[i][0] *= correction[0];
      acc[i][1] *= correction[0];
      acc[i][2] *= correction[1];
      acc[i][3] *= correction[1];
    }
  }
#pragma unroll
  for (int c = 0; c < N; ++c) {
    uint32_t pa[4];
    pack_a<T>(pa, sc[c]);
    mma_pb<T, D>(acc, pa, v_tile, lane_t(offsets, c0 + c));
  }
}

// The softmax state before any key: O (unnormalized) and l zero, the running max kNoMax.
template <int D>
__device__ __forceinline__ void forward_start(float (&acc)[D / 8][4], float (&m)[2], float (&l)[2]) {
#pragma unroll
  for (int i = 0; i < D / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  m[0] = m[1] = kNoMax;
  l[0] = l[1] = 0.f;
}

// One warp's 16 queries over a walk (chunks >= 1): O (unnormalized, acc) and the softmax
// statistics m, l, in steps of kStepChunks chunks (walk_steps). Fresh: the state is
// forward_start's (the first step then skips the rescale); false: the walk continues the state
// of walks over earlier slabs (with the state at forward_start it gives the same result: the
// first correction is exp2(kNoMax - m) = 0, or 1 while no key is attended, with acc and l zero).
template <typename T, int D, bool Fresh>
__device__ __forceinline__ void forward_walk(const uint32_t (&qf)[D / 16][4], uint32_t k_tile, uint32_t v_tile,
                                             const uint32_t* masks, const uint32_t* offsets, int chunks,
                                             float scale_log2, float (&acc)[D / 8][4],
                                             float (&m)[2], float (&l)[2]) {
  walk_steps<Fresh>(masks, chunks, [&](auto n, auto first, int c0, uint32_t mask) {
    forward_step<T, D, decltype(n)::value, decltype(first)::value>(qf, k_tile, v_tile, offsets, c0, mask,
                                                                    scale_log2, acc, m, l);
  });
}

// Streamed: the halo comes in slabs (plan.hpp), each loaded after the walks of the last.
template <typename T, int D, bool Streamed>
__global__ void __launch_bounds__(kWarps * 32, forward_blocks_per_sm(D))
    halo_forward_kernel(const __grid_constant__ ForwardParams<T> P) {
  extern __shared__ __align__(128) char smem[];
  const Problem& p = P.p;
  Slice s;
  if (!decode_slice(P.geo, p, Side::keys_of_queries, s)) return;
  const ForwardLayout<D> L(P.geo);
  const uint32_t q_tile = smem_address(smem);
  const uint32_t k_tile = q_tile + L.k, v_tile = q_tile + L.v;
  int* q_table = reinterpret_cast<int*>(smem + L.q_table);
  int* k_table = reinterpret_cast<int*>(smem + L.k_table);
  int* v_table = reinterpret_cast<int*>(smem + L.v_table);
  box_row_table(P.q, p, P.geo, s, q_table);
  halo_row_table(P.k, p, s, k_table);
  halo_row_table(P.v, p, s, v_table);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const WarpBox w = warp_box(P.geo, p, s, warp, Side::keys_of_queries);
  uint32_t* coords = reinterpret_cast<uint32_t*>(smem + L.coords) + warp * P.geo.walk_rows;
  uint32_t* offsets = reinterpret_cast<uint32_t*>(smem + L.offsets) + warp * P.geo.walk_rows;
  const int slab_planes = Streamed ? P.geo.slab_planes : s.halo_side[0];
  const int chunks = w.empty ? 0 : build_walk_table<D>(w, s, p.rank, slab_planes, coords, offsets);
  uint32_t* masks = reinterpret_cast<uint32_t*>(smem + L.masks + warp * walk_mask_bytes(P.geo.walk_rows, P.geo.segments));
  build_walk_masks(w, s, slab_planes, coords, row_windows(P.geo, p, s, w, Side::keys_of_queries), masks);
  // Where the lane's rows go in a slice of O and of LSE (-1: outside the group).
  int o_off[2], lse_off[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int ig[kMaxRank];
    const bool valid = !w.empty && patch_token(P.geo, w, p.rank, lane / 4 + 8 * r, ig);
    o_off[r] = valid ? static_cast<int>(token_offset(P.o, p, s, ig)) : -1;
    lse_off[r] = valid && P.write_lse && lane % 4 == 0 ? static_cast<int>(token_offset(P.lse, p, s, ig)) : -1;
  }
  __syncthreads();

  const int group_heads = p.heads_q / p.heads_kv;
  for (SliceCursor c(blockIdx.y * P.geo.slices_per_cta, P.geo.slices_per_cta, p.batch * p.heads_q,
                     p.heads_q, group_heads);
       c.more(); c.next(p.heads_q, group_heads)) {
    const int b = c.batch, h = c.head, hk = c.kv_head;
    load_rows<T, D>(slice_base(P.q, b, h), q_table, kBoxTokens, q_tile);
    float acc[D / 8][4], m[2], l[2];
    uint32_t qf[D / 16][4];
    if constexpr (!Streamed) {
      load_kv_rows<T, D>(P.k, P.v, b, hk, k_table, v_table, 0, s.halo_count, k_tile, v_tile);
      if (!w.empty) {
        load_a<D>(qf, q_tile, warp * kWarpTokens);
        forward_start<D>(acc, m, l);
        forward_walk<T, D, true>(qf, k_tile, v_tile, masks, offsets, chunks, P.scale_log2, acc, m, l);
      }
    } else {
      forward_start<D>(acc, m, l);
      Segment seg;
      for (int k = 0; k < slab_count(s, slab_planes); ++k) {
        if (k > 0) __syncthreads();  // the walks of the last slab are done with the tiles
        const SlabRows rows = slab_rows(s, slab_planes, k);
        load_kv_rows<T, D>(P.k, P.v, b, hk, k_table, v_table, rows.first, rows.count, k_tile,
                           v_tile);
        if (w.empty) continue;
        if (k == 0) load_a<D>(qf, q_tile, warp * kWarpTokens);
        const int n = segment_chunks(w, s, slab_planes, k);
        if (n > 0)
          forward_walk<T, D, false>(qf, k_tile, v_tile, masks + seg.word * 32, offsets + seg.chunk * kChunk, n,
                                    P.scale_log2, acc, m, l);
        seg.advance(n);
      }
    }
    if (!w.empty) {
      // O = acc / l, LSE = (m + log2 l) * ln 2 (natural log, as every backend writes it).
      T* out[2];
      float inv[2];
      float* lse = slice_base(P.lse, b, h);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float sum = quad_sum(l[r]);
        inv[r] = __fdividef(1.f, sum);  // MUFU.RCP: the IEEE division took ten instructions
        out[r] = o_off[r] >= 0 ? slice_base(P.o, b, h) + o_off[r] : nullptr;
        // MUFU.LG2 (sum >= 1: the largest term is 1): log2f took 35 instructions per row.
        if (lse_off[r] >= 0) lse[lse_off[r]] = (m[r] + __log2f(sum)) * 0.69314718055994531f;
      }
      store_rows<T, D>(out, acc, inv[0], inv[1]);
    }
    __syncthreads();  // the next slice's loads overwrite the tiles
  }
}

}  // namespace gna::halo
