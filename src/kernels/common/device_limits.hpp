// What a device lets the kernels do, asked once here: whether a kernel family runs on it (its
// compute capability against the code this library embeds, backend/device_code.hpp) and the
// shared memory per block the kernels may plan for (the device's opt-in limit, capped by
// GNA_MAX_SHARED_MEMORY_BYTES).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "backend/device_code.hpp"

namespace gna::cuda {

// 0 when the device cannot be asked (the error is cleared so that it does not surface later).
inline int device_attribute(cudaDeviceAttr attr, int device) {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, attr, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return v;
}

// 86 for compute capability 8.6; 0 when the device cannot be asked.
inline int compute_capability(int device) {
  return 10 * device_attribute(cudaDevAttrComputeCapabilityMajor, device) +
         device_attribute(cudaDevAttrComputeCapabilityMinor, device);
}

// Whether `family`'s kernels run on `device`; otherwise writes "<backend>: <why>".
inline bool device_runs(int device, KernelFamily family, const char* backend, std::string* why) {
  std::string reason;
  if (family_runs_on(family, compute_capability(device), embedded_code(family), &reason)) return true;
  if (why) *why = std::string(backend) + ": " + reason;
  return false;
}

// Shared memory per block the kernels may use on `device` (0 if it cannot be asked and no cap is
// set). The environment is read at each call: a bad cap is an error naming it.
inline int shared_memory_per_block(int device) {
  return capped_shared_memory(device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                              std::getenv(kSharedMemoryCapVariable));
}

// How a refusal names the limit: "the device allows N" or, where the cap is lower than the
// device's limit, "N allowed by GNA_MAX_SHARED_MEMORY_BYTES".
inline std::string shared_memory_allowance(int device) {
  const int limit = shared_memory_per_block(device);
  const int own = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  return limit < own || own == 0
             ? std::to_string(limit) + " allowed by " + kSharedMemoryCapVariable
             : "the device allows " + std::to_string(limit);
}

}  // namespace gna::cuda
