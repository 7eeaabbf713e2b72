// Pieces of the kernel benchmark that other CUDA tools can share: a CUDA status check that exits
// and the event timing of one call.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

namespace gna::bench {

#define GNA_BENCH_CHECK(x)                                                              \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                     \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

// Milliseconds of one call of f between events e0 and e1 (recorded around it, then waited for).
inline float event_ms(cudaEvent_t e0, cudaEvent_t e1, const std::function<void()>& f) {
  GNA_BENCH_CHECK(cudaEventRecord(e0));
  f();
  GNA_BENCH_CHECK(cudaEventRecord(e1));
  GNA_BENCH_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  GNA_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  return ms;
}

}  // namespace gna::bench
