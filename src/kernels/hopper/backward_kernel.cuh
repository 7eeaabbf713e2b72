// The Hopper backward kernel, KV-stationary: one CTA per (128-key KV tile, KV head, batch) keeps
// K and V in shared memory and walks the 64-row Q tiles whose queries attend it (the core's
// inverse rule per axis, a product box of Q tile runs, on the grid or placed at the first query
// of the KV tile's union query window; in additional mode every grid Q tile), for every query
// head of its GQA group. A producer warp loads Q and dO by TMA (multi-dimensional boxes of the
// heads-last tensors) plus the rows' LSE and delta into a 2-stage ring; two consumer
// warpgroups own 64 keys each:
//   S^T = K Q^T, dP^T = V dO^T           (wgmma SS, N = 64 queries)
//   P^T = exp2(S^T * scale_log2 - LSE2), dS^T = P^T (dP^T - delta)
//   dV += P^T dO, dK += dS^T Q           (wgmma RS, operands from registers, kept all along)
//   dQ += dS K                           (dS^T staged in shared memory, wgmma SS transposed)
// and stage dQ in shared memory, from where a writer thread of the producer warpgroup adds it
// into an fp32 accumulator with tensor-map reduce-adds, one per 32-column box (in deterministic
// mode in the order of the KV tiles, one turn counter per Q tile). Head dim 128 splits dQ's columns between
// the warpgroups (all 128 keys each); smaller head dims let each warpgroup add its own keys'
// part of every column.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "gna/core/tiling.hpp"
#include "kernels/hopper/backward_params.hpp"
#include "kernels/hopper/backward_walk.cuh"
#include "gna/core/column_mask.hpp"
#include "kernels/hopper/device_util.cuh"
#include "kernels/hopper/ptx.cuh"

namespace gna::hopper::bwd {

constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
// setmaxnreg.inc takes registers only from what the CTA holds (168 x 384 at launch):
// 128 x 40 + 256 x 232 = 168 x 384. (At 224 for the consumers ptxas serializes the head dim
// 128 wgmmas.)
constexpr int kStages = 2;

// dS^T: [128 keys][64 queries] 16-bit, 128-byte rows, 128-byte swizzle.
constexpr int kDsBytes = kBwdKvRows * kBwdQRows * 2;

// dQ columns each consumer warpgroup adds per pair: head dim 128 splits the columns between the
// warpgroups (each over all 128 keys), smaller head dims give each warpgroup every column (over
// its own 64 keys).
template <int D>
constexpr int dq_columns() {
  return D == 128 ? 64 : D;
}
// A warpgroup's dQ staging: boxes of 32 fp32 columns (128-byte rows, 128-byte swizzle), the box
// of the accumulator's tensor map.
constexpr int kDqBoxCols = 32;
constexpr int kDqBoxBytes = kBwdQRows * kDqBoxCols * 4;

// kKeySets: sets of key-row query windows (one per head-rule group, one without head rules).
template <int D, int kKeySets>
struct StorageBase {
  alignas(1024) uint8_t k[TileLayout<D, kBwdKvRows>::kTileBytes];
  alignas(1024) uint8_t v[TileLayout<D, kBwdKvRows>::kTileBytes];
  alignas(1024) uint8_t q[kStages][TileLayout<D, kBwdQRows>::kTileBytes];
  alignas(1024) uint8_t d_o[kStages][TileLayout<D, kBwdQRows>::kTileBytes];
  alignas(1024) uint8_t ds[kStages][kDsBytes];
  alignas(1024) uint8_t dq[2][dq_columns<D>() / kDqBoxCols][kDqBoxBytes];  // per warpgroup
  // Per key row of the tile: its query window per axis (inverse rule), kept here instead of in
  // registers (used by partial pairs only); written by lane 0 of the row's quad. With head rules
  // one set per group.
  int key_q_lo[kKeySets][kBwdKvRows][kAxes], key_q_width[kKeySets][kBwdKvRows][kAxes];
  float lse2[kStages][kBwdQRows];
  float delta[kStages][kBwdQRows];
  uint64_t kv_full;
  uint64_t q_full[kStages], q_empty[kStages];
  uint64_t dq_full[2], dq_empty[2];  // per consumer warpgroup: its dQ staging area
  // Deterministic mode, per visit (ring of 4): the Q tile's turn counter and this CTA's rank
  // among the KV tiles adding into it, computed by a consumer thread for the dQ writer (whose
  // 40 registers do not hold that computation).
  int turn_index[4], turn_rank[4];
  // The Q tile's axes seen from the columns of each quad (column_mask.hpp), read by partial
  // pairs only: kept here, not in registers through the walk.
  AxisColumns q_columns[4][kAxes];
};

// The storage of the kernel without head rules (kRules false) and with them, on grid Q tiles
// and placed (kPlacedQ).
template <int D, bool kRules, bool kPlacedQ>
struct SharedStorage;
template <int D>
struct SharedStorage<D, false, false> : StorageBase<D, 1> {};
template <int D>
struct SharedStorage<D, true, false> : StorageBase<D, kMaxHeadGroups> {
  HeadBoxes<false> heads;  // each group's Q box for this KV tile (backward_walk.cuh)
};
template <int D>
struct SharedStorage<D, false, true> : StorageBase<D, 1> {
  // The CTA's Work::q_shift, read from here where a placed walk needs it so that no role holds
  // it in registers (the producer warp and the dQ writer have 40).
  int q_shift[kAxes];
};
template <int D>
struct SharedStorage<D, true, true> : StorageBase<D, kMaxHeadGroups> {
  HeadBoxes<true> heads;  // each group's Q box and shift for this KV tile
};

// The walk of one role over the CTA's visits: without head rules every query head walks the
// CTA's box (QWalk; the rules are never read), with them (kRules) its group's (BoxWalk).
template <int D, bool kRules, bool kPlacedQ>
struct RoleWalk {
  using Walk = std::conditional_t<kRules, BoxWalk<kPlacedQ>, QWalk>;
  const BwdParams& p;
  const SharedStorage<D, kRules, kPlacedQ>& s;
  const Work& w;
  Walk& walk;

  // Begins the walk; returns the CTA's visits.
  __device__ __forceinline__ int begin() {
    if constexpr (kRules) {
      walk.begin(p, s.heads, w.head_kv * p.heads_per_kv);
      return s.heads.visits;
    } else {
      const int total = w.q_count * p.heads_per_kv;
      walk.begin(w, w.head_kv * p.heads_per_kv);
      return total;
    }
  }
  __device__ __forceinline__ void next() {
    if constexpr (kRules)
      walk.next(p, s.heads);
    else
      walk.next(w);
  }
  // Placed kernels: the query added to the first query qt * q_tile of the visit's Q tile on
  // axis a (the first query of the head's run).
  __device__ __forceinline__ int q_shift(int a) const {
    static_assert(kPlacedQ, "grid Q tiles have no shift");
    if constexpr (kRules)
      return walk.box->q_shift[a];
    else
      return s.q_shift[a];
  }
  // The first query on axis a of the visit's Q tile (computed where used, as the grid walk
  // always did).
  __device__ __forceinline__ int q_first(int a) const {
    if constexpr (kPlacedQ)
      return walk.qt[a] * p.q_tile[a] + q_shift(a);
    else
      return walk.qt[a] * p.q_tile[a];
  }
};

template <int D, bool kRules, bool kPlacedQ>
constexpr int shared_bytes() {
  return static_cast<int>(sizeof(SharedStorage<D, kRules, kPlacedQ>)) + 1024;
}

template <int D, bool kRules, bool kPlacedQ>
__device__ __forceinline__ void producer(const BwdParams& p, SharedStorage<D, kRules, kPlacedQ>& s,
                                         const Work& w,
                                         const CUtensorMap* tm_q, const CUtensorMap* tm_do,
                                         const CUtensorMap* tm_k, const CUtensorMap* tm_v) {
  using KvT = TileLayout<D, kBwdKvRows>;
  using QT = TileLayout<D, kBwdQRows>;
  const int lane = threadIdx.x % 32;
  const int x_base = w.batch * p.axes[0].extent;  // batches folded into the outermost axis
  if (lane == 0) {
    const KvTileCoords c = kv_tile_coords(p, w);
    mbar_expect_tx(&s.kv_full, 2 * KvT::kTileBytes);
#pragma unroll
    for (int box = 0; box < KvT::kBoxes; ++box) {
      tma_load_5d(s.k + box * KvT::kBoxBytes, tm_k, &s.kv_full, box * KvT::kBoxCols, w.head_kv,
                  c.c2, c.c3, c.c4);
      tma_load_5d(s.v + box * KvT::kBoxBytes, tm_v, &s.kv_full, box * KvT::kBoxCols, w.head_kv,
                  c.c2, c.c3, c.c4);
    }
  }
  typename RoleWalk<D, kRules, kPlacedQ>::Walk walk;
  RoleWalk<D, kRules, kPlacedQ> role{p, s, w, walk};
  for_each_visit<kStages>(role, [&](int, int head, const int(&qt)[kAxes], int stage,
                                    uint32_t phase) {
    mbar_wait(&s.q_empty[stage], phase ^ 1);
    if (lane == 0) {
      mbar_expect_tx(&s.q_full[stage], 2 * QT::kTileBytes);
#pragma unroll
      for (int box = 0; box < QT::kBoxes; ++box) {
        // Tensor rows: less the query tensor's first row (rows.q_begin).
        tma_load_5d(s.q[stage] + box * QT::kBoxBytes, tm_q, &s.q_full[stage], box * QT::kBoxCols,
                    head, role.q_first(2) - p.rows.q_begin[2],
                    role.q_first(1) - p.rows.q_begin[1],
                    x_base + role.q_first(0) - p.rows.q_begin[0]);
        tma_load_5d(s.d_o[stage] + box * QT::kBoxBytes, tm_do, &s.q_full[stage],
                    box * QT::kBoxCols, head, role.q_first(2) - p.rows.q_begin[2],
                    role.q_first(1) - p.rows.q_begin[1],
                    x_base + role.q_first(0) - p.rows.q_begin[0]);
      }
    }
    // Rows outside the image (tensor edge, the next folded batch, or outside a slab's query
    // rows) get LSE = +inf: P = 0, so their dS, dK / dV shares and dQ rows are zero.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = lane + 32 * h;
      int64_t off = w.batch * p.row_batch_stride + head;
      bool valid;
      if constexpr (kPlacedQ) {
        const int row[kAxes] = {role.q_first(0), role.q_first(1), role.q_first(2)};
        valid = q_row_offset(p, row, r, off);
      } else {
        valid = tile_row_offset(p.rows.q_begin, p.rows.q_end, qt, p.q_tile, r, p.row_axis_stride,
                                off);
      }
      s.lse2[stage][r] = valid ? p.lse2[off] : INFINITY;
      s.delta[stage][r] = valid ? p.delta[off] : 0.f;
    }
    mbar_arrive(&s.q_full[stage]);
  });
}

template <int D, typename Tag, bool kRules, bool kPlacedQ>
__device__ __forceinline__ void consumer(const BwdParams& p, SharedStorage<D, kRules, kPlacedQ>& s,
                                         const Work& w,
                                         int wg, const CUtensorMap* tm_dk,
                                         const CUtensorMap* tm_dv) {
  using KvT = TileLayout<D, kBwdKvRows>;
  using QT = TileLayout<D, kBwdQRows>;
  constexpr int kS = kBwdQRows / 2;               // S^T accumulators per thread (64 x 64)
  constexpr int kG = D / 2;                       // dK / dV accumulators per thread (64 x D)
  constexpr bool kSplitColumns = D == 128;        // dQ: columns split between warpgroups
  constexpr int kDqN = dq_columns<D>();           // dQ columns per warpgroup
  constexpr int kDqKeys = kSplitColumns ? 128 : 64;
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int quad = lane % 4;
  const int row_in_wg = warp * 16 + lane / 4;  // and + 8
  const int wtid = threadIdx.x % 128;

  // This thread's two key rows: validity (inside the key tensor's rows, rows.k_begin..k_end:
  // the image, or a slab's keys; additional keys: below the batch item's count) and the query
  // window per axis under the rules `axes` (inverse rule) into window set `set`.
  // Additional mode: the keys the batch item attends (its count; all without counts).
  const int counted_keys =
      p.additional ? additional_keys_of_batch(p.counts, p.additional_kv, p.batch_offset + w.batch)
                   : 0;
  bool key_valid[2];
  auto key_windows = [&](const AxisRule* axes, int set) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = wg * 64 + row_in_wg + 8 * i;
      if (p.additional) {
        key_valid[i] = w.kt[2] * kBwdKvRows + r < counted_keys;
#pragma unroll
        for (int a = 0; a < kAxes; ++a)
          if (quad == 0) s.key_q_lo[set][r][a] = s.key_q_width[set][r][a] = 0;
      } else {
        int local[kAxes];
        tile_local(r, p.kv_tile, local);
        key_valid[i] = true;
#pragma unroll
        for (int a = 0; a < kAxes; ++a) {
          const int n = p.axes[a].extent;
          const int c = w.kt[a] * p.kv_tile[a] + local[a];
          const bool ok = c >= p.rows.k_begin[a] && c < p.rows.k_end[a];
          key_valid[i] = key_valid[i] && ok;
          const Range qw = query_window(axes[a], n, min_i(c, n - 1));
          if (quad == 0) {
            s.key_q_lo[set][r][a] = qw.begin;
            s.key_q_width[set][r][a] = ok ? max_i(qw.end - qw.begin, 0) : 0;
          }
        }
      }
    }
  };
  // With head rules every group's key windows, once (the visits of a head read its group's).
  if constexpr (kRules) {
#pragma unroll 1
    for (int g = 0; g < p.rules.groups; ++g) key_windows(p.rules.axes[g], g);
  } else {
    key_windows(p.axes, 0);
  }

  __syncwarp();  // the key windows are read by every lane of the quad
  float dk[kG], dv[kG];
#pragma unroll
  for (int i = 0; i < kG; ++i) dk[i] = dv[i] = 0.f;

  const uint32_t k_base = smem_addr(s.k), v_base = smem_addr(s.v);
  const uint32_t k_rows = wg * 64 * KvT::kRowBytes;  // this warpgroup's keys inside each box
  mbar_wait(&s.kv_full, 0);

  // The last additional KV tile the batch item attends may hold slots beyond its additional
  // keys: its pairs are masked.
  const bool key_mask = p.additional && (w.kt[2] + 1) * kBwdKvRows > counted_keys;
  // A masked pair's masks: per key row i, the thread's queries (bit 2j + e
  // for column j * 8 + quad * 2 + e) that the key attends: none for a slot that holds no key;
  // on a partial pair those inside the key's query window on every axis (set: the head's group's
  // windows, relative to the Q tile's first query).
  auto row_query_masks = [&](const auto& role, int head, bool partial, uint32_t(&keep)[2]) {
    int set = 0;
    if constexpr (kRules) set = p.rules.group_of_head[head];
#pragma unroll
    for (int i = 0; i < 2; ++i) keep[i] = key_valid[i] ? 0xffffffffu : 0u;
    if (!partial) return;
#pragma unroll
    for (int a = 0; a < kAxes; ++a) {
      const AxisColumns axis = s.q_columns[quad][a];
      const int origin = role.q_first(a) + axis.base;  // the thread's first query on the axis
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = wg * 64 + row_in_wg + 8 * i;
        const int lo = s.key_q_lo[set][r][a] - origin;
        keep[i] &= axis.within(lo, lo + s.key_q_width[set][r][a]);
      }
    }
  };
  PairClass axis_class[kAxes];  // per axis, recomputed only where the walk moved (no rules)
  typename RoleWalk<D, kRules, kPlacedQ>::Walk walk;
  RoleWalk<D, kRules, kPlacedQ> role{p, s, w, walk};
  for_each_visit<kStages>(role, [&](int it, int head, const int(&qt)[kAxes], int stage,
                                    uint32_t phase) {
    const uint32_t q_base = smem_addr(s.q[stage]), do_base = smem_addr(s.d_o[stage]);
    // Pair class (spatial mode): the minimum over axes of the per-axis classes, under the
    // head's rules.
    bool partial = false;
    if constexpr (kRules) {  // from the box of the head's group (no rule read in the walk)
      const QBox& box = s.heads.box[p.rules.group_of_head[head]];
#pragma unroll
      for (int a = 0; a < kAxes; ++a)
        partial = partial || qt[a] < box.full_begin[a] || qt[a] >= box.full_end[a];
    } else if (!p.additional) {
#pragma unroll
      for (int a = 0; a < kAxes; ++a)
        if (a >= walk.changed) {
          if constexpr (kPlacedQ)  // tile qt of the run from query q_shift
            axis_class[a] =
                classify_run_q_tile(p.axes[a], p.axes[a].extent, QTileRun{role.q_shift(a), 0},
                                    qt[a], p.q_tile[a], w.kt[a], p.kv_tile[a]);
          else
            axis_class[a] = classify_axis_tiles(p.axes[a], p.axes[a].extent, qt[a], w.kt[a],
                                                p.q_tile[a], p.kv_tile[a]);
        }
      partial = combine(combine(axis_class[0], axis_class[1]), axis_class[2]) != PairClass::full;
    }
    const bool masked = partial || key_mask;
    if (p.turns != nullptr && wg == 0 && wtid == 0) {
      // The writer is done with this ring slot (last used four visits ago): at the previous
      // visit this warpgroup waited (dq_empty) for the writer to finish the visit before that,
      // and the writer goes in order.
      // Deterministic mode runs the grid kernels: qt is the tile's index on the grid.
      int rank = 0;
      if (p.additional) {
        rank = w.kt[2];
      } else {
        // The KV tile's index in the Q tile's box, in the CTAs' order (make_work), so that a
        // KV tile's turn never waits for a CTA launched after it.
        // With head rules the box of the head's group.
        const AxisRule* axes = axes_of_item<kRules>(p, head);
        int size[kAxes], off[kAxes];
#pragma unroll
        for (int a = 0; a < kAxes; ++a) {
          const Range kr = kv_tiles_for_q_tile(axes[a], p.axes[a].extent, qt[a], p.q_tile[a],
                                               p.kv_tile[a]);
          size[a] = kr.size();
          off[a] = w.kt[a] - kr.begin;
        }
        rank = p.kv_outer_axis_fastest ? (off[2] * size[1] + off[1]) * size[0] + off[0]
                                       : (off[0] * size[1] + off[1]) * size[2] + off[2];
      }
      const int q_lin = (qt[0] * p.q_tiles[1] + qt[1]) * p.q_tiles[2] + qt[2];
      s.turn_index[it % 4] = (w.batch * p.heads_q + head) * p.q_tiles_per_image + q_lin;
      s.turn_rank[it % 4] = rank;
    }

    float sacc[kS], dpacc[kS];
    // acc = (this warpgroup's rows of a KV-side tile) x (a Q-side tile)^T over the head dim:
    // S^T = K Q^T and dP^T = V dO^T.
    auto issue_ss = [&](float (&acc)[kS], uint32_t kv_side, uint32_t q_side) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const int box = kk * 16 / KvT::kBoxCols;
        const int within = (kk * 16 % KvT::kBoxCols) * 2;
        const uint64_t a = make_smem_desc(kv_side + box * KvT::kBoxBytes + k_rows + within, 16,
                                          8 * KvT::kRowBytes, KvT::kSwizzleMode);
        const uint64_t b = make_smem_desc(q_side + box * QT::kBoxBytes + within, 16,
                                          8 * QT::kRowBytes, QT::kSwizzleMode);
        WgmmaSS<kBwdQRows, Tag>::run(acc, a, b, kk > 0);
      }
    };
    mbar_wait(&s.q_full[stage], phase);
    wgmma_fence();
    issue_ss(sacc, k_base, q_base);
    issue_ss(dpacc, v_base, do_base);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(sacc);
    fence_regs(dpacc);

    // P^T = exp2(S^T scale_log2 - LSE2), dS^T = P^T (dP^T - delta). Full pairs run without
    // mask code; masked pairs zero P^T outside the key rows' masks (row_query_masks).
    const float scale_log2 = p.scale_log2;
    auto grad = [&](int idx, float l2, float dl, bool keep) {
      float pr = fast_exp2(fmaf(sacc[idx], scale_log2, -l2));
      if (!keep) pr = 0.f;
      sacc[idx] = pr;
      dpacc[idx] = pr * (dpacc[idx] - dl);
    };
    const float* lse2 = s.lse2[stage];
    const float* delta = s.delta[stage];
    if (!masked) {
#pragma unroll
      for (int j = 0; j < kBwdQRows / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = j * 8 + quad * 2 + e;
#pragma unroll
          for (int i = 0; i < 2; ++i) grad(j * 4 + i * 2 + e, lse2[c], delta[c], true);
        }
    } else {
      uint32_t keep[2];
      row_query_masks(role, head, partial, keep);
#pragma unroll
      for (int j = 0; j < kBwdQRows / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = j * 8 + quad * 2 + e;
#pragma unroll
          for (int i = 0; i < 2; ++i)
            grad(j * 4 + i * 2 + e, lse2[c], delta[c], (keep[i] >> (2 * j + e)) & 1);
        }
    }

    // P^T and dS^T as A operands (registers); dS^T also into shared memory for dQ (below).
    uint32_t pa[kS / 2], da[kS / 2];
#pragma unroll
    for (int k = 0; k < kBwdQRows / 16; ++k)
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        pa[k * 4 + h] = pack2<Tag>(sacc[8 * k + 2 * h], sacc[8 * k + 2 * h + 1]);
        da[k * 4 + h] = pack2<Tag>(dpacc[8 * k + 2 * h], dpacc[8 * k + 2 * h + 1]);
      }
    // dV += P^T dO, dK += dS^T Q (B operands N-major: transposed).
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kBwdQRows / 16; ++k) {
      const uint64_t db = make_smem_desc(do_base + k * 16 * QT::kRowBytes, QT::kBoxBytes,
                                         8 * QT::kRowBytes, QT::kSwizzleMode);
      WgmmaRS<D, Tag>::run(dv, &pa[k * 4], db);
    }
#pragma unroll
    for (int k = 0; k < kBwdQRows / 16; ++k) {
      const uint64_t db = make_smem_desc(q_base + k * 16 * QT::kRowBytes, QT::kBoxBytes,
                                         8 * QT::kRowBytes, QT::kSwizzleMode);
      WgmmaRS<D, Tag>::run(dk, &da[k * 4], db);
    }
    wgmma_commit();

    // While those run (they only read da): dS^T rows r (keys) of 128 bytes, 16-byte chunk c / 8 swizzled by XOR with r % 8: per
    // 16-query step k one stmatrix of the 8x8 blocks (rows + 0 / + 8, queries 16k / 16k + 8),
    // lane l giving row (l / 8 % 2) * 8 + l % 8 of block l / 16.
    uint8_t* ds = s.ds[stage];
    {
      // The row's address with chunk (l / 16) ^ (row % 8) (ds is 1024-byte aligned): step k
      // XORs the chunk with 2k.
      // (From a fresh read of the thread index: not held in a register through the loop.)
      const int t = thread_index();
      const int m = (t / 8) % 4, rr = t % 8;
      const uint32_t base =
          (smem_addr(ds) + (((t - 128) / 32) * 16 + (m & 1) * 8 + rr) * 128) |
          static_cast<uint32_t>(((m >> 1) ^ rr) << 4);
#pragma unroll
      for (int k = 0; k < kBwdQRows / 16; ++k)
        stmatrix_x4(base ^ (k << 5), da[k * 4], da[k * 4 + 1], da[k * 4 + 2], da[k * 4 + 3]);
    }

    // dQ = dS K: dS^T from shared memory (M-major), K N-major.
    fence_proxy_async_smem();
    mbar_wait(&s.dq_empty[wg], (it & 1) ^ 1);
    if (kSplitColumns)
      named_barrier_sync(3, 256);
    else
      named_barrier_sync(1 + wg, 128);
    float dq[kDqN / 2];
    const uint32_t ds_base = smem_addr(ds) + (kSplitColumns ? 0 : wg * 64 * 128);
    const uint32_t kb_base =
        k_base + (kSplitColumns ? wg * KvT::kBoxBytes : wg * 64 * KvT::kRowBytes);
#pragma unroll
    for (int kk = 0; kk < kDqKeys / 16; ++kk) {
      const uint64_t d_a = make_smem_desc(ds_base + kk * 16 * 128, 64 * 128, 1024, 1);
      const uint64_t d_b = make_smem_desc(kb_base + kk * 16 * KvT::kRowBytes, KvT::kBoxBytes,
                                          8 * KvT::kRowBytes, KvT::kSwizzleMode);
      WgmmaSSTT<kDqN, Tag>::run(dq, d_a, d_b, kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(dq);
    fence_regs(dk);
    fence_regs(dv);
    // Every lane releases the stage itself: its own LSE / delta reads are then ordered before
    // the producer's next stores into the stage by the barrier alone.
    mbar_arrive(&s.q_empty[stage]);

    // dQ into the staging area in the tensor map's box layout (the dQ writer has read the
    // previous pair's: waited for before the dQ GEMM, where fewer registers are live), from
    // where the writer adds it into the accumulator. Column pair
    // j * 8 + quad * 2 of row r sits in 16-byte chunk (j % 4) * 2 + quad / 2 of the row, swizzled
    // by XOR with r % 8: with the buffer 1024-byte aligned, the swizzle of the j-dependent part
    // is an XOR of the address with (j % 4) << 5.
    const uint32_t stage_dq = smem_addr(s.dq[wg][0]);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = row_in_wg + 8 * i;
      const uint32_t row_addr =
          stage_dq + r * 128 + (((quad / 2) ^ (r & 7)) << 4) + (quad & 1) * 8;
#pragma unroll
      for (int j = 0; j < kDqN / 8; ++j)
        st_shared_v2((row_addr ^ ((j % 4) << 5)) + (j / 4) * kDqBoxBytes, dq[j * 4 + i * 2],
                     dq[j * 4 + i * 2 + 1]);
    }
    fence_proxy_async_smem();
    mbar_arrive(&s.dq_full[wg]);
  });

  if (p.store_by_tma) {
    // Epilogue through the tensor maps of dK and dV: both warpgroups are done with K and V
    // (the last dQ GEMM reads K), so dK (scaled) and dV go into their buffers in the load
    // layout, and one thread stores the tile, rows outside the image clipped by the maps.
    named_barrier_sync(3, 256);
    using KvT = TileLayout<D, kBwdKvRows>;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = wg * 64 + row_in_wg + 8 * i;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        const int off = KvT::offset(r, j * 8 + quad * 2);
        *reinterpret_cast<uint32_t*>(s.k + off) =
            pack2<Tag>(dk[j * 4 + i * 2] * p.scale, dk[j * 4 + i * 2 + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(s.v + off) = pack2<Tag>(dv[j * 4 + i * 2], dv[j * 4 + i * 2 + 1]);
      }
    }
    fence_proxy_async_smem();
    named_barrier_sync(3, 256);
    if (threadIdx.x == 128) {
      // The tile's coordinates decoded again rather than kept in registers through the loop.
      const Work t = make_work<kPlacedQ>(p);
      const KvTileCoords c = kv_tile_coords(p, t);
#pragma unroll
      for (int box = 0; box < KvT::kBoxes; ++box) {
        tma_store_5d(tm_dk, s.k + box * KvT::kBoxBytes, box * KvT::kBoxCols, t.head_kv, c.c2, c.c3, c.c4);
        tma_store_5d(tm_dv, s.v + box * KvT::kBoxBytes, box * KvT::kBoxCols, t.head_kv, c.c2, c.c3, c.c4);
      }
      bulk_commit();
      bulk_wait<0>();
    }
    return;
  }

  // Epilogue for gradient tensors that tensor maps cannot address: dK (scaled) and dV of this
  // warpgroup's keys, element by element, rows outside the image skipped (additional keys past
  // the count: zero, as their accumulators are).
  const bool additional = p.additional != 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = wg * 64 + row_in_wg + 8 * i;
    if (additional ? w.kt[2] * kBwdKvRows + r >= p.additional_kv : !key_valid[i]) continue;
    int64_t ok_off = w.batch * p.dk_batch_stride + w.head_kv * p.dk_head_stride;
    int64_t ov_off = w.batch * p.dv_batch_stride + w.head_kv * p.dv_head_stride;
    if (additional) {
      const int j = w.kt[2] * kBwdKvRows + r;
      ok_off += j * p.dk_axis_stride[2];
      ov_off += j * p.dv_axis_stride[2];
    } else {
      int local[kAxes];
      tile_local(r, p.kv_tile, local);
#pragma unroll
      for (int a = 0; a < kAxes; ++a) {
        const int c = w.kt[a] * p.kv_tile[a] + local[a] - p.rows.k_begin[a];
        ok_off += c * p.dk_axis_stride[a];
        ov_off += c * p.dv_axis_stride[a];
      }
    }
    // 16-bit stores: the gradient tensors may have any element strides.
    uint16_t* dk_row = static_cast<uint16_t*>(p.dk) + ok_off;
    uint16_t* dv_row = static_cast<uint16_t*>(p.dv) + ov_off;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int col = j * 8 + quad * 2;
      const uint32_t k2 = pack2<Tag>(dk[j * 4 + i * 2] * p.scale, dk[j * 4 + i * 2 + 1] * p.scale);
      const uint32_t v2 = pack2<Tag>(dv[j * 4 + i * 2], dv[j * 4 + i * 2 + 1]);
      dk_row[col] = static_cast<uint16_t>(k2);
      dk_row[col + 1] = static_cast<uint16_t>(k2 >> 16);
      dv_row[col] = static_cast<uint16_t>(v2);
      dv_row[col + 1] = static_cast<uint16_t>(v2 >> 16);
    }
  }
}

// The dQ writer (one thread of the producer warpgroup): for every visit, each consumer
// warpgroup's staged dQ goes into the fp32 accumulator with one tensor reduce-add per 32-column
// box (rows outside the image are clipped by the map). In deterministic mode it first waits for
// the warpgroup's turn at the Q tile and passes the turn on once the additions are performed,
// so that the consumers never wait for turns themselves.
template <int D, bool kRules, bool kPlacedQ>
__device__ __forceinline__ void dq_writer(const BwdParams& p, SharedStorage<D, kRules, kPlacedQ>& s,
                                          const Work& w,
                                          const CUtensorMap* tm_dq) {
  constexpr int kDqN = dq_columns<D>();
  constexpr bool kSplitColumns = D == 128;
  const int x_base = w.batch * p.axes[0].extent;
  typename RoleWalk<D, kRules, kPlacedQ>::Walk walk;
  RoleWalk<D, kRules, kPlacedQ> role{p, s, w, walk};
  for_each_visit<kStages>(role, [&](int it, int head, const int(&)[kAxes], int, uint32_t) {
    int* turn = nullptr;
    int rank = 0;
#pragma unroll 1
    for (int wg = 0; wg < 2; ++wg) {
      mbar_wait(&s.dq_full[wg], it & 1);
      if (p.turns != nullptr && wg == 0) {  // written before warpgroup 0's dQ was staged
        turn = p.turns + s.turn_index[it % 4];
        rank = s.turn_rank[it % 4];
      }
      if (turn != nullptr) spin_until_at_least(turn, 2 * rank + wg);
      const int col0 = kSplitColumns ? wg * 64 : 0;
#pragma unroll
      for (int box = 0; box < kDqN / kDqBoxCols; ++box)
        tma_reduce_add_5d(tm_dq, s.dq[wg][box], col0 + box * kDqBoxCols, head,
                          role.q_first(2) - p.rows.q_begin[2], role.q_first(1) - p.rows.q_begin[1],
                          x_base + role.q_first(0) - p.rows.q_begin[0]);
      bulk_commit();
      if (turn != nullptr) {
        bulk_wait<0>();
        fence_proxy_async_global();
        red_release_add(turn, 1);
      } else {
        bulk_wait_read<0>();
      }
      mbar_arrive(&s.dq_empty[wg]);
    }
  });
  bulk_wait<0>();  // every addition performed before the CTA ends
}

// kRules: the kernel of launches with head rules (BwdParams::rules.groups > 0); without, the
// rules are never read and the kernel is the plain one. kPlacedQ: the kernel of launches with
// placed Q tiles (the chosen ScoredTiles::placement); without, the walk is the grid's and nothing of the
// placement is compiled.
template <int D, typename Tag, bool kRules, bool kPlacedQ>
__global__ void __launch_bounds__(kThreads, 1)
    backward_kernel(const __grid_constant__ CUtensorMap tm_q,
                    const __grid_constant__ CUtensorMap tm_do,
                    const __grid_constant__ CUtensorMap tm_k,
                    const __grid_constant__ CUtensorMap tm_v,
                    const __grid_constant__ CUtensorMap tm_dq,
                    const __grid_constant__ CUtensorMap tm_dk,
                    const __grid_constant__ CUtensorMap tm_dv, const __grid_constant__ BwdParams p) {
  extern __shared__ uint8_t smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<D, kRules, kPlacedQ>*>(align_shared_1024(smem_raw));
  const Work w = make_work<kPlacedQ>(p);
  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    prefetch_tensor_map(&tm_q);
    prefetch_tensor_map(&tm_do);
    prefetch_tensor_map(&tm_k);
    prefetch_tensor_map(&tm_v);
    prefetch_tensor_map(&tm_dq);
    if (p.store_by_tma) {
      prefetch_tensor_map(&tm_dk);
      prefetch_tensor_map(&tm_dv);
    }
    mbar_init(&s.kv_full, 1);
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&s.q_full[i], 33);  // the TMA issue (expect_tx) + 32 lanes writing LSE / delta
      mbar_init(&s.q_empty[i], 256);  // one arrival per consumer thread
    }
    for (int i = 0; i < 2; ++i) {
      mbar_init(&s.dq_full[i], 128);  // every thread of the warpgroup, after its stores
      mbar_init(&s.dq_empty[i], 1);   // the writer, once the reduction has read the staging
    }
    fence_barrier_init();
  }
  if (threadIdx.x >= 128 && threadIdx.x < 132)  // one consumer thread per quad
    tile_columns(p.q_tile, threadIdx.x - 128, s.q_columns[threadIdx.x - 128]);
  if constexpr (kRules) {
    if (threadIdx.x == 128) set_head_boxes<kPlacedQ>(p, w, s.heads);
  } else if constexpr (kPlacedQ) {
    if (threadIdx.x == 128)
      for (int a = 0; a < kAxes; ++a) s.q_shift[a] = w.q_shift[a];
  }
  __syncthreads();
  if (warpgroup == 0) {
    regs_decrease<kProducerRegs>();
    if (threadIdx.x < 32)
      producer<D, kRules, kPlacedQ>(p, s, w, &tm_q, &tm_do, &tm_k, &tm_v);
    else if (threadIdx.x == 32)
      dq_writer<D, kRules, kPlacedQ>(p, s, w, &tm_dq);
  } else {
    regs_increase<kConsumerRegs>();
    consumer<D, Tag, kRules, kPlacedQ>(p, s, w, warpgroup - 1, &tm_dk, &tm_dv);
  }
}

}  // namespace gna::hopper::bwd
