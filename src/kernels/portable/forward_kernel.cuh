// Portable fused forward (mma.sync, sm_80+): one CTA of 4 warps per (multi-dimensional Q tile of
// up to 64 tokens, batch, head, dilation group); two CTAs share an SM so that one computes while
// the other waits at its barriers. It visits only the box of KV tiles (64 tokens
// each) that its queries need, skips empty pairs, runs fully dense pairs without mask code and
// masks partial ones per element, then the additional KV tokens in the same online softmax.
// K/V tiles are double-buffered with cp.async; each warp owns 16 query rows.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "gna/core/tiling.hpp"
#include "kernels/common/element.cuh"
#include "kernels/common/token_tensor.cuh"
#include "kernels/portable/mma.cuh"
#include "kernels/portable/tile_rows.cuh"

namespace gna::portable {

constexpr int kForwardRowsQ = 64;
constexpr int kForwardRowsKV = 64;
constexpr int kForwardWarps = kForwardRowsQ / 16;

template <typename T>
struct ForwardParams {
  Problem p;
  int tile_q[kMaxRank];
  int tile_kv[kMaxRank];
  int q_tiles[kMaxRank];  // Q tiles along each axis in the longest dilation group
  int q_volume;           // tokens of a Q tile (<= kForwardRowsQ)
  float scale_log2;       // softmax scale * log2(e)
  cuda::TokenTensor<const T> q, k, v, add_k, add_v;
  cuda::TokenTensor<T> o;
  cuda::TokenTensor<float> lse;
  bool write_lse;
};

template <int D, int DV>
struct ForwardSmem {
  using QTile = SmemTile<kForwardRowsQ, D>;
  using KTile = SmemTile<kForwardRowsKV, D>;
  using VTile = SmemTile<kForwardRowsKV, DV>;
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + QTile::kBytes;
  static constexpr int kV = kK + 2 * KTile::kBytes;
  static constexpr int kQRows = kV + 2 * VTile::kBytes;
  static constexpr int kKVRows = kQRows + 4 * kForwardRowsQ;
  static constexpr int kKDelta = kKVRows + 4 * kForwardRowsKV;
  static constexpr int kVDelta = kKDelta + 8 * kForwardRowsKV;
  static constexpr int kBytes = kVDelta + 8 * kForwardRowsKV;
};

// The KV tiles one Q tile visits: the per-axis box, then the additional-KV tiles.
struct KvWalk {
  Range box[kMaxRank];
  int spatial = 0;     // tiles in the box
  int total = 0;       // + additional tiles
  int additional = 0;  // additional KV tokens

  __device__ __forceinline__ void tile_coordinates(int i, int rank, int* kt) const {
    GNA_FOR_AXES_REVERSE(a, rank) {
      const int size = box[a].size();
      kt[a] = box[a].begin + i % size;
      i /= size;
    }
  }
};

template <typename T, int D, int DV>
struct ForwardCta {
  using Smem = ForwardSmem<D, DV>;
  using QTile = typename Smem::QTile;
  using KTile = typename Smem::KTile;
  using VTile = typename Smem::VTile;
  static constexpr int BN = kForwardRowsKV;

  const ForwardParams<T>& P;
  char* smem;
  GroupGeometry geo;
  int qt[kMaxRank];       // Q tile coordinates
  int q_base[kMaxRank];   // first group coordinate of the Q tile per axis
  int b, h, hk;
  KvWalk walk;

  __device__ ForwardCta(const ForwardParams<T>& params, char* s) : P(params), smem(s) {}

  __device__ uint32_t* q_rows() const { return reinterpret_cast<uint32_t*>(smem + Smem::kQRows); }
  __device__ uint32_t* kv_rows() const { return reinterpret_cast<uint32_t*>(smem + Smem::kKVRows); }
  // Element offset of each KV tile row from the tile's first token (K and V strides).
  __device__ int64_t* k_delta() const { return reinterpret_cast<int64_t*>(smem + Smem::kKDelta); }
  __device__ int64_t* v_delta() const { return reinterpret_cast<int64_t*>(smem + Smem::kVDelta); }

  __device__ void build_kv_deltas() {
    const Problem& p = P.p;
    for (int r = threadIdx.x; r < BN; r += blockDim.x) {
      const uint32_t packed = kv_rows()[r];
      int64_t dk = 0, dv = 0;
      if (!(packed & kPaddingRow)) {
        GNA_FOR_AXES(a, p.rank) {
          const int64_t step = int64_t(row_offset(packed, a)) * p.axes[a].dilation;
          dk += step * P.k.stride_axis[a];
          dv += step * P.v.stride_axis[a];
        }
      }
      k_delta()[r] = dk;
      v_delta()[r] = dv;
    }
  }

  __device__ PairClass classify(int i, int* kt) const {
    const Problem& p = P.p;
    if (i >= walk.spatial) {
      const int first = (i - walk.spatial) * BN;
      return first + BN <= walk.additional ? PairClass::full : PairClass::partial;
    }
    walk.tile_coordinates(i, p.rank, kt);
    PairClass c = PairClass::full;
    GNA_FOR_AXES(a, p.rank)
      c = combine(c, classify_axis_tiles(p.axes[a], geo.n[a], qt[a], kt[a], P.tile_q[a],
                                         P.tile_kv[a]));
    return c;
  }

  // First tile index >= i that is not empty (walk.total if none).
  __device__ int next_tile(int i, PairClass* cls) const {
    int kt[kMaxRank];
    for (; i < walk.total; ++i) {
      *cls = classify(i, kt);
      if (*cls != PairClass::empty) break;
    }
    return i;
  }

  __device__ void load_q() {
    const Problem& p = P.p;
    constexpr int kChunks = D / 8;
    const uint32_t base = smem_address(smem + Smem::kQ);
    for (int c = threadIdx.x; c < kForwardRowsQ * kChunks; c += blockDim.x) {
      const int row = c / kChunks, ch = c % kChunks;
      int ig[kMaxRank], x[kMaxRank];
      const bool valid = geo.coordinates(q_rows()[row], q_base, ig);
      const T* src = P.q.data;
      if (valid) {
        GNA_FOR_AXES(a, p.rank) x[a] = coordinate_of(p.axes[a], geo.group[a], ig[a]);
        src = P.q.at(b, x, p.rank, h) + ch * 8;
      }
      cp_async_16(base + QTile::offset(row, ch * 8), src, valid);
    }
  }

  // Loads K and V of tile i (of class cls) into stage s.
  __device__ void load_kv(int i, int s, PairClass cls) {
    const bool full = cls == PairClass::full;
    const Problem& p = P.p;
    const uint32_t k_base = smem_address(smem + Smem::kK + s * KTile::kBytes);
    const uint32_t v_base = smem_address(smem + Smem::kV + s * VTile::kBytes);
    constexpr int kChunksK = D / 8, kChunksV = DV / 8;
    if (i >= walk.spatial) {
      const int add_first = (i - walk.spatial) * BN;
      for (int c = threadIdx.x; c < BN * (kChunksK + kChunksV); c += blockDim.x) {
        const bool is_k = c < BN * kChunksK;
        const int cc = is_k ? c : c - BN * kChunksK;
        const int chunks = is_k ? kChunksK : kChunksV;
        const int row = cc / chunks, ch = cc % chunks;
        const int j = add_first + row;
        const bool valid = j < walk.additional;
        const T* src = is_k ? P.k.data : P.v.data;
        if (valid) src = (is_k ? P.add_k : P.add_v).at(b, &j, 1, hk) + ch * 8;
        const uint32_t dst = is_k ? k_base + KTile::offset(row, ch * 8)
                                  : v_base + VTile::offset(row, ch * 8);
        cp_async_16(dst, src, valid);
      }
      return;
    }
    // Spatial tile: first token's offset once, then per-row deltas from the shared table.
    int kt[kMaxRank], kt_base[kMaxRank];
    walk.tile_coordinates(i, p.rank, kt);
    int64_t k_first = b * P.k.stride_batch + hk * P.k.stride_head;
    int64_t v_first = b * P.v.stride_batch + hk * P.v.stride_head;
    GNA_FOR_AXES(a, p.rank) {
      kt_base[a] = kt[a] * P.tile_kv[a];
      const int64_t x = coordinate_of(p.axes[a], geo.group[a], kt_base[a]);
      k_first += x * P.k.stride_axis[a];
      v_first += x * P.v.stride_axis[a];
    }
    load_rows<KTile, kChunksK>(P.k.data + k_first, k_delta(), k_base, full, kt_base);
    load_rows<VTile, kChunksV>(P.v.data + v_first, v_delta(), v_base, full, kt_base);
  }

  // One K or V tile: each thread copies fixed 16-byte chunks of fixed rows; rows of a full
  // pair are all real keys, so only partial pairs check their rows against the group.
  template <typename Tile, int CHUNKS>
  __device__ __forceinline__ void load_rows(const T* first, const int64_t* delta, uint32_t base,
                                            bool full, const int* kt_base) {
    constexpr int kThreads = kForwardWarps * 32;
#pragma unroll
    for (int it = 0; it < BN * CHUNKS / kThreads; ++it) {
      const int c = threadIdx.x + it * kThreads;
      const int row = c / CHUNKS, ch = c % CHUNKS;
      bool valid = true;
      if (!full) {
        int jg[kMaxRank];
        valid = geo.coordinates(kv_rows()[row], kt_base, jg);
      }
      const T* src = valid ? first + delta[row] + ch * 8 : P.k.data;
      cp_async_16(base + Tile::offset(row, ch * 8), src, valid);
    }
  }
};

// Per-thread state of a warp's 16 query rows (rows g and g + 8 of the warp's slice).
template <typename T, int D, int DV>
struct ForwardWarp {
  static constexpr int BN = kForwardRowsKV;
  static constexpr int kNB = BN / 8;  // n-blocks of S
  uint32_t qf[D / 16][4];
  float acc[DV / 8][4];
  float m[2], l[2];
  Range win[2][kMaxRank];  // key windows of the two rows (partial tiles)

  __device__ void init() {
#pragma unroll
    for (int i = 0; i < DV / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
  }

  // MASK: 0 none, 1 spatial per-element mask, 2 additional-token count mask.
  template <int MASK>
  __device__ __forceinline__ void tile(const ForwardCta<T, D, DV>& cta, uint32_t k_smem,
                                       uint32_t v_smem, float scale_log2, const int* kt_base,
                                       int add_valid) {
    using KTile = SmemTile<BN, D>;
    using VTile = SmemTile<BN, DV>;
    const int lane = threadIdx.x % 32;
    const typename KTile::Cursor kc = KTile::cursor((lane % 8) + (lane / 16) * 8, (lane / 8) % 2);
    const typename VTile::Cursor vc = VTile::cursor((lane % 8) + ((lane / 8) % 2) * 8, lane / 16);
    float s[kNB][4];
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
    // S = Q K^T
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int np = 0; np < kNB / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, k_smem + kc.at(np, ks));
        Mma<T>::run(s[2 * np], qf[ks], b[0], b[1]);
        Mma<T>::run(s[2 * np + 1], qf[ks], b[2], b[3]);
      }
    }
    const int t = lane % 4;
    if (MASK == 1) {
      const Problem& p = cta.P.p;
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = nb * 8 + 2 * t + e;
          int jg[kMaxRank];
          const bool key_valid = cta.geo.coordinates(cta.kv_rows()[col], kt_base, jg);
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            bool attend = key_valid;
            GNA_FOR_AXES(a, p.rank) attend = attend && win[r][a].contains(jg[a]);
            if (!attend) s[nb][2 * r + e] = -INFINITY;
          }
        }
      }
    } else if (MASK == 2) {
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (nb * 8 + 2 * t + e >= add_valid) s[nb][e] = s[nb][2 + e] = -INFINITY;
    }
    // Online softmax in the log2 domain.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) mx = fmaxf(mx, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
      mx = quad_max(mx) * scale_log2;
      const float m_new = fmaxf(m[r], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float correction = fast_exp2(m[r] - m_use);
      m[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
        s[nb][2 * r] = fast_exp2(s[nb][2 * r] * scale_log2 - m_use);
        s[nb][2 * r + 1] = fast_exp2(s[nb][2 * r + 1] * scale_log2 - m_use);
        sum += s[nb][2 * r] + s[nb][2 * r + 1];
      }
      l[r] = l[r] * correction + sum;
#pragma unroll
      for (int i = 0; i < DV / 8; ++i) {
        acc[i][2 * r] *= correction;
        acc[i][2 * r + 1] *= correction;
      }
    }
    // O += P V
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[4];
      a[0] = Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]);
      a[1] = Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]);
      a[2] = Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < DV / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_smem + vc.at(kk, dp));
        Mma<T>::run(acc[2 * dp], a, b[0], b[1]);
        Mma<T>::run(acc[2 * dp + 1], a, b[2], b[3]);
      }
    }
  }
};

template <typename T, int D, int DV>
__global__ void __launch_bounds__(kForwardWarps * 32, 2)
    fused_forward_kernel(const __grid_constant__ ForwardParams<T> P) {
  extern __shared__ __align__(128) char smem[];
  using Cta = ForwardCta<T, D, DV>;
  using Smem = typename Cta::Smem;
  const Problem& p = P.p;
  Cta cta(P, smem);

  // Which slice and Q tile.
  cta.b = blockIdx.y / p.heads_q;
  cta.h = blockIdx.y % p.heads_q;
  cta.hk = cta.h / (p.heads_q / p.heads_kv);
  cta.geo.rank = p.rank;
  int group = blockIdx.z, tile = blockIdx.x;
  GNA_FOR_AXES_REVERSE(a, p.rank) {
    cta.geo.group[a] = group % p.axes[a].dilation;
    group /= p.axes[a].dilation;
    cta.geo.n[a] = group_length(p.axes[a], cta.geo.group[a]);
    cta.qt[a] = tile % P.q_tiles[a];
    tile /= P.q_tiles[a];
    if (cta.qt[a] >= tiles_along(cta.geo.n[a], P.tile_q[a])) return;  // shorter group
    cta.q_base[a] = cta.qt[a] * P.tile_q[a];
  }
  // The KV tiles this Q tile visits.
  cta.walk.spatial = 1;
  GNA_FOR_AXES(a, p.rank) {
    cta.walk.box[a] = kv_tiles_for_q_tile(p.axes[a], cta.geo.n[a], cta.qt[a], P.tile_q[a],
                                          P.tile_kv[a]);
    cta.walk.spatial *= cta.walk.box[a].size();
  }
  cta.walk.additional = p.additional_kv;
  cta.walk.total = cta.walk.spatial + (p.additional_kv + Cta::BN - 1) / Cta::BN;

  int kv_volume = 1;
  for (int a = 0; a < p.rank; ++a) kv_volume *= P.tile_kv[a];
  for (int r = threadIdx.x; r < kForwardRowsQ; r += blockDim.x)
    cta.q_rows()[r] = pack_row(P.tile_q, p.rank, r, P.q_volume);
  for (int r = threadIdx.x; r < kForwardRowsKV; r += blockDim.x)
    cta.kv_rows()[r] = pack_row(P.tile_kv, p.rank, r, kv_volume);
  __syncthreads();
  cta.build_kv_deltas();
  __syncthreads();

  PairClass cls = PairClass::empty, next_cls = PairClass::empty;
  int i = cta.next_tile(0, &cls);
  cta.load_q();
  if (i < cta.walk.total) cta.load_kv(i, 0, cls);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  ForwardWarp<T, D, DV> w;
  w.init();
  // Key windows of this thread's two rows (for partial tiles).
  const int row0 = warp * 16 + lane / 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int ig[kMaxRank];
    const uint32_t packed = cta.q_rows()[row0 + 8 * r];
    cta.geo.coordinates(packed, cta.q_base, ig);
    GNA_FOR_AXES(a, p.rank) {
      // Padding rows get some window; their results are never stored.
      const int q = (packed & kPaddingRow) ? 0 : min_i(ig[a], cta.geo.n[a] - 1);
      w.win[r][a] = key_window(p.axes[a], cta.geo.n[a], q);
    }
  }

  int stage = 0;
  bool q_loaded = false;
  while (i < cta.walk.total) {
    const int next = cta.next_tile(i + 1, &next_cls);
    if (next < cta.walk.total) cta.load_kv(next, stage ^ 1, next_cls);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (!q_loaded) {
      using QTile = typename Smem::QTile;
      const uint32_t q_smem = smem_address(smem + Smem::kQ);
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks)
        ldmatrix_x4(w.qf[ks], q_smem + QTile::offset(warp * 16 + lane % 16, ks * 16 + (lane / 16) * 8));
      q_loaded = true;
    }
    int kt[kMaxRank], kt_base[kMaxRank];

    const uint32_t k_smem = smem_address(smem + Smem::kK + stage * Smem::KTile::kBytes);
    const uint32_t v_smem = smem_address(smem + Smem::kV + stage * Smem::VTile::kBytes);
    if (i >= cta.walk.spatial) {
      const int valid = cta.walk.additional - (i - cta.walk.spatial) * Cta::BN;
      if (cls == PairClass::full)
        w.template tile<0>(cta, k_smem, v_smem, P.scale_log2, kt_base, valid);
      else
        w.template tile<2>(cta, k_smem, v_smem, P.scale_log2, kt_base, valid);
    } else if (cls == PairClass::full) {
      w.template tile<0>(cta, k_smem, v_smem, P.scale_log2, kt_base, 0);
    } else {
      cta.walk.tile_coordinates(i, p.rank, kt);
      GNA_FOR_AXES(a, p.rank) kt_base[a] = kt[a] * P.tile_kv[a];
      w.template tile<1>(cta, k_smem, v_smem, P.scale_log2, kt_base, 0);
    }
    __syncthreads();  // stage is overwritten by the load issued in the next iteration
    stage ^= 1;
    i = next;
    cls = next_cls;
  }
  cp_async_wait<0>();

  // Epilogue: O = acc / l, LSE = (m + log2 l) * ln 2.
  const int t = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int ig[kMaxRank], x[kMaxRank];
    const bool valid = cta.geo.coordinates(cta.q_rows()[row0 + 8 * r], cta.q_base, ig);
    const float l = quad_sum(w.l[r]);
    if (!valid) continue;
    GNA_FOR_AXES(a, p.rank) x[a] = coordinate_of(p.axes[a], cta.geo.group[a], ig[a]);
    const float inv = 1.f / l;
    T* out = P.o.at(cta.b, x, p.rank, cta.h);
#pragma unroll
    for (int i2 = 0; i2 < DV / 8; ++i2) {
      typename std::conditional<std::is_same<T, __half>::value, __half2, __nv_bfloat162>::type v2;
      v2.x = cuda::from_float<T>(w.acc[i2][2 * r] * inv);
      v2.y = cuda::from_float<T>(w.acc[i2][2 * r + 1] * inv);
      *reinterpret_cast<decltype(v2)*>(out + i2 * 8 + 2 * t) = v2;
    }
    if (P.write_lse && t == 0)
      *P.lse.at(cta.b, x, p.rank, cta.h) = (w.m[r] + log2f(l)) * 0.69314718055994531f;
  }
}

}  // namespace gna::portable
