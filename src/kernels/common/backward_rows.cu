#include "kernels/common/backward_rows.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "kernels/common/cuda_check.hpp"
#include "kernels/common/element.cuh"
#include "kernels/common/token_tensor.cuh"

namespace gna::cuda {
namespace {

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

template <typename T, int C, typename I>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    delta_kernel(RowShape s, TokenTensor<const T> o, TokenTensor<const T> d_o,
                 TokenTensor<const float> lse, float* delta, float* lse2, I rows, int dim, int g) {
  const int lane = threadIdx.x % 32;
  const I base = warp_first_row<I>();
  if (base >= rows) return;  // the whole warp
  int64_t own_o = 0, own_do = 0;
  if (base + lane < rows) {
    const RowCoords c = split_row(s, static_cast<I>(base + lane));
    own_o = o.offset(c.b, c.x, s.rank, c.h);
    own_do = d_o.offset(c.b, c.x, s.rank, c.h);
    if (lse2 != nullptr)
      lse2[base + lane] = lse.data[lse.offset(c.b, c.x, s.rank, c.h)] * 1.4426950408889634f;
  }
  const int sub = lane % g, chunks = dim / C;
#pragma unroll 4
  for (int step = 0; step < g; ++step) {
    const int src = step * (32 / g) + lane / g;
    const int64_t ro = __shfl_sync(kFullMask, own_o, src);
    const int64_t rd = __shfl_sync(kFullMask, own_do, src);
    const bool valid = base + src < rows;
    float acc = 0.f;
    if (valid) {
      for (int ch = sub; ch < chunks; ch += g) {
        float a[C], b[C];
        load_floats<T, C>(o.data + ro + ch * C, a);
        load_floats<T, C>(d_o.data + rd + ch * C, b);
#pragma unroll
        for (int i = 0; i < C; ++i) acc = fmaf(a[i], b[i], acc);
      }
    }
    for (int off = g / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(kFullMask, acc, off);
    if (valid && sub == 0) delta[base + src] = acc;
  }
}

template <typename T, int C, typename I>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    dq_kernel(RowShape s, const float* accum, TokenTensor<T> dq, float scale, I rows, int dim,
              int g) {
  const int lane = threadIdx.x % 32;
  const I base = warp_first_row<I>();
  if (base >= rows) return;
  int64_t own = 0;
  if (base + lane < rows) {
    const RowCoords c = split_row(s, static_cast<I>(base + lane));
    own = dq.offset(c.b, c.x, s.rank, c.h);
  }
  const int sub = lane % g, chunks = dim / C;
#pragma unroll 4
  for (int step = 0; step < g; ++step) {
    const int src = step * (32 / g) + lane / g;
    const int64_t ro = __shfl_sync(kFullMask, own, src);
    if (base + src >= rows) continue;
    const float* row = accum + static_cast<int64_t>(base + src) * dim;
    for (int ch = sub; ch < chunks; ch += g) {
      float v[C];
#pragma unroll
      for (int i = 0; i < C; i += 4) {
        if constexpr (C >= 4) {
          const float4 f = *reinterpret_cast<const float4*>(row + ch * C + i);
          v[i] = f.x * scale;
          v[i + 1] = f.y * scale;
          v[i + 2] = f.z * scale;
          v[i + 3] = f.w * scale;
        } else {
          v[i] = row[ch * C + i] * scale;
        }
      }
      store_floats<T, C>(dq.data + ro + ch * C, v);
    }
  }
}

RowShape row_shape(const Problem& p) {
  RowShape s;
  s.rank = p.rank;
  s.heads = p.heads_q;
  for (int a = 0; a < p.rank; ++a) s.extent[a] = p.axes[a].extent;
  return s;
}

// 16-byte accesses need 16-byte aligned rows: the base and every stride but the last (which
// is 1) in multiples of 16 bytes, and whole chunks per row.
bool rows_vectorizable(const TensorRef& t, int dim) {
  const int64_t es = dtype_size(t.dtype);
  if ((dim * es) % 16 != 0 || reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  for (int i = 0; i + 1 < t.rank; ++i)
    if ((t.strides[i] * es) % 16 != 0) return false;
  return true;
}

int lanes_per_row(int chunks) {
  int g = 1;
  while (g < 32 && 2 * g <= chunks) g *= 2;
  return g;
}

// Runs f(T{}, std::integral_constant<int, C>{}, I{}) for the dtype, chunk and index width.
template <typename F>
void dispatch(DType dtype, bool vector, int64_t rows, F&& f) {
  const bool ok = visit_element_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = static_cast<int>(16 / sizeof(T));
    auto with_index = [&](auto c) {
      if (rows <= static_cast<int64_t>(std::numeric_limits<uint32_t>::max()))
        f(tag, c, uint32_t{});
      else
        f(tag, c, uint64_t{});
    };
    if (vector)
      with_index(std::integral_constant<int, kVec>{});
    else
      with_index(std::integral_constant<int, 1>{});
  });
  if (!ok) fail(ErrorKind::unsupported, "backward row pass: dtype ", dtype_name(dtype), " not supported");
}

unsigned blocks_for(int64_t rows) {
  const int64_t warps = (rows + 31) / 32;
  return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

void launch_backward_delta(const Problem& p, const TensorRef& out, const TensorRef& d_out,
                           const TensorRef& lse, float* delta, float* lse2, void* stream) {
  const int64_t rows = int64_t(p.batch) * p.tokens() * p.heads_q;
  if (rows == 0) return;
  const bool vector = rows_vectorizable(out, p.dim_v) && rows_vectorizable(d_out, p.dim_v);
  dispatch(p.dtype, vector, rows, [&](auto tag, auto c, auto index) {
    using T = decltype(tag);
    using I = decltype(index);
    constexpr int C = decltype(c)::value;
    delta_kernel<T, C, I><<<blocks_for(rows), kWarpsPerBlock * 32, 0,
                            static_cast<cudaStream_t>(stream)>>>(
        row_shape(p), token_tensor<const T>(out, p.rank), token_tensor<const T>(d_out, p.rank),
        token_tensor<const float>(lse, p.rank), delta, lse2, static_cast<I>(rows), p.dim_v,
        lanes_per_row(p.dim_v / C));
  });
  GNA_CUDA_CHECK_LAUNCH();
}

void launch_dq_from_accumulator(const Problem& p, const float* accum, const TensorRef& dq,
                                float scale, void* stream) {
  const int64_t rows = int64_t(p.batch) * p.tokens() * p.heads_q;
  if (rows == 0) return;
  // The accumulator's rows are dim_qk floats from a 256-byte aligned allocation.
  const bool vector = rows_vectorizable(dq, p.dim_qk) && p.dim_qk % 4 == 0;
  dispatch(p.dtype, vector, rows, [&](auto tag, auto c, auto index) {
    using T = decltype(tag);
    using I = decltype(index);
    constexpr int C = decltype(c)::value;
    dq_kernel<T, C, I><<<blocks_for(rows), kWarpsPerBlock * 32, 0,
                         static_cast<cudaStream_t>(stream)>>>(
        row_shape(p), accum, token_tensor<T>(dq, p.rank), scale, static_cast<I>(rows), p.dim_qk,
        lanes_per_row(p.dim_qk / C));
  });
  GNA_CUDA_CHECK_LAUNCH();
}

}  // namespace gna::cuda
