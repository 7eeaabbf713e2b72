// What the backward's row passes (backward_prepass, backward_postpass) share: rows (b, token, h)
// of [B, tokens, Hq] in plain token order, split into coordinates once per row (not per element)
// and read or written 16 bytes at a time where the tensors allow it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "gna/core/error.hpp"
#include "gna/core/problem.hpp"
#include "gna/tensor.hpp"
#include "kernels/common/cuda_check.hpp"
#include "kernels/common/element.cuh"

namespace gna::cuda::row_pass {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 8;

struct RowShape {
  int rank = 1;
  int heads = 1;
  int extent[kMaxRank] = {1, 1, 1};
};

struct RowCoords {
  int b, h;
  int x[kMaxRank];
};

// Row index -> (b, token coordinates, h), in I (32-bit wherever every row index fits: the
// divisions are the costly part of these passes).
template <typename I>
__device__ __forceinline__ RowCoords split_row(const RowShape& s, I row) {
  RowCoords c;
  c.h = static_cast<int>(row % static_cast<I>(s.heads));
  I token = row / static_cast<I>(s.heads);
#pragma unroll
  for (int a = kMaxRank - 1; a >= 0; --a) {
    c.x[a] = 0;
    if (a < s.rank) {
      c.x[a] = static_cast<int>(token % static_cast<I>(s.extent[a]));
      token /= static_cast<I>(s.extent[a]);
    }
  }
  c.b = static_cast<int>(token);
  return c;
}

// C consecutive elements: one 16-byte access where C * sizeof(T) == 16, else C == 1.
template <typename T, int C>
__device__ __forceinline__ void load_floats(const T* src, float (&v)[C]) {
  if constexpr (C * sizeof(T) == 16) {
    const uint4 raw = *reinterpret_cast<const uint4*>(src);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < C; ++i) v[i] = to_float(e[i]);
  } else {
    static_assert(C == 1, "C elements are 16 bytes or one element");
    v[0] = to_float(*src);
  }
}

template <typename T, int C>
__device__ __forceinline__ void store_floats(T* dst, const float (&v)[C]) {
  if constexpr (C * sizeof(T) == 16) {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < C; ++i) e[i] = from_float<T>(v[i]);
    *reinterpret_cast<uint4*>(dst) = raw;
  } else {
    static_assert(C == 1, "C elements are 16 bytes or one element");
    dst[0] = from_float<T>(v[0]);
  }
}

// Each warp takes 32 consecutive rows: lane l splits row base + l and computes its offsets,
// then groups of G lanes (G a power of two) take the rows in turn, G chunks of C elements at a
// time, with the row's offsets passed by shuffle.
template <typename I>
__device__ __forceinline__ I warp_first_row() {
  return (static_cast<I>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32) * 32;
}

inline RowShape row_shape(const Problem& p) {
  RowShape s;
  s.rank = p.rank;
  s.heads = p.heads_q;
  for (int a = 0; a < p.rank; ++a) s.extent[a] = p.axes[a].extent;
  return s;
}

// 16-byte accesses need 16-byte aligned rows: the base and every stride but the last (which
// is 1) in multiples of 16 bytes, and whole chunks per row.
inline bool rows_vectorizable(const TensorRef& t, int dim) {
  const int64_t es = dtype_size(t.dtype);
  if ((dim * es) % 16 != 0 || reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  for (int i = 0; i + 1 < t.rank; ++i)
    if ((t.strides[i] * es) % 16 != 0) return false;
  return true;
}

inline int lanes_per_row(int chunks) {
  int g = 1;
  while (g < 32 && 2 * g <= chunks) g *= 2;
  return g;
}

inline unsigned blocks_for(int64_t rows) {
  const int64_t warps = (rows + 31) / 32;
  return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

// Rows (b, token, h) of the problem's query side.
inline int64_t row_count(const Problem& p) { return int64_t(p.batch) * p.tokens() * p.heads_q; }

// The element type T, the chunk of C elements and the row index type I a pass's kernel is
// instantiated with.
template <typename Element, int Chunk, typename Index>
struct PassTypes {
  using T = Element;
  static constexpr int C = Chunk;
  using I = Index;
};

// One launch over the problem's rows: blocks of kWarpsPerBlock warps, a warp per 32 rows.
struct RowLaunch {
  static constexpr int threads = kWarpsPerBlock * 32;
  int64_t rows;
  unsigned blocks;
  cudaStream_t stream;
};

// Where the problem has rows, calls launch(PassTypes<T, C, I>{}, RowLaunch) for the dtype,
// chunk (16 bytes where vector, else one element) and index width, and checks the launch.
template <typename F>
void launch_rows(const Problem& p, bool vector, void* stream, F&& launch) {
  const int64_t rows = row_count(p);
  if (rows == 0) return;
  const RowLaunch config{rows, blocks_for(rows), static_cast<cudaStream_t>(stream)};
  const bool ok = visit_element_type(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = static_cast<int>(16 / sizeof(T));
    auto with_index = [&](auto c) {
      constexpr int C = decltype(c)::value;
      if (rows <= static_cast<int64_t>(std::numeric_limits<uint32_t>::max()))
        launch(PassTypes<T, C, uint32_t>{}, config);
      else
        launch(PassTypes<T, C, uint64_t>{}, config);
    };
    if (vector)
      with_index(std::integral_constant<int, kVec>{});
    else
      with_index(std::integral_constant<int, 1>{});
  });
  if (!ok)
    fail(ErrorKind::unsupported, "backward row pass: dtype ", dtype_name(p.dtype),
         " not supported");
  GNA_CUDA_CHECK_LAUNCH();
}

}  // namespace gna::cuda::row_pass
