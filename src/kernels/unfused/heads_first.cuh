// Device views of the unfused operators' heads-first tensors [B, heads, *spatial, n] (tokens:
// n = D; weights: n = prod(K)), row enumeration and 16-byte chunk loads along the last dim.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gna/core/problem.hpp"
#include "gna/tensor.hpp"
#include "gna/core/error.hpp"
#include "kernels/common/element.cuh"

namespace gna::unfused {

template <typename T>
struct HeadsFirst {
  T* data = nullptr;
  int64_t stride_batch = 0, stride_head = 0;
  int64_t stride_axis[kMaxRank] = {0, 0, 0};

  template <int Rank>
  __device__ __forceinline__ T* row(int b, int h, const int* x) const {
    int64_t o = b * stride_batch + h * stride_head;
#pragma unroll
    for (int a = 0; a < Rank; ++a) o += x[a] * stride_axis[a];
    return data + o;
  }
};

template <typename T>
HeadsFirst<T> heads_first(const TensorRef& t, int rank) {
  HeadsFirst<T> v;
  v.data = static_cast<T*>(t.data);
  v.stride_batch = t.strides[0];
  v.stride_head = t.strides[1];
  for (int a = 0; a < rank; ++a) v.stride_axis[a] = t.strides[2 + a];
  return v;
}

// Row `row` of [B, heads, tokens] (tokens fastest, row-major over axes): b, h and coordinates.
// 32-bit: launchers refuse more rows than an int holds (checked_rows).
template <int Rank>
__device__ __forceinline__ void split_row(const Problem& p, int row, int* b, int* h, int* x) {
#pragma unroll
  for (int a = Rank - 1; a >= 0; --a) {
    x[a] = row % p.axes[a].extent;
    row /= p.axes[a].extent;
  }
  *h = row % p.heads_q;
  *b = row / p.heads_q;
}

// Rows of a call, B * heads * tokens, refused past 2^31 - 1 (the kernels index rows in 32 bits).
inline int checked_rows(const Problem& p) {
  const int64_t rows = int64_t{p.batch} * p.heads_q * p.tokens();
  if (rows > INT32_MAX)
    fail(ErrorKind::unsupported, "unfused operators on CUDA: batch*heads*tokens must be < 2^31, got ",
         rows);
  return static_cast<int>(rows);
}

// Blocks of `rows_per_block` rows (threadIdx.y) with `lanes` threads per row (threadIdx.x): no
// division to find a thread's row, and a row's threads are adjacent in the warp.
struct RowBlocks {
  dim3 block, grid;
};
inline RowBlocks row_blocks(int rows, int per_row, int threads) {
  const int lanes = per_row < threads ? per_row : threads;
  const int rows_per_block = threads / lanes;
  return RowBlocks{dim3(lanes, rows_per_block), dim3((rows + rows_per_block - 1) / rows_per_block)};
}

// Elements of T in one 16-byte load.
template <typename T>
constexpr int kChunk = 16 / sizeof(T);

// Loads N elements (N == kChunk<T>: one 16-byte load; N == 1: one element) as floats.
template <typename T, int N>
__device__ __forceinline__ void load_floats(const T* p, float* out) {
  if constexpr (N == 1) {
    out[0] = cuda::to_float(p[0]);
  } else {
    static_assert(N == kChunk<T>, "one 16-byte load");
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = cuda::to_float(e[i]);
  }
}

template <typename T, int N>
__device__ __forceinline__ void store_floats(T* p, const float* v) {
  if constexpr (N == 1) {
    p[0] = cuda::from_float<T>(v[0]);
  } else {
    static_assert(N == kChunk<T>, "one 16-byte store");
    uint4 u;
    T* e = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int i = 0; i < N; ++i) e[i] = cuda::from_float<T>(v[i]);
    *reinterpret_cast<uint4*>(p) = u;
  }
}

// Whether a tensor's rows can be read in 16-byte chunks: last dim a multiple of the chunk, base
// address and every stride aligned to it.
inline bool chunk_aligned(const TensorRef& t) {
  const int chunk = 16 / dtype_size(t.dtype);
  if (t.shape[t.rank - 1] % chunk != 0) return false;
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  for (int i = 0; i < t.rank - 1; ++i)
    if (t.strides[i] % chunk != 0 && t.shape[i] > 1) return false;
  return true;
}

// Calls f(T{}, std::integral_constant<int, Rank>{}) for the problem's dtype and rank.
template <typename F>
void visit_type_and_rank(const Problem& p, F&& f) {
  cuda::visit_element_type(p.dtype, [&](auto t) {
    switch (p.rank) {
      case 1: f(t, std::integral_constant<int, 1>{}); break;
      case 2: f(t, std::integral_constant<int, 2>{}); break;
      default: f(t, std::integral_constant<int, 3>{}); break;
    }
  });
}

}  // namespace gna::unfused
