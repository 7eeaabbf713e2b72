// Device helpers of the Hopper tests: fp16 / bf16 buffers filled with uniform values in [-1, 1)
// from a seed (a splitmix hash per element), and their float32 copies.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace gna::hopper_test {
namespace {  // internal linkage: each test binary has its own copy

__global__ void fill_random(uint16_t* x, int64_t n, uint64_t seed, bool bf16) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) / static_cast<float>(1 << 24) * 2.f - 1.f;
    if (bf16) {
      __nv_bfloat16 b = __float2bfloat16(u);
      x[i] = *reinterpret_cast<uint16_t*>(&b);
    } else {
      __half h = __float2half(u);
      x[i] = *reinterpret_cast<uint16_t*>(&h);
    }
  }
}

__global__ void to_float(const uint16_t* x, float* y, int64_t n, bool bf16) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint16_t v = x[i];
    y[i] = bf16 ? __bfloat162float(*reinterpret_cast<__nv_bfloat16*>(&v))
                : __half2float(*reinterpret_cast<__half*>(&v));
  }
}

}  // namespace
}  // namespace gna::hopper_test
