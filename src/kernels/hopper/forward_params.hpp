// Parameters of one launch of the Hopper forward kernel. A launch covers one dilation group
// combination (inside it every axis has dilation 1) and a run of batch indices folded into the
// outermost axis of the tensor maps. Axes are right-aligned to three (tile_sizes.hpp).
#pragma once

#include <cstdint>

#include "gna/core/axis_rule.hpp"
#include "gna/core/tiling.hpp"
#include "kernels/hopper/additional_counts.hpp"
#include "kernels/hopper/head_rules.hpp"
#include "kernels/hopper/tensor_rows.hpp"
#include "kernels/hopper/tile_sizes.hpp"

namespace gna::hopper {

// A float per token and head, [B, spatial.., H], laid out as LSE is: element strides, the base
// offset to the launch's dilation group and first batch, axis strides times the dilation.
struct TokenFloats {
  const float* data = nullptr;
  int64_t batch_stride = 0, axis_stride[kAxes] = {0, 0, 0}, head_stride = 0;
};

// The FP8 scheme's scales (launches with e4m3 operands only; O = acc * v_scale / (448 l),
// LSE + lse_bias).
struct Fp8Scales {
  TokenFloats q_scale;   // per query token and head
  TokenFloats lse_bias;  // per query token and head (data null: none)
  TokenFloats k_scale;   // per key token and KV head
  // Additional keys' scales [B, Na, Hk] (batch index: batch_offset + the launch's batch).
  const float* add_k_scale = nullptr;
  int64_t add_k_scale_batch_stride = 0, add_k_scale_token_stride = 0,
          add_k_scale_head_stride = 0;
  // Per channel [B, Hk, Dv] (contiguous channels).
  const float* v_scale = nullptr;
  int64_t v_scale_batch_stride = 0, v_scale_head_stride = 0;
};

struct FwdParams {
  AxisRule axes[kAxes];     // extent = group length, dilation 1
  int q_tile[kAxes];        // Q tile per axis (powers of two, product kTileTokens)
  int kv_tile[kAxes];       // KV tile per axis (powers of two, product kTileTokens)
  int q_tiles[kAxes];       // Q tiles per axis (from rows.q_first_tile on)
  int q_tiles_per_image;    // product of q_tiles
  // The query and key tensors' rows on each axis (tensor_rows.hpp): the whole group, or a
  // slab's rows in it.
  TensorRows rows;
  // Where a Q tile's KV tiles start per axis (gna/core/tiling.hpp): on the grid of kv_tile or
  // placed at the union window's first key; only the walk's start changes, not the KV loop.
  KvPlacement kv_placement;
  int batches;              // batch indices folded into this launch
  int batch_offset;         // first batch index (additional KV tensor coordinate)
  int heads_q;
  int heads_per_kv;         // heads_q / heads_kv
  int additional_kv;        // extra keys (0: none)
  AdditionalCounts counts;  // per batch (index batch_offset + the launch's batch): keys attended
  float scale_log2;         // scale * log2(e)
  // Persistent kernel: work items (Q tile, head, batch) = q_tiles_per_image * heads_q * batches,
  // item k is tile order[k % q_tiles_per_image] (with head rules: in the row of the head's group;
  // tile k % q_tiles_per_image without an order)
  // of image and head k / q_tiles_per_image; work_counter (two ints, zero between launches)
  // hands items out dynamically, round robin without it.
  int items;
  const int* tile_order;
  int* work_counter;
  // Output O [.., Hq, Dv] and LSE [.., Hq] (float32), element strides; the base pointers are
  // already offset to this launch's dilation group and first batch, axis strides multiplied by
  // the dilation.
  void* o;
  int64_t o_batch_stride, o_axis_stride[kAxes], o_head_stride;
  float* lse;
  int64_t lse_batch_stride, lse_axis_stride[kAxes], lse_head_stride;
  // Per-head rules (head_rules.hpp): a work item's KV walk, tile classes, masks and row windows
  // come from its head's group (axes_of_item); the tiles, the placement and the extents are the
  // launch's. tile_order then holds one row of q_tiles_per_image entries per group.
  HeadGroupRules rules;
  Fp8Scales fp8;  // read only by the e4m3 kernels
};

}  // namespace gna::hopper
