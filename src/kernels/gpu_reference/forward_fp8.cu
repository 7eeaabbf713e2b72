// GPU reference of the FP8 forward (docs/fp8.md): one warp per (batch, query token, query
// head), the scheme's arithmetic key by key: scores from the e4m3 Q and K rows and their
// scales, P rounded to e4m3 at 448 times its weight, V in e4m3 with its per-channel scale
// applied at the end. Two walks over the keys: the row's maximum first, then the weights
// against it, as the CPU reference emulates the scheme (a fused kernel's running maximum rounds
// P against smaller maxima; its tests allow for that). Any GPU (the conversions are the
// core's); the oracle of the fast FP8 kernels.
#include <cmath>

#include "gna/core/fp8.hpp"
#include "kernels/common/cuda_check.hpp"
#include "kernels/common/element.cuh"
#include "kernels/common/token_tensor.cuh"
#include "kernels/gpu_reference/gpu_reference.hpp"
#include "kernels/gpu_reference/rows.cuh"
#include "kernels/gpu_reference/walk.cuh"

namespace gna::gpu_reference {
namespace {

constexpr int kPerLane = kMaxHeadDim / 32;

template <typename T>
struct Fp8Args {
  Problem p;
  float scale;
  cuda::TokenTensor<const uint8_t> q8, k8, v8, add_k8, add_v8;
  cuda::TokenTensor<const float> q_scale, k_scale, add_k_scale, lse_bias;
  const float* v_scale;
  int64_t v_scale_batch, v_scale_head;
  bool has_lse_bias;
  cuda::TokenTensor<T> o;
  cuda::TokenTensor<float> lse;
  bool write_lse;
};

struct Fp8Row {
  float q[kPerLane];
  float acc[kPerLane];
  float m = -INFINITY, l = 0.f;

  __device__ float score(const Problem& p, float row_scale, const uint8_t* key, float k_scale,
                         int lane) const {
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < p.dim_qk) dot += q[i] * e4m3_to_float(key[d]);
    }
    return row_scale * k_scale * warp_sum(dot);
  }
  // First walk: the maximum.
  __device__ void find_max(const Problem& p, float row_scale, const uint8_t* key, float k_scale,
                           const uint8_t*, int lane) {
    m = fmaxf(m, score(p, row_scale, key, k_scale, lane));
  }
  // Second walk: the weights against it.
  __device__ void accumulate(const Problem& p, float row_scale, const uint8_t* key, float k_scale,
                             const uint8_t* value, int lane) {
    const float weight = expf(score(p, row_scale, key, k_scale, lane) - m);
    const float p8 = e4m3_to_float(e4m3_probability(weight));
    l += weight;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < p.dim_v) acc[i] += p8 * e4m3_to_float(value[d]);
    }
  }
};

template <typename T>
__global__ void forward_fp8_kernel(Fp8Args<T> args, int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int64_t row = warp_row();
  if (row >= rows) return;
  const Problem& p = args.p;
  const QueryRow q_row = query_row(p, row);
  const int b = q_row.b, h = q_row.h;
  const int hk = h / (p.heads_q / p.heads_kv);
  int x[kMaxRank];
  token_coordinates(p, q_row.token, x);

  Fp8Row r;
  const uint8_t* q8 = args.q8.at(b, x, p.rank, h);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    r.q[i] = d < p.dim_qk ? e4m3_to_float(q8[d]) : 0.f;
    r.acc[i] = 0.f;
  }
  const float row_scale = args.scale * *args.q_scale.at(b, x, p.rank, h);
  const AxisRanges keys = keys_of_query(p, h, x);
  const int n_keys = keys.count();
  auto walk = [&](auto visit) {
    for (int idx = 0; idx < n_keys; ++idx) {
      int y[kMaxRank];
      keys.coordinates(idx, y);
      visit(args.k8.at(b, y, p.rank, hk), *args.k_scale.at(b, y, p.rank, hk),
            args.v8.at(b, y, p.rank, hk));
    }
    for (int j = 0; j < p.additional_kv; ++j)
      visit(args.add_k8.at(b, &j, 1, hk), *args.add_k_scale.at(b, &j, 1, hk),
            args.add_v8.at(b, &j, 1, hk));
  };
  walk([&](const uint8_t* key, float k_scale, const uint8_t* value) {
    r.find_max(p, row_scale, key, k_scale, value, lane);
  });
  walk([&](const uint8_t* key, float k_scale, const uint8_t* value) {
    r.accumulate(p, row_scale, key, k_scale, value, lane);
  });

  T* orow = args.o.at(b, x, p.rank, h);
  const float* v_scale = args.v_scale + b * args.v_scale_batch + hk * args.v_scale_head;
  const float denominator = kE4m3Max * r.l;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < p.dim_v) orow[d] = cuda::from_float<T>(r.acc[i] * v_scale[d] / denominator);
  }
  if (args.write_lse && lane == 0) {
    const float bias = args.has_lse_bias ? *args.lse_bias.at(b, x, p.rank, h) : 0.f;
    *args.lse.at(b, x, p.rank, h) = r.m + logf(r.l) + bias;
  }
}

}  // namespace

void forward_fp8(const ForwardCall& call) {
  const Problem& p = call.problem;
  const Fp8Operands& in = *call.fp8;
  const bool ok = cuda::visit_element_type(p.dtype, [&](auto zero) {
    using T = decltype(zero);
    Fp8Args<T> args;
    args.p = p;
    args.scale = static_cast<float>(effective_scale(p));
    args.q8 = cuda::token_tensor<const uint8_t>(in.q8, p.rank);
    args.k8 = cuda::token_tensor<const uint8_t>(in.k8, p.rank);
    args.v8 = cuda::token_tensor<const uint8_t>(in.v8, p.rank);
    args.q_scale = cuda::token_tensor<const float>(in.q_scale, p.rank);
    args.k_scale = cuda::token_tensor<const float>(in.k_scale, p.rank);
    if (p.additional_kv > 0) {
      args.add_k8 = cuda::token_tensor<const uint8_t>(in.add_k8, 1);
      args.add_v8 = cuda::token_tensor<const uint8_t>(in.add_v8, 1);
      args.add_k_scale = cuda::token_tensor<const float>(in.add_k_scale, 1);
    }
    args.v_scale = static_cast<const float*>(in.v_scale.data);
    args.v_scale_batch = in.v_scale.strides[0];
    args.v_scale_head = in.v_scale.strides[1];
    args.has_lse_bias = in.has_lse_bias();
    if (args.has_lse_bias) args.lse_bias = cuda::token_tensor<const float>(in.lse_bias, p.rank);
    args.o = cuda::token_tensor<T>(call.out, p.rank);
    args.write_lse = call.lse != nullptr;
    if (call.lse) args.lse = cuda::token_tensor<float>(*call.lse, p.rank);
    const int64_t rows = int64_t(p.batch) * p.tokens() * p.heads_q;
    forward_fp8_kernel<T>
        <<<row_blocks(rows), kRowThreads, 0, static_cast<cudaStream_t>(call.stream)>>>(args, rows);
    GNA_CUDA_CHECK_LAUNCH();
  });
  if (!ok)
    fail(ErrorKind::unsupported, "gpu_reference: FP8 output dtype ", dtype_name(p.dtype),
         " not supported");
}

}  // namespace gna::gpu_reference
