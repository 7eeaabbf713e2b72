// Host side of the persistent forward kernel's work hand-out: the SM count, a per-stream work
// counter in device memory, and the longest-first order of an image's Q tiles from the core's
// tiling math.
#pragma once

#include "kernels/hopper/forward_params.hpp"

namespace gna::hopper {

int sm_count(int device);

// Mean KV tiles per work item (the box from the core's per-axis runs with the launch's KV
// placement, separable, averaged over the heads with head rules, plus the additional-KV tiles).
double mean_kv_tiles(const FwdParams& p);

// Two ints in device memory, zero between launches (the kernel's last CTA resets them), one
// pair per stream so that launches on different streams never share one. nullptr when it
// cannot be had now (first use while the stream is being captured into a graph).
int* work_counter(int device, void* stream);

// The image's Q tiles, most KV tiles first (ties in plain order), as a device array cached per
// launch geometry (with head rules one row of tiles per group); nullptr when every tile has the
// same work (the plain order is then as good) or when it cannot be uploaded now (first use while
// the stream is being captured).
const int* longest_first_order(const FwdParams& p, int device, void* stream);

}  // namespace gna::hopper
