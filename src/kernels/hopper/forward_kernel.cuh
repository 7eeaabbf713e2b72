// The Hopper forward kernel: one CTA per (128-token Q tile, head, batch) with a producer warp
// issuing TMA loads of multi-dimensional boxes straight from the heads-last tensors and two
// consumer warpgroups (64 Q rows each) doing S = Q K^T (wgmma SS), the online softmax in the
// exp2 domain and O += P V (wgmma RS, P from registers). K and V flow through rings guarded by
// full/empty mbarriers. Per (Q tile, KV tile) pair the core's tiling math decides: empty pairs
// are never loaded, full pairs run without mask code, partial pairs apply the per-axis rule with
// one unsigned compare per axis and element. The GEMMs, the softmax and the epilogue are shared
// with the persistent kernel (forward_mainloop.cuh, forward_softmax.cuh, forward_epilogue.cuh).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gna/core/tiling.hpp"
#include "kernels/hopper/device_util.cuh"
#include "kernels/hopper/forward_epilogue.cuh"
#include "kernels/hopper/forward_load.cuh"
#include "kernels/hopper/forward_mainloop.cuh"
#include "kernels/hopper/forward_params.hpp"
#include "kernels/hopper/forward_softmax.cuh"
#include "kernels/hopper/ptx.cuh"

namespace gna::hopper {

constexpr int kStages = 2;  // K/V ring depth of the persistent kernel
// K/V ring depth of the one-item kernel: three stages where they fit beside the Q tile (head
// dim <= 128: 32 + 6 x 32 KB of the 227 KB), so a KV tile's load is issued two tiles ahead.
constexpr int kv_stages(int head_dim) { return head_dim > 128 ? 2 : 3; }
constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
// Register split (128 * producer + 256 * consumer <= 64 K): head dim 256 keeps 128 O
// accumulators per thread and takes the largest consumer share.
constexpr int producer_regs(int head_dim) { return head_dim > 128 ? 24 : 40; }
constexpr int consumer_regs(int head_dim) { return head_dim > 128 ? 240 : 232; }
constexpr int kClassTable = 256;  // per-axis class entries kept in shared memory

template <int D>
struct SharedStorage {
  alignas(1024) uint8_t q[TileLayout<D>::kTileBytes];
  alignas(1024) uint8_t k[kv_stages(D)][KvLayout<D>::kTileBytes];
  alignas(1024) uint8_t v[kv_stages(D)][KvLayout<D>::kTileBytes];
  uint64_t q_full;
  uint64_t k_full[kv_stages(D)], k_empty[kv_stages(D)];
  uint64_t v_full[kv_stages(D)], v_empty[kv_stages(D)];
  uint8_t axis_class[kAxes][kClassTable];  // PairClass per KV tile of each axis run
  int full_tiles[kAxes][2];  // runs longer than the table: their full tiles [begin, end)
  // Head dim 256: the consumers' per-row key windows (begin, width per row and axis) live here
  // instead of in registers, next to the 128 O accumulators per thread.
  int row_window[D > 128 ? 4 * kAxes : 1][D > 128 ? 256 : 1];
};

template <int D>
constexpr int shared_bytes() {
  return static_cast<int>(sizeof(SharedStorage<D>)) + 1024;  // + alignment slack
}

// The KV tiles a Q tile visits under the item's rules `axes` (axes_of_item): the per-axis runs
// from the core (grid or placed, p.kv_placement; tile m of axis a starts at key
// first[a] + m * kv_tile[a]), then the additional-KV tiles.
struct KvWalk {
  int first[kAxes];
  int size[kAxes];
  int spatial;     // tiles in the box
  int additional;  // tiles of additional keys
};

__device__ __forceinline__ KvWalk make_walk(const FwdParams& p, const AxisRule* axes,
                                            const int (&qt)[kAxes], int kv_tokens = kTileTokens) {
  KvWalk w;
  w.spatial = 1;
#pragma unroll
  for (int a = 0; a < kAxes; ++a) {
    const KvTileRun r = kv_tile_run(axes[a], p.axes[a].extent, qt[a], p.q_tile[a],
                                    p.kv_tile[a], p.kv_placement);
    w.first[a] = r.first;
    w.size[a] = r.count;
    w.spatial *= w.size[a];
  }
  w.additional = (p.additional_kv + kv_tokens - 1) / kv_tokens;
  return w;
}

// Position in the walk: index t (spatial tiles first, then additional ones) and the KV tile
// offsets inside the per-axis runs. The walk never meets an empty pair: every tile of an
// axis run intersects the union of the Q tile's windows on that axis, and because the rule is
// an AND over axes with Q and KV tiles being products of per-axis sets, a pair is empty only if
// one of its axes is.
struct KvCursor {
  int t;
  int idx[kAxes];
};

__device__ __forceinline__ void cursor_begin(KvCursor& c) {
  c.t = 0;
  c.idx[0] = c.idx[1] = c.idx[2] = 0;
}

__device__ __forceinline__ void cursor_step(const KvWalk& w, KvCursor& c) {
  ++c.t;
  if (c.t >= w.spatial) return;
  if (++c.idx[2] == w.size[2]) {
    c.idx[2] = 0;
    if (++c.idx[1] == w.size[1]) {
      c.idx[1] = 0;
      ++c.idx[0];
    }
  }
}

template <int D, bool kRules>
__device__ __forceinline__ void producer_loop(const FwdParams& p, SharedStorage<D>& s,
                                              const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                                              const CUtensorMap* tm_v, const CUtensorMap* tm_ak,
                                              const CUtensorMap* tm_av, const int (&qt)[kAxes],
                                              int head, int batch) {
  using L = TileLayout<D>;
  using KL = KvLayout<D>;
  constexpr int kKv = kv_tile_tokens(D);
  const int head_kv = head / p.heads_per_kv;
  const int x_base = batch * p.axes[0].extent;  // batches folded into the outermost axis
  mbar_expect_tx(&s.q_full, L::kTileBytes);
  load_tile<L>(s.q, tm_q, &s.q_full, head, qt[2] * p.q_tile[2], qt[1] * p.q_tile[1],
               x_base + qt[0] * p.q_tile[0]);

  const KvWalk w = make_walk(p, axes_of_item<kRules>(p, head), qt, kKv);
  int it = 0;
  KvCursor cur;
  cursor_begin(cur);
  for (; cur.t < w.spatial + w.additional; cursor_step(w, cur)) {
    int c2, c3, c4;
    const CUtensorMap *mk, *mv;
    if (cur.t < w.spatial) {
      // Any key coordinate: a box past the axis' end is zero-filled, or on the folded axis 0
      // holds the next batch's keys; either way the pair is partial and those keys masked.
      c2 = w.first[2] + cur.idx[2] * p.kv_tile[2];
      c3 = w.first[1] + cur.idx[1] * p.kv_tile[1];
      c4 = x_base + w.first[0] + cur.idx[0] * p.kv_tile[0];
      mk = tm_k;
      mv = tm_v;
    } else {
      c2 = (cur.t - w.spatial) * kKv;
      c3 = p.batch_offset + batch;
      c4 = 0;
      mk = tm_ak;
      mv = tm_av;
    }
    const int stage = it % kv_stages(D);
    const uint32_t phase = (it / kv_stages(D)) & 1;
    mbar_wait(&s.k_empty[stage], phase ^ 1);
    mbar_expect_tx(&s.k_full[stage], KL::kTileBytes);
    load_tile<KL>(s.k[stage], mk, &s.k_full[stage], head_kv, c2, c3, c4);
    mbar_wait(&s.v_empty[stage], phase ^ 1);
    mbar_expect_tx(&s.v_full[stage], KL::kTileBytes);
    load_tile<KL>(s.v[stage], mv, &s.v_full[stage], head_kv, c2, c3, c4);
    ++it;
  }
}

template <int D, typename Tag, bool kRules>
__device__ __forceinline__ void consumer_loop(const FwdParams& p, SharedStorage<D>& s,
                                              const int (&qt)[kAxes], int head, int batch,
                                              int consumer) {
  using L = TileLayout<D>;
  using KL = KvLayout<D>;
  constexpr int kKv = kv_tile_tokens(D);  // keys per KV tile
  constexpr int kS = kKv / 2;             // S accumulators per thread (64 x kKv per warpgroup)
  constexpr int kO = D / 2;            // O accumulators per thread (64 x D)
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int quad = lane % 4;
  const int row_in_wg = warp * 16 + lane / 4;  // and + 8

  const AxisRule* axes = axes_of_item<kRules>(p, head);  // the head's rules (head_rules.hpp)
  const KvWalk w = make_walk(p, axes, qt, kKv);
  const int total = w.spatial + w.additional;

  // Per row (2 per thread): the key window per axis, counted from the walk's first key (so tile
  // m of an axis starts at m * kv_tile, grid or placed).
  constexpr bool kWindowsInSmem = D > 128;
  const int ctid = threadIdx.x - 128;
  int key_begin[2][kAxes], key_width[2][kAxes];
  row_key_windows(p, axes, qt, consumer, row_in_wg, [&](int i, int a, Range kw) {
    key_begin[i][a] = kw.begin - w.first[a];
    key_width[i][a] = kw.size();
    if constexpr (kWindowsInSmem) {
      s.row_window[(i * kAxes + a) * 2][ctid] = kw.begin - w.first[a];
      s.row_window[(i * kAxes + a) * 2 + 1][ctid] = kw.size();
    }
  });
  auto window_begin = [&](int i, int a) {
    if constexpr (kWindowsInSmem) return s.row_window[(i * kAxes + a) * 2][ctid];
    else return key_begin[i][a];
  };
  auto window_width = [&](int i, int a) {
    if constexpr (kWindowsInSmem) return s.row_window[(i * kAxes + a) * 2 + 1][ctid];
    else return key_width[i][a];
  };

  float o[kO];
#pragma unroll
  for (int i = 0; i < kO; ++i) o[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // log2 domain (scaled)
  float row_sum[2] = {0.f, 0.f};              // this thread's partial sums
  const float scale_log2 = p.scale_log2;

  // wgmma descriptors of this warpgroup's Q rows and of the first K and V stages, built once; a
  // stage or k-step only moves the start address (desc_advance).
  const uint64_t q_desc = q_rows_desc<D>(smem_addr(s.q) + consumer * 64 * L::kRowBytes);
  const uint64_t k_desc = k_tile_desc<D>(smem_addr(s.k[0]));
  const uint64_t v_desc = v_tile_desc<D>(smem_addr(s.v[0]));

  // Per-axis pair classes of this Q tile's KV runs, computed once into shared memory; for runs
  // longer than the table, from the range of full tiles of each run.
  const bool class_table = w.size[0] <= kClassTable && w.size[1] <= kClassTable &&
                           w.size[2] <= kClassTable;
  if (!class_table && threadIdx.x == 128) {
#pragma unroll
    for (int a = 0; a < kAxes; ++a) {
      const Range r = full_tiles_of_run(axes[a], p.axes[a].extent, qt[a], p.q_tile[a],
                                        p.kv_tile[a], KvTileRun{w.first[a], w.size[a]});
      s.full_tiles[a][0] = r.begin;
      s.full_tiles[a][1] = r.end;
    }
  }
  if (class_table) {
    const int tid = threadIdx.x - 128;
#pragma unroll
    for (int a = 0; a < kAxes; ++a)
      for (int i = tid; i < w.size[a]; i += 256)
        s.axis_class[a][i] = static_cast<uint8_t>(
            classify_q_tile_keys(axes[a], p.axes[a].extent, qt[a], p.q_tile[a],
                                 w.first[a] + i * p.kv_tile[a], p.kv_tile[a]));
  }
  named_barrier_sync(5, 256);
  mbar_wait(&s.q_full, 0);  // the tables above overlap the Q load
  struct TileInfo {
    int kt[kAxes];  // KV tile per axis, counted in the walk
    bool partial;
    int key_limit;
  };
  auto tile_info = [&](const KvCursor& c) {
    TileInfo ti;
    ti.key_limit = kKv;
    ti.partial = false;
    if (c.t < w.spatial) {
      PairClass cls = PairClass::full;
#pragma unroll
      for (int a = 0; a < kAxes; ++a) {
        ti.kt[a] = c.idx[a];
        cls = combine(cls, class_table ? static_cast<PairClass>(s.axis_class[a][c.idx[a]])
                           : Range{s.full_tiles[a][0], s.full_tiles[a][1]}.contains(c.idx[a])
                               ? PairClass::full
                               : PairClass::partial);
      }
      ti.partial = cls == PairClass::partial;
    } else {
      ti.kt[0] = ti.kt[1] = ti.kt[2] = 0;
      ti.key_limit = min_i(kKv, p.additional_kv - (c.t - w.spatial) * kKv);
    }
    return ti;
  };

  auto issue_s = [&](float (&sacc)[kS], int stage) {
    issue_qk<D, Tag>(sacc, q_desc, desc_advance(k_desc, stage * KL::kTileBytes));
  };
  auto issue_o = [&](const uint32_t (&pa)[kKv / 4], int stage) {
    issue_pv<D, Tag>(o, pa, desc_advance(v_desc, stage * KL::kTileBytes));
  };
  // Masks S (partial pairs: the per-axis rule; additional-KV tail: keys beyond the count).
  auto apply_mask = [&](float (&sacc)[kS], const int (&kt)[kAxes], bool partial, int key_limit) {
    mask_tile<kKv>(
        sacc, partial, key_limit, p.kv_tile,
        [&](int i, int a) { return window_begin(i, a) - kt[a] * p.kv_tile[a]; }, window_width,
        quad);
  };

  // The pipeline over the Q tile's KV tiles (forward_mainloop.cuh); ping-pong turns are the
  // named barriers 3 and 4.
  const int my_turn = 3 + consumer, other_turn = 3 + (consumer ^ 1);
  KvCursor cur;
  cursor_begin(cur);
  uint32_t pa[kKv / 4];
  float sacc[kS];
  if (total > 0) {
    if (consumer == 1) named_barrier_arrive(3, 256);  // the first consumer goes first
    mbar_wait(&s.k_full[0], 0);
    TileInfo ti;
    consumer_first_tile<D, Tag>(
        sacc, pa, row_max, row_sum, scale_log2, my_turn, other_turn,
        [&](float (&acc)[kS]) { issue_s(acc, 0); },
        [&] {
          ti = tile_info(cur);
          cursor_step(w, cur);
        },
        [&](float (&acc)[kS]) {
          if (lane == 0) mbar_arrive(&s.k_empty[0]);
          apply_mask(acc, ti.kt, ti.partial, ti.key_limit);
        });
    int it = 1;
    for (; cur.t < total; ++it) {
      const int stage = it % kv_stages(D);
      const uint32_t phase = (it / kv_stages(D)) & 1;
      const int prev_stage = (it - 1) % kv_stages(D);
      const uint32_t prev_phase = ((it - 1) / kv_stages(D)) & 1;
      mbar_wait(&s.k_full[stage], phase);
      mbar_wait(&s.v_full[prev_stage], prev_phase);
      consumer_next_tile<D, Tag>(
          sacc, pa, o, row_max, row_sum, scale_log2, my_turn, other_turn, lane,
          &s.v_empty[prev_stage], [&](float (&acc)[kS]) { issue_s(acc, stage); },
          [&](const uint32_t (&a)[kKv / 4]) { issue_o(a, prev_stage); },
          [&] {
            ti = tile_info(cur);  // overlaps the GEMMs just issued
            cursor_step(w, cur);
          },
          [&](float (&acc)[kS]) {
            if (lane == 0) mbar_arrive(&s.k_empty[stage]);
            apply_mask(acc, ti.kt, ti.partial, ti.key_limit);
          },
          [] { return false; });  // one item: O is only rescaled
    }
    const int last = (it - 1) % kv_stages(D);
    consumer_last_pv<D>(o, pa, my_turn, other_turn, lane, &s.v_full[last],
                        ((it - 1) / kv_stages(D)) & 1, &s.v_empty[last],
                        [&](const uint32_t (&a)[kKv / 4]) { issue_o(a, last); });
    if (consumer == 0) named_barrier_sync(my_turn, 256);  // the second consumer's last pass
  }

  // Epilogue: normalise, stage this warpgroup's rows in its own rows of the Q tile, store.
  write_output_rows<D, Tag>(p, o, row_max, row_sum, s.q, consumer, row_in_wg, quad, qt, head,
                            batch);
}

// kRules: the kernel of launches with head rules (FwdParams::rules.groups > 0); without, the
// rules are never read and the kernel is the plain one.
template <int D, typename Tag, bool kRules>
__global__ void __launch_bounds__(kThreads, 1)
    forward_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                   const __grid_constant__ CUtensorMap tm_v,
                   const __grid_constant__ CUtensorMap tm_ak,
                   const __grid_constant__ CUtensorMap tm_av, const __grid_constant__ FwdParams p) {
  extern __shared__ uint8_t smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<D>*>(align_shared_1024(smem_raw));

  int work = blockIdx.x;
  const int tile = work % p.q_tiles_per_image;
  work /= p.q_tiles_per_image;
  const int head = work % p.heads_q;
  const int batch = work / p.heads_q;
  // Q tile coordinates as tile_coords computes them, written out: through the helper this
  // kernel compiles to other machine code (the measured one is kept).
  int qt[kAxes];
  qt[2] = tile % p.q_tiles[2];
  qt[1] = (tile / p.q_tiles[2]) % p.q_tiles[1];
  qt[0] = tile / (p.q_tiles[2] * p.q_tiles[1]);

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    prefetch_tensor_map(&tm_q);
    prefetch_tensor_map(&tm_k);
    prefetch_tensor_map(&tm_v);
    mbar_init(&s.q_full, 1);
    for (int i = 0; i < kv_stages(D); ++i) {
      mbar_init(&s.k_full[i], 1);
      mbar_init(&s.v_full[i], 1);
      mbar_init(&s.k_empty[i], 8);  // one arrival per consumer warp
      mbar_init(&s.v_empty[i], 8);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    regs_decrease<producer_regs(D)>();
    if (threadIdx.x == 0)
      producer_loop<D, kRules>(p, s, &tm_q, &tm_k, &tm_v, &tm_ak, &tm_av, qt, head, batch);
  } else {
    regs_increase<consumer_regs(D)>();
    consumer_loop<D, Tag, kRules>(p, s, qt, head, batch, warp_uniform(warpgroup - 1));
  }
}

}  // namespace gna::hopper
