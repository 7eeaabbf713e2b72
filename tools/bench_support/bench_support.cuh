// Pieces shared by the kernel benchmarks (tools/hopper_bench, tools/hopper_bwd_bench): the case
// description, a CUDA status check that exits, and a deterministic bf16 fill in [-1, 1).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace gna::bench {

// One problem: rank, extents, windows and strides per axis (unused axes 1), batch, heads, head
// dim. window == extent on every axis is dense attention.
struct Case {
  const char* name;
  int rank;
  int extent[3];
  int window[3];
  int stride[3];
  int batch, heads, dim;
};

#define GNA_BENCH_CHECK(x)                                                              \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                     \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

// x[i] = a hash of (i, seed) mapped to [-1, 1), as bf16 bits.
__global__ void fill_bf16(uint16_t* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float u = (h & 0xFFFF) / 65536.f * 2.f - 1.f;
    __nv_bfloat16 b = __float2bfloat16(u);
    x[i] = *reinterpret_cast<uint16_t*>(&b);
  }
}

}  // namespace gna::bench
