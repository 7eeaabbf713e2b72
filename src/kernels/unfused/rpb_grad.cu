// Bias gradient without atomics, in a fixed order (deterministic): each block sums, for one head
// and one chunk of (batch, query) rows, every bias entry's weight gradients into a partial sum;
// a second kernel adds the chunks' partial sums in chunk order. An entry's slot in a row follows
// from the row's window start: slot = (key' - query') + (query' - start) per axis.
#include "kernels/common/scratch.hpp"
#include "kernels/unfused/launch.hpp"
#include "kernels/unfused/row_chunks.cuh"

#include "gna/core/neighborhood.hpp"

namespace gna::unfused {
namespace {

constexpr int kRowsPerChunk = 256;
constexpr int kThreads = 256;

template <typename T>
struct PartialArgs {
  Problem p;
  HeadsFirst<const T> g;  // d_attn
  float* partial;         // [chunks, heads, entries]
  int entries;            // prod(2K-1)
  int64_t rows_per_head;  // batch * tokens
};

template <typename T, int Rank>
__global__ void __launch_bounds__(kThreads) rpb_partial_kernel(const PartialArgs<T> args) {
  __shared__ int64_t row_offset[kRowsPerChunk];   // the row's offset in d_attn
  __shared__ int shift[kRowsPerChunk][kMaxRank];  // query' - window start, per axis
  __shared__ int valid[kRowsPerChunk][kMaxRank];  // slots holding keys, per axis
  const Problem& p = args.p;
  const int h = blockIdx.y;
  const int64_t first = int64_t(blockIdx.x) * kRowsPerChunk;
  const int rows = static_cast<int>(min(int64_t{kRowsPerChunk}, args.rows_per_head - first));
  const int64_t tokens = p.tokens();
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    int64_t t = (first + r) % tokens;
    const int b = static_cast<int>((first + r) / tokens);
    int x[kMaxRank];
#pragma unroll
    for (int a = Rank - 1; a >= 0; --a) {
      x[a] = static_cast<int>(t % p.axes[a].extent);
      t /= p.axes[a].extent;
    }
    row_offset[r] = args.g.template row<Rank>(b, h, x) - args.g.data;
#pragma unroll
    for (int a = 0; a < Rank; ++a) {
      const AxisWindow w = axis_window(p.axes[a], x[a]);
      shift[r][a] = index_in_group(p.axes[a], x[a]) - w.start;
      valid[r][a] = w.valid;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < args.entries; e += blockDim.x) {
    int rel[kMaxRank];  // key' - query' of this entry, per axis
    int rest = e;
#pragma unroll
    for (int a = Rank - 1; a >= 0; --a) {
      rel[a] = rest % rpb_extent(p.axes[a]) - (p.axes[a].window - 1);
      rest /= rpb_extent(p.axes[a]);
    }
    float acc = 0.f;
    for (int r = 0; r < rows; ++r) {
      int slot = 0;
      bool has_key = true;
#pragma unroll
      for (int a = 0; a < Rank; ++a) {
        const int s = rel[a] + shift[r][a];
        has_key = has_key && s >= 0 && s < valid[r][a];
        slot = slot * p.axes[a].window + s;
      }
      if (has_key) acc += cuda::to_float(args.g.data[row_offset[r] + slot]);
    }
    args.partial[(int64_t(blockIdx.x) * p.heads_q + h) * args.entries + e] = acc;
  }
}

template <typename T>
struct SumArgs {
  const float* partial;
  int chunks, heads, entries, rank;
  int extent[kMaxRank];          // 2K-1 per axis
  T* d_rpb;
  int64_t stride[kMaxRank + 1];  // d_rpb's strides
};

template <typename T>
__global__ void __launch_bounds__(kThreads) rpb_sum_kernel(const SumArgs<T> args) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= args.heads * args.entries) return;
  const int h = idx / args.entries, e = idx % args.entries;
  float acc = 0.f;
  for (int c = 0; c < args.chunks; ++c) acc += args.partial[(int64_t(c) * args.heads + h) * args.entries + e];
  int64_t off = h * args.stride[0];
  int rest = e;
  for (int a = args.rank - 1; a >= 0; --a) {
    off += (rest % args.extent[a]) * args.stride[1 + a];
    rest /= args.extent[a];
  }
  args.d_rpb[off] = cuda::from_float<T>(acc);
}

}  // namespace

void launch_rpb_grad(const Problem& p, const TensorRef& d_attn, const TensorRef& d_rpb,
                     void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  int entries = 1;
  for (int a = 0; a < p.rank; ++a) entries *= rpb_extent(p.axes[a]);
  const int64_t rows_per_head = int64_t{p.batch} * p.tokens();
  const int chunks = static_cast<int>((rows_per_head + kRowsPerChunk - 1) / kRowsPerChunk);
  float* partial = cuda::scratch_alloc<float>(size_t(chunks) * p.heads_q * entries, stream);
  visit_type_and_rank(p, [&](auto t, auto rank) {
    using T = decltype(t);
    PartialArgs<T> args{p, heads_first<const T>(d_attn, p.rank), partial, entries, rows_per_head};
    rpb_partial_kernel<T, decltype(rank)::value>
        <<<dim3(chunks, p.heads_q), kThreads, 0, s>>>(args);
    GNA_CUDA_CHECK_LAUNCH();
    SumArgs<T> sum{partial, chunks, p.heads_q, entries, p.rank, {1, 1, 1},
                   static_cast<T*>(d_rpb.data), {0, 0, 0, 0}};
    for (int a = 0; a < p.rank; ++a) sum.extent[a] = rpb_extent(p.axes[a]);
    for (int i = 0; i <= p.rank; ++i) sum.stride[i] = d_rpb.strides[i];
    const int blocks = (p.heads_q * entries + kThreads - 1) / kThreads;
    rpb_sum_kernel<T><<<blocks, kThreads, 0, s>>>(sum);
    GNA_CUDA_CHECK_LAUNCH();
  });
  cuda::scratch_free(partial, stream);
}

}  // namespace gna::unfused
