// Preprocess and conversion kernels of the Hopper backward, over rows (b, token, h) of
// [B, tokens, Hq] in plain token order:
//   lse2[row] = LSE * log2(e)  and  delta[row] = rowsum(dO * O)  (one warp per row);
//   dq = scale * accumulator in the dtype and strides of dq (two elements per thread).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/common/cuda_check.hpp"
#include "kernels/common/element.cuh"
#include "kernels/common/token_tensor.cuh"
#include "kernels/hopper/bwd_launch.hpp"

namespace gna::hopper {
namespace {

struct RowIndex {
  int b, h;
  int x[kMaxRank];
};

__device__ __forceinline__ RowIndex split_row(const Problem& p, int64_t row) {
  RowIndex r;
  r.h = static_cast<int>(row % p.heads_q);
  int64_t token = row / p.heads_q;
  for (int a = p.rank - 1; a >= 0; --a) {
    r.x[a] = static_cast<int>(token % p.axes[a].extent);
    token /= p.axes[a].extent;
  }
  r.b = static_cast<int>(token);
  return r;
}

template <typename T>
__global__ void preprocess_kernel(Problem p, cuda::TokenTensor<const T> o,
                                  cuda::TokenTensor<const T> d_o, cuda::TokenTensor<const float> lse,
                                  float* lse2, float* delta, int64_t rows) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const RowIndex ri = split_row(p, row);
  const T* orow = o.at(ri.b, ri.x, p.rank, ri.h);
  const T* drow = d_o.at(ri.b, ri.x, p.rank, ri.h);
  float s = 0.f;
  for (int d = lane; d < p.dim_v; d += 32) s += cuda::to_float(orow[d]) * cuda::to_float(drow[d]);
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) {
    delta[row] = s;
    lse2[row] = *lse.at(ri.b, ri.x, p.rank, ri.h) * 1.4426950408889634f;
  }
}

template <typename T>
__global__ void dq_convert_kernel(Problem p, const float* accum, cuda::TokenTensor<T> dq,
                                  float scale, int64_t pairs) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  const int half_dim = p.dim_qk / 2;
  const int d = static_cast<int>(i % half_dim) * 2;
  const int64_t row = i / half_dim;
  const RowIndex ri = split_row(p, row);
  const float2 v = *reinterpret_cast<const float2*>(accum + row * p.dim_qk + d);
  T* dst = dq.at(ri.b, ri.x, p.rank, ri.h) + d;
  dst[0] = cuda::from_float<T>(v.x * scale);
  dst[1] = cuda::from_float<T>(v.y * scale);
}

}  // namespace

void launch_backward_preprocess(const BackwardCall& call, float* lse2, float* delta, void* s) {
  const Problem& p = call.problem;
  cudaStream_t stream = static_cast<cudaStream_t>(s);
  const int64_t rows = int64_t(p.batch) * p.tokens() * p.heads_q;
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>((rows * 32 + 255) / 256);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    preprocess_kernel<T><<<blocks, 256, 0, stream>>>(
        p, cuda::token_tensor<const T>(call.out, p.rank),
        cuda::token_tensor<const T>(call.d_out, p.rank),
        cuda::token_tensor<const float>(call.lse, p.rank), lse2, delta, rows);
  };
  if (p.dtype == DType::bf16)
    run(__nv_bfloat16{});
  else
    run(__half{});
  GNA_CUDA_CHECK_LAUNCH();
}

void launch_backward_dq_convert(const BackwardCall& call, const float* dq_accum, void* s) {
  const Problem& p = call.problem;
  cudaStream_t stream = static_cast<cudaStream_t>(s);
  const int64_t pairs = int64_t(p.batch) * p.tokens() * p.heads_q * (p.dim_qk / 2);
  if (pairs == 0) return;
  const unsigned blocks = static_cast<unsigned>((pairs + 255) / 256);
  const float scale = static_cast<float>(effective_scale(p));
  if (p.dtype == DType::bf16)
    dq_convert_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(
        p, dq_accum, cuda::token_tensor<__nv_bfloat16>(call.dq, p.rank), scale, pairs);
  else
    dq_convert_kernel<__half><<<blocks, 256, 0, stream>>>(
        p, dq_accum, cuda::token_tensor<__half>(call.dq, p.rank), scale, pairs);
  GNA_CUDA_CHECK_LAUNCH();
}

}  // namespace gna::hopper
