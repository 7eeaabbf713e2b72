// GPU reference backward. Three kernels, one warp per output row each, no atomics:
//   delta[row] = dO . O                                   (per query row)
//   dQ  = scale * sum_j P_ij (dO_i . V_j - delta_i) K_j      (over the keys of query i)
//   dK_j = scale * sum_i P_ij (dO_i . V_j - delta_i) Q_i,  dV_j = sum_i P_ij dO_i
//        (over the queries attending key j: inverse rule; every query for additional keys)
// with P_ij = exp(scale * Q_i . K_j - LSE_i).
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
struct BackwardArgs {
  Problem p;
  float scale;
  cuda::TokenTensor<const T> q, k, v, o, d_o, add_k, add_v;
  cuda::TokenTensor<const float> lse;
  cuda::TokenTensor<T> dq, dk, dv, d_add_k, d_add_v;
  float* delta;  // [B, tokens, Hq] contiguous
};

template <typename T>
__device__ void load_row(float* dst, const T* src, int dim, int lane) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    dst[i] = d < dim ? cuda::to_float(src[d]) : 0.f;
  }
}

template <typename T>
__device__ float dot_row(const float* a, const T* b, int dim, int lane) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < dim) s += a[i] * cuda::to_float(b[d]);
  }
  return warp_sum(s);
}

template <typename T>
__device__ void store_row(T* dst, const float* src, float factor, int dim, int lane) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < dim) dst[d] = cuda::from_float<T>(src[i] * factor);
  }
}

template <typename T>
__global__ void delta_kernel(BackwardArgs<T> args, int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int64_t row = warp_row();
  if (row >= rows) return;
  const Problem& p = args.p;
  const QueryRow r = query_row(p, row);
  int x[kMaxRank];
  token_coordinates(p, r.token, x);
  float o[kPerLane];
  load_row(o, args.o.at(r.b, x, p.rank, r.h), p.dim_v, lane);
  const float delta = dot_row(o, args.d_o.at(r.b, x, p.rank, r.h), p.dim_v, lane);
  if (lane == 0) args.delta[row] = delta;
}

template <typename T>
__global__ void dq_kernel(BackwardArgs<T> args, int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int64_t row = warp_row();
  if (row >= rows) return;
  const Problem& p = args.p;
  const QueryRow r = query_row(p, row);
  const int hk = r.h / (p.heads_q / p.heads_kv);
  int x[kMaxRank];
  token_coordinates(p, r.token, x);
  float q[kPerLane], d_o[kPerLane], dq[kPerLane];
  load_row(q, args.q.at(r.b, x, p.rank, r.h), p.dim_qk, lane);
  load_row(d_o, args.d_o.at(r.b, x, p.rank, r.h), p.dim_v, lane);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) dq[i] = 0.f;
  const float lse = *args.lse.at(r.b, x, p.rank, r.h);
  const float delta = args.delta[row];

  auto visit = [&](const T* key, const T* value) {
    const float prob = expf(dot_row(q, key, p.dim_qk, lane) * args.scale - lse);
    const float ds = prob * (dot_row(d_o, value, p.dim_v, lane) - delta);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < p.dim_qk) dq[i] += ds * cuda::to_float(key[d]);
    }
  };
  const AxisRanges keys = keys_of_query(p, r.h, x);
  const int n_keys = keys.count();
  for (int idx = 0; idx < n_keys; ++idx) {
    int y[kMaxRank];
    keys.coordinates(idx, y);
    visit(args.k.at(r.b, y, p.rank, hk), args.v.at(r.b, y, p.rank, hk));
  }
  for (int j = 0; j < p.additional_kv; ++j)
    visit(args.add_k.at(r.b, &j, 1, hk), args.add_v.at(r.b, &j, 1, hk));
  store_row(args.dq.at(r.b, x, p.rank, r.h), dq, args.scale, p.dim_qk, lane);
}

// One query row's contribution to a key's dK/dV accumulators.
template <typename T>
__device__ void accumulate_query(const BackwardArgs<T>& args, int b, const int* x, int h,
                                 int64_t row, const float* key, const float* value, float* dk,
                                 float* dv, int lane) {
  const Problem& p = args.p;
  const T* qrow = args.q.at(b, x, p.rank, h);
  const T* dorow = args.d_o.at(b, x, p.rank, h);
  const float lse = *args.lse.at(b, x, p.rank, h);
  float qk = 0.f, dov = 0.f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < p.dim_qk) qk += key[i] * cuda::to_float(qrow[d]);
    if (d < p.dim_v) dov += value[i] * cuda::to_float(dorow[d]);
  }
  const float prob = expf(warp_sum(qk) * args.scale - lse);
  const float ds = prob * (warp_sum(dov) - args.delta[row]);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < p.dim_qk) dk[i] += ds * cuda::to_float(qrow[d]);
    if (d < p.dim_v) dv[i] += prob * cuda::to_float(dorow[d]);
  }
}

// One warp per (batch, key token, KV head) of the layout; additional keys after them.
template <typename T>
__global__ void dkv_kernel(BackwardArgs<T> args, int64_t layout_rows, int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int64_t row = warp_row();
  if (row >= rows) return;
  const Problem& p = args.p;
  const int group_size = p.heads_q / p.heads_kv;
  float key[kPerLane], value[kPerLane], dk[kPerLane], dv[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) dk[i] = dv[i] = 0.f;

  if (row < layout_rows) {
    const int hk = static_cast<int>(row % p.heads_kv);
    const int64_t token = (row / p.heads_kv) % p.tokens();
    const int b = static_cast<int>(row / p.heads_kv / p.tokens());
    int y[kMaxRank];
    token_coordinates(p, token, y);
    load_row(key, args.k.at(b, y, p.rank, hk), p.dim_qk, lane);
    load_row(value, args.v.at(b, y, p.rank, hk), p.dim_v, lane);
    // Each query head of the KV head walks the inverse rule of its own rules (head rules).
    for (int h = hk * group_size; h < (hk + 1) * group_size; ++h) {
      const AxisRanges queries = queries_of_key(p, h, y);
      const int n_queries = queries.count();
      for (int idx = 0; idx < n_queries; ++idx) {
        int x[kMaxRank];
        queries.coordinates(idx, x);
        int64_t qtoken = 0;
        for (int a = 0; a < p.rank; ++a) qtoken = qtoken * p.axes[a].extent + x[a];
        const int64_t qrow = (int64_t(b) * p.tokens() + qtoken) * p.heads_q + h;
        accumulate_query(args, b, x, h, qrow, key, value, dk, dv, lane);
      }
    }
    store_row(args.dk.at(b, y, p.rank, hk), dk, args.scale, p.dim_qk, lane);
    store_row(args.dv.at(b, y, p.rank, hk), dv, 1.f, p.dim_v, lane);
    return;
  }
  const int64_t extra = row - layout_rows;  // [B, additional_kv, Hkv]
  const int hk = static_cast<int>(extra % p.heads_kv);
  const int j = static_cast<int>((extra / p.heads_kv) % p.additional_kv);
  const int b = static_cast<int>(extra / p.heads_kv / p.additional_kv);
  load_row(key, args.add_k.at(b, &j, 1, hk), p.dim_qk, lane);
  load_row(value, args.add_v.at(b, &j, 1, hk), p.dim_v, lane);
  for (int64_t qtoken = 0; qtoken < p.tokens(); ++qtoken) {
    int x[kMaxRank];
    token_coordinates(p, qtoken, x);
    for (int h = hk * group_size; h < (hk + 1) * group_size; ++h) {
      const int64_t qrow = (int64_t(b) * p.tokens() + qtoken) * p.heads_q + h;
      accumulate_query(args, b, x, h, qrow, key, value, dk, dv, lane);
    }
  }
  store_row(args.d_add_k.at(b, &j, 1, hk), dk, args.scale, p.dim_qk, lane);
  store_row(args.d_add_v.at(b, &j, 1, hk), dv, 1.f, p.dim_v, lane);
}

}  // namespace

void backward(const BackwardCall& call) {
  const Problem& p = call.problem;
  if (p.additional_kv > 0 && (!call.d_additional_k || !call.d_additional_v))
    fail_invalid("gpu_reference: additional keys present but their gradients are not given");
  cudaStream_t stream = static_cast<cudaStream_t>(call.stream);
  const int64_t q_rows = int64_t(p.batch) * p.tokens() * p.heads_q;
  float* delta = nullptr;
  GNA_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&delta), q_rows * sizeof(float), stream));
  const bool ok = cuda::visit_element_type(p.dtype, [&](auto zero) {
    using T = decltype(zero);
    BackwardArgs<T> args;
    set_input_views(args, p, call.in);
    args.o = cuda::token_tensor<const T>(call.out, p.rank);
    args.d_o = cuda::token_tensor<const T>(call.d_out, p.rank);
    args.lse = cuda::token_tensor<const float>(call.lse, p.rank);
    args.dq = cuda::token_tensor<T>(call.dq, p.rank);
    args.dk = cuda::token_tensor<T>(call.dk, p.rank);
    args.dv = cuda::token_tensor<T>(call.dv, p.rank);
    if (p.additional_kv > 0) {
      args.d_add_k = cuda::token_tensor<T>(*call.d_additional_k, 1);
      args.d_add_v = cuda::token_tensor<T>(*call.d_additional_v, 1);
    }
    args.delta = delta;
    delta_kernel<T><<<row_blocks(q_rows), kRowThreads, 0, stream>>>(args, q_rows);
    GNA_CUDA_CHECK_LAUNCH();
    dq_kernel<T><<<row_blocks(q_rows), kRowThreads, 0, stream>>>(args, q_rows);
    GNA_CUDA_CHECK_LAUNCH();
    const int64_t layout_rows = int64_t(p.batch) * p.tokens() * p.heads_kv;
    const int64_t kv_rows = layout_rows + int64_t(p.batch) * p.additional_kv * p.heads_kv;
    dkv_kernel<T><<<row_blocks(kv_rows), kRowThreads, 0, stream>>>(args, layout_rows, kv_rows);
    GNA_CUDA_CHECK_LAUNCH();
  });
  GNA_CUDA_CHECK(cudaFreeAsync(delta, stream));
  if (!ok) fail(ErrorKind::unsupported, "gpu_reference: dtype ", dtype_name(p.dtype), " not supported");
}

}  // namespace gna::gpu_reference
