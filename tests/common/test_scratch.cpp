// The scratch pool of the GPU backends: freed blocks stay with the pool for the next call, and
// gna::release_cached_memory gives them back. Without a CUDA device only the release runs (a
// no-op that must not fail).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "gna/gna.hpp"
#include "kernels/common/scratch.hpp"
#include "../gpu_reference/gpu_harness.hpp"

namespace gna::testing {
namespace {

TEST(Scratch, ReleaseWithoutAllocationsIsANoOp) { EXPECT_NO_THROW(release_cached_memory()); }

TEST(Scratch, PoolKeepsFreedMemoryUntilReleased) {
  GNA_SKIP_WITHOUT_GPU();
  constexpr size_t kBytes = size_t(64) << 20;
  void* a = cuda::scratch_alloc(kBytes, nullptr);
  ASSERT_NE(a, nullptr);
  GNA_CUDA_OK(cudaMemsetAsync(a, 0, kBytes, nullptr));
  cuda::scratch_free(a, nullptr);
  GNA_CUDA_OK(cudaDeviceSynchronize());
  const size_t kept = cuda::scratch_reserved_bytes();
  EXPECT_GE(kept, kBytes);  // not given back at the synchronization
  void* b = cuda::scratch_alloc(kBytes, nullptr);  // served from the pool
  EXPECT_EQ(cuda::scratch_reserved_bytes(), kept);
  cuda::scratch_free(b, nullptr);
  release_cached_memory();
  EXPECT_EQ(cuda::scratch_reserved_bytes(), 0u);
  void* c = cuda::scratch_alloc(kBytes, nullptr);  // allocates again after a release
  ASSERT_NE(c, nullptr);
  cuda::scratch_free(c, nullptr);
  GNA_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace gna::testing
