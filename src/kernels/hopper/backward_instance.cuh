// Launches one instantiation of the backward kernel (maps: 7 CUtensorMap in order q, dO, k, v, dQ accumulator, dK, dV).
#pragma once

#include <cuda_runtime.h>

#include "gna/core/error.hpp"
#include "kernels/hopper/backward_kernel.cuh"
#include "kernels/hopper/backward_launch.hpp"

namespace gna::hopper {

template <int D, typename Tag, bool kRules>
void launch_backward_kernel(const CUtensorMap* maps, const BwdParams& p, int grid,
                            cudaStream_t stream) {
  constexpr int smem = bwd::shared_bytes<D, kRules>();
  static const cudaError_t attr = cudaFuncSetAttribute(
      bwd::backward_kernel<D, Tag, kRules>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess)
    fail(ErrorKind::runtime, "hopper: cannot reserve ", smem, " bytes of shared memory: ",
         cudaGetErrorString(attr));
  bwd::backward_kernel<D, Tag, kRules><<<grid, bwd::kThreads, smem, stream>>>(
      maps[0], maps[1], maps[2], maps[3], maps[4], maps[5], maps[6], p);
}

// Launches with head rules run their own instantiation (kRules), so that the kernel without them
// never reads the rules.
template <int D, typename Tag>
void launch_backward_kernel(const void* maps_v, const BwdParams& p, int grid, void* stream) {
  const CUtensorMap* maps = static_cast<const CUtensorMap*>(maps_v);
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.rules.groups > 0)
    launch_backward_kernel<D, Tag, true>(maps, p, grid, st);
  else
    launch_backward_kernel<D, Tag, false>(maps, p, grid, st);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(ErrorKind::runtime, "hopper: backward launch failed: ", cudaGetErrorString(err));
}

}  // namespace gna::hopper
