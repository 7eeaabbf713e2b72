// A plain float32 GPU forward (one thread per query row and head) used as the oracle of the
// Hopper tests: every key of the layout is checked against the core's rule, additional keys
// are attended (the first attended_additional_keys(count[b]) under per-batch counts); two
// passes (max, then sums) in float32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gna/core/axis_rule.hpp"
#include "gna/core/problem.hpp"

namespace gna::hopper_test {

struct RefTensors {
  const void* q;
  const void* k;
  const void* v;
  const void* add_k;
  const void* add_v;
  int64_t q_tok, q_head, k_tok, k_head, v_tok, v_head;  // strides (elements); batch = tokens*tok
  int64_t q_batch, k_batch, v_batch;
  int64_t add_tok, add_head, add_batch;
  const int32_t* counts;  // per-batch counts of additional keys (device; null: all)
  float* o;    // [B, N, Hq, D] float32
  float* lse;  // [B, N, Hq]
};

__device__ inline float load_elem(const void* base, int64_t i, bool bf16) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i])
              : __half2float(static_cast<const __half*>(base)[i]);
}

__global__ void reference_forward(Problem p, RefTensors t, bool bf16) {
  const int64_t n = p.tokens();
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= p.batch * n * p.heads_q) return;
  const int h = static_cast<int>(row % p.heads_q);
  const int64_t tok = (row / p.heads_q) % n;
  const int b = static_cast<int>(row / (p.heads_q * n));
  const int hk = h / (p.heads_q / p.heads_kv);
  const int D = p.dim_qk;
  const float scale = p.scale;
  const int additional =
      t.counts ? attended_additional_keys(t.counts[b], p.additional_kv) : p.additional_kv;

  int qc[3];
  {
    int64_t rest = tok;
    for (int a = p.rank - 1; a >= 0; --a) {
      qc[a] = static_cast<int>(rest % p.axes[a].extent);
      rest /= p.axes[a].extent;
    }
  }
  const int64_t qoff = b * t.q_batch + tok * t.q_tok + h * t.q_head;
  float qv[256];
  for (int d = 0; d < D; ++d) qv[d] = load_elem(t.q, qoff + d, bf16);

  auto attends = [&](int64_t key) {
    int64_t rest = key;
    for (int a = p.rank - 1; a >= 0; --a) {
      const int kc = static_cast<int>(rest % p.axes[a].extent);
      rest /= p.axes[a].extent;
      if (!axis_attends(p.axes[a], qc[a], kc)) return false;
    }
    return true;
  };
  auto score = [&](const void* kb, int64_t off) {
    float s = 0.f;
    for (int d = 0; d < D; ++d) s += qv[d] * load_elem(kb, off + d, bf16);
    return s * scale;
  };
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j)
    if (attends(j)) mx = fmaxf(mx, score(t.k, b * t.k_batch + j * t.k_tok + hk * t.k_head));
  for (int j = 0; j < additional; ++j)
    mx = fmaxf(mx, score(t.add_k, b * t.add_batch + j * t.add_tok + hk * t.add_head));
  float acc[256];
  for (int d = 0; d < D; ++d) acc[d] = 0.f;
  float sum = 0.f;
  for (int64_t j = 0; j < n + additional; ++j) {
    const bool extra = j >= n;
    if (!extra && !attends(j)) continue;
    const int64_t koff = extra ? b * t.add_batch + (j - n) * t.add_tok + hk * t.add_head
                               : b * t.k_batch + j * t.k_tok + hk * t.k_head;
    const int64_t voff = extra ? koff : b * t.v_batch + j * t.v_tok + hk * t.v_head;
    const float w = expf(score(extra ? t.add_k : t.k, koff) - mx);
    sum += w;
    const void* vb = extra ? t.add_v : t.v;
    for (int d = 0; d < D; ++d) acc[d] += w * load_elem(vb, voff + d, bf16);
  }
  float* o = t.o + row * D;
  for (int d = 0; d < D; ++d) o[d] = acc[d] / sum;
  t.lse[row] = mx + logf(sum);
}

}  // namespace gna::hopper_test
