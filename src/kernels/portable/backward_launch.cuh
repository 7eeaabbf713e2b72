// Host side of the portable fused backward: delta = rowsum(dO * O), the fused KV-stationary
// kernel accumulating dQ in fp32, then dQ = scale * accumulator in the output dtype.
#pragma once

#include "kernels/common/cuda_check.hpp"
#include "kernels/portable/backward_kernel.cuh"
#include "kernels/portable/portable.hpp"

namespace gna::portable {

// One warp per (batch, token, query head) row: delta[row] = dO . O.
template <typename T>
__global__ void backward_delta_kernel(Problem p, cuda::TokenTensor<const T> o,
                                      cuda::TokenTensor<const T> d_o, float* delta, int64_t rows) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int h = static_cast<int>(row % p.heads_q);
  int64_t token = (row / p.heads_q) % p.tokens();
  const int b = static_cast<int>(row / p.heads_q / p.tokens());
  int x[kMaxRank];
  for (int a = p.rank - 1; a >= 0; --a) {
    x[a] = static_cast<int>(token % p.axes[a].extent);
    token /= p.axes[a].extent;
  }
  const T* orow = o.at(b, x, p.rank, h);
  const T* drow = d_o.at(b, x, p.rank, h);
  float s = 0.f;
  for (int d = lane; d < p.dim_v; d += 32) s += cuda::to_float(orow[d]) * cuda::to_float(drow[d]);
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) delta[row] = s;
}

// dq[b, x.., h, :] = scale * accum[(b, token, h), :] in the output dtype.
template <typename T>
__global__ void backward_dq_kernel(Problem p, const float* accum, cuda::TokenTensor<T> dq,
                                   float scale, int64_t pairs) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  const int half_dim = p.dim_qk / 2;
  const int d = static_cast<int>(i % half_dim) * 2;
  const int64_t row = i / half_dim;
  const int h = static_cast<int>(row % p.heads_q);
  int64_t token = (row / p.heads_q) % p.tokens();
  const int b = static_cast<int>(row / p.heads_q / p.tokens());
  int x[kMaxRank];
  for (int a = p.rank - 1; a >= 0; --a) {
    x[a] = static_cast<int>(token % p.axes[a].extent);
    token /= p.axes[a].extent;
  }
  const float2 v = *reinterpret_cast<const float2*>(accum + row * p.dim_qk + d);
  T* dst = dq.at(b, x, p.rank, h) + d;
  dst[0] = cuda::from_float<T>(v.x * scale);
  dst[1] = cuda::from_float<T>(v.y * scale);
}

template <typename T, int D, int DV>
void launch_backward(const BackwardCall& call, const TilePlan& plan) {
  const Problem& p = call.problem;
  cudaStream_t stream = static_cast<cudaStream_t>(call.stream);
  BackwardParams<T> P;
  P.p = p;
  P.kv_tiles_total = 1;
  P.q_volume = P.kv_volume = 1;
  P.groups = 1;
  for (int a = 0; a < kMaxRank; ++a) {
    P.tile_q[a] = a < p.rank ? plan.q.size[a] : 1;
    P.tile_kv[a] = a < p.rank ? plan.kv.size[a] : 1;
    P.q_tiles[a] = P.kv_tiles[a] = 1;
  }
  for (int a = 0; a < p.rank; ++a) {
    const int n = group_length(p.axes[a], 0);
    P.q_tiles[a] = tiles_along(n, P.tile_q[a]);
    P.kv_tiles[a] = tiles_along(n, P.tile_kv[a]);
    P.kv_tiles_total *= P.kv_tiles[a];
    P.q_volume *= P.tile_q[a];
    P.kv_volume *= P.tile_kv[a];
    P.groups *= p.axes[a].dilation;
  }
  P.scale = effective_scale(p);
  P.scale_log2 = P.scale * 1.4426950408889634f;
  P.q = cuda::token_tensor<const T>(call.in.q, p.rank);
  P.k = cuda::token_tensor<const T>(call.in.k, p.rank);
  P.v = cuda::token_tensor<const T>(call.in.v, p.rank);
  P.d_o = cuda::token_tensor<const T>(call.d_out, p.rank);
  P.lse = cuda::token_tensor<const float>(call.lse, p.rank);
  P.dk = cuda::token_tensor<T>(call.dk, p.rank);
  P.dv = cuda::token_tensor<T>(call.dv, p.rank);
  if (p.additional_kv > 0) {
    P.add_k = cuda::token_tensor<const T>(*call.in.additional_k, 1);
    P.add_v = cuda::token_tensor<const T>(*call.in.additional_v, 1);
    P.d_add_k = cuda::token_tensor<T>(*call.d_additional_k, 1);
    P.d_add_v = cuda::token_tensor<T>(*call.d_additional_v, 1);
  }
  const int64_t rows = int64_t(p.batch) * p.tokens() * p.heads_q;
  float* delta = nullptr;
  float* accum = nullptr;
  GNA_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&delta), rows * sizeof(float), stream));
  GNA_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&accum), rows * p.dim_qk * sizeof(float), stream));
  GNA_CUDA_CHECK(cudaMemsetAsync(accum, 0, rows * p.dim_qk * sizeof(float), stream));
  P.delta = delta;
  P.dq_accum = accum;

  backward_delta_kernel<T><<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, stream>>>(
      p, cuda::token_tensor<const T>(call.out, p.rank), P.d_o, delta, rows);
  GNA_CUDA_CHECK_LAUNCH();

  using Smem = BackwardSmem<D, DV>;
  auto kernel = fused_backward_kernel<T, D, DV>;
  GNA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Smem::kBytes));
  const int add_tiles = (p.additional_kv + kBackwardRowsKV - 1) / kBackwardRowsKV;
  const dim3 grid(P.kv_tiles_total + add_tiles, p.batch * p.heads_kv, P.groups);
  kernel<<<grid, kBackwardWarps * 32, Smem::kBytes, stream>>>(P);
  GNA_CUDA_CHECK_LAUNCH();

  const int64_t pairs = rows * (p.dim_qk / 2);
  backward_dq_kernel<T><<<static_cast<unsigned>((pairs + 255) / 256), 256, 0, stream>>>(
      p, accum, cuda::token_tensor<T>(call.dq, p.rank), P.scale, pairs);
  GNA_CUDA_CHECK_LAUNCH();
  GNA_CUDA_CHECK(cudaFreeAsync(delta, stream));
  GNA_CUDA_CHECK(cudaFreeAsync(accum, stream));
}

}  // namespace gna::portable
