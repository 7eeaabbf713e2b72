// Launches one instantiation of the backward kernel (maps: 7 CUtensorMap in order q, dO, k, v, dQ accumulator, dK, dV).
#pragma once

#include <cuda_runtime.h>

#include "gna/core/error.hpp"
#include "gna/core/kernel_tiles.hpp"
#include "kernels/hopper/backward_kernel.cuh"
#include "kernels/hopper/backward_launch.hpp"

namespace gna::hopper {

template <int D, typename Tag, bool kRules, bool kPlacedQ>
void launch_backward_instance(const CUtensorMap* maps, const BwdParams& p, int grid,
                            cudaStream_t stream) {
  constexpr int smem = bwd::shared_bytes<D, kRules, kPlacedQ>();
  static const cudaError_t attr =
      cudaFuncSetAttribute(bwd::backward_kernel<D, Tag, kRules, kPlacedQ>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess)
    fail(ErrorKind::runtime, "hopper: cannot reserve ", smem, " bytes of shared memory: ",
         cudaGetErrorString(attr));
  bwd::backward_kernel<D, Tag, kRules, kPlacedQ><<<grid, bwd::kThreads, smem, stream>>>(
      maps[0], maps[1], maps[2], maps[3], maps[4], maps[5], maps[6], p);
}

// Launches with head rules run their own instantiation (kRules), so that the kernel without them
// never reads the rules; placed Q tiles too (kPlacedQ, only at the head dims of
// hopper_backward_placed_q_head_dim), so that the grid kernels carry no placement code.
template <int D, typename Tag, bool kPlacedQ>
void launch_backward_for_rules(const CUtensorMap* maps, const BwdParams& p, int grid,
                            cudaStream_t stream) {
  if (p.rules.groups > 0)
    launch_backward_instance<D, Tag, true, kPlacedQ>(maps, p, grid, stream);
  else
    launch_backward_instance<D, Tag, false, kPlacedQ>(maps, p, grid, stream);
}

template <int D, typename Tag>
void launch_backward_kernel(KvPlacement q_placement, const void* maps_v, const BwdParams& p,
                            int grid, void* stream) {
  const CUtensorMap* maps = static_cast<const CUtensorMap*>(maps_v);
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (q_placement == KvPlacement::grid) {
    launch_backward_for_rules<D, Tag, false>(maps, p, grid, st);
  } else if constexpr (hopper_backward_placed_q_head_dim(D)) {
    launch_backward_for_rules<D, Tag, true>(maps, p, grid, st);
  } else {
    // The tile chooser (hopper_backward_tile_kernel) places Q tiles only where a kernel exists.
    fail(ErrorKind::runtime, "hopper: the backward has no placed Q tile kernel at head dim ", D);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(ErrorKind::runtime, "hopper: backward launch failed: ", cudaGetErrorString(err));
}

}  // namespace gna::hopper
