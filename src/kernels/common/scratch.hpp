// Scratch memory of the kernels (fp32 dQ accumulators, row statistics, turn counters), stream
// ordered, from a pool per device owned by the library. Freed blocks stay with the pool for the
// next call: the device's default pool gives its memory back at every synchronization, so each
// backward call would map and unmap its accumulator (4 bytes x tokens x heads x head dim) again.
// Streams are passed as void* (cudaStream_t) so that host-only layers can include this.
#pragma once

#include <cstddef>

namespace gna::cuda {

void* scratch_alloc(size_t bytes, void* stream);
void scratch_free(void* ptr, void* stream);

// Waits for every device that has a pool, then gives the pools' unused memory back.
void scratch_release();
// Bytes the pool of the current device holds (0 without one).
size_t scratch_reserved_bytes();

template <typename T>
T* scratch_alloc(size_t count, void* stream) {
  return static_cast<T*>(scratch_alloc(count * sizeof(T), stream));
}

}  // namespace gna::cuda
