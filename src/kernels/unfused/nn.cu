// NN: one thread per (query row, head-dim chunk) sums weight * value over the query's window
// slots that hold a key.
#include "kernels/unfused/launch.hpp"
#include "kernels/unfused/row_chunks.cuh"
#include "kernels/unfused/window_walk.cuh"

namespace gna::unfused {
namespace {

template <typename T, int Rank, int N>
__device__ __forceinline__ void nn_row_chunk(const RowChunkArgs<T>& args, int row, int chunk) {
  const Problem& p = args.p;
  const int c0 = chunk * N;
  int b, h, x[kMaxRank];
  split_row<Rank>(p, row, &b, &h, x);
  const T* w_row = args.w.template row<Rank>(b, h, x);
  float acc[N] = {};
  for_each_key_slot<Rank>(p, x, [&](const int* y, int slot) {
    const float weight = cuda::to_float(w_row[slot]);
    float v[N];
    load_floats<T, N>(args.x.template row<Rank>(b, h, y) + c0, v);
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = fmaf(weight, v[i], acc[i]);
  });
  store_floats<T, N>(args.out.template row<Rank>(b, h, x) + c0, acc);
}

template <typename T, int Rank>
__global__ void __launch_bounds__(kRowChunkThreads) nn_kernel(const RowChunkArgs<T> args) {
  for_each_row_chunk(args, [&](int row, int chunk) {
    if (args.chunked)
      nn_row_chunk<T, Rank, kChunk<T>>(args, row, chunk);
    else
      nn_row_chunk<T, Rank, 1>(args, row, chunk);
  });
}

}  // namespace

void launch_nn(const Problem& p, const TensorRef& w, const TensorRef& x, const TensorRef& out,
               void* stream) {
  visit_type_and_rank(p, [&](auto t, auto rank) {
    using T = decltype(t);
    launch_rows(nn_kernel<T, decltype(rank)::value>, row_chunk_args<T>(p, w, x, out), stream);
  });
}

}  // namespace gna::unfused
