#include "kernels/common/backward_postpass.hpp"

#include "kernels/common/row_pass.cuh"
#include "kernels/common/token_tensor.cuh"

namespace gna::cuda {
namespace {

using namespace row_pass;

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

}  // namespace

void launch_backward_postpass(const Problem& p, const float* accum, const TensorRef& dq,
                              float scale, void* stream) {
  // The accumulator's rows are dim_qk floats from a 256-byte aligned allocation.
  const bool vector = rows_vectorizable(dq, p.dim_qk) && p.dim_qk % 4 == 0;
  launch_rows(p, vector, stream, [&](auto types, const RowLaunch& l) {
    using T = typename decltype(types)::T;
    using I = typename decltype(types)::I;
    constexpr int C = decltype(types)::C;
    dq_kernel<T, C, I><<<l.blocks, l.threads, 0, l.stream>>>(
        row_shape(p), accum, token_tensor<T>(dq, p.rank), scale, static_cast<I>(l.rows), p.dim_qk,
        lanes_per_row(p.dim_qk / C));
  });
}

}  // namespace gna::cuda
