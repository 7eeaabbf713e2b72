// Portable fused forward (mma.sync, sm_80+): one CTA of 4 warps per (multi-dimensional Q tile of
// up to 64 * MB tokens, batch, head, dilation group); two CTAs share an SM so that one computes
// while the other waits at its barriers. It visits only the box of KV tiles (64 tokens
// each) that its queries need, on the grid of the KV tile or placed at the first key of the Q
// tile's union window (ForwardParams::kv_placement, rule.md section 7.2), skips empty pairs, runs
// fully dense pairs without mask code and masks partial ones by per-row bitmasks of each thread's
// keys (gna/core/column_mask.hpp; a warp whose rows keep every key of the tile runs it as full;
// only the axes on which the pair is partial are masked; a partial pair whose keys are all real
// loads as a full one), then the additional KV tokens in the same online softmax.
// K/V tiles are double-buffered with cp.async; each warp owns MB m-blocks of 16 query rows, so
// every K/V fragment it loads feeds MB MMAs (MB = 2 halves the shared-memory traffic per FLOP;
// MB = 1 keeps Q tiles small where neighborhoods are small). Q stays in shared memory.
// The operands' element type is a template axis: fp16 / bf16, or e4m3 (the FP8 forward, sm_89+,
// docs/fp8.md: m16n8k32 MMAs, the scheme's scales, one m-block per warp).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "gna/core/column_mask.hpp"
#include "gna/core/kernel_tiles.hpp"
#include "gna/core/tiling.hpp"
#include "kernels/common/element.cuh"
#include "kernels/common/token_tensor.cuh"
#include "kernels/portable/mma.cuh"
#include "kernels/portable/path_counts.hpp"
#include "kernels/portable/tile_rows.cuh"

namespace gna::portable {

constexpr int kForwardWarps = 4;
constexpr int kForwardRowsKV = kPortableForwardRowsKV;  // the tile chooser's KV tile
// The walk's steps (KV tile offsets in the box and pair class) are tabulated this many at a time
// (see ForwardCta::build_table) and the table is refilled as the walk passes its end; only boxes
// with an axis too long for the entries' bits work them out per tile.
constexpr int kForwardTableTiles = 1024;
// Q rows of a CTA whose warps own MB m-blocks each.
constexpr int forward_rows_q(int mb) { return kForwardWarps * 16 * mb; }
// A thread's keys of a KV tile as mask bits (column_mask.hpp: bit 2 j + e for key j * 8 + quad *
// 2 + e): all of them.
constexpr uint32_t kForwardAllKeys = (1u << (kForwardRowsKV / 4)) - 1;

// The operands' element type In: T (fp16 / bf16, the output's) or E4m3 (the FP8 forward, sm_89+:
// e4m3 Q, K, V and P with the scheme's scales, docs/fp8.md; O in T).
template <typename In>
constexpr bool kE4m3Operands = std::is_same<In, E4m3>::value;
// Elements of In per 16-byte copy.
template <typename In>
constexpr int kChunkElements = 16 / int(sizeof(In));
// log2(448): the FP8 forward's exponent bias that makes exp2 give 448 p, the e4m3 operand P
// (the normalizer l sums 448 p too, so that O = acc * v_scale / l).
constexpr float kLog2E4m3Max = 8.807354922057604f;

// The FP8 forward's scales (In = E4m3; docs/fp8.md): q_scale, k_scale and lse_bias per token and
// head ([B, spatial.., H]; lse_bias.data null: 0), add_k_scale per additional key ([B, Na, Hk]),
// v_scale per channel ([B, Hk, Dv], channels contiguous).
struct Fp8ScaleViews {
  cuda::TokenTensor<const float> q_scale, k_scale, lse_bias, add_k_scale;
  const float* v_scale = nullptr;
  int64_t v_scale_batch = 0, v_scale_head = 0;
};

template <typename T, typename In = T>
struct ForwardParams {
  Problem p;
  int tile_q[kMaxRank];
  int tile_kv[kMaxRank];
  int q_tiles[kMaxRank];  // Q tiles along each axis in the longest dilation group
  int q_volume;           // tokens of a Q tile (<= forward_rows_q(MB))
  KvPlacement kv_placement;  // where a Q tile's KV tiles start (tiling.hpp, kv_tile_run)
  float scale_log2;       // softmax scale * log2(e)
  cuda::TokenTensor<const In> q, k, v, add_k, add_v;
  cuda::TokenTensor<T> o;
  cuda::TokenTensor<float> lse;
  bool write_lse;
  Fp8ScaleViews fp8;  // read by the e4m3 instantiations only
  ForwardPathCounts* path_counts;  // nullptr unless a test counts the paths (path_counts.hpp)
};

// ELEMENT_BYTES: the operands' element size (2, or 1 for e4m3: tiles of half as many 16-bit
// columns, and the e4m3 forward's scales).
template <int D, int DV, int MB, int ELEMENT_BYTES = 2>
struct ForwardSmem {
  static constexpr int kRowsQ = forward_rows_q(MB);
  static constexpr bool kE4m3 = ELEMENT_BYTES == 1;
  using QTile = SmemTile<kRowsQ, D * ELEMENT_BYTES / 2>;
  using KTile = SmemTile<kForwardRowsKV, D * ELEMENT_BYTES / 2>;
  using VTile = SmemTile<kForwardRowsKV, DV * ELEMENT_BYTES / 2>;
  // Q, then stage 0's K and V, the tables, and stage 1's K and V last, so that a single-stage
  // kernel (devices whose shared memory per block holds no second stage) allocates only up to
  // the tables' end.
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + QTile::kBytes;
  static constexpr int kV = kK + KTile::kBytes;
  static constexpr int kQRows = kV + VTile::kBytes;
  static constexpr int kKVRows = kQRows + 4 * kRowsQ;
  static constexpr int kKDelta = kKVRows + 4 * kForwardRowsKV;
  static constexpr int kVDelta = kKDelta + 8 * kForwardRowsKV;
  static constexpr int kWindows = kVDelta + 8 * kForwardRowsKV;  // key window per Q row and axis
  static constexpr int kTable = kWindows + kRowsQ * kMaxRank * int(sizeof(Range));
  // The KV tile's axes seen from each quad's keys (column_mask.hpp), read by partial pairs.
  static constexpr int kColumns = kTable + 4 * kForwardTableTiles;
  // The first key per axis of the spatial KV tile in each stage and the axes on which its pair
  // is partial (bit a), written with its load.
  static constexpr int kStageKeys = kColumns + 4 * kMaxRank * int(sizeof(AxisColumns));
  static constexpr int kStageStride = kMaxRank + 1;
  // e4m3: the k_scale of each stage's keys, and scale * log2(e) * q_scale per Q row.
  static constexpr int kStageEnd = kStageKeys + 2 * kStageStride * int(sizeof(int));
  static constexpr int kKScale = kE4m3 ? (kStageEnd + 15) / 16 * 16 : kStageEnd;
  static constexpr int kQFactor = kKScale + (kE4m3 ? 2 * kForwardRowsKV * int(sizeof(float)) : 0);
  static constexpr int kSingleStageBytes = kQFactor + (kE4m3 ? kRowsQ * int(sizeof(float)) : 0);
  static constexpr int kK1 = (kSingleStageBytes + 127) / 128 * 128;
  static constexpr int kV1 = kK1 + KTile::kBytes;
  static constexpr int kBytes = kV1 + VTile::kBytes;
  static constexpr int bytes(int stages) { return stages == 1 ? kSingleStageBytes : kBytes; }
  __device__ static int k_offset(int stage) { return stage == 0 ? kK : kK1; }
  __device__ static int v_offset(int stage) { return stage == 0 ? kV : kV1; }
};

// The KV tiles one Q tile visits: the per-axis box (runs of KV tiles, grid or placed), then the
// additional-KV tiles.
struct KvWalk {
  KvTileRun run[kMaxRank];
  int spatial = 0;     // tiles in the box
  int total = 0;       // + additional tiles
  int additional = 0;  // additional KV tokens
  // The walk starts at spatial tile `rotation` and wraps around, so that the CTAs of one head do
  // not all read the same KV tile at the same time (dense problems).
  int rotation = 0;
  // Walk table (see WalkEntry): whether the box fits its entries (bits per axis), and the walk
  // step of its first entry.
  bool tabulated = false;
  int entry_bits = 0;
  int table_first = 0;

  // Spatial tile (row-major in the box) visited at step i < spatial.
  __device__ __forceinline__ int spatial_tile(int i) const {
    const int j = i + rotation;
    return j >= spatial ? j - spatial : j;
  }

  // Offsets in the box (tile m of each axis' run) of spatial tile i (row-major in the box).
  __device__ __forceinline__ void tile_offsets(int i, int rank, int* m) const {
    GNA_FOR_AXES_REVERSE(a, rank) {
      const int size = run[a].count;
      m[a] = i % size;
      i /= size;
    }
  }
};

// Which (batch, head, dilation group, Q tile) a CTA computes and the KV tiles it visits. Kept in
// shared memory: the main loop reloads the few values it needs instead of holding two dozen
// registers next to the accumulators.
struct ForwardCtaState {
  GroupGeometry geo;
  int qt[kMaxRank];      // Q tile coordinates
  int q_base[kMaxRank];  // first group coordinate of the Q tile per axis
  int b, h, hk;
  KvWalk walk;
  // Element offset of the first token of the box's first KV tile, and the step per tile along
  // each axis (K and V): a tile's offset is origin + sum of its box offsets times the steps.
  int64_t k_origin, v_origin;
  int64_t k_step[kMaxRank], v_step[kMaxRank];
  // Per axis, the tiles m of the box whose pair is full on that axis (full_tiles_of_run): the
  // axes of a partial pair outside these need masks.
  Range full_tiles[kMaxRank];
};

// Walk step i < spatial of a CTA, packed in a Word: its KV tile's offsets in the box (`bits` per
// axis) and the pair's class by the rule (top two bits). The table holds 32-bit entries with
// min(30 / rank, 20) bits per axis (walk_entry_bits); boxes with a longer axis use 64-bit
// entries with 20 bits per axis, worked out per tile.
template <typename Word>
struct WalkEntry {
  static constexpr int kClassShift = 8 * sizeof(Word) - 2;
  __device__ __forceinline__ static int offset(Word e, int a, int bits) {
    return static_cast<int>((e >> (bits * a)) & ((Word(1) << bits) - 1));
  }
  __device__ __forceinline__ static PairClass pair_class(Word e) { return static_cast<PairClass>(e >> kClassShift); }
};
constexpr int kRuleEntryBits = 20;
// (At most kRuleEntryBits: the table is refilled from rule-path entries.)
__device__ __forceinline__ int walk_entry_bits(int rank) { return min_i(30 / rank, kRuleEntryBits); }

template <typename Word, typename Params>
__device__ __forceinline__ Word spatial_entry(const Params& P, const ForwardCtaState& st, int i,
                                              int bits) {
  const Problem& p = P.p;
  int m[kMaxRank];
  st.walk.tile_offsets(st.walk.spatial_tile(i), p.rank, m);
  PairClass c = PairClass::full;
  Word e = 0;
  GNA_FOR_AXES(a, p.rank) {
    const int k_begin = st.walk.run[a].first + m[a] * P.tile_kv[a];
    c = combine(c, classify_q_tile_keys(p.axes[a], st.geo.n[a], st.qt[a], P.tile_q[a], k_begin,
                                        P.tile_kv[a]));
    e |= static_cast<Word>(m[a]) << (bits * a);
  }
  return e | static_cast<Word>(c) << WalkEntry<Word>::kClassShift;
}
template <typename Params>
__device__ __noinline__ uint64_t spatial_entry_from_rule(const Params& P, const ForwardCtaState& st,
                                                         int i) {
  return spatial_entry<uint64_t, Params>(P, st, i, kRuleEntryBits);
}

template <typename T, typename In, int D, int DV, int MB>
struct ForwardCta {
  using Params = ForwardParams<T, In>;
  using Smem = ForwardSmem<D, DV, MB, int(sizeof(In))>;
  static constexpr int kChunk = kChunkElements<In>;
  static constexpr int kRowsQ = Smem::kRowsQ;
  using QTile = typename Smem::QTile;
  using KTile = typename Smem::KTile;
  using VTile = typename Smem::VTile;
  static constexpr int BN = kForwardRowsKV;

  // The parameters and the dynamic shared memory are known to the compiler; the CTA's state is
  // in shared memory (see ForwardCtaState), reached through references.
  const Params& P;
  char* smem;
  GroupGeometry& geo;
  int (&qt)[kMaxRank];
  int (&q_base)[kMaxRank];
  int &b, &h, &hk;
  KvWalk& walk;
  const ForwardCtaState& state;

  __device__ ForwardCta(const Params& params, char* s, ForwardCtaState& st)
      : P(params), smem(s), geo(st.geo), qt(st.qt), q_base(st.q_base), b(st.b), h(st.h),
        hk(st.hk), walk(st.walk), state(st) {}

  __device__ uint32_t* q_rows() const { return reinterpret_cast<uint32_t*>(smem + Smem::kQRows); }
  __device__ uint32_t* kv_rows() const { return reinterpret_cast<uint32_t*>(smem + Smem::kKVRows); }
  // Byte offset of each KV tile row from the tile's first token (K and V strides): a load adds
  // it to a byte pointer, with no scaling.
  __device__ int64_t* k_delta() const { return reinterpret_cast<int64_t*>(smem + Smem::kKDelta); }
  __device__ int64_t* v_delta() const { return reinterpret_cast<int64_t*>(smem + Smem::kVDelta); }
  __device__ Range* windows() const { return reinterpret_cast<Range*>(smem + Smem::kWindows); }

  // Key window of every Q row (used by partial pairs). Rows without a query (padding, or outside
  // the group), whose results are never stored, keep every key, so that they do not keep a warp
  // off the full path.
  __device__ void build_windows() {
    const Problem& p = P.p;
    for (int r = threadIdx.x; r < kRowsQ; r += blockDim.x) {
      int ig[kMaxRank];
      const bool valid = geo.coordinates(q_rows()[r], q_base, ig);
      GNA_FOR_AXES(a, p.rank) {
        windows()[r * kMaxRank + a] =
            valid ? key_window(p.axes[a], geo.n[a], ig[a]) : Range{-(1 << 30), 1 << 30};
      }
    }
  }

  __device__ AxisColumns* columns() const { return reinterpret_cast<AxisColumns*>(smem + Smem::kColumns); }
  // The KV tile's axes as seen from each quad's keys.
  __device__ void build_columns() {
    if (threadIdx.x < 4) {
      AxisColumns axes[kMaxRank];
      tile_columns(P.tile_kv, threadIdx.x, axes);
#pragma unroll
      for (int a = 0; a < kMaxRank; ++a) columns()[threadIdx.x * kMaxRank + a] = axes[a];
    }
  }

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
      k_delta()[r] = dk * int64_t(sizeof(In));
      v_delta()[r] = dv * int64_t(sizeof(In));
    }
  }

  __device__ uint32_t* table() const { return reinterpret_cast<uint32_t*>(smem + Smem::kTable); }
  __device__ bool tabulated() const { return walk.tabulated; }
  // Step i sits at i % kForwardTableTiles (the table holds kForwardTableTiles steps from
  // walk.table_first, a multiple of that).
  __device__ uint32_t table_entry(int i) const { return table()[static_cast<unsigned>(i) % kForwardTableTiles]; }

  // Walk steps first.. (see WalkEntry) into the table, so that the walk costs one shared load
  // per tile; boxes with an axis too long for the table's entries work each step out through a
  // call, which keeps that code (and whatever the compiler would hoist of it) out of the main
  // loop. Called by every thread; thread 0 records `first` (read after the next barrier).
  __device__ void build_table(int first) {
    if (!tabulated()) return;
    const int count = min_i(kForwardTableTiles, walk.spatial - first);
    for (int i = threadIdx.x; i < count; i += blockDim.x)
      table()[(first + i) % kForwardTableTiles] = spatial_entry<uint32_t, Params>(P, state, first + i, walk.entry_bits);
    if (threadIdx.x == 0) walk.table_first = first;
  }
  // Whether walk step i needs the table refilled (every thread reaches this with the same i).
  __device__ bool past_table(int i) const {
    return tabulated() && i < walk.spatial && i >= walk.table_first + kForwardTableTiles;
  }
  // Between two iterations of the main loop (no thread reads the table then). The steps come
  // through the call of the rule path (64-bit entries, repacked), so that the main loop holds
  // none of that code.
  __device__ void refill_table(int first) {
    __syncthreads();
    const int count = min_i(kForwardTableTiles, walk.spatial - first);
    const int bits = walk.entry_bits;
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
      const uint64_t e = spatial_entry_from_rule(P, state, first + i);
      uint32_t packed = static_cast<uint32_t>(WalkEntry<uint64_t>::pair_class(e))
                        << WalkEntry<uint32_t>::kClassShift;
      GNA_FOR_AXES(a, P.p.rank)
        packed |= static_cast<uint32_t>(WalkEntry<uint64_t>::offset(e, a, kRuleEntryBits)) << (bits * a);
      table()[(first + i) % kForwardTableTiles] = packed;
    }
    if (threadIdx.x == 0) walk.table_first = first;
    __syncthreads();
  }

  // Offsets in the box of spatial tile i, per axis.
  __device__ __forceinline__ void box_offsets(int i, int* e) const {
    if (tabulated()) {
      const uint32_t packed = table_entry(i);
      const int bits = walk.entry_bits;
      GNA_FOR_AXES(a, P.p.rank) e[a] = WalkEntry<uint32_t>::offset(packed, a, bits);
    } else {
      const uint64_t packed = spatial_entry_from_rule(P, state, i);
      GNA_FOR_AXES(a, P.p.rank) e[a] = WalkEntry<uint64_t>::offset(packed, a, kRuleEntryBits);
    }
  }


  __device__ PairClass classify(int i) const {
    if (i >= walk.spatial) {
      const int first = (i - walk.spatial) * BN;
      return first + BN <= walk.additional ? PairClass::full : PairClass::partial;
    }
    return tabulated() ? WalkEntry<uint32_t>::pair_class(table_entry(i))
                       : WalkEntry<uint64_t>::pair_class(spatial_entry_from_rule(P, state, i));
  }

  // First tile index >= i that is not empty (walk.total if none). Called by every thread with
  // the same i, between iterations of the main loop: refills the table where the walk passes it.
  __device__ int next_tile(int i, PairClass* cls) {
    for (; i < walk.total; ++i) {
      if (past_table(i)) refill_table(i);
      *cls = classify(i);
      if (*cls != PairClass::empty) break;
    }
    return i;
  }

  // The first key per axis of the spatial tile in stage s (load_kv writes it).
  __device__ int* stage_keys(int s) const {
    return reinterpret_cast<int*>(smem + Smem::kStageKeys) + s * Smem::kStageStride;
  }
  // The axes (bit a) on which the spatial pair in stage s is partial (load_kv writes it).
  __device__ int& stage_partial_axes(int s) const { return stage_keys(s)[kMaxRank]; }

  // The keys of tile i (of a partial pair, in stage s) each of this thread's rows attends, as the
  // bits of its keys (column_mask.hpp): keep[mb][r] for row row0 + 16 mb + 8 r. Returns whether
  // every row keeps every key. Reads only shared memory (no call of the rule path), so that it
  // can run while S is live.
  __device__ __forceinline__ bool row_key_masks(int i, int s, int row0, uint32_t (&keep)[MB][2]) const {
    const int quad = threadIdx.x % 4;
    if (i >= walk.spatial) {  // additional tokens: the same keys for every row
      const int count = walk.additional - (i - walk.spatial) * BN;
      uint32_t bits = 0;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (j * 8 + quad * 2 + e < count) bits |= 1u << (2 * j + e);
#pragma unroll
      for (int mb = 0; mb < MB; ++mb) keep[mb][0] = keep[mb][1] = bits;
      return bits == kForwardAllKeys;
    }
    const int* origin = stage_keys(s);  // the tile's first key per axis
    const int partial_axes = stage_partial_axes(s);
    const AxisColumns* cols = columns() + quad * kMaxRank;
#pragma unroll
    for (int mb = 0; mb < MB; ++mb) keep[mb][0] = keep[mb][1] = kForwardAllKeys;
    GNA_FOR_AXES(a, P.p.rank) {
      if (!(partial_axes & (1 << a))) continue;  // every row keeps every key there
      const AxisColumns c = cols[a];
      const int o = origin[a] + c.base;
#pragma unroll
      for (int mb = 0; mb < MB; ++mb)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const Range w = windows()[(row0 + mb * 16 + 8 * r) * kMaxRank + a];
          keep[mb][r] &= c.within(w.begin - o, w.end - o);
        }
    }
    bool all = true;
#pragma unroll
    for (int mb = 0; mb < MB; ++mb) all = all && keep[mb][0] == kForwardAllKeys && keep[mb][1] == kForwardAllKeys;
    return all;
  }

  __device__ void load_q() {
    const Problem& p = P.p;
    constexpr int kChunks = D / kChunk;
    const uint32_t base = smem_address(smem + Smem::kQ);
    for (int c = threadIdx.x; c < kRowsQ * kChunks; c += blockDim.x) {
      const int row = c / kChunks, ch = c % kChunks;
      int ig[kMaxRank], x[kMaxRank];
      const bool valid = geo.coordinates(q_rows()[row], q_base, ig);
      const In* src = P.q.data;
      if (valid) {
        GNA_FOR_AXES(a, p.rank) x[a] = coordinate_of(p.axes[a], geo.group[a], ig[a]);
        src = P.q.at(b, x, p.rank, h) + ch * kChunk;
      }
      cp_async_16(base + QTile::offset(row, ch * 8), src, valid);
    }
    if constexpr (kE4m3Operands<In>) {
      // Each row's factor of its scores in the log2 domain: scale * log2(e) * q_scale (rows
      // without a query: 1, their results are not stored).
      for (int row = threadIdx.x; row < kRowsQ; row += blockDim.x) {
        int ig[kMaxRank], x[kMaxRank];
        float f = 1.f;
        if (geo.coordinates(q_rows()[row], q_base, ig)) {
          GNA_FOR_AXES(a, p.rank) x[a] = coordinate_of(p.axes[a], geo.group[a], ig[a]);
          f = P.scale_log2 * *P.fp8.q_scale.at(b, x, p.rank, h);
        }
        q_factor()[row] = f;
      }
    }
  }

  // e4m3: scale * log2(e) * q_scale of each Q row (load_q writes it).
  __device__ float* q_factor() const { return reinterpret_cast<float*>(smem + Smem::kQFactor); }
  // e4m3: the k_scale of each key of the tile in stage s (load_kv writes it; 0 for rows that are
  // not keys).
  __device__ float* k_scales(int s) const {
    return reinterpret_cast<float*>(smem + Smem::kKScale) + s * BN;
  }

  // Loads K (with the tile's first keys and partial axes) and / or V of tile i (of class cls)
  // into stage s.
  __device__ void load_kv(int i, int s, PairClass cls, bool load_k = true, bool load_v = true) {
    const bool full = cls == PairClass::full;
    const Problem& p = P.p;
    const uint32_t k_base = smem_address(smem + Smem::k_offset(s));
    const uint32_t v_base = smem_address(smem + Smem::v_offset(s));
    constexpr int kChunksK = D / kChunk, kChunksV = DV / kChunk;
    if (i >= walk.spatial) {
      const int add_first = (i - walk.spatial) * BN;
      const int c_end = load_v ? BN * (kChunksK + kChunksV) : BN * kChunksK;
      for (int c = threadIdx.x + (load_k ? 0 : BN * kChunksK); c < c_end; c += blockDim.x) {
        const bool is_k = c < BN * kChunksK;
        const int cc = is_k ? c : c - BN * kChunksK;
        const int chunks = is_k ? kChunksK : kChunksV;
        const int row = cc / chunks, ch = cc % chunks;
        const int j = add_first + row;
        const bool valid = j < walk.additional;
        const In* src = is_k ? P.k.data : P.v.data;
        if (valid) src = (is_k ? P.add_k : P.add_v).at(b, &j, 1, hk) + ch * kChunk;
        const uint32_t dst = is_k ? k_base + KTile::offset(row, ch * 8)
                                  : v_base + VTile::offset(row, ch * 8);
        cp_async_16(dst, src, valid);
      }
      if constexpr (kE4m3Operands<In>)
        if (load_k) load_k_scales(i, s);
      return;
    }
    // Spatial tile: first token's offset from the box offsets, then per-row deltas from the
    // shared table.
    int e[kMaxRank];
    box_offsets(i, e);
    int kt_base[kMaxRank];
    GNA_FOR_AXES(a, p.rank) kt_base[a] = walk.run[a].first + e[a] * P.tile_kv[a];
    int64_t k_first = state.k_origin, v_first = state.v_origin;
    GNA_FOR_AXES(a, p.rank) {
      k_first += e[a] * state.k_step[a];
      v_first += e[a] * state.v_step[a];
    }
    // A KV tile has no padding rows (exactly kForwardRowsKV tokens), so its rows are all real
    // keys unless it runs past the group's end on an axis.
    bool all_real = true;
    GNA_FOR_AXES(a, p.rank) all_real = all_real && kt_base[a] + P.tile_kv[a] <= geo.n[a];
    if (load_k && threadIdx.x == 0) {
      int partial_axes = 0;
      GNA_FOR_AXES(a, p.rank) {
        stage_keys(s)[a] = kt_base[a];
        if (!state.full_tiles[a].contains(e[a])) partial_axes |= 1 << a;
      }
      stage_partial_axes(s) = partial_axes;
      if (P.path_counts != nullptr && !full) {
        atomicAdd(all_real ? &P.path_counts->partial_full_loads : &P.path_counts->partial_fill_loads, 1ull);
        atomicAdd(&P.path_counts->skipped_mask_axes,
                  static_cast<unsigned long long>(p.rank - __popc(partial_axes)));
      }
    }
    if (full || all_real) {
      // Both tiles' row deltas before the first copy (RowDeltas).
      RowDeltas<kChunksK> k_rows;
      RowDeltas<kChunksV> v_rows;
      if (load_k) k_rows = row_deltas<kChunksK>(k_delta());
      if (load_v) v_rows = row_deltas<kChunksV>(v_delta());
      if (load_k) load_rows_full<KTile, kChunksK>(P.k.data + k_first, k_rows, k_base);
      if (load_v) load_rows_full<VTile, kChunksV>(P.v.data + v_first, v_rows, v_base);
    } else {
      if (load_k) load_rows<KTile, kChunksK>(P.k.data + k_first, k_delta(), k_base, kt_base);
      if (load_v) load_rows<VTile, kChunksV>(P.v.data + v_first, v_delta(), v_base, kt_base);
    }
    if constexpr (kE4m3Operands<In>)
      if (load_k) load_k_scales(i, s);
  }

  // e4m3: the k_scale of tile i's keys into stage s (rows that are not keys: 0, never attended).
  __device__ __forceinline__ void load_k_scales(int i, int s) {
    const Problem& p = P.p;
    const int row = threadIdx.x;
    if (row >= BN) return;
    const float* src = P.fp8.k_scale.data;
    bool valid;
    if (i >= walk.spatial) {
      const int j = (i - walk.spatial) * BN + row;
      valid = j < walk.additional;
      if (valid) src = P.fp8.add_k_scale.at(b, &j, 1, hk);
    } else {
      int e[kMaxRank], kt_base[kMaxRank], jg[kMaxRank], x[kMaxRank];
      box_offsets(i, e);
      GNA_FOR_AXES(a, p.rank) kt_base[a] = walk.run[a].first + e[a] * P.tile_kv[a];
      valid = geo.coordinates(kv_rows()[row], kt_base, jg);
      if (valid) {
        GNA_FOR_AXES(a, p.rank) x[a] = coordinate_of(p.axes[a], geo.group[a], jg[a]);
        src = P.fp8.k_scale.at(b, x, p.rank, hk);
      }
    }
    cp_async_4(smem_address(k_scales(s) + row), src, valid);
  }

  // One K or V tile whose rows are all real keys: each thread copies one 16-byte column
  // chunk of rows row_first + it * kStep, with no checks. kStep is a multiple of the swizzle
  // period, so every destination is one add away from the first; the thread index is read
  // afresh (volatile) so that the compiler rebuilds these few values per call instead of holding
  // them in registers through the GEMMs.
  // This thread's part of a K or V tile copy: 16-byte column chunk ch of rows row_first + it *
  // kStep, the first one's shared address dst.
  template <int CHUNKS>
  struct RowCopy {
    static constexpr int kStep = kForwardWarps * 32 / CHUNKS;
    static_assert(kStep % 8 == 0, "row step must keep the swizzle phase");
    int row_first, ch;
    uint32_t dst;
  };
  template <typename Tile, int CHUNKS>
  __device__ __forceinline__ RowCopy<CHUNKS> row_copy(uint32_t base) {
    const int tid = thread_index();
    const int row_first = tid / CHUNKS, ch = tid % CHUNKS;
    return {row_first, ch, base + Tile::offset(row_first, ch * 8)};
  }

  // The byte deltas of this thread's rows of a K or V tile (RowCopy's rows), read from the
  // shared table before any copy of the tile is issued: an asynchronous copy writes shared
  // memory, so a table read placed after one is issued after it and its address add then waits
  // for the read (Nsight Compute, hunyuan dense forward: 16 such waits per tile and warp, 12% of
  // the kernel's stall samples).
  template <int CHUNKS>
  struct RowDeltas {
    int64_t d[BN / RowCopy<CHUNKS>::kStep];
  };
  template <int CHUNKS>
  __device__ __forceinline__ RowDeltas<CHUNKS> row_deltas(const int64_t* delta) {
    constexpr int kStep = RowCopy<CHUNKS>::kStep;
    const int row_first = thread_index() / CHUNKS;
    RowDeltas<CHUNKS> rows;
#pragma unroll
    for (int it = 0; it < BN / kStep; ++it) rows.d[it] = delta[row_first + it * kStep];
    return rows;
  }

  template <typename Tile, int CHUNKS>
  __device__ __forceinline__ void load_rows_full(const In* first, const RowDeltas<CHUNKS>& rows, uint32_t base) {
    constexpr int kStep = RowCopy<CHUNKS>::kStep;
    const auto [row_first, ch, dst] = row_copy<Tile, CHUNKS>(base);
    const char* src = reinterpret_cast<const char*>(first + ch * kChunk);
#pragma unroll
    for (int it = 0; it < BN / kStep; ++it) cp_async_16(dst + it * kStep * CHUNKS * 16, src + rows.d[it]);
  }

  // One K or V tile of a partial pair, as load_rows_full, but rows outside the group are zero
  // filled.
  template <typename Tile, int CHUNKS>
  __device__ __forceinline__ void load_rows(const In* first, const int64_t* delta, uint32_t base,
                                            const int* kt_base) {
    constexpr int kStep = RowCopy<CHUNKS>::kStep;
    const auto [row_first, ch, dst] = row_copy<Tile, CHUNKS>(base);
#pragma unroll
    for (int it = 0; it < BN / kStep; ++it) {
      const int row = row_first + it * kStep;
      int jg[kMaxRank];
      const bool valid = geo.coordinates(kv_rows()[row], kt_base, jg);
      const void* src = valid ? reinterpret_cast<const char*>(first + ch * kChunk) + delta[row]
                              : static_cast<const void*>(P.k.data);
      cp_async_16(dst + it * kStep * CHUNKS * 16, src, valid);
    }
  }
};

// Per-thread state of a warp's MB m-blocks of 16 query rows (rows g and g + 8 of each).
// e4m3 operands (kE4m3Operands<In>): S by m16n8k32 MMAs on the same fragments in 16-bit units,
// scaled per key by k_scale and per row by q_scale; P as e4m3(448 p) (l sums the unquantized 448
// p); the PV MMA's B operand (keys contiguous per value channel) from V's row-major tile by a
// transposing ldmatrix of byte pairs and two byte permutes, so that one MMA takes the even
// channels of 16 and one the odd: acc[mb][2 dp] holds channels 16 dp + 4 t + {0, 2}, acc[mb][2 dp
// + 1] 16 dp + 4 t + {1, 3} (the epilogue writes the four together).
template <typename T, typename In, int D, int DV, int MB>
struct ForwardWarp {
  static constexpr int BN = kForwardRowsKV;
  static constexpr bool kE4m3 = kE4m3Operands<In>;
  using Cta = ForwardCta<T, In, D, DV, MB>;
  float acc[MB][DV / 8][4];
  float m[MB][2], l[MB][2];

  __device__ void init() {
#pragma unroll
    for (int mb = 0; mb < MB; ++mb) {
#pragma unroll
      for (int i = 0; i < DV / 8; ++i) acc[mb][i][0] = acc[mb][i][1] = acc[mb][i][2] = acc[mb][i][3] = 0.f;
      m[mb][0] = m[mb][1] = -INFINITY;
      l[mb][0] = l[mb][1] = 0.f;
    }
  }

  // The whole 64-key tile in one softmax step, so that each Q fragment read from shared memory
  // feeds 8 key blocks (S of two m-blocks is 64 registers; no mask state is live next to it).
  static constexpr int kStep = BN;
  static constexpr int kNB = kStep / 8;  // n-blocks of S

  // Tile i of the CTA's walk. MASKED (a partial pair): scores of keys a row does not attend
  // become -inf, by the rows' bits of this thread's keys (ForwardCta::row_key_masks, built after
  // S so that they hold no registers through the S GEMMs); a warp whose rows keep every key
  // skips the mask. q_smem: the address of this warp's first Q row; row0: this thread's first
  // row in the tile.
  // before_pv() runs between the softmax and the PV product (the single-stage pipeline's K load).
  template <bool MASKED, typename BeforePv>
  __device__ __forceinline__ void tile(const Cta& cta, int i, int stage, uint32_t q_smem, int row0,
                                       uint32_t k_smem, uint32_t v_smem, BeforePv&& before_pv) {
    const float scale_log2 = cta.P.scale_log2;
    using QTile = typename Cta::QTile;
    using KTile = typename Cta::KTile;
    using VTile = typename Cta::VTile;
    const int lane = threadIdx.x % 32;
    const auto qc = QTile::lean_cursor(lane % 16, lane / 16);
    const auto kc = KTile::lean_cursor((lane % 8) + (lane / 16) * 8, (lane / 8) % 2);
    const auto vc = VTile::lean_cursor((lane % 8) + ((lane / 8) % 2) * 8, lane / 16);
    float s[MB][kNB][4];
#pragma unroll
    for (int mb = 0; mb < MB; ++mb)
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) s[mb][nb][0] = s[mb][nb][1] = s[mb][nb][2] = s[mb][nb][3] = 0.f;
    // S = Q K^T (steps of 16 columns of 16 bits: 16 elements, or 32 e4m3)
#pragma unroll
    for (int ks = 0; ks < KTile::kChunks / 2; ++ks) {
      uint32_t qf[MB][4];
#pragma unroll
      for (int mb = 0; mb < MB; ++mb) ldmatrix_x4(qf[mb], q_smem + qc.at(mb, ks));
#pragma unroll
      for (int np = 0; np < kNB / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, k_smem + kc.at(np, ks));
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) {
          Mma<In>::run(s[mb][2 * np], qf[mb], b[0], b[1]);
          Mma<In>::run(s[mb][2 * np + 1], qf[mb], b[2], b[3]);
        }
      }
    }
    if constexpr (kE4m3) {
      // Each key's k_scale (keys 8 nb + 2 t, + 1 of this thread).
      const float* ks = cta.k_scales(stage) + 2 * (lane % 4);
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) {
        const float2 k2 = *reinterpret_cast<const float2*>(ks + 8 * nb);
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) {
          s[mb][nb][0] *= k2.x;
          s[mb][nb][1] *= k2.y;
          s[mb][nb][2] *= k2.x;
          s[mb][nb][3] *= k2.y;
        }
      }
    }
    if (MASKED) {
      uint32_t keep[MB][2];
      const bool full_rows = __all_sync(0xffffffffu, cta.row_key_masks(i, stage, row0, keep));
      if (cta.P.path_counts != nullptr && lane == 0)
        atomicAdd(full_rows ? &cta.P.path_counts->full_row_warps : &cta.P.path_counts->masked_warps, 1ull);
      if (!full_rows) {
#pragma unroll
        for (int mb = 0; mb < MB; ++mb)
#pragma unroll
          for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
              for (int e = 0; e < 2; ++e)
                if (!(keep[mb][r] & (1u << (2 * nb + e)))) s[mb][nb][2 * r + e] = -INFINITY;
      }
    }
    // Online softmax in the log2 domain (the scale folded into one FMA per score; e4m3: the
    // row's q_scale too, and exp2 gives 448 p).
    float correction[MB][2];
    bool rescale = false;
#pragma unroll
    for (int mb = 0; mb < MB; ++mb) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float factor = kE4m3 ? cta.q_factor()[row0 + mb * 16 + 8 * r] : scale_log2;
        float mx = -INFINITY;
#pragma unroll
        for (int nb = 0; nb < kNB; ++nb) mx = fmaxf(mx, fmaxf(s[mb][nb][2 * r], s[mb][nb][2 * r + 1]));
        mx = quad_max(mx) * factor;
        const float m_new = fmaxf(m[mb][r], mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        correction[mb][r] = fast_exp2(m[mb][r] - m_use);
        rescale = rescale || m_new != m[mb][r];
        m[mb][r] = m_new;
        const float bias = kE4m3 ? kLog2E4m3Max - m_use : -m_use;
        float sum = 0.f;
#pragma unroll
        for (int nb = 0; nb < kNB; ++nb) {
          s[mb][nb][2 * r] = fast_exp2(fmaf(s[mb][nb][2 * r], factor, bias));
          s[mb][nb][2 * r + 1] = fast_exp2(fmaf(s[mb][nb][2 * r + 1], factor, bias));
          sum += s[mb][nb][2 * r] + s[mb][nb][2 * r + 1];
        }
        l[mb][r] = l[mb][r] * correction[mb][r] + sum;
      }
    }
    // Once the running maxima settle, most steps leave every row's maximum unchanged: the
    // warp then skips the accumulator rescale.
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int mb = 0; mb < MB; ++mb)
#pragma unroll
        for (int i = 0; i < DV / 8; ++i) {
          acc[mb][i][0] *= correction[mb][0];
          acc[mb][i][1] *= correction[mb][0];
          acc[mb][i][2] *= correction[mb][1];
          acc[mb][i][3] *= correction[mb][1];
        }
    }
    before_pv();
    if constexpr (kE4m3) {
      pv_e4m3(v_smem, s);
      return;
    }
    // O += P V
#pragma unroll
    for (int kk = 0; kk < kStep / 16; ++kk) {
      uint32_t a[MB][4];
#pragma unroll
      for (int mb = 0; mb < MB; ++mb) {
        a[mb][0] = Mma<T>::pack(s[mb][2 * kk][0], s[mb][2 * kk][1]);
        a[mb][1] = Mma<T>::pack(s[mb][2 * kk][2], s[mb][2 * kk][3]);
        a[mb][2] = Mma<T>::pack(s[mb][2 * kk + 1][0], s[mb][2 * kk + 1][1]);
        a[mb][3] = Mma<T>::pack(s[mb][2 * kk + 1][2], s[mb][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < DV / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_smem + vc.at(kk, dp));
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) {
          Mma<T>::run(acc[mb][2 * dp], a[mb], b[0], b[1]);
          Mma<T>::run(acc[mb][2 * dp + 1], a[mb], b[2], b[3]);
        }
      }
    }
  }

  // O += P V with e4m3 operands, 32 keys per MMA. The A fragment's k = 4 t + i holds key 8 j +
  // 2 t + e of the chunk (i = 2 j + e for j < 2; k = 4 t + 16 + i: j = i / 2 + 2), the keys this
  // thread's S accumulators hold, so P is packed in place; B takes the same key order: a
  // transposing ldmatrix of 16-bit pairs gives keys 2 t and 2 t + 1 of channels 2 g and 2 g + 1
  // per 8-key block, and byte permutes split the channels.
  __device__ __forceinline__ void pv_e4m3(uint32_t v_smem, float (&s)[MB][kNB][4]) {
    using VTile = typename Cta::VTile;
    // Lane l addresses key 32 kk + l of a 16-channel chunk dp (each 8 lanes one 8-key block):
    // chunk dp ^ phase of its row. The lane is read afresh so that the compiler rebuilds these
    // addresses (one XOR each) instead of holding them through the main loop.
    const int lane_now = thread_index() % 32;
    const uint32_t y = static_cast<uint32_t>((lane_now / VTile::kRowsPerPhase) % VTile::kPhases) * 16;
    const uint32_t v_lane = v_smem + static_cast<uint32_t>(lane_now * VTile::kChunks * 16);
#pragma unroll
    for (int kk = 0; kk < kStep / 32; ++kk) {
      uint32_t a[MB][4];
#pragma unroll
      for (int mb = 0; mb < MB; ++mb) {
        const float(&s0)[4] = s[mb][4 * kk];
        const float(&s1)[4] = s[mb][4 * kk + 1];
        const float(&s2)[4] = s[mb][4 * kk + 2];
        const float(&s3)[4] = s[mb][4 * kk + 3];
        a[mb][0] = Mma<E4m3>::pack4(s0[0], s0[1], s1[0], s1[1]);
        a[mb][1] = Mma<E4m3>::pack4(s0[2], s0[3], s1[2], s1[3]);
        a[mb][2] = Mma<E4m3>::pack4(s2[0], s2[1], s3[0], s3[1]);
        a[mb][3] = Mma<E4m3>::pack4(s2[2], s2[3], s3[2], s3[3]);
      }
#pragma unroll
      for (int dp = 0; dp < DV / 16; ++dp) {
        uint32_t r[4];
        ldmatrix_x4_trans(r, v_lane + static_cast<uint32_t>(kk * 32 * VTile::kChunks * 16 + (dp / 8) * 128) +
                                 ((static_cast<uint32_t>(dp % 8) * 16) ^ y));
        const uint32_t even0 = byte_perm(r[0], r[1], 0x6420), odd0 = byte_perm(r[0], r[1], 0x7531);
        const uint32_t even1 = byte_perm(r[2], r[3], 0x6420), odd1 = byte_perm(r[2], r[3], 0x7531);
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) {
          Mma<E4m3>::run(acc[mb][2 * dp], a[mb], even0, even1);
          Mma<E4m3>::run(acc[mb][2 * dp + 1], a[mb], odd0, odd1);
        }
      }
    }
  }
};

template <typename T, typename In, int D, int DV, int MB, bool SINGLE>
__device__ __forceinline__ void fused_forward(const ForwardParams<T, In>& P) {
  extern __shared__ __align__(128) char smem[];
  using Cta = ForwardCta<T, In, D, DV, MB>;
  using Smem = typename Cta::Smem;
  const Problem& p = P.p;
  ForwardCtaState setup;

  // Which slice and Q tile.
  setup.b = blockIdx.y / p.heads_q;
  setup.h = blockIdx.y % p.heads_q;
  setup.hk = setup.h / (p.heads_q / p.heads_kv);
  setup.geo.rank = p.rank;
  int group = blockIdx.z, tile = blockIdx.x;
  GNA_FOR_AXES_REVERSE(a, p.rank) {
    setup.geo.group[a] = group % p.axes[a].dilation;
    group /= p.axes[a].dilation;
    setup.geo.n[a] = group_length(p.axes[a], setup.geo.group[a]);
    setup.qt[a] = tile % P.q_tiles[a];
    tile /= P.q_tiles[a];
    if (setup.qt[a] >= tiles_along(setup.geo.n[a], P.tile_q[a])) return;  // shorter group
    setup.q_base[a] = setup.qt[a] * P.tile_q[a];
  }
  // The KV tiles this Q tile visits.
  setup.walk.spatial = 1;
  GNA_FOR_AXES(a, p.rank) {
    setup.walk.run[a] = kv_tile_run(p.axes[a], setup.geo.n[a], setup.qt[a], P.tile_q[a],
                                    P.tile_kv[a], P.kv_placement);
    setup.walk.spatial *= setup.walk.run[a].count;
    setup.full_tiles[a] = full_tiles_of_run(p.axes[a], setup.geo.n[a], setup.qt[a], P.tile_q[a],
                                            P.tile_kv[a], setup.walk.run[a]);
  }
  setup.k_origin = setup.b * P.k.stride_batch + setup.hk * P.k.stride_head;
  setup.v_origin = setup.b * P.v.stride_batch + setup.hk * P.v.stride_head;
  GNA_FOR_AXES(a, p.rank) {
    const int64_t x = coordinate_of(p.axes[a], setup.geo.group[a], setup.walk.run[a].first);
    const int64_t step = int64_t(P.tile_kv[a]) * p.axes[a].dilation;
    setup.k_origin += x * P.k.stride_axis[a];
    setup.v_origin += x * P.v.stride_axis[a];
    setup.k_step[a] = step * P.k.stride_axis[a];
    setup.v_step[a] = step * P.v.stride_axis[a];
  }
  setup.walk.rotation = setup.walk.spatial > 0 ? blockIdx.x % setup.walk.spatial : 0;
  setup.walk.additional = p.additional_kv;
  setup.walk.total = setup.walk.spatial + (p.additional_kv + Cta::BN - 1) / Cta::BN;
  setup.walk.entry_bits = walk_entry_bits(p.rank);
  setup.walk.tabulated = true;
  GNA_FOR_AXES(a, p.rank) setup.walk.tabulated =
      setup.walk.tabulated && setup.walk.run[a].count <= (1 << setup.walk.entry_bits);
  setup.walk.table_first = 0;

  __shared__ ForwardCtaState state;
  if (threadIdx.x == 0) state = setup;
  __syncthreads();
  Cta cta(P, smem, state);

  int kv_volume = 1;
  for (int a = 0; a < p.rank; ++a) kv_volume *= P.tile_kv[a];
  for (int r = threadIdx.x; r < Cta::kRowsQ; r += blockDim.x)
    cta.q_rows()[r] = pack_row(P.tile_q, p.rank, r, P.q_volume);
  for (int r = threadIdx.x; r < kForwardRowsKV; r += blockDim.x)
    cta.kv_rows()[r] = pack_row(P.tile_kv, p.rank, r, kv_volume);
  __syncthreads();
  cta.build_kv_deltas();
  cta.build_windows();
  cta.build_columns();
  cta.build_table(0);
  __syncthreads();

  PairClass cls = PairClass::empty, next_cls = PairClass::empty;
  int i = cta.next_tile(0, &cls);
  cta.load_q();
  if (i < cta.walk.total) cta.load_kv(i, 0, cls, true, !SINGLE);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  ForwardWarp<T, In, D, DV, MB> w;
  w.init();
  const int warp_row = warp * 16 * MB;     // first Q row of this warp
  const int row0 = warp_row + lane / 4;    // this thread's first row
  const uint32_t q_smem = smem_address(smem + Smem::kQ) + warp_row * D * int(sizeof(In));

  // Double-buffered: tile next's K and V load into the other stage while tile i runs, issued
  // right after the one barrier per tile (it also tells that every warp is done with the other
  // stage, tile i - 1's). SINGLE (one K and one V buffer): K(next) loads while tile i's PV product
  // runs, V(next) while the next tile's S and softmax run (a second barrier per tile).
  constexpr bool single = SINGLE;
  if (single) {
    if (i < cta.walk.total) cta.load_kv(i, 0, cls, false, true);
    cp_async_commit();  // V(i), after the group of Q and K(i)
  }
  int stage = 0;
  while (i < cta.walk.total) {
    const int next = cta.next_tile(i + 1, &next_cls);
    if (single)
      cp_async_wait<1>();  // K(i)
    else
      cp_async_wait<0>();  // tile i's K and V, the only group in flight
    __syncthreads();
    if (!single) {
      if (next < cta.walk.total) cta.load_kv(next, stage ^ 1, next_cls);
      cp_async_commit();
    }
    const uint32_t k_smem = smem_address(smem + Smem::k_offset(stage));
    const uint32_t v_smem = smem_address(smem + Smem::v_offset(stage));
    if (P.path_counts != nullptr && threadIdx.x == 0) {
      atomicAdd(&P.path_counts->tiles, 1ull);
      if (kE4m3Operands<In>) atomicAdd(&P.path_counts->e4m3_tiles, 1ull);
      if (P.kv_placement == KvPlacement::placed && i < cta.walk.spatial)
        atomicAdd(&P.path_counts->placed_tiles, 1ull);
      if (single) atomicAdd(&P.path_counts->single_stage_tiles, 1ull);
    }
    auto load_next_k = [&]() {
      if (!single) return;
      cp_async_wait<0>();  // V(i)
      __syncthreads();     // and every warp is done with K(i) and the tile's first keys
      if (next < cta.walk.total) cta.load_kv(next, 0, next_cls, true, false);
      cp_async_commit();
    };
    if (cls == PairClass::full)
      w.template tile<false>(cta, i, stage, q_smem, row0, k_smem, v_smem, load_next_k);
    else
      w.template tile<true>(cta, i, stage, q_smem, row0, k_smem, v_smem, load_next_k);
    if (single) {
      __syncthreads();  // V(i) is overwritten by V(next)
      if (next < cta.walk.total) cta.load_kv(next, 0, next_cls, false, true);
      cp_async_commit();
    } else {
      stage ^= 1;
    }
    i = next;
    cls = next_cls;
  }
  cp_async_wait<0>();

  // Epilogue: O = acc / l, LSE = (m + log2 l) * ln 2.
  const int t = lane % 4;
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int ig[kMaxRank], x[kMaxRank];
      const bool valid = cta.geo.coordinates(cta.q_rows()[row0 + mb * 16 + 8 * r], cta.q_base, ig);
      const float l = quad_sum(w.l[mb][r]);
      if (!valid) continue;
      GNA_FOR_AXES(a, p.rank) x[a] = coordinate_of(p.axes[a], cta.geo.group[a], ig[a]);
      const float inv = 1.f / l;
      T* out = P.o.at(cta.b, x, p.rank, cta.h);
      using T2 = typename std::conditional<std::is_same<T, __half>::value, __half2, __nv_bfloat162>::type;
      if constexpr (kE4m3Operands<In>) {
        // O = acc * v_scale / (448 l) (l sums 448 p); channels 16 dp + 4 t .. + 3 (ForwardWarp).
        const float* vs = P.fp8.v_scale + cta.b * P.fp8.v_scale_batch + cta.hk * P.fp8.v_scale_head;
#pragma unroll
        for (int dp = 0; dp < DV / 16; ++dp) {
          const int c = 16 * dp + 4 * t;
          const float2 s01 = *reinterpret_cast<const float2*>(vs + c);
          const float2 s23 = *reinterpret_cast<const float2*>(vs + c + 2);
          T2 lo, hi;
          lo.x = cuda::from_float<T>(w.acc[mb][2 * dp][2 * r] * s01.x * inv);
          lo.y = cuda::from_float<T>(w.acc[mb][2 * dp + 1][2 * r] * s01.y * inv);
          hi.x = cuda::from_float<T>(w.acc[mb][2 * dp][2 * r + 1] * s23.x * inv);
          hi.y = cuda::from_float<T>(w.acc[mb][2 * dp + 1][2 * r + 1] * s23.y * inv);
          *reinterpret_cast<T2*>(out + c) = lo;
          *reinterpret_cast<T2*>(out + c + 2) = hi;
        }
        if (P.write_lse && t == 0) {
          const float bias = P.fp8.lse_bias.data ? *P.fp8.lse_bias.at(cta.b, x, p.rank, cta.h) : 0.f;
          *P.lse.at(cta.b, x, p.rank, cta.h) =
              (w.m[mb][r] + log2f(l) - kLog2E4m3Max) * 0.69314718055994531f + bias;
        }
        continue;
      }
#pragma unroll
      for (int i2 = 0; i2 < DV / 8; ++i2) {
        T2 v2;
        v2.x = cuda::from_float<T>(w.acc[mb][i2][2 * r] * inv);
        v2.y = cuda::from_float<T>(w.acc[mb][i2][2 * r + 1] * inv);
        *reinterpret_cast<T2*>(out + i2 * 8 + 2 * t) = v2;
      }
      if (P.write_lse && t == 0)
        *P.lse.at(cta.b, x, p.rank, cta.h) = (w.m[mb][r] + log2f(l)) * 0.69314718055994531f;
    }
  }
}

// The e4m3 instantiations carry code for sm_89 and newer only (mma.sync e4m3); on older archs
// their body is a trap (the backend refuses such devices before a launch).
template <typename T, typename In, int D, int DV, int MB, bool SINGLE = false>
__global__ void __launch_bounds__(kForwardWarps * 32, 2)
    fused_forward_kernel(const __grid_constant__ ForwardParams<T, In> P) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  if constexpr (kE4m3Operands<In>) {
    __trap();
  } else
#endif
  {
    fused_forward<T, In, D, DV, MB, SINGLE>(P);
  }
}

}  // namespace gna::portable
