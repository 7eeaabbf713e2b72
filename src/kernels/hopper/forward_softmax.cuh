// The rows' key windows, masking, online softmax and P packing of the forward consumers, shared
// by the one-item and the persistent kernels. They work on one warpgroup's m64nKeys S fragment:
// each thread holds rows i = 0, 1 (lane / 4 and + 8) and, per 8-column group j, columns
// j * 8 + quad * 2 + e.
#pragma once

#include <cstdint>

#include "gna/core/axis_rule.hpp"
#include "gna/core/column_mask.hpp"
#include "kernels/hopper/device_util.cuh"
#include "kernels/hopper/forward_params.hpp"

namespace gna::hopper {

// The key window per axis (group coordinates) under the item's rules `axes` of the thread's two
// rows of Q tile qt (row_in_wg and + 8 of consumer warpgroup `consumer`), from which
// row_key_masks builds partial pairs' masks: keep(i, a, window) for row i and axis a.
template <typename Keep>
__device__ __forceinline__ void row_key_windows(const FwdParams& p, const AxisRule* axes,
                                                const int (&qt)[kAxes], int consumer,
                                                int row_in_wg, Keep&& keep) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    int local[kAxes];
    tile_local(consumer * 64 + row_in_wg + 8 * i, p.q_tile, local);
#pragma unroll
    for (int a = 0; a < kAxes; ++a) {
      const int n = p.axes[a].extent;
      const int c = qt[a] * p.q_tile[a] + local[a];
      keep(i, a, key_window(axes[a], n, min_i(c, n - 1)));
    }
  }
}

// The value of `rows` (a float per token and head) at row r of Q tile qt, or `fallback` where
// the row lies beyond the image or there is no tensor.
__device__ __forceinline__ float token_row_value(const FwdParams& p, const TokenFloats& rows,
                                                 const int (&qt)[kAxes], int r, int head,
                                                 int batch, float fallback) {
  if (rows.data == nullptr) return fallback;
  int64_t off = batch * rows.batch_stride + head * rows.head_stride;
  if (!tile_row_offset(p.rows.q_begin, p.rows.q_end, qt, p.q_tile, r, rows.axis_stride, off))
    return fallback;
  return rows.data[off];
}

// Partial pair, while the tile's GEMMs run: per row i, the thread's keys (bit 2j + e for column
// j * 8 + quad * 2 + e) inside the row's window on every axis. begin(i, a) / end(i, a): row i's
// key window on axis a (group coordinates), kv_origin: the tile's first key per axis.
template <typename Begin, typename End>
__device__ __forceinline__ void row_key_masks(const AxisColumns (&key_axes)[kAxes],
                                              const int (&kv_origin)[kAxes], Begin&& begin,
                                              End&& end, uint32_t (&keep)[2]) {
  int origin[kAxes];  // the thread's first key per axis
#pragma unroll
  for (int a = 0; a < kAxes; ++a) origin[a] = kv_origin[a] + key_axes[a].base;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    keep[i] = key_axes[0].within(begin(i, 0) - origin[0], end(i, 0) - origin[0]);
#pragma unroll
    for (int a = 1; a < kAxes; ++a)
      keep[i] &= key_axes[a].within(begin(i, a) - origin[a], end(i, a) - origin[a]);
  }
}

// Keys outside the rows' masks get -inf.
template <int Keys>
__device__ __forceinline__ void mask_outside(float (&sacc)[Keys / 2], const uint32_t (&keep)[2]) {
#pragma unroll
  for (int j = 0; j < Keys / 8; ++j)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (!(keep[i] & (1u << (2 * j + e)))) sacc[j * 4 + i * 2 + e] = -INFINITY;
}

// Additional-KV tail: keys at or beyond key_limit get -inf.
template <int Keys>
__device__ __forceinline__ void mask_beyond(float (&sacc)[Keys / 2], int key_limit, int quad) {
#pragma unroll
  for (int j = 0; j < Keys / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e)
      if (j * 8 + quad * 2 + e >= key_limit) {
        sacc[j * 4 + e] = -INFINITY;
        sacc[j * 4 + 2 + e] = -INFINITY;
      }
}

// Masks S of one KV tile: a partial pair by the rows' key masks (row_key_masks), the
// additional-KV tail by its key count; a full pair is left alone.
template <int Keys>
__device__ __forceinline__ void mask_tile(float (&sacc)[Keys / 2], bool partial, int key_limit,
                                          const uint32_t (&keep)[2], int quad) {
  if (partial)
    mask_outside<Keys>(sacc, keep);
  else if (key_limit < Keys)
    mask_beyond<Keys>(sacc, key_limit, quad);
}

// log2(448): e4m3's largest value. The FP8 scheme quantizes P as e4m3(p * 448); P is computed
// times 448 right away (the exponent shifted by this), and the row sums with it.
constexpr float kLog2E4m3Max = 8.807354922057604f;

// Online softmax in the exp2 domain (row_scale: the rows' scale * log2(e), the FP8 scheme's
// q_scale folded in): S becomes P (fp32, unnormalised; kP448: times 448); the running row max /
// partial sums are updated and `correction` is what O must be scaled by.
template <int Keys, bool kP448 = false>
__device__ __forceinline__ void online_softmax(float (&sacc)[Keys / 2], float (&row_max)[2],
                                               float (&row_sum)[2], const float (&row_scale)[2],
                                               float (&correction)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < Keys / 8; ++j)
      mx = fmaxf(mx, fmaxf(sacc[j * 4 + i * 2], sacc[j * 4 + i * 2 + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
    const float m_new = fmaxf(row_max[i], mx * row_scale[i]);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    const float shift = kP448 ? m_use - kLog2E4m3Max : m_use;
    correction[i] = fast_exp2(row_max[i] - m_use);
    row_max[i] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < Keys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pv = fast_exp2(fmaf(sacc[j * 4 + i * 2 + e], row_scale[i], -shift));
        sacc[j * 4 + i * 2 + e] = pv;
        sum += pv;
      }
    row_sum[i] = row_sum[i] * correction[i] + sum;
  }
}

// P in the input dtype as the A operand registers of the P V wgmma. e4m3: per 32-key k-step,
// register r = 2 h + i holds row i's keys 2q, 2q + 1, 2q + 8, 2q + 9 of the step's 16-key half h
// (its S columns as they are; V^T's keys are ordered to match, vt_key_slot).
template <int Keys, typename Tag>
__device__ __forceinline__ void pack_p(const float (&sacc)[Keys / 2],
                                       uint32_t (&pa)[Keys * OperandOf<Tag>::kBytes / 8]) {
  if constexpr (OperandOf<Tag>::kFp8) {
#pragma unroll
    for (int k = 0; k < Keys / 32; ++k)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int j = 16 * k + 8 * h + 2 * i;  // S group 4k + 2h, row i
          pa[k * 4 + 2 * h + i] = pack4_e4m3(sacc[j], sacc[j + 1], sacc[j + 4], sacc[j + 5]);
        }
  } else {
#pragma unroll
    for (int k = 0; k < Keys / 16; ++k) {
      pa[k * 4 + 0] = pack2<Tag>(sacc[8 * k + 0], sacc[8 * k + 1]);
      pa[k * 4 + 1] = pack2<Tag>(sacc[8 * k + 2], sacc[8 * k + 3]);
      pa[k * 4 + 2] = pack2<Tag>(sacc[8 * k + 4], sacc[8 * k + 5]);
      pa[k * 4 + 3] = pack2<Tag>(sacc[8 * k + 6], sacc[8 * k + 7]);
    }
  }
}

}  // namespace gna::hopper
