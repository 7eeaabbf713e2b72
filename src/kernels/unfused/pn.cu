// PN: blocks of query rows (threadIdx.y) with a thread per window slot (threadIdx.x), so that
// the threads of a warp write consecutive weights and read neighbouring key rows; the query row,
// shared by a row's threads, comes from L1. Rows are read in 16-byte chunks when the tensors'
// alignment allows.
#include "kernels/common/cuda_check.hpp"
#include "kernels/unfused/heads_first.cuh"
#include "kernels/unfused/launch.hpp"

#include "gna/core/neighborhood.hpp"

namespace gna::unfused {
namespace {

template <typename T>
struct PnArgs {
  Problem p;
  HeadsFirst<const T> a, b;
  HeadsFirst<T> out;
  const T* rpb;                        // null: no bias
  int64_t rpb_stride[kMaxRank + 1];    // [heads, 2K-1 per axis]
  float empty;                         // value of slots without a key
  int slots;
  bool chunked;                        // a and b readable in 16-byte chunks
  int rows;                            // B * heads * tokens
};

template <typename T, int N>
__device__ __forceinline__ float dot_rows(const T* a, const T* b, int dim) {
  float acc = 0.f;
  for (int c = 0; c < dim; c += N) {
    float fa[N], fb[N];
    load_floats<T, N>(a + c, fa);
    load_floats<T, N>(b + c, fb);
#pragma unroll
    for (int i = 0; i < N; ++i) acc = fmaf(fa[i], fb[i], acc);
  }
  return acc;
}

template <typename T, int Rank>
__global__ void __launch_bounds__(256) pn_kernel(const PnArgs<T> args) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= args.rows) return;
  const Problem& p = args.p;
  int b, h, x[kMaxRank];
  split_row<Rank>(p, row, &b, &h, x);
  AxisWindow w[kMaxRank];
#pragma unroll
  for (int a = 0; a < Rank; ++a) w[a] = axis_window(p.axes[a], x[a]);
  const T* ar = args.a.template row<Rank>(b, h, x);
  T* out = args.out.template row<Rank>(b, h, x);
  for (int slot = threadIdx.x; slot < args.slots; slot += blockDim.x) {
    int s[kMaxRank], y[kMaxRank];
    split_slot(p.axes, Rank, slot, s);
    bool has_key = true;
#pragma unroll
    for (int a = 0; a < Rank; ++a) {
      has_key = has_key && s[a] < w[a].valid;
      y[a] = key_of_slot(p.axes[a], w[a], s[a]);
    }
    if (!has_key) {
      out[slot] = cuda::from_float<T>(args.empty);
      continue;
    }
    const T* br = args.b.template row<Rank>(b, h, y);
    float acc = args.chunked ? dot_rows<T, kChunk<T>>(ar, br, p.dim_qk) : dot_rows<T, 1>(ar, br, p.dim_qk);
    if (args.rpb) {
      int64_t off = h * args.rpb_stride[0];
#pragma unroll
      for (int a = 0; a < Rank; ++a) off += rpb_index(p.axes[a], x[a], y[a]) * args.rpb_stride[1 + a];
      acc += cuda::to_float(args.rpb[off]);
    }
    out[slot] = cuda::from_float<T>(acc);
  }
}

}  // namespace

void launch_pn(const Problem& p, const TensorRef& a, const TensorRef& b, const TensorRef* rpb,
               const TensorRef& out, float empty, void* stream) {
  visit_type_and_rank(p, [&](auto t, auto rank) {
    using T = decltype(t);
    constexpr int R = decltype(rank)::value;
    PnArgs<T> args{};
    args.p = p;
    args.a = heads_first<const T>(a, p.rank);
    args.b = heads_first<const T>(b, p.rank);
    args.out = heads_first<T>(out, p.rank);
    args.rpb = rpb ? static_cast<const T*>(rpb->data) : nullptr;
    if (rpb)
      for (int i = 0; i <= p.rank; ++i) args.rpb_stride[i] = rpb->strides[i];
    args.empty = empty;
    args.slots = window_slots(p.axes, p.rank);
    args.chunked = chunk_aligned(a) && chunk_aligned(b);
    args.rows = checked_rows(p);
    if (args.rows == 0) return;
    const RowBlocks g = row_blocks(args.rows, args.slots, 256);
    pn_kernel<T, R><<<g.grid, g.block, 0, static_cast<cudaStream_t>(stream)>>>(args);
    GNA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace gna::unfused
