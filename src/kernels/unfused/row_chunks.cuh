// Shared by NN and IN: blocks of output rows (threadIdx.y) with a thread per chunk of the head
// dim (threadIdx.x), where a chunk is 16 bytes when every tensor read or written along the head
// dim allows it (one element otherwise). Threads of a row are adjacent, so a warp reads and
// writes whole rows.
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
  int rows;               // B * heads * tokens
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
  args.rows = checked_rows(p);
  return args;
}

constexpr int kRowChunkThreads = 128;

// Launches kernel<<<..>>>(args) over blocks of rows.
template <typename Args, typename Kernel>
void launch_rows(Kernel kernel, const Args& args, void* stream) {
  if (args.rows == 0 || args.chunks_per_row == 0) return;
  const RowBlocks g = row_blocks(args.rows, args.chunks_per_row, kRowChunkThreads);
  kernel<<<g.grid, g.block, 0, static_cast<cudaStream_t>(stream)>>>(args);
  GNA_CUDA_CHECK_LAUNCH();
}

// Calls f(row, chunk) for this thread's row and each of its chunks.
template <typename T, typename F>
__device__ __forceinline__ void for_each_row_chunk(const RowChunkArgs<T>& args, F&& f) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= args.rows) return;
  for (int c = threadIdx.x; c < args.chunks_per_row; c += blockDim.x) f(row, c);
}

}  // namespace gna::unfused
