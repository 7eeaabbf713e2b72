#include "kernels/common/fp8_quantize.hpp"

#include <cuda_runtime.h>

#include <memory>

#include "gna/core/fp8.hpp"
#include "kernels/common/cuda_check.hpp"
#include "kernels/common/element.cuh"
#include "kernels/common/scratch.hpp"
#include "kernels/common/token_tensor.cuh"

namespace gna::cuda {
namespace {

constexpr int kMaxDim = 256;            // head dims the pass takes (the GPU reference's limit)
constexpr int kPerLane = kMaxDim / 32;  // elements of a row per lane
constexpr int kChunkTokens = 256;       // tokens per block of the column reductions
constexpr int kColumnThreads = 128;
constexpr int kRowWarps = 8;

// Tokens of a heads-last tensor: [B, extents.., H, D] with `rank` token axes.
template <typename T>
struct Tokens {
  TokenTensor<const T> t;
  int rank = 1;
  int extent[kMaxRank] = {1, 1, 1};
  int64_t count = 1;  // tokens per batch item

  __device__ const T* row(int b, int64_t token, int h) const {
    int x[kMaxRank] = {0, 0, 0};
    for (int a = rank - 1; a >= 0; --a) {
      x[a] = static_cast<int>(token % extent[a]);
      token /= extent[a];
    }
    return t.at(b, x, rank, h);
  }
};

template <typename T>
Tokens<T> spatial_tokens(const Problem& p, const TensorRef& t) {
  Tokens<T> s;
  s.t = token_tensor<const T>(t, p.rank);
  s.rank = p.rank;
  for (int a = 0; a < p.rank; ++a) s.extent[a] = p.axes[a].extent;
  s.count = p.tokens();
  return s;
}

template <typename T>
Tokens<T> extra_tokens(const Problem& p, const TensorRef& t) {
  Tokens<T> s;
  s.t = token_tensor<const T>(t, 1);
  s.extent[0] = p.additional_kv;
  s.count = p.additional_kv;
  return s;
}

// Per (b, h, chunk of kChunkTokens tokens, channel): the sum of the channel (mean: false ->
// the largest magnitude). Block (chunk, h, b); thread c owns channels c, c + 128.
template <typename T, bool Sum>
__global__ void column_partials(Tokens<T> src, int heads, int dim, int chunk_offset, int chunks,
                                float* partial) {
  const int chunk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t begin = int64_t(chunk) * kChunkTokens;
  const int64_t end = min(src.count, begin + kChunkTokens);
  for (int c = threadIdx.x; c < dim; c += kColumnThreads) {
    float acc = 0.f;
    for (int64_t t = begin; t < end; ++t) {
      const float x = to_float(src.row(b, t, h)[c]);
      acc = Sum ? acc + x : fmaxf(acc, fabsf(x));
    }
    partial[((int64_t(b) * heads + h) * chunks + chunk_offset + chunk) * dim + c] = acc;
  }
}

// k_mean = sum of the partials / tokens; or v_scale = e4m3_scale(max of the partials). In chunk
// order: the same bits every run.
template <bool Sum>
__global__ void column_finish(const float* partial, int chunks, int dim, int64_t tokens,
                              float* out) {
  const int bh = blockIdx.x;
  for (int c = threadIdx.x; c < dim; c += kColumnThreads) {
    float acc = 0.f;
    for (int i = 0; i < chunks; ++i) {
      const float x = partial[(int64_t(bh) * chunks + i) * dim + c];
      acc = Sum ? acc + x : fmaxf(acc, x);
    }
    out[int64_t(bh) * dim + c] = Sum ? fp8_div(acc, float(tokens)) : e4m3_scale(acc);
  }
}

// How a row pass quantizes: per row at its amax (after subtracting `shift`, [B, Hs, D], head
// h / shift_group, where `smooth`), or per channel at `channel_scale` ([B, H, D]); optionally the LSE bias
// scale * dot(row, shift).
struct RowQuantization {
  const float* shift = nullptr;
  bool smooth = false;  // subtract `shift` (K); else it is read for the LSE bias only (Q)
  int shift_group = 1;
  const float* channel_scale = nullptr;
  float* row_scale = nullptr;  // [rows]
  float* lse_bias = nullptr;   // [rows]
  float softmax_scale = 0.f;
};

// One warp per row (b, token, h) of [B, tokens, H] (heads fastest, as the outputs are laid
// out); lane l owns elements l, l + 32, ... of the row.
template <typename T>
__global__ void __launch_bounds__(kRowWarps * 32)
    quantize_rows(Tokens<T> src, int heads, int dim, int64_t rows, RowQuantization how,
                  uint8_t* codes) {
  const int lane = threadIdx.x % 32;
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (row >= rows) return;
  const int h = static_cast<int>(row % heads);
  const int64_t token = (row / heads) % src.count;
  const int b = static_cast<int>(row / heads / src.count);
  const T* x = src.row(b, token, h);
  const int64_t shift_row = (int64_t(b) * (heads / how.shift_group) + h / how.shift_group) * dim;
  float v[kPerLane];
  float amax = 0.f, dot = 0.f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    v[i] = 0.f;
    if (d < dim) {
      const float raw = to_float(x[d]);
      v[i] = raw;
      if (how.shift) {
        if (how.smooth) v[i] = raw - how.shift[shift_row + d];
        dot = fmaf(raw, how.shift[shift_row + d], dot);
      }
      amax = fmaxf(amax, fabsf(v[i]));
    }
  }
  uint8_t* out = codes + row * dim;
  if (how.channel_scale) {
    const float* scale = how.channel_scale + (int64_t(b) * heads + h) * dim;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < dim) out[d] = e4m3_quantize(v[i], scale[d]);
    }
    return;
  }
  for (int o = 16; o > 0; o >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    dot += __shfl_xor_sync(0xffffffffu, dot, o);
  }
  const float scale = e4m3_scale(amax);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < dim) out[d] = e4m3_quantize(v[i], scale);
  }
  if (lane == 0) {
    how.row_scale[row] = scale;
    if (how.lse_bias) how.lse_bias[row] = how.softmax_scale * dot;
  }
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps);
}

template <typename T>
void launch_rows(const Tokens<T>& src, int batch, int heads, int dim, const RowQuantization& how,
                 uint8_t* codes, cudaStream_t stream) {
  const int64_t rows = int64_t(batch) * src.count * heads;
  if (rows == 0) return;
  quantize_rows<T><<<row_blocks(rows), kRowWarps * 32, 0, stream>>>(src, heads, dim, rows, how,
                                                                      codes);
  GNA_CUDA_CHECK_LAUNCH();
}

template <typename T>
int chunks_of(const Tokens<T>& s) {
  return static_cast<int>((s.count + kChunkTokens - 1) / kChunkTokens);
}

template <typename T>
void quantize(const Problem& p, const AttentionTensors& in, const Fp8Operands& o,
              float* scratch, cudaStream_t stream) {
  const int B = p.batch, Hk = p.heads_kv, D = p.dim_qk, Dv = p.dim_v;
  const Tokens<T> q = spatial_tokens<T>(p, in.q), k = spatial_tokens<T>(p, in.k),
                  v = spatial_tokens<T>(p, in.v);
  const bool extra = p.additional_kv > 0;
  Tokens<T> ak, av;
  if (extra) {
    ak = extra_tokens<T>(p, *in.additional_k);
    av = extra_tokens<T>(p, *in.additional_v);
  }
  const int k_chunks = chunks_of(k);
  const int v_chunks = k_chunks + (extra ? chunks_of(av) : 0);
  float* k_mean = scratch;                              // [B, Hk, D]
  float* partial = k_mean + int64_t(B) * Hk * D;        // [B, Hk, chunks, max(D, Dv)]

  // K: mean over the spatial keys, then each key row (and each additional key) smoothed by it.
  column_partials<T, true><<<dim3(k_chunks, Hk, B), kColumnThreads, 0, stream>>>(
      k, Hk, D, 0, k_chunks, partial);
  GNA_CUDA_CHECK_LAUNCH();
  column_finish<true><<<B * Hk, kColumnThreads, 0, stream>>>(partial, k_chunks, D, k.count, k_mean);
  GNA_CUDA_CHECK_LAUNCH();
  RowQuantization key_rows;
  key_rows.shift = k_mean;
  key_rows.smooth = true;
  key_rows.row_scale = static_cast<float*>(o.k_scale.data);
  launch_rows(k, B, Hk, D, key_rows, static_cast<uint8_t*>(o.k8.data), stream);
  if (extra) {
    key_rows.row_scale = static_cast<float*>(o.add_k_scale.data);
    launch_rows(ak, B, Hk, D, key_rows, static_cast<uint8_t*>(o.add_k8.data), stream);
  }

  // Q: per row, with the LSE bias scale * dot(q, k_mean) of its KV head.
  RowQuantization query_rows;
  query_rows.shift = k_mean;
  query_rows.shift_group = p.heads_q / Hk;
  query_rows.row_scale = static_cast<float*>(o.q_scale.data);
  query_rows.lse_bias = static_cast<float*>(o.lse_bias.data);
  query_rows.softmax_scale = static_cast<float>(effective_scale(p));
  launch_rows(q, B, p.heads_q, D, query_rows, static_cast<uint8_t*>(o.q8.data), stream);

  // V: per-channel amax over every key, then each row.
  float* v_scale = static_cast<float*>(o.v_scale.data);
  column_partials<T, false><<<dim3(k_chunks, Hk, B), kColumnThreads, 0, stream>>>(
      v, Hk, Dv, 0, v_chunks, partial);
  GNA_CUDA_CHECK_LAUNCH();
  if (extra) {
    column_partials<T, false><<<dim3(v_chunks - k_chunks, Hk, B), kColumnThreads, 0, stream>>>(
        av, Hk, Dv, k_chunks, v_chunks, partial);
    GNA_CUDA_CHECK_LAUNCH();
  }
  column_finish<false><<<B * Hk, kColumnThreads, 0, stream>>>(partial, v_chunks, Dv, 0, v_scale);
  GNA_CUDA_CHECK_LAUNCH();
  RowQuantization value_rows;
  value_rows.channel_scale = v_scale;
  launch_rows(v, B, Hk, Dv, value_rows, static_cast<uint8_t*>(o.v8.data), stream);
  if (extra) launch_rows(av, B, Hk, Dv, value_rows, static_cast<uint8_t*>(o.add_v8.data), stream);
}

}  // namespace

Fp8Quantized quantize_fp8(const Problem& p, const AttentionTensors& in, void* stream) {
  if (p.dim_qk > kMaxDim || p.dim_v > kMaxDim)
    fail(ErrorKind::unsupported, "fp8 quantization: head dim ",
         p.dim_qk > kMaxDim ? p.dim_qk : p.dim_v, " not supported (at most ", kMaxDim, ")");
  const int device = in.q.device;
  Fp8Quantized result;
  void* block = scratch_alloc(fp8_operands_bytes(p), stream);
  result.storage = std::shared_ptr<void>(block, [stream](void* ptr) { scratch_free(ptr, stream); });
  result.operands = fp8_operand_views(p, block, device);
  const int64_t k_chunks = (p.tokens() + kChunkTokens - 1) / kChunkTokens;
  const int64_t chunks = k_chunks + (p.additional_kv + kChunkTokens - 1) / kChunkTokens;
  const int64_t floats = int64_t(p.batch) * p.heads_kv *
                         (p.dim_qk + chunks * (p.dim_qk > p.dim_v ? p.dim_qk : p.dim_v));
  const std::shared_ptr<float> scratch(scratch_alloc<float>(floats, stream),
                                       [stream](float* ptr) { scratch_free(ptr, stream); });
  const bool ok = visit_element_type(p.dtype, [&](auto zero) {
    quantize<decltype(zero)>(p, in, result.operands, scratch.get(),
                             static_cast<cudaStream_t>(stream));
  });
  if (!ok)
    fail(ErrorKind::unsupported, "fp8 quantization: dtype ", dtype_name(p.dtype),
         " not supported (float16, bfloat16, float32)");
  return result;
}

namespace {

Fp8Quantizer make_device_quantizer() {
  Fp8Quantizer q;
  q.name = "cuda";
  q.device = true;
  q.quantize = quantize_fp8;
  return q;
}

GNA_REGISTER_FP8_QUANTIZER(make_device_quantizer);

}  // namespace
}  // namespace gna::cuda
