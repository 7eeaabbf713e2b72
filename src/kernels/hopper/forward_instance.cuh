// Launches one instantiation of the forward kernel (maps: 5 CUtensorMap in order q, k, v,
// additional k, additional v) with its work hand-out: one CTA per work item (grid = items), or
// persistent CTAs walking the items (grid = CTAs).
#pragma once

#include <cuda_runtime.h>

#include "gna/core/error.hpp"
#include "kernels/hopper/forward_kernel.cuh"
#include "kernels/hopper/forward_launch.hpp"

namespace gna::hopper {

template <typename Kernel>
void reserve_shared(Kernel kernel, int smem) {
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess)
    fail(ErrorKind::runtime, "hopper: cannot reserve ", smem, " bytes of shared memory: ",
         cudaGetErrorString(attr));
}

template <int D, typename Tag, bool kRules, typename Sched>
void launch_with(const CUtensorMap* maps, const FwdParams& p, int grid, cudaStream_t st) {
  constexpr int smem = shared_bytes<D, Tag, Sched>();
  static const bool reserved =
      (reserve_shared(forward_kernel<D, Tag, kRules, Sched>, smem), true);
  (void)reserved;
  forward_kernel<D, Tag, kRules, Sched><<<grid, kThreads, smem, st>>>(maps[0], maps[1], maps[2],
                                                                       maps[3], maps[4], p);
}

template <int D, typename Tag, bool kRules>
void launch_forward_kernel(const CUtensorMap* maps, const FwdParams& p, int grid, bool persistent,
                           cudaStream_t st) {
  // Head dim 256 has no persistent CTAs: two 64 KB Q buffers do not fit beside the K/V ring.
  if constexpr (D <= 128) {
    if (persistent) return launch_with<D, Tag, kRules, PersistentCtas>(maps, p, grid, st);
  }
  launch_with<D, Tag, kRules, OneItemPerCta>(maps, p, grid, st);
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
