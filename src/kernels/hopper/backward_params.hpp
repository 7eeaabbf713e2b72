// Parameters of one launch of the Hopper backward kernel. Like the forward, a launch covers one
// dilation-group combination (inside it every axis has dilation 1, extent = group length) and a
// run of batch indices folded into the outermost axis of the tensor maps; axes are right-aligned
// to three. A second kind of launch ("additional" mode) computes the gradients of the additional
// keys and values: its KV tiles are tiles of additional tokens, its axes span the whole token
// layout with dilation 1, and every Q tile is visited without any rule mask.
#pragma once

#include <cstdint>

#include "gna/core/axis_rule.hpp"
#include "kernels/hopper/additional_counts.hpp"
#include "kernels/hopper/head_rules.hpp"
#include "kernels/hopper/tensor_rows.hpp"
#include "kernels/hopper/tile_sizes.hpp"

namespace gna::hopper {

// Q tile rows and KV tile keys (64 per consumer warpgroup) of the backward: the core's
// (gna/core/kernel_tiles.hpp).
constexpr int kBwdQRows = kHopperBwdQRows;
constexpr int kBwdKvRows = kHopperBwdKvRows;

struct BwdParams {
  AxisRule axes[kAxes];   // extent = group length (whole extent in additional mode), dilation 1
  int q_tile[kAxes];      // Q tile per axis (powers of two, product kBwdQRows)
  int kv_tile[kAxes];     // KV tile per axis (powers of two, product kBwdKvRows)
  int q_tiles[kAxes];     // Q tiles per axis (from rows.q_first_tile on)
  int kv_tiles[kAxes];    // KV tiles per axis (spatial mode; from rows.k_first_tile on)
  // The query-side and key-side tensors' rows on each axis (tensor_rows.hpp): the whole group,
  // or a slab's rows in it. A KV tile visits only the Q tiles meeting the query rows.
  TensorRows rows;
  int q_tiles_per_image;
  int kv_tiles_per_image;  // spatial: product of kv_tiles; additional: additional KV tiles
  // Spatial mode: the CTAs take the KV tiles with the outermost axis fastest (1) or in row
  // order (0); see make_work.
  int kv_outer_axis_fastest;
  int batches;             // batch indices folded into this launch
  int batch_offset;        // first batch index of the run
  int heads_q, heads_kv, heads_per_kv;
  int additional;          // 1: additional mode
  int additional_kv;       // additional keys
  AdditionalCounts counts; // per batch (index batch_offset + the run's batch): keys attended
  float scale;             // softmax scale (dK)
  float scale_log2;        // scale * log2(e)
  // Per query row (b, token, h) of [B, tokens, Hq]: LSE in the log2 domain and rowsum(dO * O).
  // Element offsets of a row: batch * row_batch_stride + sum(coordinate * row_axis_stride) +
  // head; base pointers already at this launch's group origin and first batch. (The dQ
  // accumulator, [B, tokens, Hq, D] fp32, is reached through its tensor map.)
  const float* lse2;
  const float* delta;
  int64_t row_batch_stride, row_axis_stride[kAxes];
  // dK / dV outputs (input dtype): element strides, base pointers at the group origin and the
  // run's first batch; in additional mode axis 2 runs over the additional tokens.
  void* dk;
  void* dv;
  int64_t dk_batch_stride, dk_axis_stride[kAxes], dk_head_stride;
  int64_t dv_batch_stride, dv_axis_stride[kAxes], dv_head_stride;
  // 1: dK / dV stored through their tensor maps (tensor-map compatible strides, and no KV tile
  // reaching into the next batch folded into axis 0); 0: element by element.
  int store_by_tma;
  // Deterministic mode: one counter per (batch, query head, Q tile) of this launch (zeroed);
  // the CTAs adding into a Q tile's dQ rows take turns in the order of their KV tiles.
  int* turns;
  // Per-head rules (head_rules.hpp; spatial mode only): each query head's visits of a KV tile
  // walk the Q tiles of its group's inverse rule, with that group's classes and masks.
  HeadGroupRules rules;
};

}  // namespace gna::hopper
