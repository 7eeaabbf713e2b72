// Element types of the device kernels and their conversions to/from fp32 accumulators.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gna/core/problem.hpp"

namespace gna::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Calls f(T{}) with the element type of dtype (f32, f16, bf16); returns false for others.
template <typename F>
bool visit_element_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f(float{}); return true;
    case DType::f16: f(__half{}); return true;
    case DType::bf16: f(__nv_bfloat16{}); return true;
    default: return false;
  }
}

}  // namespace gna::cuda
