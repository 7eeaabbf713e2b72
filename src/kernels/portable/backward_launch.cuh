// Host side of the portable fused backward: delta = rowsum(dO * O), the fused KV-stationary
// kernel accumulating dQ in fp32, then dQ = scale * accumulator in the output dtype.
#pragma once

#include "kernels/common/backward_postpass.hpp"
#include "kernels/common/backward_prepass.hpp"
#include "kernels/common/cuda_check.hpp"
#include "kernels/common/scratch.hpp"
#include "kernels/portable/backward_kernel.cuh"
#include "kernels/portable/path_counts.hpp"
#include "kernels/portable/portable.hpp"

namespace gna::portable {

// RK keys per KV tile (128, or 64 for the variant that fits 99 KB of shared memory, with
// STAGES = 1).
template <typename T, int D, int DV, int RK = kBackwardRowsKV, int STAGES = 2>
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
  P.q_placement = plan.placement;
  P.q_bitmask = true;
  for (int a = 0; a < p.rank; ++a) P.q_bitmask = P.q_bitmask && (P.tile_q[a] & (P.tile_q[a] - 1)) == 0;
  P.path_counts = backward_path_counts_device();
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
  float* delta = cuda::scratch_alloc<float>(rows, stream);
  float* accum = cuda::scratch_alloc<float>(rows * p.dim_qk, stream);
  GNA_CUDA_CHECK(cudaMemsetAsync(accum, 0, rows * p.dim_qk * sizeof(float), stream));
  P.delta = delta;
  P.dq_accum = accum;

  cuda::launch_backward_prepass(p, call.out, call.d_out, call.lse, delta, nullptr, stream);

  using Smem = BackwardSmem<D, DV, RK, STAGES>;
  auto kernel = fused_backward_kernel<T, D, DV, RK, STAGES>;
  GNA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Smem::kBytes));
  const int add_tiles = (p.additional_kv + RK - 1) / RK;
  const dim3 grid(P.kv_tiles_total + add_tiles, p.batch * p.heads_kv, P.groups);
  kernel<<<grid, backward_warps(RK) * 32, Smem::kBytes, stream>>>(P);
  GNA_CUDA_CHECK_LAUNCH();

  cuda::launch_backward_postpass(p, accum, call.dq, P.scale, stream);
  cuda::scratch_free(delta, stream);
  cuda::scratch_free(accum, stream);
}

// The 128-key kernel, or the 64-key one with one stage where backward_runs_small says so (only
// the head dims that have it instantiate it).
template <typename T, int D, int DV>
void launch_backward_variant(const BackwardCall& call, const TilePlan& plan) {
  if constexpr (backward_small_variant(D, DV)) {
    if (backward_runs_small(call.problem, plan.kv)) {
      launch_backward<T, D, DV, kBackwardRowsKVSmall, 1>(call, plan);
      return;
    }
  }
  launch_backward<T, D, DV>(call, plan);
}

}  // namespace gna::portable
