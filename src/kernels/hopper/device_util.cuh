// Small device helpers shared by the Hopper forward and backward kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/hopper/fwd_params.hpp"
#include "kernels/hopper/ptx.cuh"

namespace gna::hopper {

__device__ __forceinline__ int log2_pow2(int v) { return __ffs(v) - 1; }

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Local coordinates of token r of a tile (row-major over axes 0, 1, 2; sizes are powers of two).
__device__ __forceinline__ void tile_local(int r, const int (&size)[kAxes], int (&local)[kAxes]) {
  const int s2 = log2_pow2(size[2]), s1 = log2_pow2(size[1]);
  local[2] = r & (size[2] - 1);
  local[1] = (r >> s2) & (size[1] - 1);
  local[0] = r >> (s1 + s2);
}

// Two floats rounded to the input dtype, packed as the 32-bit operand register of a wgmma.
template <typename Tag>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<Bf16Tag>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<F16Tag>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

}  // namespace gna::hopper
