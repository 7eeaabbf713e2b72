// Device pieces shared by the halo kernels: which box a CTA owns and its halo (the union of the
// box's windows, from the core's rule), row gathers into swizzled shared memory with cp.async
// (16-byte chunks, so dilated rows cost nothing extra), each warp's patch, the walk table of its
// sub-box (the union of its 16 tokens' windows) and the exact per-(row, column) mask.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "gna/core/tiling.hpp"
#include "kernels/common/element.cuh"
#include "kernels/common/token_tensor.cuh"
#include "kernels/halo/params.hpp"
#include "kernels/portable/mma.cuh"

namespace gna::halo {

using portable::cp_async_16;
using portable::cp_async_commit;
using portable::cp_async_wait;
using portable::fast_exp2;
using portable::ldmatrix_x4;
using portable::ldmatrix_x4_trans;
using portable::Mma;
using portable::quad_max;
using portable::quad_sum;
using portable::smem_address;

#define GNA_HALO_FOR_AXES(a, rank) \
  _Pragma("unroll") for (int a = 0; a < kMaxRank; ++a) if (a < (rank))
#define GNA_HALO_FOR_AXES_REVERSE(a, rank) \
  _Pragma("unroll") for (int a = kMaxRank - 1; a >= 0; --a) if (a < (rank))

// Rows of D 16-bit columns, 16-byte chunks XOR-swizzled so that ldmatrix over 8 rows is free of
// bank conflicts when the rows are consecutive (the layout of the portable kernels).
template <int D>
struct Rows {
  static constexpr int kChunks = D / 8;
  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    return portable::SmemTile<1, D>::offset(row, chunk * 8);
  }
};

// Row-major offsets per axis of index i in a box of extents ext.
__device__ __forceinline__ void split_index(int i, const int* ext, int rank, int* off) {
  GNA_HALO_FOR_AXES_REVERSE(a, rank) {
    off[a] = i % ext[a];
    i /= ext[a];
  }
}

// The same over sides given as SmallDivisors (indices below 2^22).
__device__ __forceinline__ void split_index(int i, const SmallDivisor* ext, int rank, int* off) {
  GNA_HALO_FOR_AXES_REVERSE(a, rank) {
    const int q = ext[a].div(i);
    off[a] = i - q * ext[a].d;
    i = q;
  }
}

// The CTA's box in its dilation group and the box's halo, in group coordinates; unused axes are
// [0, 1). The same for every (batch item, head) slice the CTA takes.
struct Slice {
  int group[kMaxRank];
  int n[kMaxRank];
  Range box[kMaxRank];
  Range halo[kMaxRank];
  int halo_side[kMaxRank];
  SmallDivisor halo_div[kMaxRank];
  int halo_count;
  int plane_rows;  // halo rows per plane of axis 0
};

__device__ __forceinline__ Range window_of(const AxisRule& a, int n, int token, Side side) {
  return side == Side::keys_of_queries ? key_window(a, n, token) : query_window(a, n, token);
}
__device__ __forceinline__ Range union_of(const AxisRule& a, int n, Range tokens, Side side) {
  return side == Side::keys_of_queries ? union_key_window(a, n, tokens)
                                       : union_query_window(a, n, tokens);
}

// False when the box lies past the end of a shorter dilation group (the grid is sized by group 0).
__device__ __forceinline__ bool decode_slice(const Geometry& G, const Problem& p, Side side, Slice& s) {
  int box = blockIdx.x % G.boxes_total, group = blockIdx.x / G.boxes_total;
  s.halo_count = 1;
#pragma unroll
  for (int a = 0; a < kMaxRank; ++a) {
    s.group[a] = 0;
    s.n[a] = 1;
    s.box[a] = s.halo[a] = Range{0, 1};
    s.halo_side[a] = 1;
    s.halo_div[a] = small_divisor(1);
  }
  GNA_HALO_FOR_AXES_REVERSE(a, p.rank) {
    const AxisRule& r = p.axes[a];
    s.group[a] = group % r.dilation;
    group /= r.dilation;
    s.n[a] = group_length(r, s.group[a]);
    const int first = (box % G.boxes[a]) * G.cta[a];
    box /= G.boxes[a];
    if (first >= s.n[a]) return false;
    s.box[a] = Range{first, min_i(first + G.cta[a], s.n[a])};
    s.halo[a] = union_of(r, s.n[a], s.box[a], side);
    s.halo_side[a] = s.halo[a].size();
    s.halo_div[a] = small_divisor(s.halo_side[a]);
    s.halo_count *= s.halo_side[a];
  }
  s.plane_rows = s.halo_count / s.halo_side[0];
  return true;
}

// Slabs of the halo (plan.hpp): slab k holds the planes [k S, min((k + 1) S, side)) of axis 0 (S:
// slab_planes), the rows [first, first + count) of the halo's row tables.
struct SlabRows {
  int first, count;
};
__device__ __forceinline__ int slab_count(const Slice& s, int slab_planes) {
  return ceil_div(s.halo_side[0], slab_planes);
}
__device__ __forceinline__ SlabRows slab_rows(const Slice& s, int slab_planes, int k) {
  const int p0 = k * slab_planes, p1 = min_i(p0 + slab_planes, s.halo_side[0]);
  return SlabRows{p0 * s.plane_rows, (p1 - p0) * s.plane_rows};
}

// Element offset of token ig (group coordinates of the slice's groups) in t, without batch/head.
template <typename X>
__device__ __forceinline__ int64_t token_offset(const cuda::TokenTensor<X>& t, const Problem& p,
                                                const Slice& s, const int* ig) {
  int64_t o = 0;
  GNA_HALO_FOR_AXES(a, p.rank) o += int64_t(coordinate_of(p.axes[a], s.group[a], ig[a])) * t.stride_axis[a];
  return o;
}

// Offsets in the CTA box of box row r: rows are grouped by warp (16 consecutive rows form one
// warp's patch, row-major inside it), warps row-major over the box.
__device__ __forceinline__ void box_row_offsets(const Geometry& G, int rank, int r, int* off) {
  int wc[kMaxRank], ic[kMaxRank];
  split_index(r / kWarpTokens, G.grid_div, rank, wc);
  split_index(r % kWarpTokens, G.warp_div, rank, ic);
  GNA_HALO_FOR_AXES(a, rank) off[a] = wc[a] * G.warp[a] + ic[a];
}

// Row tables: element offsets (int32: the host checks that a slice's span fits) of each row of
// the box or the halo in one tensor, relative to the (batch item, head) slice's first element,
// -1 for box rows outside the group. Built once per CTA, they make a slice's loads a table
// lookup and a copy per 16-byte chunk.
template <typename X>
__device__ __forceinline__ void box_row_table(const cuda::TokenTensor<X>& t, const Problem& p,
                                              const Geometry& G, const Slice& s, int* table) {
  for (int r = threadIdx.x; r < kBoxTokens; r += kWarps * 32) {
    int off[kMaxRank], ig[kMaxRank] = {0, 0, 0};
    box_row_offsets(G, p.rank, r, off);
    bool valid = true;
    GNA_HALO_FOR_AXES(a, p.rank) {
      ig[a] = s.box[a].begin + off[a];
      valid = valid && ig[a] < s.box[a].end;
    }
    table[r] = valid ? static_cast<int>(token_offset(t, p, s, ig)) : -1;
  }
}

template <typename X>
__device__ __forceinline__ void halo_row_table(const cuda::TokenTensor<X>& t, const Problem& p,
                                               const Slice& s, int* table) {
  for (int r = threadIdx.x; r < s.halo_count; r += kWarps * 32) {
    int ig[kMaxRank] = {0, 0, 0};
    split_index(r, s.halo_div, p.rank, ig);
    GNA_HALO_FOR_AXES(a, p.rank) ig[a] += s.halo[a].begin;
    table[r] = static_cast<int>(token_offset(t, p, s, ig));
  }
}

// Plain token index (row-major over the full extents) of each halo row, for [B, tokens, H]
// scratch such as delta.
__device__ __forceinline__ void halo_token_table(const Problem& p, const Slice& s, int* table) {
  for (int r = threadIdx.x; r < s.halo_count; r += kWarps * 32) {
    int ig[kMaxRank] = {0, 0, 0};
    split_index(r, s.halo_div, p.rank, ig);
    int token = 0;
    GNA_HALO_FOR_AXES(a, p.rank) token = token * p.axes[a].extent + coordinate_of(p.axes[a], s.group[a], s.halo[a].begin + ig[a]);
    table[r] = token;
  }
}

// Rows [0, count) of a slice (first element `slice`) into the tile at dst: one 16-byte cp.async
// per chunk. Table entries are element offsets in the slice, below 2^31; with Absent, -1 marks a
// row outside the tensor, zero filled (box tables: a box may overhang the extents). Halo tables
// have no such row: their offset goes in as an unsigned 32-bit index, without sign extension or
// zero-fill select (about 12 instructions per 16-byte chunk in the SASS instead of 20; the loads
// were a third of the forward's instructions at nat 28x28). The box tables keep the signed form:
// the unsigned one made the head-dim-32 forward spill 24 more bytes.
template <typename T, int D, bool Absent = true>
__device__ __forceinline__ void load_rows(const T* slice, const int* table, int count, uint32_t dst) {
  constexpr int kChunks = D / 8;
  const int ch = threadIdx.x % kChunks;
  for (int r = threadIdx.x / kChunks; r < count; r += kWarps * 32 / kChunks) {
    const int o = table[r];
    if constexpr (Absent)
      cp_async_16(dst + Rows<D>::offset(r, ch), o >= 0 ? slice + o + ch * 8 : slice, o >= 0);
    else
      cp_async_16(dst + Rows<D>::offset(r, ch), slice + static_cast<uint32_t>(o + ch * 8));
  }
}

// First element of slice (b, h) of a tensor.
template <typename X>
__device__ __forceinline__ X* slice_base(const cuda::TokenTensor<X>& t, int b, int h) {
  return t.data + b * t.stride_batch + h * t.stride_head;
}

// Rows [first, first + count) of the K and V halo tables of slice (b, hk) into their tiles,
// waited for by the whole CTA: the keys a walk reads next (a whole halo or one slab of it).
template <typename T, int D>
__device__ __forceinline__ void load_kv_rows(const cuda::TokenTensor<const T>& k,
                                             const cuda::TokenTensor<const T>& v, int b, int hk,
                                             const int* k_table, const int* v_table, int first,
                                             int count, uint32_t k_tile, uint32_t v_tile) {
  load_rows<T, D, false>(slice_base(k, b, hk), k_table + first, count, k_tile);
  load_rows<T, D, false>(slice_base(v, b, hk), v_table + first, count, v_tile);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
}

// The slices [first, last) (batch-major over heads) of the CTA's grid row.
struct SliceRange {
  int first, last;
};
__device__ __forceinline__ SliceRange slice_range(int per_cta, int total) {
  const int first = blockIdx.y * per_cta;
  return SliceRange{first, min_i(first + per_cta, total)};
}

// A warp's patch (its 16 tokens, clipped to the group) and the union of their windows.
struct WarpBox {
  Range tokens[kMaxRank];
  Range walk[kMaxRank];
  int walk_side[kMaxRank];
  SmallDivisor walk_div[kMaxRank];
  int walk_count;
  int plane_count;  // walked tokens per plane of axis 0
  bool empty;
};

__device__ __forceinline__ WarpBox warp_box(const Geometry& G, const Problem& p, const Slice& s,
                                            int warp, Side side) {
  WarpBox w;
  int wc[kMaxRank] = {0, 0, 0};
#pragma unroll
  for (int a = 0; a < kMaxRank; ++a) {
    w.tokens[a] = w.walk[a] = Range{0, 1};
    w.walk_side[a] = 1;
    w.walk_div[a] = small_divisor(1);
  }
  split_index(warp, G.grid_div, p.rank, wc);
  w.empty = false;
  w.walk_count = 1;
  GNA_HALO_FOR_AXES(a, p.rank) {
    const int first = s.box[a].begin + wc[a] * G.warp[a];
    w.tokens[a] = Range{first, min_i(first + G.warp[a], s.n[a])};
    w.empty = w.empty || w.tokens[a].empty();
    if (!w.tokens[a].empty()) w.walk[a] = union_of(p.axes[a], s.n[a], w.tokens[a], side);
    w.walk_side[a] = w.walk[a].size();
    w.walk_div[a] = small_divisor(w.walk_side[a]);
    w.walk_count *= w.walk_side[a];
  }
  w.plane_count = w.walk_count / w.walk_side[0];
  return w;
}

// The planes of slab k that the warp's walk meets, relative to the walk's first plane (empty
// where it meets none).
__device__ __forceinline__ Range walk_planes(const WarpBox& w, const Slice& s, int slab_planes, int k) {
  const int first = w.walk[0].begin - s.halo[0].begin;
  const int b = max_i(k * slab_planes, first);
  const int e = max_i(min_i((k + 1) * slab_planes, first + w.walk_side[0]), b);
  return Range{b - first, e - first};
}
// Chunks of the warp's walk over slab k.
__device__ __forceinline__ int segment_chunks(const WarpBox& w, const Slice& s, int slab_planes, int k) {
  return ceil_div(walk_planes(w, s, slab_planes, k).size() * w.plane_count, kChunk);
}
// Where the warp's walk over a slab starts in its tables: chunk (walk table entry chunk * kChunk)
// and mask word (each walk's mask words start afresh, see build_chunk_masks).
struct Segment {
  int chunk = 0, word = 0;
  __device__ __forceinline__ void advance(int chunks) {
    chunk += chunks;
    word += ceil_div(chunks, 4);
  }
};

// Walk table entry: halo-local coordinates in 10-bit fields (9-bit value, the top bit a guard for
// the mask arithmetic below). Padding entries (past the sub-box, up to a whole chunk) carry
// axis-0 coordinate 511, inside no window (halo sides are at most kMaxHaloSide = 510).
constexpr uint32_t kPaddingEntry = 511;
constexpr uint32_t kGuardBits = (1u << 9) | (1u << 19) | (1u << 29);

__device__ __forceinline__ uint32_t pack_fields(const int* v, int rank) {
  uint32_t packed = 0;
  GNA_HALO_FOR_AXES(a, rank) packed |= static_cast<uint32_t>(v[a]) << (10 * a);
  return packed;
}

// Byte offset in a D-column tile (Rows<D>) of halo row `row` with the swizzle of its column
// chunk 0. The swizzle XORs the chunk index with bits below the row's stride, so the row's column
// chunk c lies at walk_offset ^ (16 c): walks address rows by table lookups and XORs.
template <int D>
__device__ __forceinline__ uint32_t walk_offset(int row) {
  static_assert((Rows<D>::kChunks & (Rows<D>::kChunks - 1)) == 0, "the swizzle must stay below the row stride");
  return Rows<D>::offset(row, 0);
}
// The halo row of a walk offset.
template <int D>
__device__ __forceinline__ int walk_row(uint32_t offset) { return static_cast<int>(offset / (D * 2)); }

// The warp's walk table: coordinates (for the mask) and walk_offset of each walked token, whole
// chunks, one walk per slab of the halo (one walk where the slab is the whole halo), the tile
// offsets relative to the slab's first row; padding entries point at the slab's row 0 (loaded, so
// finite, and masked). Returns the chunks of all walks.
template <int D>
__device__ __forceinline__ int build_walk_table(const WarpBox& w, const Slice& s, int rank, int slab_planes,
                                                uint32_t* coords, uint32_t* offsets) {
  const int lane = threadIdx.x % 32;
  int first = 0;
  for (int k = 0; k < slab_count(s, slab_planes); ++k) {
    const Range planes = walk_planes(w, s, slab_planes, k);
    const int count = planes.size() * w.plane_count;
    const int chunks = ceil_div(count, kChunk);
    const int slab_first = slab_rows(s, slab_planes, k).first;
    for (int e = lane; e < chunks * kChunk; e += 32) {
      uint32_t packed = kPaddingEntry;
      int row = slab_first;
      if (e < count) {
        int c[kMaxRank] = {0, 0, 0};
        split_index(e, w.walk_div, rank, c);
        c[0] += planes.begin;
        row = 0;
        GNA_HALO_FOR_AXES(a, rank) {
          c[a] += w.walk[a].begin - s.halo[a].begin;
          row = row * s.halo_side[a] + c[a];
        }
        packed = pack_fields(c, rank);
      }
      coords[first + e] = packed;
      offsets[first + e] = walk_offset<D>(row - slab_first);
    }
    first += chunks * kChunk;
  }
  __syncwarp();
  return first / kChunk;
}

// The windows of the lane's two rows g and g + 8 of the warp's patch, halo-local and packed like
// the walk entries: [start, end) per axis (unused axes: [0, 1)). Rows past the group take the
// last token's window (never stored).
struct RowWindows {
  uint32_t start[2];
  uint32_t end[2];
};

// Group coordinates of row i of the warp's patch and whether it is inside the group.
__device__ __forceinline__ bool patch_token(const Geometry& G, const WarpBox& w, int rank, int i, int* ig) {
  int off[kMaxRank] = {0, 0, 0};
  split_index(i, G.warp_div, rank, off);
  bool valid = true;
#pragma unroll
  for (int a = 0; a < kMaxRank; ++a) {
    ig[a] = 0;
    if (a < rank) {
      ig[a] = w.tokens[a].begin + off[a];
      valid = valid && ig[a] < w.tokens[a].end;
    }
  }
  return valid;
}

// f(r, valid, ig) for each of the lane's two rows r (g and g + 8 of the warp's patch): ig its
// group coordinates, valid whether it is a token of the group (never in an empty box).
template <typename F>
__device__ __forceinline__ void for_lane_rows(const Geometry& G, const WarpBox& w, int rank, int lane, F&& f) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int ig[kMaxRank];
    const bool valid = !w.empty && patch_token(G, w, rank, lane / 4 + 8 * r, ig);
    f(r, valid, ig);
  }
}

__device__ __forceinline__ RowWindows row_windows(const Geometry& G, const Problem& p, const Slice& s,
                                                  const WarpBox& w, Side side) {
  RowWindows rw;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int ig[kMaxRank], start[kMaxRank] = {0, 0, 0}, end[kMaxRank] = {1, 1, 1};
    patch_token(G, w, p.rank, lane / 4 + 8 * r, ig);
    GNA_HALO_FOR_AXES(a, p.rank) {
      const Range win = window_of(p.axes[a], s.n[a], min_i(ig[a], w.tokens[a].end - 1), side);
      start[a] = win.begin - s.halo[a].begin;
      end[a] = win.end - s.halo[a].begin;
    }
    rw.start[r] = pack_fields(start, kMaxRank);
    rw.end[r] = pack_fields(end, kMaxRank);
  }
  return rw;
}

// Whether the lane's row r attends the walked token whose entry, guard bits set, is eg
// (e | kGuardBits), every axis at once: per field, eg - start keeps its guard bit iff e >= start,
// eg - end keeps it iff e >= end (fields are below 512, so none borrows from the next).
__device__ __forceinline__ bool attends(const RowWindows& rw, int r, uint32_t eg) {
  return ((eg - rw.start[r]) & ~(eg - rw.end[r]) & kGuardBits) == kGuardBits;
}

// The rule's mask of each chunk of the warp's walk, for this lane: bit nb * 4 + r * 2 + j says
// whether row r (g, g + 8) attends column nb * 8 + 2t + j. Built once per CTA, a byte per lane and
// chunk, four chunks to a 32-bit word per lane (word-major, so that a warp reads 32 consecutive
// words); the walks then test bits. The words follow the walk's steps of kMaskChunks chunks with
// the partial step first (mask_lead): chunk c is byte (c + lead) % 4 of word (c + lead) / 4.
constexpr int kMaskChunks = 4;
static_assert(kMaskChunks == 4, "four mask bytes to a 32-bit word");
__device__ __forceinline__ int mask_lead(int chunks) { return (kMaskChunks - chunks % kMaskChunks) % kMaskChunks; }
__device__ __forceinline__ void build_chunk_masks(const uint32_t* coords, int chunks, const RowWindows& rw,
                                                  uint32_t* masks);
__device__ __forceinline__ bool mask_bit(uint32_t m, int nb, int r, int j) { return (m >> (nb * 4 + r * 2 + j)) & 1u; }

// Calls f(nb, r, j) for the eight accumulator elements a lane holds of a 16-key chunk: n8 block
// nb, row r (lane / 4, + 8), column j; element [nb][2 * r + j], mask bit nb * 4 + r * 2 + j.
template <typename F>
__device__ __forceinline__ void for_each_chunk_element(F&& f) {
#pragma unroll
  for (int nb = 0; nb < 2; ++nb)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int j = 0; j < 2; ++j) f(nb, r, j);
}

// Runs step(n, first, c0, mask) over a walk of chunks >= 1 in steps of kMaskChunks chunks, the
// partial one first: n (std::integral_constant) is the step's chunk count, first
// (std::bool_constant) whether it is the walk's first step, mask the lane's mask bytes of chunks
// c0 .. c0 + n - 1 (chunk c0 + c in byte c). Every step's chunks exist: no step tests them.
// Fresh: false where the walk continues an earlier one (a later slab's), so that no step is the
// first.
template <bool Fresh = true, typename Step>
__device__ __forceinline__ void walk_steps(const uint32_t* masks, int chunks, Step&& step) {
  using std::integral_constant;
  using FirstStep = std::bool_constant<Fresh>;
  const uint32_t* words = masks + threadIdx.x % 32;  // mask word k at words[32 k]
  const int lead = mask_lead(chunks);
  const uint32_t mask0 = words[0] >> (8 * lead);
  switch (kMaskChunks - lead) {
    case 1: step(integral_constant<int, 1>{}, FirstStep{}, 0, mask0); break;
    case 2: step(integral_constant<int, 2>{}, FirstStep{}, 0, mask0); break;
    case 3: step(integral_constant<int, 3>{}, FirstStep{}, 0, mask0); break;
    default: step(integral_constant<int, kMaskChunks>{}, FirstStep{}, 0, mask0);
  }
  for (int c0 = kMaskChunks - lead, k = 1; c0 < chunks; c0 += kMaskChunks, ++k)
    step(integral_constant<int, kMaskChunks>{}, std::false_type{}, c0, words[32 * k]);
}

// Runs chunk(c, mask) over a walk's chunks one at a time (mask: the lane's mask byte of chunk c in
// its low byte), a mask word read every kMaskChunks chunks: for walks whose registers do not
// take a whole step unrolled.
template <typename Chunk>
__device__ __forceinline__ void walk_chunks(const uint32_t* masks, int chunks, Chunk&& chunk) {
  const uint32_t* words = masks + threadIdx.x % 32;  // mask word k at words[32 k]
  const int lead = mask_lead(chunks);
  uint32_t word = words[0] >> (8 * lead);
  for (int c = 0, v = lead; c < chunks; ++c, ++v) {
    if (c > 0 && v % kMaskChunks == 0) word = words[32 * (v / kMaskChunks)];
    chunk(c, word);
    word >>= 8;
  }
}

// ldmatrix rows of a chunk's 16 walked tokens, as the portable kernels take them: for the
// non-transposed operand (B of S = A B^T) lane l reads walk entry l % 8 + (l / 16) * 8 at column
// chunk 2 j + (l / 8) % 2, for the transposed one (B of O += P B) entry l % 16 at column chunk
// 2 j + l / 16 (the orders in which an x4 ldmatrix yields the MMA's B register pairs). lane_nt /
// lane_t are the lane's table reads with its column chunk parity applied: column chunk 2 j is then
// at lane_nt ^ (32 j) (see walk_offset).
__device__ __forceinline__ uint32_t lane_nt(const uint32_t* offsets, int c) {
  const int l = threadIdx.x % 32;
  return offsets[c * kChunk + l % 8 + (l / 16) * 8] ^ static_cast<uint32_t>(((l / 8) % 2) * 16);
}
__device__ __forceinline__ uint32_t lane_t(const uint32_t* offsets, int c) {
  const int l = threadIdx.x % 32;
  return offsets[c * kChunk + l % 16] ^ static_cast<uint32_t>((l / 16) * 16);
}

// A fragments of the warp's 16 rows (rows r0.. of a tile), D columns.
template <int D>
__device__ __forceinline__ void load_a(uint32_t (&f)[D / 16][4], uint32_t tile, int r0) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
    ldmatrix_x4(f[ks], tile + Rows<D>::offset(r0 + lane % 16, 2 * ks + lane / 16));
}

// s[2][4] += A (16 x D, fragments) * B^T where B's 16 rows are a chunk's walked tokens in the tile
// at b_tile (lane_off: this lane's lane_nt of the chunk).
template <typename T, int D>
__device__ __forceinline__ void mma_abt(float (&s)[2][4], const uint32_t (&a)[D / 16][4], uint32_t b_tile,
                                        uint32_t lane_off) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t b[4];
    ldmatrix_x4(b, b_tile + (lane_off ^ static_cast<uint32_t>(32 * ks)));
    Mma<T>::run(s[0], a[ks], b[0], b[1]);
    Mma<T>::run(s[1], a[ks], b[2], b[3]);
  }
}

// acc[D/8][4] += P (16 x 16: the chunk's scores as an A fragment) * B, B's 16 rows a chunk's walked
// tokens in the tile at b_tile (lane_off: this lane's lane_t of the chunk).
template <typename T, int D>
__device__ __forceinline__ void mma_pb(float (&acc)[D / 8][4], const uint32_t (&pa)[4], uint32_t b_tile,
                                       uint32_t lane_off) {
#pragma unroll
  for (int dp = 0; dp < D / 16; ++dp) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, b_tile + (lane_off ^ static_cast<uint32_t>(32 * dp)));
    Mma<T>::run(acc[2 * dp], pa, b[0], b[1]);
    Mma<T>::run(acc[2 * dp + 1], pa, b[2], b[3]);
  }
}

// The chunk's 16 x 16 scores (C fragments of two n-blocks) as an A fragment.
template <typename T>
__device__ __forceinline__ void pack_a(uint32_t (&a)[4], const float (&s)[2][4]) {
  a[0] = Mma<T>::pack(s[0][0], s[0][1]);
  a[1] = Mma<T>::pack(s[0][2], s[0][3]);
  a[2] = Mma<T>::pack(s[1][0], s[1][1]);
  a[3] = Mma<T>::pack(s[1][2], s[1][3]);
}

// Entries (guard bits set, see attends) of the 4 walked tokens (columns nb * 8 + 2t + e) of
// chunk c whose scores this lane's C fragment holds: e[nb][e].
__device__ __forceinline__ void chunk_columns(const uint32_t* coords, int c, uint32_t (&e)[2][2]) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int nb = 0; nb < 2; ++nb) {
    const uint2 v = *reinterpret_cast<const uint2*>(coords + c * kChunk + nb * 8 + 2 * t);
    e[nb][0] = v.x | kGuardBits;
    e[nb][1] = v.y | kGuardBits;
  }
}

// The masks of every walk of the warp's table (one per slab, build_walk_table), each from a fresh
// mask word.
__device__ __forceinline__ void build_walk_masks(const WarpBox& w, const Slice& s, int slab_planes,
                                                 const uint32_t* coords, const RowWindows& rw, uint32_t* masks) {
  if (w.empty) return;
  Segment seg;
  for (int k = 0; k < slab_count(s, slab_planes); ++k) {
    const int chunks = segment_chunks(w, s, slab_planes, k);
    build_chunk_masks(coords + seg.chunk * kChunk, chunks, rw, masks + seg.word * 32);
    seg.advance(chunks);
  }
}

__device__ __forceinline__ void build_chunk_masks(const uint32_t* coords, int chunks, const RowWindows& rw,
                                                  uint32_t* masks) {
  const int lane = threadIdx.x % 32;
  const int lead = mask_lead(chunks);
  for (int w = 0; w * kMaskChunks < chunks + lead; ++w) {
    uint32_t word = 0;
    for (int k = 0; k < kMaskChunks; ++k) {
      const int c = w * kMaskChunks + k - lead;
      if (c < 0 || c >= chunks) continue;
      uint32_t e[2][2];
      chunk_columns(coords, c, e);
      for_each_chunk_element([&](int nb, int r, int j) {
        if (attends(rw, r, e[nb][j])) word |= 1u << (8 * k + nb * 4 + r * 2 + j);
      });
    }
    masks[w * 32 + lane] = word;
  }
}

// The streamed dK / dV pass's walk table (plan.hpp, slab_table_rows): one table per warp for
// every slab, since a warp's sub-box meets each slab in a run of whole planes and the entries of
// a plane do not depend on the slab. Entry q * plane_count + i is token i of plane q of the slab
// (q < slab_planes): coordinates with the slab-relative plane in field 0 (the mask adds the
// slab's first plane) and walk_offset of its slab-relative row. Entries past slab_planes planes
// (to table_rows, whole chunks and one more) are padding at the slab's row 0.
template <int D>
__device__ __forceinline__ void build_slab_table(const WarpBox& w, const Slice& s, int rank, int slab_planes,
                                                 int table_rows, uint32_t* coords, uint32_t* offsets) {
  const int lane = threadIdx.x % 32;
  const int entries = slab_planes * w.plane_count;
  const SmallDivisor div[kMaxRank] = {small_divisor(slab_planes), w.walk_div[1], w.walk_div[2]};
  for (int e = lane; e < table_rows; e += 32) {
    uint32_t packed = kPaddingEntry;
    int row = 0;
    if (e < entries) {
      int c[kMaxRank] = {0, 0, 0};
      split_index(e, div, rank, c);
      GNA_HALO_FOR_AXES(a, rank) {
        if (a > 0) c[a] += w.walk[a].begin - s.halo[a].begin;
        row = row * s.halo_side[a] + c[a];
      }
      packed = pack_fields(c, rank);
    }
    coords[e] = packed;
    offsets[e] = walk_offset<D>(row);
  }
  __syncwarp();
}

// The warp's walk over slab k in its slab table: entries [first, first + 16 chunks), of which
// [first + lead, first + lead + count) are the planes of its sub-box in the slab. first is even
// (lead: one entry of the plane before, masked) so that a lane's pair of columns is one 8-byte
// read; the entries past them are masked and point at rows of the slab's tile (loaded, or zero).
struct SlabWalk {
  int first, lead, count, chunks;
};
__device__ __forceinline__ SlabWalk slab_walk(const WarpBox& w, const Slice& s, int slab_planes, int k) {
  const Range planes = walk_planes(w, s, slab_planes, k);
  const int begin = (w.walk[0].begin - s.halo[0].begin + planes.begin - k * slab_planes) * w.plane_count;
  SlabWalk sw;
  sw.lead = begin & 1;
  sw.first = begin - sw.lead;
  sw.count = planes.size() * w.plane_count;
  sw.chunks = sw.count > 0 ? ceil_div(sw.count + sw.lead, kChunk) : 0;
  return sw;
}

// The masks of the warp's walks over every slab (slab_walk), each from a fresh mask word as
// build_walk_masks lays them out; entries outside a walk's planes attend nothing.
__device__ __forceinline__ void build_slab_walk_masks(const WarpBox& w, const Slice& s, int slab_planes,
                                                      const uint32_t* coords, const RowWindows& rw,
                                                      uint32_t* masks) {
  if (w.empty) return;
  const int lane = threadIdx.x % 32, t = lane % 4;
  int word0 = 0;
  for (int k = 0; k < slab_count(s, slab_planes); ++k) {
    const SlabWalk sw = slab_walk(w, s, slab_planes, k);
    const uint32_t shift = static_cast<uint32_t>(k * slab_planes);  // field 0: slab plane -> halo plane
    const int lead = mask_lead(sw.chunks);
    for (int v = 0; v * kMaskChunks < sw.chunks + lead; ++v) {
      uint32_t word = 0;
      for (int b = 0; b < kMaskChunks; ++b) {
        const int c = v * kMaskChunks + b - lead;
        if (c < 0 || c >= sw.chunks) continue;
        for_each_chunk_element([&](int nb, int r, int j) {
          const int e = c * kChunk + nb * 8 + 2 * t + j;
          if (e < sw.lead || e >= sw.lead + sw.count) return;
          if (attends(rw, r, (coords[sw.first + e] + shift) | kGuardBits)) word |= 1u << (8 * b + nb * 4 + r * 2 + j);
        });
      }
      masks[(word0 + v) * 32 + lane] = word;
    }
    word0 += ceil_div(sw.chunks, kMaskChunks);
  }
}

// A fragments of a warp's 16 rows straight from global memory (rows at element offsets
// table[0..15] of `slice`, -1: zero), as load_a takes them from a tile: register pairs of
// columns 2t, 2t + 1 of rows g and g + 8, then of columns 8 further.
template <typename T, int D>
__device__ __forceinline__ void load_a_global(uint32_t (&f)[D / 16][4], const T* slice, const int* table) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int rows[2] = {table[g], table[g + 8]};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const unsigned int* row = reinterpret_cast<const unsigned int*>(slice + rows[r] + 2 * t);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      f[ks][r] = rows[r] >= 0 ? __ldg(row + 8 * ks) : 0u;
      f[ks][2 + r] = rows[r] >= 0 ? __ldg(row + 8 * ks + 4) : 0u;
    }
  }
}

template <typename T>
using Pair2 = typename std::conditional<std::is_same<T, __half>::value, __half2, __nv_bfloat162>::type;

// Stores the lane's part of rows g, g + 8 (acc C fragments over D columns, times mul) at dst[r]
// (null: row not stored).
template <typename T, int D>
__device__ __forceinline__ void store_rows(T* const (&dst)[2], const float (&acc)[D / 8][4], float mul0, float mul1) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!dst[r]) continue;
    const float mul = r ? mul1 : mul0;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      Pair2<T> v;
      v.x = cuda::from_float<T>(acc[i][2 * r] * mul);
      v.y = cuda::from_float<T>(acc[i][2 * r + 1] * mul);
      *reinterpret_cast<Pair2<T>*>(dst[r] + i * 8 + 2 * t) = v;
    }
  }
}

}  // namespace gna::halo
