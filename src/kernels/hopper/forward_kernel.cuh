// The Hopper forward kernel: CTAs of a producer warp issuing TMA loads of multi-dimensional boxes
// straight from the heads-last tensors and two consumer warpgroups (64 Q rows each) doing
// S = Q K^T (wgmma SS), the online softmax in the exp2 domain and O += P V (wgmma RS, P from
// registers). Which work items (128-token Q tile, head, batch) a CTA runs is its scheduler's
// (forward_scheduler.cuh): one item per CTA, or persistent CTAs walking items round robin or
// from a counter (longest first). One body serves both: the producer streams the KV tiles of the
// CTA's items through one K/V ring and tags each stage with what the consumers need (item, the
// item's tile count, tile class, key offsets); per (Q tile, KV tile) pair the core's tiling math
// decides: empty pairs are never loaded, full pairs run without mask code, partial pairs apply
// the per-axis rule as per-row bitmasks of the thread's keys, built while the tile's GEMMs run
// (column_mask.hpp). With many items per CTA, Q is double-buffered so the
// next item's Q arrives while the current one finishes, and the consumers pipeline across items:
// the next item's first S is issued together with the current one's last P V, and the current
// item's epilogue runs while the other consumer warpgroup holds the tensor cores. The GEMMs, the
// softmax and the epilogue are forward_mainloop.cuh, forward_softmax.cuh, forward_epilogue.cuh.
// With e4m3 operands (Tag E4m3Tag, the FP8 scheme) the producer warpgroup's other three warps
// transpose each V tile for the 8-bit P V GEMM and stage the tile's k_scale values
// (forward_transpose.cuh); the consumers scale S by q_scale per row and k_scale per key, quantize
// P to e4m3 and scale O by v_scale per channel.
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
#include "kernels/hopper/forward_scheduler.cuh"
#include "kernels/hopper/forward_softmax.cuh"
#include "kernels/hopper/forward_transpose.cuh"
#include "kernels/hopper/forward_work_item.cuh"
#include "kernels/hopper/ptx.cuh"

namespace gna::hopper {

constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups

// What the consumers need about the KV tile in a stage, written by the producer before the
// stage's K load is armed (the mbarrier's arrive releases it, the consumers' wait acquires it).
// The mask fields come first: the consumers copy only them at every tile.
struct TileMask {
  int flags;             // kPartialTile | kEndOfWork
  int key_limit;         // keys of the tile attended (fewer only in the last additional-KV tile:
                         // the additional keys' end, or the batch item's count)
  int kv_origin[kAxes];  // first key of the KV tile per axis (group coordinates)
};
struct StageTag {
  TileMask mask;
  int item_tiles;  // KV tiles of the work item (the consumers read it at its first tile)
  int tile;        // many items per CTA: Q tile of the work item (linear index in the image)
  int head_batch;  // many items per CTA: head + heads_q * batch
};
constexpr int kPartialTile = 2;  // the pair needs the per-axis mask
constexpr int kEndOfWork = 4;    // no KV tile: the CTA's work is done

// What the kernel's shape takes from the head dim and the scheduler. A CTA with many items
// double-buffers Q; the K/V ring then has 2 stages, one item per CTA has room for 3 (head dim
// <= 128: 32 + 6 x 32 KB of the 227 KB), so a KV tile's load is issued two tiles ahead. Head dim
// 256 (a 64 KB Q tile, 64-key KV tiles) has room for one Q buffer and 2 stages only.
template <int D, typename Sched, bool kFp8 = false>
struct ForwardShape {
  static_assert(D <= 128 || !Sched::kManyItems, "head dim 256 has room for one Q buffer only");
  static constexpr int kQBuffers = Sched::kManyItems ? 2 : 1;
  static constexpr int kStages = D > 128 || Sched::kManyItems ? 2 : 3;
  // Register split: 128 * producer + 256 * consumer within the launch allocation of
  // 384 x 168 = 64512 (setmaxnreg only moves registers inside it). Head dim 256 keeps 128 O
  // accumulators per thread and takes the largest consumer share; the producer of many items
  // keeps the next item's state; e4m3's producer warpgroup also transposes V (up to three
  // blocks of 4 x 16 bytes in flight per thread), its consumers hold half the P registers.
  static constexpr int kProducerRegs = D > 128 ? 24 : Sched::kManyItems ? 72 : kFp8 ? 64 : 40;
  static constexpr int kConsumerRegs = D > 128 ? 240 : Sched::kManyItems ? 216 : kFp8 ? 216 : 232;
  // Head dim 256: the consumers' per-row key windows live in shared memory instead of
  // registers, next to the 128 O accumulators per thread.
  static constexpr bool kWindowsInSmem = D > 128;
};

// e4m3 (Tag E4m3Tag): a Q buffer holds the e4m3 Q tile and, beside it, the O staging rows of
// the output dtype (the 16-bit layout, twice the Q tile's bytes); V has two rings, the TMA's raw
// tiles and their transposes (the consumers' V operand, in v), and each stage the keys' k_scale.
template <int D, typename Tag, typename Sched>
struct SharedStorage {
  using Shape = ForwardShape<D, Sched>;
  static constexpr bool kFp8 = OperandOf<Tag>::kFp8;
  static constexpr int kStages = Shape::kStages;
  static constexpr int kQTileBytes = QLayout<D, Tag>::kTileBytes;
  static constexpr int kQBufferBytes = kQTileBytes + (kFp8 ? TileLayout<D>::kTileBytes : 0);
  static constexpr int kVBytes = kFp8 ? VtLayout<D>::kTileBytes : KvLayout<D, Tag>::kTileBytes;
  static constexpr int kFp8Stages = kFp8 ? kStages : 1;
  // Item j of the CTA uses q[j % kQBuffers]; also its O staging.
  alignas(1024) uint8_t q[Shape::kQBuffers][kQBufferBytes];
  alignas(1024) uint8_t k[kStages][KvLayout<D, Tag>::kTileBytes];
  alignas(1024) uint8_t v[kStages][kVBytes];
  StageTag tag[kStages];
  uint64_t q_full[Shape::kQBuffers], q_empty[Shape::kQBuffers];
  uint64_t k_full[kStages], k_empty[kStages];
  uint64_t v_full[kStages], v_empty[kStages];
  // Per row and consumer thread: key window begin and width per row and axis.
  int row_window[Shape::kWindowsInSmem ? 4 * kAxes : 1][Shape::kWindowsInSmem ? 256 : 1];
  // e4m3 only (one element otherwise, after what the 16-bit kernels use).
  VStageTag vtag[kFp8Stages];
  uint64_t v_raw_full[kFp8Stages], v_raw_empty[kFp8Stages], k_scale_full[kFp8Stages];
  uint64_t vtag_full[kFp8Stages];
  float k_scale[kFp8Stages][kFp8 ? kv_tile_tokens(D) : 1];
  alignas(1024) uint8_t v_raw[kFp8Stages][kFp8 ? KvLayout<D, Tag>::kTileBytes : 16];
};

template <int D, typename Tag, typename Sched>
constexpr int shared_bytes() {
  return static_cast<int>(sizeof(SharedStorage<D, Tag, Sched>)) + 1024;  // + alignment slack
}

template <int D, typename Tag, typename Sched, bool kRules>
__device__ __forceinline__ void producer(const FwdParams& p, SharedStorage<D, Tag, Sched>& s,
                                         const Sched& sched, const CUtensorMap* tm_q,
                                         const CUtensorMap* tm_k, const CUtensorMap* tm_v,
                                         const CUtensorMap* tm_ak, const CUtensorMap* tm_av) {
  using Shape = ForwardShape<D, Sched>;
  using L = QLayout<D, Tag>;
  using KL = KvLayout<D, Tag>;
  constexpr bool kFp8 = OperandOf<Tag>::kFp8;
  constexpr int kKv = kv_tile_tokens(D);
  constexpr int kQ = Shape::kQBuffers;
  constexpr int kStages = Shape::kStages;
  // Q of work item `item`, the CTA's item number `jq`, into buffer jq % kQ once the consumers
  // have released it (after the epilogue of item jq - kQ).
  auto load_q = [&](int item, int jq) {
    int tile, hb;
    decode_item<kRules>(p, item, tile, hb);
    int qt[kAxes];
    tile_coords(p, tile, qt);
    const int qb = jq % kQ;
    if constexpr (kQ > 1) mbar_wait(&s.q_empty[qb], ((jq / kQ) & 1) ^ 1);
    mbar_expect_tx(&s.q_full[qb], L::kTileBytes);
    // Tensor rows: the tile's first query less the query tensor's first row (rows.q_begin).
    load_tile<L>(s.q[qb], tm_q, &s.q_full[qb], hb % p.heads_q,
                 qt[2] * p.q_tile[2] - p.rows.q_begin[2], qt[1] * p.q_tile[1] - p.rows.q_begin[1],
                 hb / p.heads_q * p.axes[0].extent + qt[0] * p.q_tile[0] - p.rows.q_begin[0]);
  };
  int k = sched.first_item();
  int j = 0;   // items of this CTA
  int it = 0;  // KV tiles of this CTA
  if (!sched.done(p, k)) load_q(k, 0);
  while (!sched.done(p, k)) {
    // The next item, asked for at the start of this one: the atomic's latency and the next
    // item's Q load (from DRAM: Q is read once) then hide behind this item's KV tiles.
    const int next = sched.next_item(p, k);
    int tile, hb;
    decode_item<kRules>(p, k, tile, hb);
    const int head = hb % p.heads_q;
    const int head_kv = head / p.heads_per_kv;
    const int x_base = hb / p.heads_q * p.axes[0].extent;  // batches folded into axis 0
    int qt[kAxes];
    tile_coords(p, tile, qt);
    // The next item's Q goes into the buffer of the previous item, which the consumers release
    // after its epilogue, i.e. during this item's first KV tile: issued after this item's
    // kQPrefetchTile-th tile (the producer runs two stages ahead), or after its last.
    constexpr int kQPrefetchTile = 3;
    bool next_q_issued = sched.done(p, next);
    auto prefetch_next_q = [&] {
      if (!next_q_issued) load_q(next, j + 1);
      next_q_issued = true;
    };

    // The box of KV tiles from the core's per-axis runs under the item's rules (axes_of_item;
    // grid or placed: tile m of axis a starts at key first[a] + m * kv_tile[a]), then the
    // additional-KV tiles. A tile's pair class per axis comes from the run's range of full tiles
    // (the core's full_tiles_of_run; every other tile of the run is partial) as key bounds
    // computed once per item: per KV tile the walk only compares its first key with them.
    const AxisRule* axes = axes_of_item<kRules>(p, head);
    int first[kAxes], end[kAxes], full_begin[kAxes], full_end[kAxes];
    // The additional keys the item's batch attends (its count; all without counts).
    const int additional =
        additional_keys_of_batch(p.counts, p.additional_kv, p.batch_offset + hb / p.heads_q);
    int item_tiles = (additional + kKv - 1) / kKv;
    {
      int spatial = 1;
#pragma unroll
      for (int a = 0; a < kAxes; ++a) {
        const KvTileRun r = kv_tile_run(axes[a], p.axes[a].extent, qt[a], p.q_tile[a],
                                        p.kv_tile[a], p.kv_placement);
        const Range full =
            full_tiles_of_run(axes[a], p.axes[a].extent, qt[a], p.q_tile[a], p.kv_tile[a], r);
        first[a] = r.first;
        end[a] = r.first + r.count * p.kv_tile[a];
        full_begin[a] = r.first + full.begin * p.kv_tile[a];
        full_end[a] = r.first + full.end * p.kv_tile[a];
        spatial *= r.count;
      }
      item_tiles += spatial;
    }
    const int first_it = it;
    // One KV tile into the next stage, tagged for the consumers.
    auto emit = [&](int flags, int key_limit, int o0, int o1, int o2, int c2, int c3, int c4,
                    const CUtensorMap* mk, const CUtensorMap* mv, int v_kind) {
      const int stage = it % kStages;
      const uint32_t phase = (it / kStages) & 1;
      mbar_wait(&s.k_empty[stage], phase ^ 1);
      StageTag& tag = s.tag[stage];
      tag.mask.flags = flags;
      tag.mask.key_limit = key_limit;
      tag.mask.kv_origin[0] = o0;
      tag.mask.kv_origin[1] = o1;
      tag.mask.kv_origin[2] = o2;
      tag.item_tiles = item_tiles;
      if constexpr (Sched::kManyItems) {  // one item per CTA: the consumers know their item
        tag.tile = tile;
        tag.head_batch = hb;
      }
      mbar_expect_tx(&s.k_full[stage], KL::kTileBytes);
      load_tile<KL>(s.k[stage], mk, &s.k_full[stage], head_kv, c2, c3, c4);
      if constexpr (kFp8) {
        // Raw V for the transposers, with what they need for the tile's k_scale.
        mbar_wait(&s.v_raw_empty[stage], phase ^ 1);
        VStageTag& vt = s.vtag[stage];
        vt.kind = v_kind;
        vt.origin[0] = v_kind == kAdditionalKeys ? c2 : o0;  // additional: first key
        vt.origin[1] = o1;
        vt.origin[2] = o2;
        vt.head_kv = head_kv;
        vt.batch = hb / p.heads_q;
        mbar_arrive(&s.vtag_full[stage]);
        mbar_expect_tx(&s.v_raw_full[stage], KL::kTileBytes);
        load_tile<KL>(s.v_raw[stage], mv, &s.v_raw_full[stage], head_kv, c2, c3, c4);
      } else {
        mbar_wait(&s.v_empty[stage], phase ^ 1);
        mbar_expect_tx(&s.v_full[stage], KL::kTileBytes);
        load_tile<KL>(s.v[stage], mv, &s.v_full[stage], head_kv, c2, c3, c4);
      }
      ++it;
      if (it - first_it == kQPrefetchTile) prefetch_next_q();
    };
    // The walk (o: a tile's first key per axis), each axis' class where that axis' tile changes.
    // It never meets an empty pair: every tile of an axis run meets the union of the Q tile's
    // windows on that axis, and a pair of product sets under a rule that is an AND over axes is
    // empty only if one of its axes is. A tile past an axis' end is zero-filled or, on the folded
    // axis 0, holds the next batch's keys: its pair is partial and those keys are masked. On a
    // slab, keys outside the key tensor read zeros: no own query attends them (the slab's
    // keys hold every own query's window), so a pair with such keys is partial and the own
    // rows' masks drop them; rows outside the query tensor are never stored.
    {
      for (int o0 = first[0]; o0 < end[0]; o0 += p.kv_tile[0]) {
        const bool full0 = o0 >= full_begin[0] && o0 < full_end[0];
        for (int o1 = first[1]; o1 < end[1]; o1 += p.kv_tile[1]) {
          const bool full01 = full0 && o1 >= full_begin[1] && o1 < full_end[1];
          for (int o2 = first[2]; o2 < end[2]; o2 += p.kv_tile[2]) {
            const bool full = full01 && o2 >= full_begin[2] && o2 < full_end[2];
            emit(full ? 0 : kPartialTile, kKv, o0, o1, o2, o2 - p.rows.k_begin[2],
                 o1 - p.rows.k_begin[1], x_base + o0 - p.rows.k_begin[0], tm_k, tm_v,
                 kSpatialKeys);
          }
        }
      }
    }
    for (int a0 = 0; a0 < additional; a0 += kKv)
      emit(0, min_i(kKv, additional - a0), 0, 0, 0, a0, p.batch_offset + hb / p.heads_q, 0,
           tm_ak, tm_av, kAdditionalKeys);
    prefetch_next_q();
    ++j;
    k = next;
  }
  if constexpr (Sched::kManyItems) {
    sched.finish(p);
    // End of work: a stage with no data, only the tag (one item per CTA: the consumers stop
    // after the item's tiles).
    const int stage = it % kStages;
    mbar_wait(&s.k_empty[stage], ((it / kStages) & 1) ^ 1);
    s.tag[stage].mask.flags = kEndOfWork;
    mbar_arrive(&s.k_full[stage]);
  }
  if constexpr (kFp8) {  // the transposers' end of work: a tag without a tile
    const int stage = it % kStages;
    mbar_wait(&s.v_raw_empty[stage], ((it / kStages) & 1) ^ 1);
    s.vtag[stage].kind = kNoMoreKeys;
    mbar_arrive(&s.vtag_full[stage]);
  }
}

template <int D, typename Tag, typename Sched, bool kRules>
__device__ __forceinline__ void consumer(const FwdParams& p, SharedStorage<D, Tag, Sched>& s,
                                         const Sched& sched, int consumer) {
  using Shape = ForwardShape<D, Sched>;
  using Storage = SharedStorage<D, Tag, Sched>;
  using L = QLayout<D, Tag>;
  using KL = KvLayout<D, Tag>;
  constexpr bool kFp8 = OperandOf<Tag>::kFp8;
  constexpr int kKv = kv_tile_tokens(D);  // keys per KV tile
  constexpr int kS = kKv / 2;             // S accumulators per thread (64 x kKv per warpgroup)
  constexpr int kO = D / 2;               // O accumulators per thread (64 x D)
  constexpr int kP = kPRegs<D, Tag>;      // P registers per thread
  constexpr int kQ = Shape::kQBuffers;
  constexpr int kStages = Shape::kStages;
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int quad = lane % 4;
  const int row_in_wg = warp * 16 + lane / 4;  // and + 8
  // Per row: scale * log2(e), times the row's q_scale with e4m3 operands (set per item).
  float row_scale[2] = {p.scale_log2, p.scale_log2};

  // The CTA's first item is the scheduler's, the producer's too: its row windows are computed
  // while Q and the first K/V tiles load. A CTA without items only lets the producer finish.
  int item_tile, item_hb;
  {
    const int item = sched.first_item();
    if (sched.done(p, item)) return;
    decode_item<kRules>(p, item, item_tile, item_hb);
  }

  // Per row (2 per thread): the key window [begin, end) per axis in group coordinates, under the
  // rules of the item's head (head_rules.hpp).
  const int ctid = threadIdx.x - 128;
  int key_begin[2][kAxes], key_end[2][kAxes];
  auto begin_item = [&](int tile, int hb) {
    int qt[kAxes];
    tile_coords(p, tile, qt);
    if constexpr (kFp8) {
#pragma unroll
      for (int i = 0; i < 2; ++i)
        row_scale[i] = p.scale_log2 * token_row_value(p, p.fp8.q_scale, qt,
                                                      consumer * 64 + row_in_wg + 8 * i,
                                                      hb % p.heads_q, hb / p.heads_q, 1.f);
    }
    row_key_windows(p, axes_of_item<kRules>(p, hb % p.heads_q), qt, consumer, row_in_wg,
                    [&](int i, int a, Range kw) {
                      if constexpr (Shape::kWindowsInSmem) {
                        s.row_window[(i * kAxes + a) * 2][ctid] = kw.begin;
                        s.row_window[(i * kAxes + a) * 2 + 1][ctid] = kw.end;
                      } else {
                        key_begin[i][a] = kw.begin;
                        key_end[i][a] = kw.end;
                      }
                    });
  };
  auto window_begin = [&](int i, int a) {
    if constexpr (Shape::kWindowsInSmem) return s.row_window[(i * kAxes + a) * 2][ctid];
    else return key_begin[i][a];
  };
  auto window_end = [&](int i, int a) {
    if constexpr (Shape::kWindowsInSmem) return s.row_window[(i * kAxes + a) * 2 + 1][ctid];
    else return key_end[i][a];
  };
  // The KV tile's axes seen from this thread's columns (the launch's tile shape).
  AxisColumns key_axes[kAxes];
  tile_columns(p.kv_tile, quad, key_axes);
  begin_item(item_tile, item_hb);

  float o[kO];
#pragma unroll
  for (int i = 0; i < kO; ++i) o[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // log2 domain (scaled)
  float row_sum[2] = {0.f, 0.f};              // this thread's partial sums

  // wgmma descriptors of the first Q buffer (this warpgroup's rows), K and V stages, built once;
  // a buffer, stage or k-step only moves the start address. Buffer and stage indices are warp
  // uniform, so the descriptors stay in uniform registers.
  const uint64_t q_desc =
      q_rows_desc<D, Tag>(smem_addr(s.q[0]) + consumer * 64 * L::kRowBytes);
  const uint64_t k_desc = k_tile_desc<D, Tag>(smem_addr(s.k[0]));
  const uint64_t v_desc = v_tile_desc<D, Tag>(smem_addr(s.v[0]));
  auto issue_s = [&](float (&sacc)[kS], int qb, int stage) {
    issue_qk<D, Tag>(sacc, desc_advance(q_desc, qb * Storage::kQBufferBytes),
                     desc_advance(k_desc, stage * KL::kTileBytes));
  };
  auto issue_o = [&](const uint32_t (&pa)[kP], int stage) {
    issue_pv<D, Tag>(o, pa, desc_advance(v_desc, stage * Storage::kVBytes));
  };
  // What the mask needs, from a stage's tag (its mask fields only), while the stage's GEMMs run
  // (no shared-memory load between the K wait and the GEMM issue, nor between S's completion and
  // the mask): a partial pair's row masks of this thread's keys; a warp whose rows keep every
  // key of the tile runs it as a full pair. Every read of a stage's tag precedes, in program
  // order, this thread's own release of that K stage: the producer rewrites the tag right after
  // its k_empty wait.
  struct TileKeep {
    int flags, key_limit;
    uint32_t keep[2];  // partial pairs: per row, the keys kept (row_key_masks)
  };
  constexpr uint32_t kAllKeys = kKv / 4 >= 32 ? 0xffffffffu : (1u << (kKv / 4)) - 1u;
  auto read_mask = [&](TileKeep& m, int stage) {
    const TileMask t = s.tag[stage].mask;
    m.flags = warp_uniform(t.flags);
    m.key_limit = t.key_limit;
    if (m.flags & kPartialTile) {
      row_key_masks(key_axes, t.kv_origin, window_begin, window_end, m.keep);
      if (__all_sync(0xffffffff, (m.keep[0] & m.keep[1] & kAllKeys) == kAllKeys))
        m.flags &= ~kPartialTile;
    }
  };
  // Releases the K stage once S is done (its tag is in registers by then; the arrive's memory
  // clobber keeps the tag loads before it), then masks S: partial pairs get the per-axis rule,
  // the additional-KV tail the key count. Every consumer thread arrives (k_empty counts 256):
  // each thread's own release orders its reads of the tag (here, at an item's first tile and at
  // the loop's start) before the producer's next write of it, without relying on warp-level
  // ordering.
  // e4m3: S first gets its keys' k_scale (the stage's, from the transposers), read before the
  // release like the tag.
  auto release_and_mask = [&](float (&sacc)[kS], int stage, uint32_t phase, const TileKeep& m) {
    if constexpr (kFp8) {
      mbar_wait(&s.k_scale_full[stage], phase);
#pragma unroll
      for (int j = 0; j < kKv / 8; ++j) {
        const float2 ks = *reinterpret_cast<const float2*>(&s.k_scale[stage][j * 8 + quad * 2]);
        sacc[j * 4 + 0] *= ks.x;
        sacc[j * 4 + 1] *= ks.y;
        sacc[j * 4 + 2] *= ks.x;
        sacc[j * 4 + 3] *= ks.y;
      }
    }
    mbar_arrive(&s.k_empty[stage]);
    mask_tile<kKv>(sacc, (m.flags & kPartialTile) != 0, m.key_limit, m.keep, quad);
  };
  // Epilogue of a finished item: normalise, stage this warpgroup's rows in its own rows of the
  // item's Q buffer (its last S = Q K^T is done), store to the heads-last output; with a second
  // Q buffer, release this one to the producer.
  auto epilogue = [&](int tile, int hb, int qb, const float (&m)[2], float (&l_part)[2]) {
    int qt[kAxes];
    tile_coords(p, tile, qt);
    write_output_rows<D, Tag>(p, o, m, l_part, s.q[qb] + (kFp8 ? Storage::kQTileBytes : 0),
                              consumer, row_in_wg, quad, qt, hb % p.heads_q, hb / p.heads_q);
    if constexpr (kQ > 1) {
      // The producer's next TMA write to this buffer must follow these generic accesses.
      fence_proxy_async_smem();
      mbar_arrive(&s.q_empty[qb]);
    }
  };

  // The pipeline over the KV tiles of the CTA's items (forward_mainloop.cuh); ping-pong turns
  // are the named barriers 3 and 4, and an item's epilogue runs in the warpgroup's softmax slot,
  // while the other warpgroup's GEMMs hold the tensor cores. The first consumer goes first.
  const int my_turn = 3 + consumer, other_turn = 3 + (consumer ^ 1);
  if (consumer == 1) named_barrier_arrive(3, 256);
  int j = 0;  // items of this CTA: item j's Q is in q[j % kQ]
  mbar_wait(&s.q_full[0], 0);
  mbar_wait(&s.k_full[0], 0);
  // KV tiles of the current item still to come: the loop needs the tags only where an item ends,
  // so the wait for a K tile leads straight to the GEMM issue.
  int tiles_left = warp_uniform(s.tag[0].item_tiles) - 1;
  uint32_t pa[kP];
  float sacc[kS];
  {
    TileKeep mask;
    consumer_first_tile<D, Tag>(
        sacc, pa, row_max, row_sum, row_scale, my_turn, other_turn,
        [&](float (&acc)[kS]) { issue_s(acc, 0, 0); }, [&] { read_mask(mask, 0); },
        [&](float (&acc)[kS]) { release_and_mask(acc, 0, 0, mask); });
  }
  int it = 1;
  for (;; ++it) {
    const int stage = it % kStages;
    const uint32_t phase = (it / kStages) & 1;
    const int prev_stage = (it - 1) % kStages;
    const uint32_t prev_phase = ((it - 1) / kStages) & 1;
    // The item's tiles are done: with one item per CTA, so is the CTA; with many, the next
    // stage starts the next item (keep the finished one's row statistics for its epilogue,
    // start afresh) or ends the work.
    bool first = false;
    int done_tile = item_tile, done_hb = item_hb;
    float done_max[2] = {row_max[0], row_max[1]}, done_sum[2] = {row_sum[0], row_sum[1]};
    if (tiles_left == 0) {
      if constexpr (!Sched::kManyItems) {
        break;
      } else {
        mbar_wait(&s.k_full[stage], phase);
        if (warp_uniform(s.tag[stage].mask.flags) & kEndOfWork) break;
        first = true;
        item_tile = s.tag[stage].tile;
        item_hb = s.tag[stage].head_batch;
        tiles_left = warp_uniform(s.tag[stage].item_tiles);
        row_max[0] = row_max[1] = -INFINITY;
        row_sum[0] = row_sum[1] = 0.f;
        begin_item(item_tile, item_hb);
        ++j;
        mbar_wait(&s.q_full[j % kQ], (j / kQ) & 1);
      }
    }
    if (!first) mbar_wait(&s.k_full[stage], phase);
    --tiles_left;
    mbar_wait(&s.v_full[prev_stage], prev_phase);
    TileKeep mask;
    consumer_next_tile<D, Tag>(
        sacc, pa, o, row_max, row_sum, row_scale, my_turn, other_turn, lane,
        &s.v_empty[prev_stage], [&](float (&acc)[kS]) { issue_s(acc, j % kQ, stage); },
        [&](const uint32_t (&a)[kP]) { issue_o(a, prev_stage); },
        [&] { read_mask(mask, stage); },
        [&](float (&acc)[kS]) { release_and_mask(acc, stage, phase, mask); },
        [&] {
          if constexpr (Sched::kManyItems) {
            if (!first) return false;
            epilogue(done_tile, done_hb, (j - 1) % kQ, done_max, done_sum);
#pragma unroll
            for (int i = 0; i < kO; ++i) o[i] = 0.f;
            return true;
          } else {
            return false;  // one item: O is only rescaled
          }
        });
  }
  const int last = (it - 1) % kStages;
  consumer_last_pv<D, Tag>(o, pa, my_turn, other_turn, lane, &s.v_full[last],
                           ((it - 1) / kStages) & 1, &s.v_empty[last],
                           [&](const uint32_t (&a)[kP]) { issue_o(a, last); });
  epilogue(item_tile, item_hb, j % kQ, row_max, row_sum);
  if (consumer == 0) named_barrier_sync(my_turn, 256);  // the second consumer's last turn
}

// Sched: the work hand-out (forward_scheduler.cuh). kRules: the kernel of launches with head
// rules (FwdParams::rules.groups > 0); without, the rules are never read and the kernel is the
// plain one.
template <int D, typename Tag, bool kRules, typename Sched>
__global__ void __launch_bounds__(kThreads, 1)
    forward_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                   const __grid_constant__ CUtensorMap tm_v,
                   const __grid_constant__ CUtensorMap tm_ak,
                   const __grid_constant__ CUtensorMap tm_av, const __grid_constant__ FwdParams p) {
  constexpr bool kFp8 = OperandOf<Tag>::kFp8;
  using Shape = ForwardShape<D, Sched, kFp8>;
  extern __shared__ uint8_t smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<D, Tag, Sched>*>(align_shared_1024(smem_raw));
  const Sched sched{};
  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    prefetch_tensor_map(&tm_q);
    prefetch_tensor_map(&tm_k);
    prefetch_tensor_map(&tm_v);
    for (int i = 0; i < Shape::kQBuffers; ++i) {
      mbar_init(&s.q_full[i], 1);
      // Every consumer thread arrives on the barrier that releases a Q buffer after the O
      // staging: each thread's own release orders its generic accesses before the producer's
      // next TMA write.
      mbar_init(&s.q_empty[i], 256);
    }
    for (int i = 0; i < Shape::kStages; ++i) {
      mbar_init(&s.k_full[i], 1);
      mbar_init(&s.v_full[i], kFp8 ? kTransposeThreads : 1);
      // Every consumer thread releases a K stage: its tag is read by every thread, and each
      // thread's own arrival orders its reads before the producer's next write of the tag.
      mbar_init(&s.k_empty[i], 256);
      mbar_init(&s.v_empty[i], 8);  // one arrival per consumer warp (V is read by wgmma only)
    }
    if constexpr (kFp8) {
      // V^T (v_full) is written by the transposers, each of whom arrives; so do they on the
      // k_scale stages and when they give a raw V stage back.
      for (int i = 0; i < Shape::kStages; ++i) {
        mbar_init(&s.v_raw_full[i], 1);
        mbar_init(&s.vtag_full[i], 1);
        mbar_init(&s.v_raw_empty[i], kTransposeThreads);
        mbar_init(&s.k_scale_full[i], kTransposeThreads);
      }
    }
    fence_barrier_init();
  }
  __syncthreads();
  if (warpgroup == 0) {
    regs_decrease<Shape::kProducerRegs>();
    if (threadIdx.x == 0) {
      producer<D, Tag, Sched, kRules>(p, s, sched, &tm_q, &tm_k, &tm_v, &tm_ak, &tm_av);
    } else if constexpr (kFp8) {
      if (threadIdx.x >= 32) v_transposer<D, Shape::kStages>(p, s, threadIdx.x - 32);
    }
  } else {
    regs_increase<Shape::kConsumerRegs>();
    consumer<D, Tag, Sched, kRules>(p, s, sched, warp_uniform(warpgroup - 1));
  }
}

}  // namespace gna::hopper
