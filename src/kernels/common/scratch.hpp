// Scratch memory of the kernels (fp32 dQ accumulators, row statistics, turn counters), stream
// ordered, from a pool per device owned by the library. Freed blocks stay with the pool for the
// next call: the device's default pool gives its memory back at every synchronization, so each
// backward call would map and unmap its accumulator (4 bytes x tokens x heads x head dim) again.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace gna::cuda {

void* scratch_alloc(size_t bytes, cudaStream_t stream);
void scratch_free(void* ptr, cudaStream_t stream);

template <typename T>
T* scratch_alloc(size_t count, cudaStream_t stream) {
  return static_cast<T*>(scratch_alloc(count * sizeof(T), stream));
}

}  // namespace gna::cuda
