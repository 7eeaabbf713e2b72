// Shared by NN and IN: one thread per (output row, chunk of the head dim), where a chunk is 16
// bytes when every tensor read or written along the head dim allows it (one element otherwise).
// Threads of a row are adjacent, so a warp reads and writes whole rows.
#pragma once

#include "kernels/common/cuda_check.hpp"
#include "kernels/unfused/heads_first.cuh"

namespace gna::unfused {

template <typename T>
struct RowChunkArgs {
  Problem p;
  HeadsFirst<const T> w;  // weights [B, heads, *spatial, prod(K)]
  HeadsFirst<const T> x;  // tokens  [B, heads, *spatial, D]
  HeadsFirst<T> out;      // tokens  [B, heads, *spatial, D]
  int chunks_per_row;
  bool chunked;
  int64_t total;          // rows * chunks_per_row
};

template <typename T>
RowChunkArgs<T> row_chunk_args(const Problem& p, const TensorRef& w, const TensorRef& x,
                               const TensorRef& out) {
  RowChunkArgs<T> args{};
  args.p = p;
  args.w = heads_first<const T>(w, p.rank);
  args.x = heads_first<const T>(x, p.rank);
  args.out = heads_first<T>(out, p.rank);
  args.chunked = chunk_aligned(x) && chunk_aligned(out);
  const int dim = p.dim_v;
  args.chunks_per_row = args.chunked ? dim / kChunk<T> : dim;
  args.total = int64_t{p.batch} * p.heads_q * p.tokens() * args.chunks_per_row;
  return args;
}

// Launches kernel<<<..>>>(args) over args.total threads.
template <typename Args, typename Kernel>
void launch_rows(Kernel kernel, const Args& args, void* stream) {
  if (args.total == 0) return;
  const int threads = 128;
  const int64_t blocks = (args.total + threads - 1) / threads;
  kernel<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  GNA_CUDA_CHECK_LAUNCH();
}

}  // namespace gna::unfused
