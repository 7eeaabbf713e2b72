// Portable fused backward (mma.sync, sm_80+), KV-stationary: one CTA of 8 warps per (KV tile of
// up to 128 tokens, batch, KV head, dilation group) keeps K and V in shared memory and walks the
// Q tiles (64 tokens) of every query head of its GQA group whose queries attend it: per axis a
// run of the core's q_tile_run, on the grid of the Q tile or placed at the first query of the KV
// tile's union query window (BackwardParams::q_placement, a launch parameter; rule.md section
// 7.2). Empty pairs are skipped, full pairs run unmasked, partial pairs are masked by per-key-row
// bitmasks of each thread's queries (gna/core/column_mask.hpp with the Q tile's shape; a warp
// whose key rows keep every query of its columns runs the pair as full; only the axes on which
// the pair is partial are masked), and a partial pair whose Q rows are all real queries loads
// them as a full pair does. Per pair, in three phases split by barriers:
//   1. warp (32 keys x 32 queries): S^T = K Q^T, dP^T = V dO^T, P^T = exp(S^T - LSE),
//      dS^T = P^T (dP^T - delta); P^T and dS^T to shared memory;
//   2. warp (32 keys x half the columns): dV += P^T dO, dK += dS^T Q (registers);
//   3. warp (32 queries x a quarter of the columns): dQ += dS K over all 128 keys (fp32
//      atomics into a buffer).
// 32-row warp tiles let each ldmatrix'd fragment feed two 16-row blocks (0.5 ldmatrix per
// mma against 0.63 with 16-key warps holding all columns); 128 keys per CTA halve the Q / dO
// loads and the dQ additions per FLOP against 64. One CTA per SM (186 KB of shared memory at
// head dim 128).
// The variant with 64-key tiles (RK = 64: 4 warps) and one Q / dO stage fits 99 KB of shared
// memory; dispatch also runs it where the 128-key tiles leave partial pairs (portable.hpp).
// CTAs of additional KV tiles walk every grid Q tile of every dilation group.
// Zero-filled rows (padding, or outside the group: Q, dO, K or V zero, LSE and delta zero)
// contribute nothing and are never stored, so only pairs that are partial by the rule need
// masks.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "gna/core/column_mask.hpp"
#include "gna/core/tiling.hpp"
#include "kernels/common/element.cuh"
#include "kernels/common/token_tensor.cuh"
#include "kernels/portable/mma.cuh"
#include "kernels/portable/path_counts.hpp"
#include "kernels/portable/tile_plan.hpp"
#include "kernels/portable/tile_rows.cuh"

namespace gna::portable {

// One warp per 16 keys: 8 warps for the 128-key KV tiles, 4 for the 64-key ones of the variant
// that fits 99 KB of shared memory (warps pair up over 32-key blocks, see above).
constexpr int backward_warps(int rows_kv) { return rows_kv / 16; }
// A spatial CTA whose box spans at most this many Q tiles along every axis tabulates, per axis
// and offset in the box, the axis's pair class (bits 0-1) and whether the Q tile's rows along it
// are all inside the group (bit 2); an item's class and rows-valid flag combine its axes' entries.
constexpr int kBackwardAxisTable = 1024;
constexpr uint8_t kAxisRowsValid = 4;
// Such a CTA also tabulates, per axis and offset in the box, the Q tile's offsets in Q, dO, LSE
// and the linear token index (an item's are their sums), when the box's sizes add up to at most
// this many entries (32 bytes each).
constexpr int backward_offset_entries(int rows_kv) { return rows_kv * 4; }

template <typename T>
struct BackwardParams {
  Problem p;
  int tile_q[kMaxRank];
  int tile_kv[kMaxRank];
  int kv_tiles[kMaxRank];  // KV tiles along each axis in the longest dilation group
  int kv_tiles_total;      // product: CTAs with blockIdx.x beyond it take additional tiles
  int q_tiles[kMaxRank];   // Q tiles along each axis in the longest dilation group
  int q_volume, kv_volume;
  int groups;
  KvPlacement q_placement;  // where a KV tile's Q tiles start (tiling.hpp, q_tile_run)
  // Whether every Q tile side is a power of two (chosen tiles always; forced ones may not be):
  // partial pairs are then masked by bitmasks (column_mask.hpp), else query by query.
  bool q_bitmask;
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e)
  cuda::TokenTensor<const T> q, k, v, d_o, add_k, add_v;
  cuda::TokenTensor<const float> lse;
  cuda::TokenTensor<T> dk, dv, d_add_k, d_add_v;
  const float* delta;  // [B, tokens, Hq] rowsum(dO * O)
  float* dq_accum;     // [B, tokens, Hq, Dqk] fp32, unscaled
  BackwardPathCounts* path_counts;  // nullptr unless a test counts the paths (path_counts.hpp)
};

// STAGES Q / dO stages: 2 (the next item loads during the current one) or 1 (it loads during
// the dQ phase, which reads neither).
template <int D, int DV, int RK_ = kBackwardRowsKV, int STAGES = 2>
struct BackwardSmem {
  static constexpr int RQ = kBackwardRowsQ, RK = RK_;
  using QTile = SmemTile<RQ, D>;
  using OTile = SmemTile<RQ, DV>;  // dO
  using KTile = SmemTile<RK, D>;
  using VTile = SmemTile<RK, DV>;
  using STile = SmemTile<RK, RQ>;  // P^T and dS^T [key][query]
  static constexpr int kK = 0;
  static constexpr int kV = kK + KTile::kBytes;
  static constexpr int kQ = kV + VTile::kBytes;                 // STAGES stages
  static constexpr int kO = kQ + STAGES * QTile::kBytes;         // STAGES stages
  static constexpr int kS = kO + STAGES * OTile::kBytes;
  static constexpr int kP = kS + STile::kBytes;
  static constexpr int kLse = kP + STile::kBytes;                // STAGES x RQ floats
  static constexpr int kDelta = kLse + STAGES * 4 * RQ;          // STAGES x RQ floats
  static constexpr int kQRows = kDelta + STAGES * 4 * RQ;        // packed row offsets
  static constexpr int kKVRows = kQRows + 4 * RQ;
  static constexpr int kQDelta = kKVRows + 4 * RK;               // byte deltas per Q row
  static constexpr int kODelta = kQDelta + 8 * RQ;
  static constexpr int kLseDelta = kODelta + 8 * RQ;
  static constexpr int kLinDelta = kLseDelta + 8 * RQ;           // linear token delta
  static constexpr int kQWin = kLinDelta + 8 * RQ;               // query window per key row, axis
  static constexpr int kOffsets = kQWin + 8 * kMaxRank * RK;     // per-axis Q tile offsets
  static constexpr int kTable = kOffsets + 32 * backward_offset_entries(RK);  // pair classes
  // The Q tile's axes seen from each quad's queries (column_mask.hpp), read by partial pairs.
  static constexpr int kQColumns = kTable + kMaxRank * kBackwardAxisTable;
  static constexpr int kBytes = kQColumns + 4 * kMaxRank * int(sizeof(AxisColumns));
  static_assert(kQColumns % alignof(AxisColumns) == 0, "column constants alignment");
};

// One pair of the walk: a query head and Q tile (of dilation group geo) against the CTA's KV tile.
struct BackwardItem {
  // Offsets of the Q tile's first row (batch and head included) in Q, dO and LSE, and its linear
  // token index b * tokens + token.
  int64_t q_first, o_first, l_first, lin_first;
  GroupGeometry geo;
  int h;
  int q_base[kMaxRank];
  PairClass cls;
  bool rows_valid;  // every row of the Q tile is a real query (no zero fill, no row checks)
  uint8_t partial_axes;  // the axes (bit a) on which the pair is partial: only they are masked
};

// Walk position i of a CTA by the rule: (dilation group, query head, Q tile of the runs) with the
// Q tile fastest; tile m of the run of axis a starts at query box[a].first + m * tile_q[a]. Not
// inlined: the main loop takes it only for additional KV tiles and boxes too large for the
// table, and a call keeps its divisions out of the loop's code and registers.
template <typename T>
__device__ __noinline__ BackwardItem backward_item_from_rule(const BackwardParams<T>& P,
                                                             const QTileRun* box, int box_count,
                                                             const int* kt, bool additional,
                                                             int b, int hk, int i) {
  const Problem& p = P.p;
  const int heads_per_kv = p.heads_q / p.heads_kv;
  BackwardItem it;
  const int idx = i % box_count;
  const int hi = (i / box_count) % heads_per_kv;
  int group = additional ? i / box_count / heads_per_kv : blockIdx.z;
  it.h = hk * heads_per_kv + hi;
  it.geo.rank = p.rank;
  int rest = idx;
  it.cls = PairClass::full;
  it.rows_valid = P.q_volume == kBackwardRowsQ;
  it.partial_axes = 0;
  GNA_FOR_AXES_REVERSE(a, p.rank) {
    it.geo.group[a] = group % p.axes[a].dilation;
    group /= p.axes[a].dilation;
    it.geo.n[a] = group_length(p.axes[a], it.geo.group[a]);
    const int size = box[a].count;
    const int m = rest % size;
    rest /= size;
    it.q_base[a] = box[a].first + m * P.tile_q[a];
    it.rows_valid = it.rows_valid && it.q_base[a] + P.tile_q[a] <= it.geo.n[a];
    if (it.q_base[a] >= it.geo.n[a]) {
      it.cls = PairClass::empty;
    } else if (!additional) {
      const PairClass c = classify_run_q_tile(p.axes[a], it.geo.n[a], box[a], m, P.tile_q[a],
                                              kt[a], P.tile_kv[a]);
      if (c == PairClass::partial) it.partial_axes |= 1 << a;
      it.cls = combine(it.cls, c);
    }
  }
  it.q_first = b * P.q.stride_batch + it.h * P.q.stride_head;
  it.o_first = b * P.d_o.stride_batch + it.h * P.d_o.stride_head;
  it.l_first = b * P.lse.stride_batch + it.h * P.lse.stride_head;
  int64_t lin = 0;
  GNA_FOR_AXES(a, p.rank) {
    const int64_t x = coordinate_of(p.axes[a], it.geo.group[a], it.q_base[a]);
    it.q_first += x * P.q.stride_axis[a];
    it.o_first += x * P.d_o.stride_axis[a];
    it.l_first += x * P.lse.stride_axis[a];
    lin = lin * p.axes[a].extent + x;
  }
  it.lin_first = b * p.tokens() + lin;
  return it;
}

// The queries of a warp's 32 columns (queries wq * 32 ..) of the Q tile of item `it` that each
// of this thread's four key rows key0 + 16 mb + 8 r attends, as bits 2 nb + e of query
// wq * 32 + nb * 8 + quad * 2 + e (column_mask.hpp: the Q tile's column masks shifted to the
// warp's columns): keep[mb][r]. cols: the quad's AxisColumns of the Q tile; qwin: the query
// window per key row and axis. Only the pair's partial axes are masked. Returns whether every
// row keeps every query. Reads only shared memory.
__device__ __forceinline__ bool key_row_query_masks(const Range* qwin, const AxisColumns* cols,
                                                    const BackwardItem& it, int rank, int key0,
                                                    int wq, uint32_t (&keep)[2][2]) {
  constexpr uint32_t kWarpQueries = 0xffu;  // 4 n-blocks x 2 columns
  const int partial_axes = it.partial_axes;
  keep[0][0] = keep[0][1] = keep[1][0] = keep[1][1] = kWarpQueries;
  GNA_FOR_AXES(a, rank) {
    if (!(partial_axes & (1 << a))) continue;  // every row keeps every query there
    const AxisColumns c = cols[a];
    const int o = it.q_base[a] + c.base;
#pragma unroll
    for (int mb = 0; mb < 2; ++mb)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const Range w = qwin[(key0 + mb * 16 + 8 * r) * kMaxRank + a];
        keep[mb][r] &= c.within(w.begin - o, w.end - o) >> (8 * wq);
      }
  }
  return (keep[0][0] & keep[0][1] & keep[1][0] & keep[1][1]) == kWarpQueries;
}

// key_row_query_masks for Q tiles with a side that is not a power of two (no column masks):
// the same bits, query by query (col0: this thread's first query, wq * 32 + 2 * quad); queries
// outside the group are dropped.
__device__ __forceinline__ bool key_row_query_checks(const Range* qwin, const uint32_t* q_rows,
                                                     const BackwardItem& it, int rank, int key0,
                                                     int col0, uint32_t (&keep)[2][2]) {
  keep[0][0] = keep[0][1] = keep[1][0] = keep[1][1] = 0;
#pragma unroll
  for (int nb = 0; nb < 4; ++nb) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      int ig[kMaxRank];
      const bool qvalid = it.geo.coordinates(q_rows[col0 + nb * 8 + e], it.q_base, ig);
#pragma unroll
      for (int mb = 0; mb < 2; ++mb) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          bool ok = qvalid;
          const Range* w = qwin + (key0 + mb * 16 + 8 * r) * kMaxRank;
          GNA_FOR_AXES(a, rank) ok = ok && (!(it.partial_axes & (1 << a)) || w[a].contains(ig[a]));
          if (ok) keep[mb][r] |= 1u << (2 * nb + e);
        }
      }
    }
  }
  return (keep[0][0] & keep[0][1] & keep[1][0] & keep[1][1]) == 0xffu;
}

// One Q or dO tile into shared memory: each thread copies one 16-byte column chunk of rows
// row_first + it * kStep (kStep a multiple of the swizzle period, so destinations are one add
// apart); zero fill for rows outside the group, unless rows_valid says there are none. The
// thread index is read afresh so that these values are rebuilt per call rather than held in
// registers through the GEMMs.
template <typename Tile, int CHUNKS, int WARPS, typename T>
__device__ __forceinline__ void load_q_rows(const T* first, const int64_t* delta, uint32_t base,
                                            const GroupGeometry& geo, const int* q_base,
                                            const uint32_t* q_rows, bool rows_valid) {
  constexpr int kThreads = WARPS * 32;
  constexpr int kStep = kThreads / CHUNKS;
  static_assert(kStep % 8 == 0, "row step must keep the swizzle phase");
  const int tid = thread_index();
  const int row_first = tid / CHUNKS, ch = tid % CHUNKS;
  const uint32_t dst = base + Tile::offset(row_first, ch * 8);
  if (rows_valid) {
    const char* src = reinterpret_cast<const char*>(first + ch * 8);
#pragma unroll
    for (int it = 0; it < kBackwardRowsQ / kStep; ++it)
      cp_async_16(dst + it * kStep * CHUNKS * 16, src + delta[row_first + it * kStep]);
    return;
  }
#pragma unroll
  for (int it = 0; it < kBackwardRowsQ / kStep; ++it) {
    const int row = row_first + it * kStep;
    int ig[kMaxRank];
    const bool valid = geo.coordinates(q_rows[row], q_base, ig);
    const void* src = valid ? reinterpret_cast<const char*>(first + ch * 8) + delta[row]
                            : static_cast<const void*>(first);
    cp_async_16(dst + it * kStep * CHUNKS * 16, src, valid);
  }
}

// Phase 2's step kk of one warp: acc[mb] (16-key block 2 wk + mb, the warp's half of the
// columns) += A^T B, A the 16-query step kk of P^T or dS^T (a_s, rows keys) and B that of dO or
// Q (b_s through the warp's column-shifted cursor b_t, transposed); each ldmatrix'd B fragment
// feeds both 16-key blocks.
template <typename T, int N, typename ACursor, typename BCursor>
__device__ __forceinline__ void key_blocks_mma(float (&acc)[2][N][4], uint32_t a_s,
                                               const ACursor& a_c, int wk, uint32_t b_s,
                                               const BCursor& b_t, int kk) {
  uint32_t a0[4], a1[4];
  ldmatrix_x4(a0, a_s + a_c.at(2 * wk, kk));
  ldmatrix_x4(a1, a_s + a_c.at(2 * wk + 1, kk));
#pragma unroll
  for (int dpair = 0; dpair < N / 2; ++dpair) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, b_s + b_t.at(kk, dpair));
    Mma<T>::run(acc[0][2 * dpair], a0, b[0], b[1]);
    Mma<T>::run(acc[0][2 * dpair + 1], a0, b[2], b[3]);
    Mma<T>::run(acc[1][2 * dpair], a1, b[0], b[1]);
    Mma<T>::run(acc[1][2 * dpair + 1], a1, b[2], b[3]);
  }
}

template <typename T, int D, int DV, int RK, int STAGES>
__global__ void __launch_bounds__(backward_warps(RK) * 32, 1)
    fused_backward_kernel(const __grid_constant__ BackwardParams<T> P) {
  extern __shared__ __align__(128) char smem[];
  using Smem = BackwardSmem<D, DV, RK, STAGES>;
  constexpr int RQ = kBackwardRowsQ;
  constexpr int kWarps = backward_warps(RK);
  // Warps along the keys in phases 1 and 2 (32 keys each; two along queries or columns).
  constexpr int kWarpsK = RK / 32;
  // Phase 3 (dQ): queries x columns per warp, 32 x D / (kWarps / 2) unless that leaves fewer
  // than 16 columns (then 16 queries).
  constexpr int kDqRows = D / (kWarps / 2) >= 16 ? 32 : 16;
  constexpr int kDqCols = D / (kWarps / (RQ / kDqRows));
  static_assert(kDqCols % 16 == 0 && DV % 32 == 0 && D % 32 == 0, "fragment shapes");
  const Problem& p = P.p;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g4 = lane / 4, t4 = lane % 4;

  uint32_t* q_rows = reinterpret_cast<uint32_t*>(smem + Smem::kQRows);
  uint32_t* kv_rows = reinterpret_cast<uint32_t*>(smem + Smem::kKVRows);
  int64_t* q_delta = reinterpret_cast<int64_t*>(smem + Smem::kQDelta);
  int64_t* o_delta = reinterpret_cast<int64_t*>(smem + Smem::kODelta);
  int64_t* lse_delta = reinterpret_cast<int64_t*>(smem + Smem::kLseDelta);
  int64_t* lin_delta = reinterpret_cast<int64_t*>(smem + Smem::kLinDelta);

  const int b = blockIdx.y / p.heads_kv, hk = blockIdx.y % p.heads_kv;
  const int heads_per_kv = p.heads_q / p.heads_kv;
  const bool additional = static_cast<int>(blockIdx.x) >= P.kv_tiles_total;
  if (additional && blockIdx.z != 0) return;  // additional tiles: group 0's CTAs take them
  const int add_first = (blockIdx.x - P.kv_tiles_total) * RK;

  // Own group geometry and KV tile (spatial CTAs).
  GroupGeometry kv_geo_init;
  kv_geo_init.rank = p.rank;
  int kt_init[kMaxRank] = {0, 0, 0}, kt_base_init[kMaxRank] = {0, 0, 0};
  {
    int group = blockIdx.z, tile = blockIdx.x;
    GNA_FOR_AXES_REVERSE(a, p.rank) {
      kv_geo_init.group[a] = group % p.axes[a].dilation;
      group /= p.axes[a].dilation;
      kv_geo_init.n[a] = group_length(p.axes[a], kv_geo_init.group[a]);
      kt_init[a] = tile % P.kv_tiles[a];
      tile /= P.kv_tiles[a];
      kt_base_init[a] = kt_init[a] * P.tile_kv[a];
    }
    if (!additional) {
      GNA_FOR_AXES(a, p.rank) if (kt_init[a] >= tiles_along(kv_geo_init.n[a], P.tile_kv[a])) return;
    }
  }

  // The CTA's geometry and walk box live in shared memory (made visible by the barriers below):
  // the main loop reloads what it needs instead of holding these registers next to dK and dV.
  __shared__ GroupGeometry kv_geo;
  __shared__ int kt[kMaxRank], kt_base[kMaxRank];
  __shared__ QTileRun box[kMaxRank];
  if (tid == 0) {
    kv_geo = kv_geo_init;
    for (int a = 0; a < kMaxRank; ++a) {
      kt[a] = kt_init[a];
      kt_base[a] = kt_base_init[a];
    }
  }

  // Row tables.
  for (int r = tid; r < RK; r += blockDim.x) kv_rows[r] = pack_row(P.tile_kv, p.rank, r, P.kv_volume);
  for (int r = tid; r < RQ; r += blockDim.x) {
    const uint32_t qp = pack_row(P.tile_q, p.rank, r, P.q_volume);
    q_rows[r] = qp;
    int64_t dq = 0, dob = 0, dl = 0, lin = 0;
    if (!(qp & kPaddingRow)) {
      int64_t lin_stride = 1;
      GNA_FOR_AXES_REVERSE(a, p.rank) {
        const int64_t step = int64_t(row_offset(qp, a)) * p.axes[a].dilation;
        dq += step * P.q.stride_axis[a];
        dob += step * P.d_o.stride_axis[a];
        dl += step * P.lse.stride_axis[a];
        lin += step * lin_stride;
        lin_stride *= p.axes[a].extent;
      }
    }
    q_delta[r] = dq * int64_t(sizeof(T));  // bytes: loads add them without scaling
    o_delta[r] = dob * int64_t(sizeof(T));
    lse_delta[r] = dl;
    lin_delta[r] = lin;
  }
  __syncthreads();

  // K and V of this CTA (once).
  {
    const uint32_t k_s = smem_address(smem + Smem::kK), v_s = smem_address(smem + Smem::kV);
    constexpr int CK = D / 8, CV = DV / 8;
    for (int c = tid; c < RK * (CK + CV); c += blockDim.x) {
      const bool is_k = c < RK * CK;
      const int cc = is_k ? c : c - RK * CK;
      const int chunks = is_k ? CK : CV;
      const int row = cc / chunks, ch = cc % chunks;
      const T* src = P.k.data;
      bool valid;
      if (additional) {
        const int j = add_first + row;
        valid = j < p.additional_kv;
        if (valid) src = (is_k ? P.add_k : P.add_v).at(b, &j, 1, hk) + ch * 8;
      } else {
        int jg[kMaxRank], x[kMaxRank];
        valid = kv_geo.coordinates(kv_rows[row], kt_base, jg);
        if (valid) {
          GNA_FOR_AXES(a, p.rank) x[a] = coordinate_of(p.axes[a], kv_geo.group[a], jg[a]);
          src = (is_k ? P.k : P.v).at(b, x, p.rank, hk) + ch * 8;
        }
      }
      cp_async_16((is_k ? k_s + Smem::KTile::offset(row, ch * 8) : v_s + Smem::VTile::offset(row, ch * 8)),
                  src, valid);
    }
  }

  // Query windows (inverse rule) of each key row, for partial pairs.
  Range* qwin = reinterpret_cast<Range*>(smem + Smem::kQWin);
  for (int r = tid; r < RK; r += blockDim.x) {
    int jg[kMaxRank];
    const uint32_t packed = kv_rows[r];
    kv_geo.coordinates(packed, kt_base, jg);
    GNA_FOR_AXES(a, p.rank) {
      const int j = (packed & kPaddingRow) ? 0 : min_i(jg[a], kv_geo.n[a] - 1);
      qwin[r * kMaxRank + a] = query_window(p.axes[a], kv_geo.n[a], j);
    }
  }

  // The Q tile's axes as seen from each quad's queries (partial pairs' bitmasks).
  AxisColumns* q_columns = reinterpret_cast<AxisColumns*>(smem + Smem::kQColumns);
  if (P.q_bitmask && tid < 4) {
    AxisColumns axes[kMaxRank];
    tile_columns(P.tile_q, tid, axes);
#pragma unroll
    for (int a = 0; a < kMaxRank; ++a) q_columns[tid * kMaxRank + a] = axes[a];
  }

  // The walk: (dilation group, query head, Q tile of the box) flattened; the box is a Q tile run
  // per axis (grid or placed; additional tiles: every grid Q tile).
  int box_count = 1;
  GNA_FOR_AXES(a, p.rank) {
    QTileRun r = additional ? QTileRun{0, P.q_tiles[a]}
                            : q_tile_run(p.axes[a], kv_geo.n[a], kt[a], P.tile_q[a], P.tile_kv[a],
                                         P.q_placement);
    r.count = max_i(r.count, 0);
    if (tid == 0) box[a] = r;
    box_count *= r.count;
  }
  __syncthreads();
  const int walk_groups = additional ? P.groups : 1;
  const int total = walk_groups * heads_per_kv * box_count;

  using Item = BackwardItem;
  // Spatial CTAs with boxes of at most kBackwardAxisTable Q tiles per axis, backward_offset_entries
  // in all, tabulate the axes (pair classes, row validity and offsets, see kBackwardAxisTable)
  // and follow the walk with an odometer (offsets in the box, head), so that decoding an item
  // and addressing its tiles costs a few shared loads and adds, no multiplication or division.
  uint8_t* axis_table = reinterpret_cast<uint8_t*>(smem + Smem::kTable);
  int64_t* axis_offsets = reinterpret_cast<int64_t*>(smem + Smem::kOffsets);
  __shared__ int offsets_first[kMaxRank];  // first entry of each axis in axis_offsets
  __shared__ int64_t head_base[4];         // batch offsets in Q, dO, LSE, linear tokens
  bool tabulated = !additional;
  {
    int entries = 0;
    GNA_FOR_AXES(a, p.rank) {
      tabulated = tabulated && box[a].count <= kBackwardAxisTable;
      if (tid == 0) offsets_first[a] = entries;
      entries += box[a].count;
    }
    tabulated = tabulated && entries <= backward_offset_entries(RK);
  }
  if (tid == 0) {
    head_base[0] = b * P.q.stride_batch;
    head_base[1] = b * P.d_o.stride_batch;
    head_base[2] = b * P.lse.stride_batch;
    head_base[3] = b * p.tokens();
  }
  if (tabulated) {
    int64_t lin_stride = 1;
    GNA_FOR_AXES_REVERSE(a, p.rank) {
      int first = 0;  // offsets_first[a], not yet visible
      GNA_FOR_AXES(a2, a) first += box[a2].count;
      for (int e = tid; e < box[a].count; e += blockDim.x) {
        const int q_first = box[a].first + e * P.tile_q[a];
        uint8_t entry = static_cast<uint8_t>(PairClass::empty);
        if (q_first < kv_geo.n[a])
          entry = static_cast<uint8_t>(classify_run_q_tile(p.axes[a], kv_geo.n[a], box[a], e,
                                                           P.tile_q[a], kt[a], P.tile_kv[a]));
        if (q_first + P.tile_q[a] <= kv_geo.n[a]) entry |= kAxisRowsValid;
        axis_table[a * kBackwardAxisTable + e] = entry;
        const int64_t x = coordinate_of(p.axes[a], kv_geo.group[a], q_first);
        int64_t* o = axis_offsets + 4 * (first + e);
        o[0] = x * P.q.stride_axis[a];
        o[1] = x * P.d_o.stride_axis[a];
        o[2] = x * P.lse.stride_axis[a];
        o[3] = x * lin_stride;
      }
      lin_stride *= p.axes[a].extent;
    }
  }
  __syncthreads();
  // Walk position: offsets in the box (10 bits per axis, last axis fastest; packed so that the
  // position costs two registers), then the query head.
  struct Pos {
    uint32_t e;
    int hi;
  };
  auto offset = [](const Pos& pos, int a) { return static_cast<int>((pos.e >> (10 * a)) & 1023u); };
  auto advance = [&](Pos& pos) {
    bool carry = true;
    GNA_FOR_AXES_REVERSE(a, p.rank) {
      if (carry) {
        const int e = offset(pos, a) + 1;
        carry = e == box[a].count;
        pos.e = (pos.e & ~(1023u << (10 * a))) | (carry ? 0u : static_cast<uint32_t>(e) << (10 * a));
      }
    }
    if (carry) ++pos.hi;
  };
  auto decode = [&](int i, const Pos& pos, Item& it) {
    if (!tabulated) {
      it = backward_item_from_rule(P, box, box_count, kt, additional, b, hk, i);
      return;
    }
    it.h = hk * heads_per_kv + pos.hi;
    it.geo = kv_geo;
    PairClass cls = PairClass::full;
    bool valid = P.q_volume == RQ;
    uint8_t partial_axes = 0;
    it.q_first = head_base[0] + it.h * P.q.stride_head;
    it.o_first = head_base[1] + it.h * P.d_o.stride_head;
    it.l_first = head_base[2] + it.h * P.lse.stride_head;
    it.lin_first = head_base[3];
    GNA_FOR_AXES(a, p.rank) {
      const int e = offset(pos, a);
      const uint8_t entry = axis_table[a * kBackwardAxisTable + e];
      const PairClass c = static_cast<PairClass>(entry & 3);
      cls = combine(cls, c);
      if (c == PairClass::partial) partial_axes |= 1 << a;
      valid = valid && (entry & kAxisRowsValid);
      it.q_base[a] = box[a].first + e * P.tile_q[a];
      const int64_t* o = axis_offsets + 4 * (offsets_first[a] + e);
      it.q_first += o[0];
      it.o_first += o[1];
      it.l_first += o[2];
      it.lin_first += o[3];
    }
    it.cls = cls;
    it.rows_valid = valid;
    it.partial_axes = partial_axes;
  };
  // First item >= i (at position pos) that is not empty; pos follows.
  auto next_item = [&](int i, Pos& pos, Item& it) {
    for (; i < total; ++i, advance(pos)) {
      decode(i, pos, it);
      if (it.cls != PairClass::empty) break;
    }
    return i;
  };
  // Q, dO, LSE, delta of an item into stage s.
  auto load_item = [&](const Item& it, int s) {
    const uint32_t q_s = smem_address(smem + Smem::kQ + s * Smem::QTile::kBytes);
    const uint32_t o_s = smem_address(smem + Smem::kO + s * Smem::OTile::kBytes);
    load_q_rows<typename Smem::QTile, D / 8, kWarps>(P.q.data + it.q_first, q_delta, q_s, it.geo, it.q_base, q_rows,
                                             it.rows_valid);
    load_q_rows<typename Smem::OTile, DV / 8, kWarps>(P.d_o.data + it.o_first, o_delta, o_s, it.geo, it.q_base, q_rows,
                                              it.rows_valid);
    for (int r = tid; r < RQ; r += blockDim.x) {
      int ig[kMaxRank];
      const bool valid = it.rows_valid || it.geo.coordinates(q_rows[r], it.q_base, ig);
      const float* lsrc = P.lse.data + it.l_first + lse_delta[r];
      const float* dsrc = P.delta + (it.lin_first + lin_delta[r]) * p.heads_q + it.h;
      cp_async_4(smem_address(smem + Smem::kLse + (s * RQ + r) * 4), valid ? lsrc : P.lse.data, valid);
      cp_async_4(smem_address(smem + Smem::kDelta + (s * RQ + r) * 4), valid ? dsrc : P.delta, valid);
    }
  };

  // dK and dV of the warp's 32 keys (two 16-key blocks) and half of the columns.
  float dk[2][D / 16][4], dv[2][DV / 16][4];
#pragma unroll
  for (int mb = 0; mb < 2; ++mb) {
#pragma unroll
    for (int i = 0; i < D / 16; ++i) dk[mb][i][0] = dk[mb][i][1] = dk[mb][i][2] = dk[mb][i][3] = 0.f;
#pragma unroll
    for (int i = 0; i < DV / 16; ++i) dv[mb][i][0] = dv[mb][i][1] = dv[mb][i][2] = dv[mb][i][3] = 0.f;
  }

  // Items live in shared memory, the current one in slot `slot`, the next one written by thread 0
  // where its loads are issued (before the barrier that starts its iteration): their values are
  // reloaded where used rather than held in registers next to dK, dV, S^T and dP^T.
  __shared__ Item items[2];
  int slot = 0;
  Pos pos = {0u, 0};
  int i;
  {
    Item first;
    i = next_item(0, pos, first);
    if (i < total) load_item(first, 0);
    if (tid == 0) items[0] = first;
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  const uint32_t k_s = smem_address(smem + Smem::kK), v_s = smem_address(smem + Smem::kV);
  const uint32_t s_s = smem_address(smem + Smem::kS), p_s = smem_address(smem + Smem::kP);
  // ldmatrix address patterns (see SmemTile::Cursor).
  const int lane_a = lane % 16, c_a = lane / 16;                          // A operands
  const int lane_b = (lane % 8) + (lane / 16) * 8, c_b = (lane / 8) % 2;  // B, row-major n x k
  const int lane_t = (lane % 8) + ((lane / 8) % 2) * 8, c_t = lane / 16;  // B via .trans
  const auto c_kA = Smem::KTile::lean_cursor(lane_a, c_a);
  const auto c_vA = Smem::VTile::lean_cursor(lane_a, c_a);
  const auto c_qB = Smem::QTile::lean_cursor(lane_b, c_b);
  const auto c_oB = Smem::OTile::lean_cursor(lane_b, c_b);
  const auto c_qT = Smem::QTile::lean_cursor(lane_t, c_t);
  const auto c_oT = Smem::OTile::lean_cursor(lane_t, c_t);
  const auto c_kT = Smem::KTile::lean_cursor(lane_t, c_t);
  const auto c_sT = Smem::STile::lean_cursor(lane_b, c_b);
  const auto c_sA = Smem::STile::lean_cursor(lane_a, c_a);
  int stage = 0;
  // The next item (and its position) is found where its loads are issued: at the top with two
  // stages, after the dV / dK phase with one. Each iteration ends waiting for them, so that its
  // last barrier also makes them visible.
  auto find_and_load_next = [&](Pos& next_pos, int into) {
    Item nxt;
    advance(next_pos);
    const int n = next_item(i + 1, next_pos, nxt);
    if (n < total) {
      load_item(nxt, into);
      if (tid == 0) items[slot ^ 1] = nxt;
    }
    cp_async_commit();
    return n;
  };
  while (i < total) {
    int next = total;
    Pos next_pos = pos;
    if constexpr (STAGES == 2) next = find_and_load_next(next_pos, stage ^ 1);
    const Item& cur = items[slot];
    const uint32_t q_s = smem_address(smem + Smem::kQ + stage * Smem::QTile::kBytes);
    const uint32_t o_s = smem_address(smem + Smem::kO + stage * Smem::OTile::kBytes);
    const float* lse_s = reinterpret_cast<const float*>(smem + Smem::kLse) + stage * RQ;
    const float* delta_s = reinterpret_cast<const float*>(smem + Smem::kDelta) + stage * RQ;

    // Phase 1, per warp 32 keys x 32 queries (warps: RK / 32 along keys, 2 along queries):
    // S^T = K Q^T, P^T = exp(S^T - LSE) to shared memory; then in two halves of 16 queries
    // (fewer live registers), dP^T = V dO^T and dS^T = P^T (dP^T - delta) to shared memory.
    const bool masked = cur.cls == PairClass::partial;
    if (P.path_counts != nullptr && tid == 0) {
      BackwardPathCounts& c = *P.path_counts;
      atomicAdd(&c.items, 1ull);
      if (P.q_placement == KvPlacement::placed && !additional) atomicAdd(&c.placed_items, 1ull);
      if (masked) {
        atomicAdd(cur.rows_valid ? &c.partial_full_loads : &c.partial_fill_loads, 1ull);
        atomicAdd(&c.skipped_mask_axes, static_cast<unsigned long long>(p.rank - __popc(cur.partial_axes)));
        if (!P.q_bitmask) atomicAdd(&c.query_masked_items, 1ull);
      }
    }
    {
      const int wk = warp % kWarpsK, wq = warp / kWarpsK;
      float s[2][4][4];  // [16-key block][8-query block][fragment]
#pragma unroll
      for (int mb = 0; mb < 2; ++mb)
#pragma unroll
        for (int nb = 0; nb < 4; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mb][nb][e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a0[4], a1[4];
        ldmatrix_x4(a0, k_s + c_kA.at(2 * wk, ks));
        ldmatrix_x4(a1, k_s + c_kA.at(2 * wk + 1, ks));
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t bq[4];
          ldmatrix_x4(bq, q_s + c_qB.at(2 * wq + np, ks));
          Mma<T>::run(s[0][2 * np], a0, bq[0], bq[1]);
          Mma<T>::run(s[0][2 * np + 1], a0, bq[2], bq[3]);
          Mma<T>::run(s[1][2 * np], a1, bq[0], bq[1]);
          Mma<T>::run(s[1][2 * np + 1], a1, bq[2], bq[3]);
        }
      }
      // Partial pairs: scores of pairs that do not attend become -inf (P = 0), in one branch
      // so that full pairs run the element loop below without it. By the key rows' bitmasks of
      // this thread's queries, built after S so that they hold no registers through its MMAs
      // (Q tiles with a side that is not a power of two: query by query); a warp whose key rows
      // keep every query of its columns skips the mask.
      if (masked) {
        uint32_t keep[2][2];
        const int key0 = wk * 32 + g4;
        const bool rows_keep_all =
            P.q_bitmask ? key_row_query_masks(qwin, q_columns + t4 * kMaxRank, cur, p.rank, key0, wq, keep)
                        : key_row_query_checks(qwin, q_rows, cur, p.rank, key0, wq * 32 + 2 * t4, keep);
        const bool full_rows = __all_sync(0xffffffffu, rows_keep_all);
        if (P.path_counts != nullptr && lane == 0)
          atomicAdd(full_rows ? &P.path_counts->full_row_warps : &P.path_counts->masked_warps, 1ull);
        if (!full_rows) {
#pragma unroll
          for (int mb = 0; mb < 2; ++mb)
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
              for (int nb = 0; nb < 4; ++nb)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                  if (!(keep[mb][r] & (1u << (2 * nb + e)))) s[mb][nb][2 * r + e] = -INFINITY;
        }
      }
      // P^T (fp32 kept for dS^T) and its 16-bit copy in shared memory: rows keys, columns
      // queries.
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float lse2 = lse_s[wq * 32 + nb * 8 + 2 * t4 + e] * 1.4426950408889634f;
#pragma unroll
          for (int mb = 0; mb < 2; ++mb)
#pragma unroll
            for (int r = 0; r < 2; ++r)
              s[mb][nb][2 * r + e] = fast_exp2(fmaf(s[mb][nb][2 * r + e], P.scale_log2, -lse2));
        }
      }
      auto store_pair = [&](int base, int mb, int nb, const float (&f)[4]) {
        const int key0 = wk * 32 + mb * 16 + g4;
        const int q0 = wq * 32 + nb * 8 + 2 * t4;
        *reinterpret_cast<uint32_t*>(smem + base + Smem::STile::offset(key0, q0) + (q0 % 8) * 2) =
            Mma<T>::pack(f[0], f[1]);
        *reinterpret_cast<uint32_t*>(smem + base + Smem::STile::offset(key0 + 8, q0) + (q0 % 8) * 2) =
            Mma<T>::pack(f[2], f[3]);
      };
#pragma unroll
      for (int mb = 0; mb < 2; ++mb)
#pragma unroll
        for (int nb = 0; nb < 4; ++nb) store_pair(Smem::kP, mb, nb, s[mb][nb]);
#pragma unroll
      for (int qh = 0; qh < 2; ++qh) {
        float dp[2][2][4];  // [16-key block][8-query block of this half][fragment]
#pragma unroll
        for (int mb = 0; mb < 2; ++mb)
#pragma unroll
          for (int nb = 0; nb < 2; ++nb)
#pragma unroll
            for (int e = 0; e < 4; ++e) dp[mb][nb][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < DV / 16; ++ks) {
          uint32_t a0[4], a1[4], bo[4];
          ldmatrix_x4(a0, v_s + c_vA.at(2 * wk, ks));
          ldmatrix_x4(a1, v_s + c_vA.at(2 * wk + 1, ks));
          ldmatrix_x4(bo, o_s + c_oB.at(2 * wq + qh, ks));
          Mma<T>::run(dp[0][0], a0, bo[0], bo[1]);
          Mma<T>::run(dp[0][1], a0, bo[2], bo[3]);
          Mma<T>::run(dp[1][0], a1, bo[0], bo[1]);
          Mma<T>::run(dp[1][1], a1, bo[2], bo[3]);
        }
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float delta = delta_s[wq * 32 + (2 * qh + nb) * 8 + 2 * t4 + e];
#pragma unroll
            for (int mb = 0; mb < 2; ++mb)
#pragma unroll
              for (int r = 0; r < 2; ++r)
                dp[mb][nb][2 * r + e] = s[mb][2 * qh + nb][2 * r + e] * (dp[mb][nb][2 * r + e] - delta);
          }
        }
#pragma unroll
        for (int mb = 0; mb < 2; ++mb)
#pragma unroll
          for (int nb = 0; nb < 2; ++nb) store_pair(Smem::kS, mb, 2 * qh + nb, dp[mb][nb]);
      }
    }
    __syncthreads();  // P^T and dS^T complete

    // Phase 2, per warp 32 keys x half the columns: dV += P^T dO and dK += dS^T Q, each
    // ldmatrix'd dO / Q fragment feeding both 16-key blocks.
    {
      const int wk = warp % kWarpsK, half = warp / kWarpsK;
      const auto o_t = c_oT.shifted(half * (DV / 32));
      const auto q_t = c_qT.shifted(half * (D / 32));
#pragma unroll 2
      for (int kk = 0; kk < RQ / 16; ++kk) {
        key_blocks_mma<T>(dv, p_s, c_sA, wk, o_s, o_t, kk);
        key_blocks_mma<T>(dk, s_s, c_sA, wk, q_s, q_t, kk);
      }
    }
    if constexpr (STAGES == 1) {
      __syncthreads();  // Q, dO, LSE and delta of the stage no longer read
      next = find_and_load_next(next_pos, 0);
    }

    // Phase 3: dQ = dS K over the CTA's keys, per warp kDqRows queries x kDqCols columns (in
    // chunks of at most 32), added atomically into the fp32 accumulator.
    {
      constexpr int kMB = kDqRows / 16;
      const int qblock0 = (warp % (RQ / kDqRows)) * kMB;
      const auto k_t = c_kT.shifted((warp / (RQ / kDqRows)) * (kDqCols / 16));
      const int col_first = (warp / (RQ / kDqRows)) * kDqCols;
      const int64_t lin_first = cur.lin_first;
      constexpr int kChunk = kDqCols < 32 ? kDqCols : 32;
#pragma unroll
      for (int c0 = 0; c0 < kDqCols; c0 += kChunk) {
        float acc[kMB][kChunk / 8][4];
#pragma unroll
        for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
          for (int nb = 0; nb < kChunk / 8; ++nb) acc[mb][nb][0] = acc[mb][nb][1] = acc[mb][nb][2] = acc[mb][nb][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < RK / 16; ++kk) {
          uint32_t a[kMB][4];
#pragma unroll
          for (int mb = 0; mb < kMB; ++mb) ldmatrix_x4_trans(a[mb], s_s + c_sT.at(kk, qblock0 + mb));
#pragma unroll
          for (int dpair = 0; dpair < kChunk / 16; ++dpair) {
            uint32_t bk[4];
            ldmatrix_x4_trans(bk, k_s + k_t.at(kk, c0 / 16 + dpair));
#pragma unroll
            for (int mb = 0; mb < kMB; ++mb) {
              Mma<T>::run(acc[mb][2 * dpair], a[mb], bk[0], bk[1]);
              Mma<T>::run(acc[mb][2 * dpair + 1], a[mb], bk[2], bk[3]);
            }
          }
        }
#pragma unroll
        for (int mb = 0; mb < kMB; ++mb) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            // The row's validity and accumulator offset, computed here rather than held
            // through the GEMM.
            const int row = (qblock0 + mb) * 16 + g4 + 8 * r;
            int ig[kMaxRank];
            const bool qvalid = cur.rows_valid || cur.geo.coordinates(q_rows[row], cur.q_base, ig);
            const int64_t qrow_off = ((lin_first + lin_delta[row]) * p.heads_q + cur.h) * D + col_first;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            // Lanes t and t ^ 1 swap halves so that each holds four consecutive columns: even t
            // those of n-block nb at 2t, odd t those of nb + 1 at 2(t - 1); one 16-byte
            // reduction. The shuffles first (every lane takes part), then the row's reductions
            // under one branch.
            const bool odd = t4 & 1;
            float4 v[kChunk / 16];
#pragma unroll
            for (int nb = 0; nb < kChunk / 8; nb += 2) {
              const float s0 = odd ? acc[mb][nb][2 * r] : acc[mb][nb + 1][2 * r];
              const float s1 = odd ? acc[mb][nb][2 * r + 1] : acc[mb][nb + 1][2 * r + 1];
              const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1);
              const float r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
              v[nb / 2] = odd ? make_float4(r0, r1, acc[mb][nb + 1][2 * r], acc[mb][nb + 1][2 * r + 1])
                              : make_float4(acc[mb][nb][2 * r], acc[mb][nb][2 * r + 1], r0, r1);
            }
            if (qvalid) {
              float4* dst = reinterpret_cast<float4*>(P.dq_accum + qrow_off + c0 + 2 * (t4 & ~1) + odd * 8);
#pragma unroll
              for (int j = 0; j < kChunk / 16; ++j) atomicAdd(dst + 4 * j, v[j]);
            }
#else
            if (!qvalid) continue;
            float* dst = P.dq_accum + qrow_off + c0 + 2 * t4;
#pragma unroll
            for (int nb = 0; nb < kChunk / 8; ++nb) {
              atomicAdd(dst + nb * 8, acc[mb][nb][2 * r]);
              atomicAdd(dst + nb * 8 + 1, acc[mb][nb][2 * r + 1]);
            }
#endif
          }
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // the next item's tiles landed; P^T, dS^T and this stage are reused
    if constexpr (STAGES == 2) stage ^= 1;
    i = next;
    pos = next_pos;
    slot ^= 1;
  }

  // dK = scale * dS^T Q, dV: this thread's four key rows, half of the columns.
  const int wk = warp % kWarpsK, half = warp / kWarpsK;
#pragma unroll
  for (int mb = 0; mb < 2; ++mb) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = wk * 32 + mb * 16 + g4 + 8 * r;
      T* kdst;
      T* vdst;
      if (additional) {
        const int j = add_first + row;
        if (j >= p.additional_kv) continue;
        kdst = P.d_add_k.at(b, &j, 1, hk);
        vdst = P.d_add_v.at(b, &j, 1, hk);
      } else {
        int jg[kMaxRank], x[kMaxRank];
        if (!kv_geo.coordinates(kv_rows[row], kt_base, jg)) continue;
        GNA_FOR_AXES(a, p.rank) x[a] = coordinate_of(p.axes[a], kv_geo.group[a], jg[a]);
        kdst = P.dk.at(b, x, p.rank, hk);
        vdst = P.dv.at(b, x, p.rank, hk);
      }
      kdst += half * (D / 2) + 2 * t4;
      vdst += half * (DV / 2) + 2 * t4;
      using T2 = typename std::conditional<std::is_same<T, __half>::value, __half2, __nv_bfloat162>::type;
#pragma unroll
      for (int nb = 0; nb < D / 16; ++nb) {
        T2 v2;
        v2.x = cuda::from_float<T>(dk[mb][nb][2 * r] * P.scale);
        v2.y = cuda::from_float<T>(dk[mb][nb][2 * r + 1] * P.scale);
        *reinterpret_cast<T2*>(kdst + nb * 8) = v2;
      }
#pragma unroll
      for (int nb = 0; nb < DV / 16; ++nb) {
        T2 v2;
        v2.x = cuda::from_float<T>(dv[mb][nb][2 * r]);
        v2.y = cuda::from_float<T>(dv[mb][nb][2 * r + 1]);
        *reinterpret_cast<T2*>(vdst + nb * 8) = v2;
      }
    }
  }
}

}  // namespace gna::portable
