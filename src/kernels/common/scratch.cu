#include "kernels/common/scratch.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "kernels/common/cuda_check.hpp"

namespace gna::cuda {
namespace {

std::mutex mu;
std::map<int, cudaMemPool_t> pools;

cudaMemPool_t pool_of_current_device() {
  int device = 0;
  GNA_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  auto it = pools.find(device);
  if (it != pools.end()) return it->second;
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool;
  GNA_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
  uint64_t keep = UINT64_MAX;  // never trim at synchronization
  GNA_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  pools.emplace(device, pool);
  return pool;
}

}  // namespace

void* scratch_alloc(size_t bytes, void* stream) {
  void* ptr = nullptr;
  GNA_CUDA_CHECK(cudaMallocFromPoolAsync(&ptr, bytes > 0 ? bytes : 1, pool_of_current_device(),
                                         static_cast<cudaStream_t>(stream)));
  return ptr;
}

void scratch_free(void* ptr, void* stream) {
  if (ptr != nullptr) GNA_CUDA_CHECK(cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream)));
}

void scratch_release() {
  std::lock_guard<std::mutex> lock(mu);
  if (pools.empty()) return;  // nothing allocated (also: no device to ask)
  int current = 0;
  GNA_CUDA_CHECK(cudaGetDevice(&current));
  for (const auto& [device, pool] : pools) {
    // Stream-ordered frees count as done only once they have run.
    GNA_CUDA_CHECK(cudaSetDevice(device));
    GNA_CUDA_CHECK(cudaDeviceSynchronize());
    GNA_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  }
  GNA_CUDA_CHECK(cudaSetDevice(current));
}

size_t scratch_reserved_bytes() {
  int device = 0;
  GNA_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  auto it = pools.find(device);
  if (it == pools.end()) return 0;
  uint64_t bytes = 0;
  GNA_CUDA_CHECK(cudaMemPoolGetAttribute(it->second, cudaMemPoolAttrReservedMemCurrent, &bytes));
  return static_cast<size_t>(bytes);
}

}  // namespace gna::cuda
