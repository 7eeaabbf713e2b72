// Geometry of the neighborhood-tile ("halo") kernels, host side (no CUDA): the box of tokens a CTA
// owns and the patch each warp takes, the largest halo (union of the box's windows) per axis,
// the shared memory that follows, the keys a warp walks per query, and the rule by which
// dispatch prefers these kernels over the 128-token tile kernels. Every count comes from the
// core's rule (union_key_window, union_query_window).
#pragma once

#include <string>
#include <vector>

#include "gna/core/problem.hpp"

namespace gna::halo {

constexpr int kWarps = 4;                      // warps per CTA
constexpr int kWarpTokens = 16;                // tokens of a warp's patch: one m16 MMA block
constexpr int kBoxTokens = kWarps * kWarpTokens;
constexpr int kChunk = 16;                     // keys (or queries) per step of a warp's walk
constexpr int kMaxHaloSide = 510;              // walk tables: 9-bit coordinates (cta.cuh)
constexpr int kMaxHeadDim = 64;
// Bytes of a warp's walk masks for a walk table of walk_rows entries in `segments` walks (one per
// slab of the halo, below): a 32-bit word per lane for every 4 chunks of each walk
// (kernels/halo/cta.cuh, build_chunk_masks).
constexpr int walk_mask_bytes(int walk_rows, int segments = 1) {
  return (walk_rows / kChunk + 3 * segments) / 4 * 32 * 4;
}

// The CTA's box and the warp's patch per axis (products kBoxTokens and kWarpTokens; unused axes
// 1): 64 in 1-D, 8x8 in 2-D (or 4x16 / 16x4 where they tile the extents in fewer boxes, as 4x16
// does 28x28: no half-empty boxes), 4x4x4 in 3-D; warps take 16, 4x4 and 2x2x4.
struct BoxShape {
  int cta[kMaxRank] = {1, 1, 1};
  int warp[kMaxRank] = {1, 1, 1};
};
BoxShape box_shape(const Problem& p);

// Which way a box looks through the rule: the keys its queries attend (forward, dQ) or the
// queries that attend its keys (dK / dV, the inverse rule).
enum class Side { keys_of_queries, queries_of_keys };

// Union of the windows (Side) of tokens [begin, end) of an axis's group of length n.
Range window_union(const AxisRule& a, int n, Range tokens, Side side);

// Per-axis and overall sizes of one problem's kernels.
//
// Slabs: where a pass's shared memory cannot hold the whole halo (3-D windows at head dim 64),
// the halo streams through shared memory in slabs of slab_planes planes of axis 0 (the
// outermost, so a slab's rows are consecutive in the row tables). Each warp's walk table then
// holds one walk per slab (the slab's planes of its sub-box, whole chunks, tile offsets relative
// to the slab), and the warp walks them in turn, its softmax state carried across slabs.
struct Plan {
  BoxShape shape;
  int boxes[kMaxRank] = {1, 1, 1};  // boxes along each axis of dilation group 0 (the longest)
  int halo[kMaxRank] = {1, 1, 1};   // largest halo of a box, per axis
  int walk[kMaxRank] = {1, 1, 1};   // largest union of a warp patch's windows, per axis
  int halo_rows = 1;                // tokens of the largest halo box (product of halo)
  int walk_rows = kChunk;           // entries of a warp's walk table (product of walk, whole chunks, per slab)
  double walked_per_token = 0;      // tokens a warp walks per token of its patch, averaged
  int slab_planes = 1;              // planes of axis 0 per slab (halo[0]: the whole halo at once)
  int slabs = 1;                    // slabs of the largest halo (ceil(halo[0] / slab_planes))
  int segments = 1;                 // most slabs one warp's walk meets (walks in its table)
  int tile_rows = 1;                // rows of each halo tile in shared memory (slab_planes planes)
  // Entries of a warp's walk table in the streamed dK / dV kernel: one table serves every slab
  // (a warp's sub-box meets a slab in whole planes, whose entries do not depend on the slab), so
  // it holds slab_planes planes of the largest sub-box, whole chunks, and one chunk more (a walk
  // may start at any entry of its first plane). Its masks take walk_rows + kChunk rows (a walk
  // may start one entry early, for aligned reads).
  int slab_table_rows = kChunk;
  // The streamed dK / dV kernel without K / V tiles: their fragments go from global memory
  // straight into registers once per slice (16 KB less shared memory at head dim 64, for more
  // planes or CTAs; where the tiles fit as many CTAs and planes they are kept: cheaper loads).
  bool kv_registers = false;
};
Plan make_plan(const Problem& p, Side side);

// The plan with its halo streamed in slabs of `planes` planes of axis 0 (1 <= planes <= halo[0]);
// kv_registers: the streamed dK / dV kernel's K / V fragments from global memory (Plan).
Plan with_slabs(const Plan& whole, int planes, bool kv_registers = false);

// Shared memory per CTA of each kernel at head dim d (bytes).
enum class Pass { forward, dq, dkdv };
int shared_bytes(const Plan& plan, Pass pass, int d);
int forward_shared_bytes(const Plan& keys_plan, int d);
int dq_shared_bytes(const Plan& keys_plan, int d);
int dkdv_shared_bytes(const Plan& queries_plan, int d);

// The plans a pass can run under `limit` bytes of shared memory per CTA, the most planes first:
// the whole halo where it fits, then its slabs of fewer and fewer planes that fit (none: nothing
// fits); for dK / dV each slab size with K / V tiles, then without (kv_registers). The launcher picks among them by resident CTAs (kernels/halo/launch.cuh).
std::vector<Plan> slab_candidates(const Plan& whole, Pass pass, int d, int limit);
// The first candidate (the whole halo where it fits, else the largest slabs that fit), or the
// whole plan where none fits (which dispatch refuses, naming the bytes).
Plan pass_plan(const Plan& whole, Pass pass, int d, int limit);

// Keys per query that the best 128x128-token tile kernel visits (whole KV tiles of the boxes its
// Q tiles need, from the core's tiling math).
double tile_keys_per_query(const Problem& p);

// The launch grid of a halo kernel: grid.x = boxes x dilation groups (x_blocks), grid.y = runs of
// slices_per_cta (batch item, head) slices. A CTA builds its box's tables once and then takes its
// run of slices, so long runs spend less on setup; the grid is sized so that its CTAs fill whole
// waves of the resident CTAs (no partial wave leaves SMs idle). Cost in units of one slice:
// waves x (slices per CTA + kSetupSlices), over the grids that fill 1, 2, ... waves; runs of at
// most kMaxSlicesPerCta slices, so that CTAs of cheaper (edge) boxes still balance the others.
constexpr int kSetupSlices = 1;
constexpr int kMaxSlicesPerCta = 32;
constexpr int kMaxGridY = 65535;
struct SliceGrid {
  int slices_per_cta = 1;
  int rows = 1;  // grid.y: ceil(slices / slices_per_cta)
  int64_t waves = 1;  // ceil(x_blocks * rows / resident)
};
// resident: CTAs of the kernel resident on the device at once (CTAs per SM x SMs).
SliceGrid slice_grid(int64_t x_blocks, int64_t slices, int64_t resident);

// A run of slices, batch-major over `heads` heads, from slice `first` (a CTA's: blockIdx.y x
// slices_per_cta) to at most first + per_cta: walked with one division per run instead of three
// per slice (they were 5% of the forward's instructions at nat 28x28). head: the slice's head;
// kv_head its KV head (group_heads heads share one). The backward passes keep their divisions:
// the cursor's registers took the head-dim-32 dQ pass from 128 to 137 registers (3 CTAs per SM
// instead of 4) and its backward 5-10% slower.
struct SliceCursor {
  int slice, last, batch, head, kv_head, in_group;
  GNA_HD SliceCursor(int first, int per_cta, int total, int heads, int group_heads)
      : slice(first), last(first + per_cta < total ? first + per_cta : total), batch(first / heads),
        head(first % heads), kv_head(head / group_heads), in_group(head % group_heads) {}
  GNA_HD bool more() const { return slice < last; }
  GNA_HD void next(int heads, int group_heads) {
    ++slice;
    ++head;
    if (++in_group == group_heads) {
      in_group = 0;
      ++kv_head;
    }
    if (head == heads) {
      head = kv_head = 0;
      ++batch;
    }
  }
};

// Dispatch's rule: the halo kernels run when a warp walks at most 1 / kPreferRatio of the keys per
// query that the 128-token tile kernels visit. The ratio accounts for the tile kernels' cheaper
// keys (dense tiles without per-element masks; wgmma on Hopper).
constexpr double kPreferRatio = 2.0;
bool preferred(const Problem& p, std::string* why = nullptr);

}  // namespace gna::halo
