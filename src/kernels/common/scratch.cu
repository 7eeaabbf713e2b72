#include "kernels/common/scratch.hpp"

#include <cstdint>
#include <map>
#include <mutex>

#include "kernels/common/cuda_check.hpp"

namespace gna::cuda {
namespace {

cudaMemPool_t pool_of_current_device() {
  static std::mutex mu;
  static std::map<int, cudaMemPool_t> pools;
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

void* scratch_alloc(size_t bytes, cudaStream_t stream) {
  void* ptr = nullptr;
  GNA_CUDA_CHECK(cudaMallocFromPoolAsync(&ptr, bytes > 0 ? bytes : 1, pool_of_current_device(), stream));
  return ptr;
}

void scratch_free(void* ptr, cudaStream_t stream) {
  if (ptr != nullptr) GNA_CUDA_CHECK(cudaFreeAsync(ptr, stream));
}

}  // namespace gna::cuda
