// Launches one instantiation of the forward kernel (maps: 5 CUtensorMap in order q, k, v,
// additional k, additional v): one CTA per work item (grid = items), or the persistent kernel
// (grid = CTAs walking the items).
#pragma once

#include <cuda_runtime.h>

#include "gna/core/error.hpp"
#include "kernels/hopper/forward_kernel.cuh"
#include "kernels/hopper/forward_launch.hpp"
#include "kernels/hopper/forward_persistent.cuh"

namespace gna::hopper {

template <typename Kernel>
void reserve_shared(Kernel kernel, int smem) {
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess)
    fail(ErrorKind::runtime, "hopper: cannot reserve ", smem, " bytes of shared memory: ",
         cudaGetErrorString(attr));
}

template <int D, typename Tag, bool kRules>
void launch_forward_kernel(const CUtensorMap* maps, const FwdParams& p, int grid, bool persistent,
                           cudaStream_t st) {
  bool launched = false;
  // Head dim 256 has no persistent kernel: two 64 KB Q buffers do not fit beside the K/V ring.
  if constexpr (D <= 128) {
    if (persistent) {
      constexpr int smem = persistent_shared_bytes<D>();
      static const bool reserved =
          (reserve_shared(persistent_forward_kernel<D, Tag, kRules>, smem), true);
      (void)reserved;
      persistent_forward_kernel<D, Tag, kRules><<<grid, kThreads, smem, st>>>(
          maps[0], maps[1], maps[2], maps[3], maps[4], p);
      launched = true;
    }
  }
  if (!launched) {
    constexpr int smem = shared_bytes<D>();
    static const bool reserved = (reserve_shared(forward_kernel<D, Tag, kRules>, smem), true);
    (void)reserved;
    forward_kernel<D, Tag, kRules><<<grid, kThreads, smem, st>>>(maps[0], maps[1], maps[2],
                                                                 maps[3], maps[4], p);
  }
}

// Launches with head rules run their own instantiation (kRules), so that the kernel without them
// never reads the rules.
template <int D, typename Tag>
void launch_forward_kernel(const void* maps_v, const FwdParams& p, int grid, bool persistent,
                           void* stream) {
  const CUtensorMap* maps = static_cast<const CUtensorMap*>(maps_v);
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.rules.groups > 0)
    launch_forward_kernel<D, Tag, true>(maps, p, grid, persistent, st);
  else
    launch_forward_kernel<D, Tag, false>(maps, p, grid, persistent, st);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(ErrorKind::runtime, "hopper: forward launch failed: ", cudaGetErrorString(err));
}

}  // namespace gna::hopper
