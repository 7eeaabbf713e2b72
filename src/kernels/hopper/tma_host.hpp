// Host-side pieces shared by the Hopper kernels: device checks, tensor maps over heads-last
// token tensors, and the launch plan (one launch per dilation-group combination and per run of
// batch indices folded into the outermost axis of the maps).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "gna/attention_params.hpp"
#include "gna/core/problem.hpp"
#include "gna/core/tiling.hpp"
#include "gna/tensor.hpp"
#include "kernels/hopper/tensor_rows.hpp"
#include "kernels/hopper/tile_sizes.hpp"

namespace gna::hopper {

// Tiles of `tile` rows (on the group's grid) meeting the rows [rows.begin, rows.begin +
// rows.count); the first is rows.begin / tile.
inline int tiles_meeting(const SlabGroupRows& rows, int tile) {
  return rows.count > 0 ? ceil_div(rows.begin + rows.count, tile) - rows.begin / tile : 0;
}

// TensorRows of kernel axis ka from the slice's query-side and key-side rows.
inline void set_axis_rows(TensorRows& t, int ka, const SlabGroupRows& q, const SlabGroupRows& k,
                          int q_tile, int kv_tile) {
  t.q_begin[ka] = q.begin;
  t.q_end[ka] = q.begin + q.count;
  t.k_begin[ka] = k.begin;
  t.k_end[ka] = k.begin + k.count;
  t.q_first_tile[ka] = q.begin / q_tile;
  t.k_first_tile[ka] = k.begin / kv_tile;
}

bool is_sm90(int device);
// Whether the driver exposes cuTensorMapEncodeTiled.
bool have_tensor_map_encoder();

// What every Hopper kernel needs: CUDA tensors on an sm_90 device, a driver that encodes tensor
// maps, fp16/bf16 inputs. Otherwise writes the reason to `why`.
bool device_and_dtype_supported(const Problem& p, const TensorRef& q, std::string* why);
// The above, and equal query/key and value head dims, one of `head_dims`.
bool device_dtype_and_dims_supported(const Problem& p, const TensorRef& q,
                                     std::initializer_list<int> head_dims, std::string* why);

// Whether TMA can read the tensor `name` as the kernels map it: a 16-byte aligned base and every
// stride but the last a multiple of 16 bytes. Otherwise writes the reason to `why`.
bool tma_readable(const TensorRef& t, const char* name, std::string* why);
// tma_readable for the query, key and value tensors; for the additional keys and values.
bool qkv_readable(const AttentionTensors& in, std::string* why);
bool additional_readable(const AttentionTensors& in, std::string* why);

// A refusal: "hopper: <reason>" in `why` (when given), false.
bool refuse(std::string* why, const std::string& reason);

// A 5-D tiled tensor map: dims (D, H, axis2, axis1, axis0').
struct MapDims {
  cuuint64_t dim[5];
  cuuint64_t stride_bytes[4];  // of dims 1..4
  cuuint32_t box[5];
};
// bf16, fp16, e4m3 or fp32 elements; 128-byte swizzle for 128-byte box rows, else 64-byte;
// throws on failure.
void encode_map(CUtensorMap* map, const MapDims& d, void* base, DType dtype);

// Tensor map over additional keys or values [B, N, H, head_dim], box (min(head_dim, 64), 1,
// box_tokens, 1, 1); the batch index is the outermost coordinate.
void encode_additional_map(CUtensorMap* map, const TensorRef& t, DType dtype, int head_dim,
                           int box_tokens);

// The tensors of a launch by the rows they hold: the query side (Q, dO, O, LSE, dQ) and the key
// side (K, V, dK, dV). They differ on a slab (gna/core/slab.hpp), where each holds a slab of the
// whole layout.
enum class TokenRows { queries, keys };

// One launch: a dilation-group combination and a run of batch indices.
struct LaunchSlice {
  int run = 0;                 // batch index of the run's first batch
  int group[kAxes] = {0, 0, 0};  // dilation group per problem axis
  AxisRule axes[kAxes];        // kernel axes (right-aligned): extent = group length, dilation 1
  // Per kernel axis the query-side and key-side tensors' rows in the group (slab_group_rows;
  // without a slab the whole group; placeholder axes: one row).
  SlabGroupRows q_rows[kAxes], k_rows[kAxes];
  const SlabGroupRows* rows(TokenRows r) const { return r == TokenRows::keys ? k_rows : q_rows; }
  // Whether the query side has rows in the group on every axis (a slab may have none in some
  // dilation groups).
  bool has_queries() const;
};

struct LaunchPlan {
  int rank = 0;
  int off = 0;         // kernel axis = problem axis + off
  int batch_runs = 1;  // launches per group along the batch
  int per_run = 1;     // batch indices folded into one launch
  std::vector<LaunchSlice> slices;

  // Element offset of the slice's origin (first batch, the tensor's first row in the group) in a
  // token tensor [B, spatial.., ...] of the query or key side.
  int64_t origin(const LaunchSlice& s, const TensorRef& t,
                 TokenRows side = TokenRows::queries) const;
  // Element stride of kernel axis `ka` in a token tensor (0 for placeholder axes), dilation
  // folded in.
  int64_t axis_stride(const Problem& p, const TensorRef& t, int ka) const;
};

// Batches fold into the outermost axis of the maps when every tensor of `token_tensors` allows
// it: for rank < 3 always (the placeholder axis carries the batch), for rank 3 when the batch
// stride spans the axis (contiguous layouts), the dilation divides the outer extent and the
// problem is no slab (its query and key tensors hold different rows). Null entries (absent
// tensors) are skipped. On a slab the slices' axes are the rule's over the whole layout
// (slab_axis) and each side's rows those of its slab.
LaunchPlan plan_launches(const Problem& p, std::initializer_list<const TensorRef*> token_tensors);

// Tensor map over a heads-last token tensor [B, spatial.., H, head_dim] of 16-bit or fp32
// elements (t.dtype) of the query or key side for one slice, box (min(head_dim, 128 bytes of
// elements), 1, tile...) so that a tile is one box per 64 (16-bit) or 32 (fp32) columns. Its
// rows per axis are the side's rows in the group: the kernels address row c (group coordinate)
// at c - rows.begin, and TMA zero-fills (or clips) rows outside them.
void encode_token_map(CUtensorMap* map, const Problem& p, const LaunchPlan& plan,
                      const LaunchSlice& s, const TensorRef& t, const int* tile, int head_dim,
                      TokenRows side = TokenRows::queries);

// The fields of a slice's kernel parameters (FwdParams, BwdParams) that the forward and the
// backward fill alike: per kernel axis the rule, the Q and KV tile (1 on placeholder axes), the
// tensors' rows and the Q tiles (those meeting the query rows); the batches and the heads.
template <typename Params>
void set_slice_fields(Params& kp, const Problem& p, const LaunchPlan& plan, const LaunchSlice& s,
                      const TileShape& q_tile, const TileShape& kv_tile) {
  for (int ka = 0; ka < kAxes; ++ka) {
    const int a = ka - plan.off;
    kp.axes[ka] = s.axes[ka];
    kp.q_tile[ka] = a < 0 ? 1 : q_tile.size[a];
    kp.kv_tile[ka] = a < 0 ? 1 : kv_tile.size[a];
    set_axis_rows(kp.rows, ka, s.q_rows[ka], s.k_rows[ka], kp.q_tile[ka], kp.kv_tile[ka]);
    kp.q_tiles[ka] = tiles_meeting(s.q_rows[ka], kp.q_tile[ka]);
  }
  kp.q_tiles_per_image = kp.q_tiles[0] * kp.q_tiles[1] * kp.q_tiles[2];
  kp.batches = plan.per_run;
  kp.batch_offset = s.run;
  kp.heads_q = p.heads_q;
  kp.heads_per_kv = p.heads_q / p.heads_kv;
  kp.additional_kv = p.additional_kv;
}

}  // namespace gna::hopper
