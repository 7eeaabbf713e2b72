// Work hand-out policies of the Hopper forward kernel: which work items (Q tile, head, batch;
// forward_work_item.cuh) a CTA runs, in what order, and what the kernel body may assume from
// that. The body (forward_kernel.cuh) asks first_item(), then next_item() at the start of each
// item, and stops at done(); kManyItems says whether a CTA can run more than one item, which
// decides the Q buffers (two: the next item's Q loads while the current one finishes), the K/V
// ring depth and the register split, and compiles the item change out where it cannot happen.
#pragma once

#include "kernels/hopper/forward_params.hpp"

namespace gna::hopper {

// One CTA per work item: the grid is the items, CTA b runs item b and nothing else.
struct OneItemPerCta {
  static constexpr bool kManyItems = false;
  __device__ __forceinline__ int first_item() const { return static_cast<int>(blockIdx.x); }
  __device__ __forceinline__ int next_item(const FwdParams&, int) const { return -1; }
  __device__ __forceinline__ bool done(const FwdParams&, int item) const { return item < 0; }
  __device__ __forceinline__ void finish(const FwdParams&) const {}
};

// Persistent CTAs (grid = at most one CTA per SM): CTA b starts with item b, then takes items
// from the per-stream counter (dynamic; FwdParams::work_counter, in the order of tile_order,
// longest first when the host gives one) or every gridDim.x-th item (round robin, no counter).
struct PersistentCtas {
  static constexpr bool kManyItems = true;
  __device__ __forceinline__ int first_item() const { return static_cast<int>(blockIdx.x); }
  __device__ __forceinline__ int next_item(const FwdParams& p, int item) const {
    return p.work_counter != nullptr ? atomicAdd(p.work_counter, 1) + static_cast<int>(gridDim.x)
                                     : item + static_cast<int>(gridDim.x);
  }
  __device__ __forceinline__ bool done(const FwdParams& p, int item) const {
    return item >= p.items;
  }
  // After the CTA's last request (the one past the end): the last CTA to get here resets the
  // counter, so launches and graph replays on this stream need no memset.
  __device__ __forceinline__ void finish(const FwdParams& p) const {
    if (p.work_counter == nullptr) return;
    __threadfence();
    if (atomicAdd(p.work_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
      atomicExch(p.work_counter, 0);
      atomicExch(p.work_counter + 1, 0);
    }
  }
};

}  // namespace gna::hopper
