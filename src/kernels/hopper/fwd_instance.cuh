// Launches one instantiation of the forward kernel (maps: 5 CUtensorMap in order q, k, v,
// additional k, additional v).
#pragma once

#include <cuda_runtime.h>

#include "gna/core/error.hpp"
#include "kernels/hopper/fwd_kernel.cuh"
#include "kernels/hopper/fwd_launch.hpp"

namespace gna::hopper {

template <int D, typename Tag>
void launch_forward_kernel(const void* maps_v, const FwdParams& p, int grid, void* stream) {
  const CUtensorMap* maps = static_cast<const CUtensorMap*>(maps_v);
  constexpr int smem = shared_bytes<D>();
  static const cudaError_t attr = cudaFuncSetAttribute(
      forward_kernel<D, Tag>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess)
    fail(ErrorKind::runtime, "hopper: cannot reserve ", smem, " bytes of shared memory: ",
         cudaGetErrorString(attr));
  forward_kernel<D, Tag><<<grid, kThreads, smem, static_cast<cudaStream_t>(stream)>>>(
      maps[0], maps[1], maps[2], maps[3], maps[4], p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(ErrorKind::runtime, "hopper: forward launch failed: ", cudaGetErrorString(err));
}

}  // namespace gna::hopper
