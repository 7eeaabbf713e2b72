// Host side of the portable fused forward: parameters, grid and launch of one instantiation.
#pragma once

#include "kernels/common/cuda_check.hpp"
#include "kernels/portable/forward_kernel.cuh"
#include "kernels/portable/portable.hpp"

namespace gna::portable {

// In: the operands' element type (T, or E4m3 for the FP8 forward: call.fp8's operands). SINGLE:
// one K/V stage (forward_single_stage_kernel).
template <typename T, typename In, int D, int DV, int MB, bool SINGLE = false>
void launch_forward_mb(const ForwardCall& call, const TilePlan& plan) {
  const Problem& p = call.problem;
  ForwardParams<T, In> P;
  P.p = p;
  int q_tiles_total = 1, groups = 1;
  P.q_volume = 1;
  for (int a = 0; a < kMaxRank; ++a) {
    P.tile_q[a] = a < p.rank ? plan.q.size[a] : 1;
    P.tile_kv[a] = a < p.rank ? plan.kv.size[a] : 1;
    P.q_tiles[a] = 1;
  }
  for (int a = 0; a < p.rank; ++a) {
    P.q_tiles[a] = tiles_along(group_length(p.axes[a], 0), P.tile_q[a]);
    q_tiles_total *= P.q_tiles[a];
    groups *= p.axes[a].dilation;
    P.q_volume *= P.tile_q[a];
  }
  P.kv_placement = plan.placement;
  P.scale_log2 = effective_scale(p) * 1.4426950408889634f;
  if constexpr (kE4m3Operands<In>) {
    const Fp8Operands& f = *call.fp8;
    P.q = cuda::token_tensor<const In>(f.q8, p.rank);
    P.k = cuda::token_tensor<const In>(f.k8, p.rank);
    P.v = cuda::token_tensor<const In>(f.v8, p.rank);
    P.fp8.q_scale = cuda::token_tensor<const float>(f.q_scale, p.rank);
    P.fp8.k_scale = cuda::token_tensor<const float>(f.k_scale, p.rank);
    if (f.has_lse_bias()) P.fp8.lse_bias = cuda::token_tensor<const float>(f.lse_bias, p.rank);
    P.fp8.v_scale = static_cast<const float*>(f.v_scale.data);
    P.fp8.v_scale_batch = f.v_scale.strides[0];
    P.fp8.v_scale_head = f.v_scale.strides[1];
    if (p.additional_kv > 0) {
      P.add_k = cuda::token_tensor<const In>(f.add_k8, 1);
      P.add_v = cuda::token_tensor<const In>(f.add_v8, 1);
      P.fp8.add_k_scale = cuda::token_tensor<const float>(f.add_k_scale, 1);
    }
  } else {
    P.q = cuda::token_tensor<const In>(call.in.q, p.rank);
    P.k = cuda::token_tensor<const In>(call.in.k, p.rank);
    P.v = cuda::token_tensor<const In>(call.in.v, p.rank);
    if (p.additional_kv > 0) {
      P.add_k = cuda::token_tensor<const In>(*call.in.additional_k, 1);
      P.add_v = cuda::token_tensor<const In>(*call.in.additional_v, 1);
    }
  }
  P.o = cuda::token_tensor<T>(call.out, p.rank);
  P.write_lse = call.lse != nullptr;
  if (call.lse) P.lse = cuda::token_tensor<float>(*call.lse, p.rank);
  P.path_counts = forward_path_counts_device();

  using Smem = ForwardSmem<D, DV, MB, int(sizeof(In))>;
  auto kernel = fused_forward_kernel<T, In, D, DV, MB, SINGLE>;
  const int bytes = Smem::bytes(SINGLE ? 1 : 2);
  GNA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const dim3 grid(q_tiles_total, p.batch * p.heads_q, groups);
  kernel<<<grid, kForwardWarps * 32, bytes, static_cast<cudaStream_t>(call.stream)>>>(P);
  GNA_CUDA_CHECK_LAUNCH();
}

// Q tiles of more than 64 tokens run with two m-blocks per warp; e4m3 operands with one (Q tiles
// of at most 64 tokens: forward_tiles), where an m16n8k32 MMA gives each K/V fragment as many
// FLOPs as two m-blocks of 16-bit ones, and two m-blocks would spill (docs/fp8.md).
static_assert(forward_rows_q(1) == kE4m3ForwardRowsQ, "the e4m3 forward's Q tile rows");
template <typename T, int D, int DV, typename In = T>
void launch_forward(const ForwardCall& call, const TilePlan& plan) {
  const bool wide = plan.q.volume(call.problem.rank) > forward_rows_q(1);
  if constexpr (kE4m3Operands<In>) {
    launch_forward_mb<T, In, D, DV, 1>(call, plan);
  } else if (plan.kv_stages == 1) {
    if constexpr (forward_single_stage_kernel(D, DV, forward_rows_q(2)))
      if (wide) return launch_forward_mb<T, In, D, DV, 2, true>(call, plan);
    fail(ErrorKind::runtime, "portable: no single-stage forward kernel at head dims ", D, "/",
         DV, " with ", wide ? 128 : 64, "-row Q tiles");
  } else if (wide) {
    launch_forward_mb<T, In, D, DV, 2>(call, plan);
  } else {
    launch_forward_mb<T, In, D, DV, 1>(call, plan);
  }
}


}  // namespace gna::portable
