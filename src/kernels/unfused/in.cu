// IN: one thread per (key row, head-dim chunk) gathers weight * x over the queries attending
// the key, enumerated by the core's inverse rule: no scatter, no atomics, a fixed order.
#include "kernels/unfused/launch.hpp"
#include "kernels/unfused/row_chunks.cuh"
#include "kernels/unfused/window_walk.cuh"

namespace gna::unfused {
namespace {

template <typename T, int Rank, int N>
__device__ __forceinline__ void in_row_chunk(const RowChunkArgs<T>& args, int row, int chunk) {
  const Problem& p = args.p;
  const int c0 = chunk * N;
  int b, h, y[kMaxRank];
  split_row<Rank>(p, row, &b, &h, y);
  float acc[N] = {};
  for_each_attending_query<Rank>(p, y, [&](const int* xq, int slot) {
    const float weight = cuda::to_float(args.w.template row<Rank>(b, h, xq)[slot]);
    float v[N];
    load_floats<T, N>(args.x.template row<Rank>(b, h, xq) + c0, v);
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = fmaf(weight, v[i], acc[i]);
  });
  store_floats<T, N>(args.out.template row<Rank>(b, h, y) + c0, acc);
}

template <typename T, int Rank>
__global__ void __launch_bounds__(kRowChunkThreads) in_kernel(const RowChunkArgs<T> args) {
  for_each_row_chunk(args, [&](int row, int chunk) {
    if (args.chunked)
      in_row_chunk<T, Rank, kChunk<T>>(args, row, chunk);
    else
      in_row_chunk<T, Rank, 1>(args, row, chunk);
  });
}

}  // namespace

void launch_in(const Problem& p, const TensorRef& w, const TensorRef& x, const TensorRef& out,
               void* stream) {
  visit_type_and_rank(p, [&](auto t, auto rank) {
    using T = decltype(t);
    launch_rows(in_kernel<T, decltype(rank)::value>, row_chunk_args<T>(p, w, x, out), stream);
  });
}

}  // namespace gna::unfused
