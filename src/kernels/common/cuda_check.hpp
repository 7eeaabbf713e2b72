// Error checking for CUDA runtime calls: failures become gna::Error (kind runtime) naming the
// call and the CUDA error string.
#pragma once

#include <cuda_runtime.h>

#include "gna/core/error.hpp"

namespace gna::cuda {

inline void check(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess)
    fail(ErrorKind::runtime, what, " failed: ", cudaGetErrorString(status), " (", file, ":", line,
         ")");
}

}  // namespace gna::cuda

#define GNA_CUDA_CHECK(call) ::gna::cuda::check((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors surface here (asynchronous faults surface
// at the next synchronizing call).
#define GNA_CUDA_CHECK_LAUNCH() ::gna::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
