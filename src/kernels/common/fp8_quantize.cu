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
constexpr int kPerLane = kMaxDim / 32;  // elements of a row per lane (strided rows)
constexpr int kChunkTokens = 256;       // tokens per block of the column reductions
constexpr int kColumnThreads = 128;
constexpr int kRowWarps = 8;

// Tokens of a heads-last tensor: [B, extents.., H, D] with `rank` token axes. Token indices
// within a batch item are 32-bit (checked on the host): 64-bit divisions per row cost more than
// the row's memory traffic.
template <typename T>
struct Tokens {
  TokenTensor<const T> t;
  int rank = 1;
  unsigned extent[kMaxRank] = {1, 1, 1};
  int count = 1;  // tokens per batch item

  __device__ const T* row(int b, unsigned token, int h) const {
    int x[kMaxRank] = {0, 0, 0};
#pragma unroll
    for (int a = kMaxRank - 1; a >= 0; --a)
      if (a < rank) {
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
  for (int a = 0; a < p.rank; ++a) s.extent[a] = static_cast<unsigned>(p.axes[a].extent);
  s.count = static_cast<int>(p.tokens());
  return s;
}

template <typename T>
Tokens<T> extra_tokens(const Problem& p, const TensorRef& t) {
  Tokens<T> s;
  s.t = token_tensor<const T>(t, 1);
  s.extent[0] = static_cast<unsigned>(p.additional_kv);
  s.count = p.additional_kv;
  return s;
}

// Per (b, h, chunk of kChunkTokens tokens, channel): the sum of the channel (mean: false ->
// the largest magnitude). Block (chunk, h, b); the chunk's row addresses first (shared memory),
// then thread c owns channels c, c + 128 with several rows' loads in flight; tokens are summed
// in order, so the result has the same bits every run.
template <typename T, bool Sum>
__global__ void __launch_bounds__(kColumnThreads)
    column_partials(Tokens<T> src, int heads, int dim, int chunk_offset, int chunks,
                    float* partial) {
  __shared__ const T* rows[kChunkTokens];
  const int chunk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int begin = chunk * kChunkTokens;
  const int n = min(src.count - begin, kChunkTokens);
  for (int i = threadIdx.x; i < n; i += kColumnThreads) rows[i] = src.row(b, begin + i, h);
  __syncthreads();
  for (int c = threadIdx.x; c < dim; c += kColumnThreads) {
    float acc = 0.f;
#pragma unroll 8
    for (int i = 0; i < n; ++i) {
      const float x = to_float(rows[i][c]);
      acc = Sum ? acc + x : fmaxf(acc, fabsf(x));
    }
    partial[((int64_t(b) * heads + h) * chunks + chunk_offset + chunk) * dim + c] = acc;
  }
}

// k_mean = sum of the partials / tokens; or V's scale and inverse scale from the max of the
// partials. In chunk order: the same bits every run.
template <bool Sum>
__global__ void column_finish(const float* partial, int chunks, int dim, int64_t tokens,
                              float* out, float* inverse) {
  const int bh = blockIdx.x;
  for (int c = threadIdx.x; c < dim; c += kColumnThreads) {
    float acc = 0.f;
    for (int i = 0; i < chunks; ++i) {
      const float x = partial[(int64_t(bh) * chunks + i) * dim + c];
      acc = Sum ? acc + x : fmaxf(acc, x);
    }
    out[int64_t(bh) * dim + c] = Sum ? fp8_div(acc, float(tokens)) : e4m3_scale(acc);
    if (!Sum) inverse[int64_t(bh) * dim + c] = e4m3_inverse_scale(acc);
  }
}

// How a row pass quantizes: per row at its amax (after subtracting `shift`, [B, Hs, D], head
// h / shift_group, where `smooth`), or per channel at `channel_inverse` ([B, H, D]); optionally
// the LSE bias scale * dot(row, shift).
struct RowQuantization {
  const float* shift = nullptr;
  bool smooth = false;  // subtract `shift` (K); else it is read for the LSE bias only (Q)
  int shift_group = 1;
  const float* channel_inverse = nullptr;
  float* row_scale = nullptr;  // [rows]
  float* lse_bias = nullptr;   // [rows]
  float softmax_scale = 0.f;
};

// E elements loaded or stored as one access (E * sizeof(T) bytes, aligned to that).
template <typename T, int E>
struct alignas(sizeof(T) * E) Pack {
  T v[E];
};

// The elements of a row a lane owns: with E > 0, elements [lane E, lane E + E) (one vector
// access; dim == 32 E and every row aligned, checked on the host); with E == 0, elements
// lane, lane + 32, ... (any dim up to kMaxDim).
template <typename T, int E>
struct LaneElements {
  static constexpr int kCount = E > 0 ? E : kPerLane;
  __device__ static int index(int lane, int i) { return E > 0 ? lane * E + i : lane + 32 * i; }
  template <typename U>
  __device__ static void load(const U* row, int lane, int dim, float (&out)[kCount]) {
    if constexpr (E > 0) {
      const Pack<U, E> p = *reinterpret_cast<const Pack<U, E>*>(row + lane * E);
#pragma unroll
      for (int i = 0; i < E; ++i) out[i] = to_float(p.v[i]);
    } else {
#pragma unroll
      for (int i = 0; i < kCount; ++i) {
        const int d = index(lane, i);
        out[i] = d < dim ? to_float(row[d]) : 0.f;
      }
    }
  }
  __device__ static void store(uint8_t* row, int lane, int dim, const uint8_t (&codes)[kCount]) {
    if constexpr (E > 0) {
      Pack<uint8_t, E> p;
#pragma unroll
      for (int i = 0; i < E; ++i) p.v[i] = codes[i];
      *reinterpret_cast<Pack<uint8_t, E>*>(row + lane * E) = p;
    } else {
#pragma unroll
      for (int i = 0; i < kCount; ++i)
        if (index(lane, i) < dim) row[index(lane, i)] = codes[i];
    }
  }
};

// One warp per row (b, token, h); rows of a batch item in [tokens, H] order (heads fastest, as
// the outputs are laid out). Grid (row blocks, B).
template <typename T, int E>
__global__ void __launch_bounds__(kRowWarps * 32)
    quantize_rows(Tokens<T> src, int heads, int dim, RowQuantization how, uint8_t* codes) {
  using Lane = LaneElements<T, E>;
  constexpr int kCount = Lane::kCount;
  const int lane = threadIdx.x % 32;
  const int in_batch = blockIdx.x * kRowWarps + threadIdx.x / 32;
  if (in_batch >= src.count * heads) return;
  const int b = blockIdx.y;
  const int h = in_batch % heads;
  const int64_t row = int64_t(b) * src.count * heads + in_batch;
  float v[kCount], shift[kCount];
  Lane::load(src.row(b, static_cast<unsigned>(in_batch / heads), h), lane, dim, v);
  float amax = 0.f, dot = 0.f;
  if (how.shift) {
    const int64_t shift_row = (int64_t(b) * (heads / how.shift_group) + h / how.shift_group) * dim;
    Lane::load(how.shift + shift_row, lane, dim, shift);
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      dot = fmaf(v[i], shift[i], dot);
      if (how.smooth) v[i] -= shift[i];
    }
  }
  uint8_t out[kCount];
  if (how.channel_inverse) {
    float inverse[kCount];
    Lane::load(how.channel_inverse + (int64_t(b) * heads + h) * dim, lane, dim, inverse);
#pragma unroll
    for (int i = 0; i < kCount; ++i) out[i] = e4m3_encode(v[i], inverse[i]);
    Lane::store(codes + row * dim, lane, dim, out);
    return;
  }
#pragma unroll
  for (int i = 0; i < kCount; ++i) amax = fmaxf(amax, fabsf(v[i]));
  for (int o = 16; o > 0; o >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    dot += __shfl_xor_sync(0xffffffffu, dot, o);
  }
  const float inverse = e4m3_inverse_scale(amax);
#pragma unroll
  for (int i = 0; i < kCount; ++i) out[i] = e4m3_encode(v[i], inverse);
  Lane::store(codes + row * dim, lane, dim, out);
  if (lane == 0) {
    how.row_scale[row] = e4m3_scale(amax);
    if (how.lse_bias) how.lse_bias[row] = how.softmax_scale * dot;
  }
}

// Whether every row of `src` and of the codes starts E-element aligned for vector accesses.
template <typename T>
bool rows_aligned(const Tokens<T>& src, int rank, const void* codes, int e) {
  auto fits = [e](int64_t stride) { return stride % e == 0; };
  bool ok = reinterpret_cast<uintptr_t>(src.t.data) % (sizeof(T) * e) == 0 &&
            reinterpret_cast<uintptr_t>(codes) % e == 0 && fits(src.t.stride_batch) &&
            fits(src.t.stride_head);
  for (int a = 0; a < rank; ++a) ok = ok && fits(src.t.stride_axis[a]);
  return ok;
}

template <typename T>
void launch_rows(const Tokens<T>& src, int batch, int heads, int dim, const RowQuantization& how,
                 uint8_t* codes, cudaStream_t stream) {
  const int64_t rows = int64_t(src.count) * heads;
  if (rows == 0 || batch == 0) return;
  const dim3 grid(static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps), batch);
  const int e = dim % 32 == 0 ? dim / 32 : 0;
  if (e == 4 && rows_aligned(src, src.rank, codes, 4))
    quantize_rows<T, 4><<<grid, kRowWarps * 32, 0, stream>>>(src, heads, dim, how, codes);
  else if (e == 2 && rows_aligned(src, src.rank, codes, 2))
    quantize_rows<T, 2><<<grid, kRowWarps * 32, 0, stream>>>(src, heads, dim, how, codes);
  else
    quantize_rows<T, 0><<<grid, kRowWarps * 32, 0, stream>>>(src, heads, dim, how, codes);
  GNA_CUDA_CHECK_LAUNCH();
}

template <typename T>
int chunks_of(const Tokens<T>& s) {
  return (s.count + kChunkTokens - 1) / kChunkTokens;
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
  float* v_inverse = k_mean + int64_t(B) * Hk * D;      // [B, Hk, Dv]
  float* partial = v_inverse + int64_t(B) * Hk * Dv;    // [B, Hk, chunks, max(D, Dv)]

  // K: mean over the spatial keys, then each key row (and each additional key) smoothed by it.
  column_partials<T, true><<<dim3(k_chunks, Hk, B), kColumnThreads, 0, stream>>>(
      k, Hk, D, 0, k_chunks, partial);
  GNA_CUDA_CHECK_LAUNCH();
  column_finish<true><<<B * Hk, kColumnThreads, 0, stream>>>(partial, k_chunks, D, k.count,
                                                              k_mean, nullptr);
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
  column_finish<false><<<B * Hk, kColumnThreads, 0, stream>>>(partial, v_chunks, Dv, 0, v_scale,
                                                               v_inverse);
  GNA_CUDA_CHECK_LAUNCH();
  RowQuantization value_rows;
  value_rows.channel_inverse = v_inverse;
  launch_rows(v, B, Hk, Dv, value_rows, static_cast<uint8_t*>(o.v8.data), stream);
  if (extra) launch_rows(av, B, Hk, Dv, value_rows, static_cast<uint8_t*>(o.add_v8.data), stream);
}

}  // namespace

Fp8Quantized quantize_fp8(const Problem& p, const AttentionTensors& in, void* stream) {
  if (p.dim_qk > kMaxDim || p.dim_v > kMaxDim)
    fail(ErrorKind::unsupported, "fp8 quantization: head dim ",
         p.dim_qk > kMaxDim ? p.dim_qk : p.dim_v, " not supported (at most ", kMaxDim, ")");
  const int64_t heads = p.heads_q > p.heads_kv ? p.heads_q : p.heads_kv;
  if ((p.tokens() > p.additional_kv ? p.tokens() : p.additional_kv) * heads >= (int64_t(1) << 31))
    fail(ErrorKind::unsupported, "fp8 quantization: ", p.tokens(), " tokens x ", heads,
         " heads per batch item not supported (fewer than 2^31 rows)");
  if (p.batch > 65535 || heads > 65535)
    fail(ErrorKind::unsupported, "fp8 quantization: batch ", p.batch, " x ", heads,
         " heads not supported (at most 65535 each)");
  const int device = in.q.device;
  Fp8Quantized result;
  void* block = scratch_alloc(fp8_operands_bytes(p), stream);
  result.storage = std::shared_ptr<void>(block, [stream](void* ptr) { scratch_free(ptr, stream); });
  result.operands = fp8_operand_views(p, block, device);
  const int64_t k_chunks = (p.tokens() + kChunkTokens - 1) / kChunkTokens;
  const int64_t chunks = k_chunks + (p.additional_kv + kChunkTokens - 1) / kChunkTokens;
  const int64_t floats = int64_t(p.batch) * p.heads_kv *
                         (p.dim_qk + p.dim_v + chunks * (p.dim_qk > p.dim_v ? p.dim_qk : p.dim_v));
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
