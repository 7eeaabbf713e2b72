// The persistent Hopper forward kernel: one CTA per SM walks a list of work items (128-token Q
// tile, head, batch), taken from a global counter (dynamic, longest first when the host passes
// an order) or round robin. The producer thread streams the KV tiles of consecutive items through
// one K/V ring without a break and tags each stage with what the consumers need (item, tile
// class, key offsets); Q is double-buffered so the next item's Q arrives while the current one
// finishes. The consumers pipeline across items: the first S = Q K^T of the next item is issued
// together with the last P V of the current one, and the current item's epilogue runs while the
// other consumer warpgroup holds the tensor cores. Everything per tile (GEMMs, mask, softmax) and
// the epilogue come from the headers the one-CTA-per-item kernel (forward_kernel.cuh) uses.
#pragma once

#include "kernels/hopper/forward_kernel.cuh"
#include "kernels/hopper/forward_load.cuh"
#include "kernels/hopper/forward_work_item.cuh"

namespace gna::hopper {

// Register split: the producer walks more state than in the one-item kernel. setmaxnreg moves
// registers within the CTA's launch allocation (384 threads x 168), so 128 * producer +
// 256 * consumer must stay within 64512.
constexpr int kPersistentProducerRegs = 72;
constexpr int kPersistentConsumerRegs = 216;

// What the consumers need about the KV tile in a stage, written by the producer before the
// stage's K load is armed (the mbarrier's arrive releases it, the consumers' wait acquires it).
struct StageTag {
  int tile;        // Q tile of the work item (linear index inside the image)
  int head_batch;  // head + heads_q * batch
  int flags;       // kFirstTile | kPartialTile | kEndOfWork
  int key_limit;   // real keys of the tile (< 128 only for the last additional-KV tile)
  int kv_origin[kAxes];  // first key of the KV tile per axis (group coordinates)
  int group;       // head-rule group of the item's head (written with head rules only)
};
constexpr int kFirstTile = 1;    // first KV tile of a work item
constexpr int kPartialTile = 2;  // the pair needs the per-axis mask
constexpr int kEndOfWork = 4;    // no KV tile: the CTA's work is done

template <int D>
struct PersistentStorage {
  alignas(1024) uint8_t q[2][TileLayout<D>::kTileBytes];  // item j uses q[j % 2]; also O staging
  alignas(1024) uint8_t k[kStages][TileLayout<D>::kTileBytes];
  alignas(1024) uint8_t v[kStages][TileLayout<D>::kTileBytes];
  StageTag tag[kStages];
  uint64_t q_full[2], q_empty[2];
  uint64_t k_full[kStages], k_empty[kStages];
  uint64_t v_full[kStages], v_empty[kStages];
};

template <int D>
constexpr int persistent_shared_bytes() {
  return static_cast<int>(sizeof(PersistentStorage<D>)) + 1024;  // + alignment slack
}

template <int D, bool kRules>
__device__ __forceinline__ void persistent_producer(const FwdParams& p, PersistentStorage<D>& s,
                                                    const CUtensorMap* tm_q,
                                                    const CUtensorMap* tm_k,
                                                    const CUtensorMap* tm_v,
                                                    const CUtensorMap* tm_ak,
                                                    const CUtensorMap* tm_av) {
  using L = TileLayout<D>;
  // Q of work item `item`, the CTA's item number `jq`, into buffer jq % 2.
  auto load_q = [&](int item, int jq) {
    int tile, hb;
    decode_item<kRules>(p, item, tile, hb);
    int qt[kAxes];
    tile_coords(p, tile, qt);
    const int qb = jq & 1;
    mbar_wait(&s.q_empty[qb], ((jq >> 1) & 1) ^ 1);
    // The boxes' loop written out: through load_tile (coordinates computed once, not per box)
    // this kernel compiles to other machine code at head dim 128 (the measured one is kept).
    mbar_expect_tx(&s.q_full[qb], L::kTileBytes);
#pragma unroll
    for (int box = 0; box < L::kBoxes; ++box)
      tma_load_5d(s.q[qb] + box * L::kBoxBytes, tm_q, &s.q_full[qb], box * L::kBoxCols,
                  hb % p.heads_q, qt[2] * p.q_tile[2], qt[1] * p.q_tile[1],
                  hb / p.heads_q * p.axes[0].extent + qt[0] * p.q_tile[0]);
  };
  int k = blockIdx.x;
  int j = 0;   // items of this CTA
  int it = 0;  // KV tiles of this CTA
  if (k < p.items) load_q(k, 0);
  while (k < p.items) {
    // The next item, asked for at the start of this one: the atomic's latency and the next
    // item's Q load (from DRAM: Q is read once) then hide behind this item's KV tiles.
    const int next =
        p.work_counter != nullptr ? atomicAdd(p.work_counter, 1) + gridDim.x : k + gridDim.x;
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
    bool next_q_issued = next >= p.items;
    auto prefetch_next_q = [&] {
      if (!next_q_issued) load_q(next, j + 1);
      next_q_issued = true;
    };

    const int first_it = it;
    // One KV tile into the next stage, tagged for the consumers.
    auto emit = [&](int flags, int key_limit, int o0, int o1, int o2, int c2, int c3, int c4,
                    const CUtensorMap* mk, const CUtensorMap* mv) {
      const int stage = it % kStages;
      const uint32_t phase = (it / kStages) & 1;
      mbar_wait(&s.k_empty[stage], phase ^ 1);
      StageTag& tag = s.tag[stage];
      tag.tile = tile;
      tag.head_batch = hb;
      tag.flags = flags | (it == first_it ? kFirstTile : 0);
      tag.key_limit = key_limit;
      tag.kv_origin[0] = o0;
      tag.kv_origin[1] = o1;
      tag.kv_origin[2] = o2;
      if constexpr (kRules) tag.group = p.rules.group_of_head[head];
      mbar_expect_tx(&s.k_full[stage], L::kTileBytes);
      load_tile<L>(s.k[stage], mk, &s.k_full[stage], head_kv, c2, c3, c4);
      mbar_wait(&s.v_empty[stage], phase ^ 1);
      mbar_expect_tx(&s.v_full[stage], L::kTileBytes);
      load_tile<L>(s.v[stage], mv, &s.v_full[stage], head_kv, c2, c3, c4);
      ++it;
      if (it - first_it == kQPrefetchTile) prefetch_next_q();
    };
    // The box of KV tiles from the core's per-axis runs (grid or placed: o is the tile's first
    // key), classes per axis computed where that axis' tile changes, then the additional-KV
    // tiles. A tile past an axis' end is zero-filled or, on the folded axis 0, holds the next
    // batch's keys: its pair is partial and those keys are masked.
    // Under the item's rules (axes_of_item).
    {
      const AxisRule* axes = axes_of_item<kRules>(p, head);
      int first[kAxes], end[kAxes];
#pragma unroll
      for (int a = 0; a < kAxes; ++a) {
        const KvTileRun r = kv_tile_run(axes[a], p.axes[a].extent, qt[a], p.q_tile[a],
                                        p.kv_tile[a], p.kv_placement);
        first[a] = r.first;
        end[a] = r.first + r.count * p.kv_tile[a];
      }
      for (int o0 = first[0]; o0 < end[0]; o0 += p.kv_tile[0]) {
        const PairClass c0 = classify_q_tile_keys(axes[0], p.axes[0].extent, qt[0], p.q_tile[0],
                                                  o0, p.kv_tile[0]);
        for (int o1 = first[1]; o1 < end[1]; o1 += p.kv_tile[1]) {
          const PairClass c01 = combine(c0, classify_q_tile_keys(axes[1], p.axes[1].extent,
                                                                 qt[1], p.q_tile[1], o1,
                                                                 p.kv_tile[1]));
          for (int o2 = first[2]; o2 < end[2]; o2 += p.kv_tile[2]) {
            const PairClass c = combine(c01, classify_q_tile_keys(axes[2], p.axes[2].extent,
                                                                  qt[2], p.q_tile[2], o2,
                                                                  p.kv_tile[2]));
            emit(c == PairClass::partial ? kPartialTile : 0, kTileTokens, o0, o1, o2, o2, o1,
                 x_base + o0, tm_k, tm_v);
          }
        }
      }
    }
    for (int a0 = 0; a0 < p.additional_kv; a0 += kTileTokens)
      emit(0, min_i(kTileTokens, p.additional_kv - a0), 0, 0, 0, a0,
           p.batch_offset + hb / p.heads_q, 0, tm_ak, tm_av);
    prefetch_next_q();
    ++j;
    k = next;
  }
  if (p.work_counter != nullptr) {
    // Every CTA has made its last request (the one past the end); the last CTA to get here
    // resets the counter for the next launch on this stream.
    __threadfence();
    if (atomicAdd(p.work_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
      atomicExch(p.work_counter, 0);
      atomicExch(p.work_counter + 1, 0);
    }
  }
  // End of work: a stage with no data, only the tag.
  const int stage = it % kStages;
  mbar_wait(&s.k_empty[stage], ((it / kStages) & 1) ^ 1);
  s.tag[stage].flags = kEndOfWork;
  mbar_arrive(&s.k_full[stage]);
}

// Per-row state of a consumer thread for one work item (2 rows per thread).
struct RowWindows {
  int begin[2][kAxes], width[2][kAxes];
};

template <int D, typename Tag, bool kRules>
__device__ __forceinline__ void persistent_consumer(const FwdParams& p, PersistentStorage<D>& s,
                                                    int consumer) {
  using L = TileLayout<D>;
  constexpr int kS = kTileTokens / 2;  // S accumulators per thread (64 x 128 per warpgroup)
  constexpr int kO = D / 2;            // O accumulators per thread (64 x D)
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int quad = lane % 4;
  const int row_in_wg = warp * 16 + lane / 4;  // and + 8
  const float scale_log2 = p.scale_log2;

  RowWindows win;
  // A new item: its tile and, with head rules, the head-rule group from its first stage's tag.
  auto begin_item = [&](int tile, const StageTag& tag) {
    int qt[kAxes];
    tile_coords(p, tile, qt);
    const AxisRule* axes;
    if constexpr (kRules)
      axes = p.rules.axes[tag.group];
    else
      axes = p.axes;
    row_key_windows(p, axes, qt, consumer, row_in_wg, [&](int i, int a, Range kw) {
      win.begin[i][a] = kw.begin;
      win.width[i][a] = kw.size();
    });
  };

  float o[kO];
#pragma unroll
  for (int i = 0; i < kO; ++i) o[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // log2 domain (scaled)
  float row_sum[2] = {0.f, 0.f};              // this thread's partial sums
  const uint32_t q_row_offset = consumer * 64 * L::kRowBytes;

  // wgmma descriptors of the first buffer of Q (this warpgroup's rows), K and V, built once;
  // a buffer, stage or k-step only moves the start address. Buffer and stage indices are warp
  // uniform, so the descriptors stay in uniform registers.
  const uint64_t q_desc = q_rows_desc<D>(smem_addr(s.q[0]) + q_row_offset);
  const uint64_t k_desc = k_tile_desc<D>(smem_addr(s.k[0]));
  const uint64_t v_desc = v_tile_desc<D>(smem_addr(s.v[0]));
  auto issue_s = [&](float (&sacc)[kS], int qb, int stage) {
    issue_qk<D, Tag>(sacc, desc_advance(q_desc, qb * L::kTileBytes),
                     desc_advance(k_desc, stage * L::kTileBytes));
  };
  auto issue_o = [&](const uint32_t (&pa)[kTileTokens / 4], int stage) {
    issue_pv<D, Tag>(o, pa, desc_advance(v_desc, stage * L::kTileBytes));
  };
  // Masks S: partial pairs get the per-axis rule, the additional-KV tail the key count.
  auto apply_mask = [&](float (&sacc)[kS], const StageTag& tag) {
    mask_tile<kTileTokens>(
        sacc, (tag.flags & kPartialTile) != 0, tag.key_limit, p.kv_tile,
        [&](int i, int a) { return win.begin[i][a] - tag.kv_origin[a]; },
        [&](int i, int a) { return win.width[i][a]; }, quad);
  };
  // Epilogue of a finished item: normalise, stage this warpgroup's rows in its own rows of the
  // item's Q buffer (its last S = Q K^T is done), store to the heads-last output, then release
  // the Q buffer to the producer.
  auto epilogue = [&](int tile, int hb, int qb, const float (&m)[2], float (&l_part)[2]) {
    int qt[kAxes];
    tile_coords(p, tile, qt);
    write_output_rows<D, Tag>(p, o, m, l_part, s.q[qb], consumer, row_in_wg, quad, qt,
                              hb % p.heads_q, hb / p.heads_q);
    // The producer's next TMA write to this buffer must follow these generic accesses.
    fence_proxy_async_smem();
    mbar_arrive(&s.q_empty[qb]);
  };

  // The pipeline over the KV tiles of consecutive items (forward_mainloop.cuh); ping-pong turns
  // are the named barriers 3 and 4, and an item's epilogue runs in the warpgroup's softmax slot,
  // while the other warpgroup's GEMMs hold the tensor cores. The first consumer goes first.
  const int my_turn = 3 + consumer, other_turn = 3 + (consumer ^ 1);
  if (consumer == 1) named_barrier_arrive(3, 256);
  mbar_wait(&s.k_full[0], 0);
  if (warp_uniform(s.tag[0].flags) & kEndOfWork) {  // no item for this CTA
    if (consumer == 0) named_barrier_sync(my_turn, 256);
    return;
  }
  int item_tile = s.tag[0].tile, item_hb = s.tag[0].head_batch;
  int j = 0;  // items of this CTA: item j's Q is in q[j % 2]
  begin_item(item_tile, s.tag[0]);
  mbar_wait(&s.q_full[0], 0);
  uint32_t pa[kTileTokens / 4];
  float sacc[kS];
  consumer_first_tile<D, Tag>(
      sacc, pa, row_max, row_sum, scale_log2, my_turn, other_turn,
      [&](float (&acc)[kS]) { issue_s(acc, 0, 0); }, [] {},
      [&](float (&acc)[kS]) {
        {
          const StageTag tag = s.tag[0];
          apply_mask(acc, tag);
        }
        mbar_arrive(&s.k_empty[0]);
      });
  int it = 1;
  for (;; ++it) {
    const int stage = it % kStages;
    const uint32_t phase = (it / kStages) & 1;
    const int prev_stage = (it - 1) % kStages;
    const uint32_t prev_phase = ((it - 1) / kStages) & 1;
    mbar_wait(&s.k_full[stage], phase);
    const int flags = warp_uniform(s.tag[stage].flags);
    if (flags & kEndOfWork) break;
    // A new item: keep the finished one's row statistics for its epilogue, start afresh.
    const bool first = flags & kFirstTile;
    int done_tile = item_tile, done_hb = item_hb;
    float done_max[2] = {row_max[0], row_max[1]}, done_sum[2] = {row_sum[0], row_sum[1]};
    if (first) {
      item_tile = s.tag[stage].tile;
      item_hb = s.tag[stage].head_batch;
      row_max[0] = row_max[1] = -INFINITY;
      row_sum[0] = row_sum[1] = 0.f;
      begin_item(item_tile, s.tag[stage]);
      ++j;
      mbar_wait(&s.q_full[j & 1], (j >> 1) & 1);
    }
    mbar_wait(&s.v_full[prev_stage], prev_phase);
    consumer_next_tile<D, Tag>(
        sacc, pa, o, row_max, row_sum, scale_log2, my_turn, other_turn, lane,
        &s.v_empty[prev_stage], [&](float (&acc)[kS]) { issue_s(acc, j & 1, stage); },
        [&](const uint32_t (&a)[kTileTokens / 4]) { issue_o(a, prev_stage); }, [] {},
        [&](float (&acc)[kS]) {
          {
            const StageTag tag = s.tag[stage];
            apply_mask(acc, tag);
          }
          mbar_arrive(&s.k_empty[stage]);  // after reading the tag that lives with the stage
        },
        [&] {
          if (!first) return false;
          epilogue(done_tile, done_hb, (j - 1) & 1, done_max, done_sum);
#pragma unroll
          for (int i = 0; i < kO; ++i) o[i] = 0.f;
          return true;
        });
  }
  const int last = (it - 1) % kStages;
  consumer_last_pv<D>(o, pa, my_turn, other_turn, lane, &s.v_full[last],
                      ((it - 1) / kStages) & 1, &s.v_empty[last],
                      [&](const uint32_t (&a)[kTileTokens / 4]) { issue_o(a, last); });
  epilogue(item_tile, item_hb, j & 1, row_max, row_sum);
  if (consumer == 0) named_barrier_sync(my_turn, 256);  // the second consumer's last turn
}

// kRules: as forward_kernel's.
template <int D, typename Tag, bool kRules>
__global__ void __launch_bounds__(kThreads, 1)
    persistent_forward_kernel(const __grid_constant__ CUtensorMap tm_q,
                              const __grid_constant__ CUtensorMap tm_k,
                              const __grid_constant__ CUtensorMap tm_v,
                              const __grid_constant__ CUtensorMap tm_ak,
                              const __grid_constant__ CUtensorMap tm_av,
                              const __grid_constant__ FwdParams p) {
  extern __shared__ uint8_t smem_raw[];
  auto& s = *reinterpret_cast<PersistentStorage<D>*>(align_shared_1024(smem_raw));
  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    prefetch_tensor_map(&tm_q);
    prefetch_tensor_map(&tm_k);
    prefetch_tensor_map(&tm_v);
    for (int i = 0; i < 2; ++i) {
      mbar_init(&s.q_full[i], 1);
      // Every consumer thread arrives on the barriers that release generic shared-memory
      // accesses (stage tags, O staging): each thread's own release orders its accesses
      // before the producer's next write, with no reliance on warp-level ordering.
      mbar_init(&s.q_empty[i], 256);
    }
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&s.k_full[i], 1);
      mbar_init(&s.v_full[i], 1);
      mbar_init(&s.k_empty[i], 256);
      mbar_init(&s.v_empty[i], 8);  // one arrival per consumer warp (V is read by wgmma only)
    }
    fence_barrier_init();
  }
  __syncthreads();
  if (warpgroup == 0) {
    regs_decrease<kPersistentProducerRegs>();
    if (threadIdx.x == 0) persistent_producer<D, kRules>(p, s, &tm_q, &tm_k, &tm_v, &tm_ak, &tm_av);
  } else {
    regs_increase<kPersistentConsumerRegs>();
    persistent_consumer<D, Tag, kRules>(p, s, warp_uniform(warpgroup - 1));
  }
}

}  // namespace gna::hopper
