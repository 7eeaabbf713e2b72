// PN: one thread per (query row, window slot), so that the threads of a warp write consecutive
// weights and read neighbouring key rows; the query row, shared by a row's threads, comes from
// L1. Rows are read in 16-byte chunks when the tensors' alignment allows.
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
  int64_t total;                       // rows * slots
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
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= args.total) return;
  const Problem& p = args.p;
  const int slot = static_cast<int>(idx % args.slots);
  int b, h, x[kMaxRank];
  split_row<Rank>(p, idx / args.slots, &b, &h, x);
  int s[kMaxRank], y[kMaxRank];
  split_slot(p.axes, Rank, slot, s);
  bool has_key = true;
#pragma unroll
  for (int a = 0; a < Rank; ++a) {
    const AxisWindow w = axis_window(p.axes[a], x[a]);
    has_key = has_key && s[a] < w.valid;
    y[a] = key_of_slot(p.axes[a], w, s[a]);
  }
  T* out = args.out.template row<Rank>(b, h, x) + slot;
  if (!has_key) {
    *out = cuda::from_float<T>(args.empty);
    return;
  }
  const T* ar = args.a.template row<Rank>(b, h, x);
  const T* br = args.b.template row<Rank>(b, h, y);
  float acc = args.chunked ? dot_rows<T, kChunk<T>>(ar, br, p.dim_qk) : dot_rows<T, 1>(ar, br, p.dim_qk);
  if (args.rpb) {
    int64_t off = h * args.rpb_stride[0];
#pragma unroll
    for (int a = 0; a < Rank; ++a) off += rpb_index(p.axes[a], x[a], y[a]) * args.rpb_stride[1 + a];
    acc += cuda::to_float(args.rpb[off]);
  }
  *out = cuda::from_float<T>(acc);
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
    args.total = int64_t{p.batch} * p.heads_q * p.tokens() * args.slots;
    if (args.total == 0) return;
    const int threads = 256;
    const int64_t blocks = (args.total + threads - 1) / threads;
    pn_kernel<T, R><<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(args);
    GNA_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace gna::unfused
