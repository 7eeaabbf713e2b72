#include "kernels/portable/path_counts.hpp"

#include <cuda_runtime.h>

#include "kernels/common/cuda_check.hpp"

namespace gna::portable {
namespace {
ForwardPathCounts* counters = nullptr;
}  // namespace

void count_forward_paths(bool on) {
  if (on) {
    if (counters == nullptr) GNA_CUDA_CHECK(cudaMalloc(&counters, sizeof(ForwardPathCounts)));
    GNA_CUDA_CHECK(cudaMemset(counters, 0, sizeof(ForwardPathCounts)));
  } else if (counters != nullptr) {
    GNA_CUDA_CHECK(cudaFree(counters));
    counters = nullptr;
  }
}

ForwardPathCounts forward_path_counts() {
  ForwardPathCounts c;
  if (counters == nullptr) return c;
  GNA_CUDA_CHECK(cudaDeviceSynchronize());
  GNA_CUDA_CHECK(cudaMemcpy(&c, counters, sizeof(c), cudaMemcpyDeviceToHost));
  return c;
}

ForwardPathCounts* forward_path_counts_device() { return counters; }

namespace {
BackwardPathCounts* backward_counters = nullptr;
}  // namespace

void count_backward_paths(bool on) {
  if (on) {
    if (backward_counters == nullptr)
      GNA_CUDA_CHECK(cudaMalloc(&backward_counters, sizeof(BackwardPathCounts)));
    GNA_CUDA_CHECK(cudaMemset(backward_counters, 0, sizeof(BackwardPathCounts)));
  } else if (backward_counters != nullptr) {
    GNA_CUDA_CHECK(cudaFree(backward_counters));
    backward_counters = nullptr;
  }
}

BackwardPathCounts backward_path_counts() {
  BackwardPathCounts c;
  if (backward_counters == nullptr) return c;
  GNA_CUDA_CHECK(cudaDeviceSynchronize());
  GNA_CUDA_CHECK(cudaMemcpy(&c, backward_counters, sizeof(c), cudaMemcpyDeviceToHost));
  return c;
}

BackwardPathCounts* backward_path_counts_device() { return backward_counters; }

}  // namespace gna::portable
