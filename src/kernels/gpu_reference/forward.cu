// GPU reference forward: one warp per (batch, query token, query head); online softmax over the
// attended keys, then over the additional keys. Lane l owns head-dim elements l, l + 32, ...
#include <cmath>

#include "kernels/common/cuda_check.hpp"
#include "kernels/common/element.cuh"
#include "kernels/common/token_tensor.cuh"
#include "kernels/gpu_reference/gpu_reference.hpp"
#include "kernels/gpu_reference/input_views.cuh"
#include "kernels/gpu_reference/rows.cuh"
#include "kernels/gpu_reference/walk.cuh"

namespace gna::gpu_reference {
namespace {

constexpr int kPerLane = kMaxHeadDim / 32;

template <typename T>
struct ForwardArgs {
  Problem p;
  float scale;
  cuda::TokenTensor<const T> q, k, v, add_k, add_v;
  cuda::TokenTensor<T> o;
  cuda::TokenTensor<float> lse;
  bool write_lse;
};

template <typename T>
struct OnlineRow {
  float q[kPerLane];
  float acc[kPerLane];
  float m = -INFINITY, l = 0.f;

  __device__ void visit(const ForwardArgs<T>& args, const T* key, const T* value, int lane) {
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < args.p.dim_qk) dot += q[i] * cuda::to_float(key[d]);
    }
    const float s = warp_sum(dot) * args.scale;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);  // m == -inf on the first key: 0
    const float w = expf(s - m_new);
    l = l * correction + w;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      const float vd = d < args.p.dim_v ? cuda::to_float(value[d]) : 0.f;
      acc[i] = acc[i] * correction + w * vd;
    }
    m = m_new;
  }
};

template <typename T>
__global__ void forward_kernel(ForwardArgs<T> args, int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int64_t row = warp_row();
  if (row >= rows) return;
  const Problem& p = args.p;
  const QueryRow q_row = query_row(p, row);
  const int b = q_row.b, h = q_row.h;
  const int hk = h / (p.heads_q / p.heads_kv);
  int x[kMaxRank];
  token_coordinates(p, q_row.token, x);

  OnlineRow<T> r;
  const T* qrow = args.q.at(b, x, p.rank, h);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    r.q[i] = d < p.dim_qk ? cuda::to_float(qrow[d]) : 0.f;
    r.acc[i] = 0.f;
  }
  const AxisRanges keys = keys_of_query(p, h, x);
  const int n_keys = keys.count();
  for (int idx = 0; idx < n_keys; ++idx) {
    int y[kMaxRank];
    keys.coordinates(idx, y);
    r.visit(args, args.k.at(b, y, p.rank, hk), args.v.at(b, y, p.rank, hk), lane);
  }
  for (int j = 0; j < p.additional_kv; ++j)
    r.visit(args, args.add_k.at(b, &j, 1, hk), args.add_v.at(b, &j, 1, hk), lane);

  T* orow = args.o.at(b, x, p.rank, h);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < p.dim_v) orow[d] = cuda::from_float<T>(r.acc[i] / r.l);
  }
  if (args.write_lse && lane == 0) *args.lse.at(b, x, p.rank, h) = r.m + logf(r.l);
}

}  // namespace

void forward(const ForwardCall& call) {
  const Problem& p = call.problem;
  const bool ok = cuda::visit_element_type(p.dtype, [&](auto zero) {
    using T = decltype(zero);
    ForwardArgs<T> args;
    set_input_views(args, p, call.in);
    args.o = cuda::token_tensor<T>(call.out, p.rank);
    args.write_lse = call.lse != nullptr;
    if (call.lse) args.lse = cuda::token_tensor<float>(*call.lse, p.rank);
    const int64_t rows = int64_t(p.batch) * p.tokens() * p.heads_q;
    forward_kernel<T><<<row_blocks(rows), kRowThreads, 0, static_cast<cudaStream_t>(call.stream)>>>(
        args, rows);
    GNA_CUDA_CHECK_LAUNCH();
  });
  if (!ok) fail(ErrorKind::unsupported, "gpu_reference: dtype ", dtype_name(p.dtype), " not supported");
}

}  // namespace gna::gpu_reference
