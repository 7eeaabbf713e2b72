// Pieces shared by the kernel benchmarks (tools/hopper_bench, tools/hopper_bwd_bench): the case
// description and its tensors, a CUDA status check that exits, a deterministic bf16 fill in
// [-1, 1), the backend lookup and the event timing (event_ms also in tools/bench).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "api/backend.hpp"
#include "gna/attention_params.hpp"

namespace gna::bench {

// One problem: rank, extents, windows and strides per axis (unused axes 1), batch, heads, head
// dim. window == extent on every axis is dense attention.
struct Case {
  const char* name;
  int rank;
  int extent[3];
  int window[3];
  int stride[3];
  int batch, heads, dim;
};

#define GNA_BENCH_CHECK(x)                                                              \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                     \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

// x[i] = a hash of (i, seed) mapped to [-1, 1), as bf16 bits.
__global__ void fill_bf16(uint16_t* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float u = (h & 0xFFFF) / 65536.f * 2.f - 1.f;
    __nv_bfloat16 b = __float2bfloat16(u);
    x[i] = *reinterpret_cast<uint16_t*>(&b);
  }
}

inline int64_t tokens_of(const Case& c) {
  int64_t tokens = 1;
  for (int a = 0; a < c.rank; ++a) tokens *= c.extent[a];
  return tokens;
}

inline AttentionParams params_of(const Case& c) {
  AttentionParams params;
  params.rank = c.rank;
  for (int a = 0; a < c.rank; ++a) {
    params.window[a] = c.window[a];
    params.stride[a] = c.stride[a];
  }
  return params;
}

// Contiguous heads-last view [B, spatial.., H(, D)] of the case's tokens.
inline TensorRef heads_last(const Case& c, void* data, DType dtype, bool with_dim) {
  TensorRef r;
  r.data = data;
  r.dtype = dtype;
  r.device = 0;
  r.rank = 0;
  r.shape[r.rank++] = c.batch;
  for (int a = 0; a < c.rank; ++a) r.shape[r.rank++] = c.extent[a];
  r.shape[r.rank++] = c.heads;
  if (with_dim) r.shape[r.rank++] = c.dim;
  int64_t stride = 1;
  for (int i = r.rank - 1; i >= 0; --i) {
    r.strides[i] = stride;
    stride *= r.shape[i];
  }
  return r;
}

// The registered backend of that name; exits when there is none.
inline const Backend& backend_named(const char* name) {
  for (const auto& b : registered_backends())
    if (b.name == name) return b;
  std::fprintf(stderr, "no %s backend\n", name);
  std::exit(1);
}

struct Timing {
  double median_ms, min_ms;
  int reps;
};

// Milliseconds of one call of f between events e0 and e1 (recorded around it, then waited for).
inline float event_ms(cudaEvent_t e0, cudaEvent_t e1, const std::function<void()>& f) {
  GNA_BENCH_CHECK(cudaEventRecord(e0));
  f();
  GNA_BENCH_CHECK(cudaEventRecord(e1));
  GNA_BENCH_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  GNA_BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  return ms;
}

// Median and minimum milliseconds of f over reps_hint runs, or (reps_hint 0) about 2 s worth,
// 5 to max_reps; one warm-up call and one timed call first.
inline Timing time_ms(const std::function<void()>& f, int reps_hint, int max_reps) {
  cudaEvent_t e0, e1;
  GNA_BENCH_CHECK(cudaEventCreate(&e0));
  GNA_BENCH_CHECK(cudaEventCreate(&e1));
  auto timed_call = [&] { return event_ms(e0, e1, f); };
  f();
  const float first = timed_call();
  std::fprintf(stderr, "first timed call: %.3f ms\n", first);
  const int reps = reps_hint > 0
                       ? reps_hint
                       : std::max(5, std::min(max_reps, static_cast<int>(2000.f / first)));
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) times.push_back(timed_call());
  GNA_BENCH_CHECK(cudaGetLastError());
  std::sort(times.begin(), times.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return {times[times.size() / 2], times.front(), reps};
}

}  // namespace gna::bench
