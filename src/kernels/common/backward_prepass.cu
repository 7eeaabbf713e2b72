#include "kernels/common/backward_prepass.hpp"

#include "kernels/common/row_pass.cuh"
#include "kernels/common/token_tensor.cuh"

namespace gna::cuda {
namespace {

using namespace row_pass;

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

}  // namespace

void launch_backward_prepass(const Problem& p, const TensorRef& out, const TensorRef& d_out,
                             const TensorRef& lse, float* delta, float* lse2, void* stream) {
  const bool vector = rows_vectorizable(out, p.dim_v) && rows_vectorizable(d_out, p.dim_v);
  launch_rows(p, vector, stream, [&](auto types, const RowLaunch& l) {
    using T = typename decltype(types)::T;
    using I = typename decltype(types)::I;
    constexpr int C = decltype(types)::C;
    delta_kernel<T, C, I><<<l.blocks, l.threads, 0, l.stream>>>(
        row_shape(p), token_tensor<const T>(out, p.rank), token_tensor<const T>(d_out, p.rank),
        token_tensor<const float>(lse, p.rank), delta, lse2, static_cast<I>(l.rows), p.dim_v,
        lanes_per_row(p.dim_v / C));
  });
}

}  // namespace gna::cuda
