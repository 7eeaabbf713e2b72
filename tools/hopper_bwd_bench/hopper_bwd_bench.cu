// Times the Hopper backward kernel (and forward + backward) on the issue's cases, or one case
// given on the command line, and prints one JSON object per case: median milliseconds of the
// backward and of forward + backward, effective backward TFLOP/s (attended pairs only,
// 2.5 x the forward's 4 * B * H * N * keys_per_query * D), and the tiles used.
//   hopper_bwd_bench [--case NAME] [--reps N] [--deterministic] [--forward BACKEND] [--list]
// --forward picks the backend whose forward produces O and LSE (and is timed in forward +
// backward; default hopper).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_support/bench_support.cuh"
#include "api/backend.hpp"
#include "gna/attention_params.hpp"
#include "kernels/hopper/backward_launch.hpp"

namespace {

using gna::bench::Case;

// window == extent on every axis is dense attention.
const Case kCases[] = {
    {"hunyuan_dense", 3, {30, 48, 80}, {30, 48, 80}, {1, 1, 1}, 1, 24, 128},
    {"hunyuan_18x24x24_s16x8x8", 3, {30, 48, 80}, {18, 24, 24}, {16, 8, 8}, 1, 24, 128},
    {"hunyuan_18x24x24_s1", 3, {30, 48, 80}, {18, 24, 24}, {1, 1, 1}, 1, 24, 128},
    {"flux4k_80x80_s1", 2, {256, 256, 1}, {80, 80, 1}, {1, 1, 1}, 1, 24, 128},
    {"flux4k_80x80_s16", 2, {256, 256, 1}, {80, 80, 1}, {16, 16, 1}, 1, 24, 128},
    {"hunyuan_dense_d64", 3, {30, 48, 80}, {30, 48, 80}, {1, 1, 1}, 1, 24, 64},
    {"probe_1d_dense_8k", 1, {8192, 1, 1}, {8192, 1, 1}, {1, 1, 1}, 1, 4, 128},
};

#define CHECK(x) GNA_BENCH_CHECK(x)

void run_case(const Case& c, int reps_hint, bool deterministic, const char* forward_backend) {
  using namespace gna;
  using namespace gna::bench;
  const Backend& be = backend_named("hopper");
  const Backend& fe = backend_named(forward_backend);
  const int64_t tokens = tokens_of(c);
  const size_t n = static_cast<size_t>(c.batch) * tokens * c.heads * c.dim;
  const size_t rows = static_cast<size_t>(c.batch) * tokens * c.heads;
  uint16_t *q, *k, *v, *o, *d_o, *dq, *dk, *dv;
  float* lse;
  for (uint16_t** b : {&q, &k, &v, &o, &d_o, &dq, &dk, &dv}) CHECK(cudaMalloc(b, n * 2));
  CHECK(cudaMalloc(&lse, rows * 4));
  fill_bf16<<<1024, 256>>>(q, n, 1);
  fill_bf16<<<1024, 256>>>(k, n, 2);
  fill_bf16<<<1024, 256>>>(v, n, 3);
  fill_bf16<<<1024, 256>>>(d_o, n, 4);
  auto shape = [&](void* data, DType t, bool with_dim) { return heads_last(c, data, t, with_dim); };
  AttentionTensors ts;
  ts.q = shape(q, DType::bf16, true);
  ts.k = shape(k, DType::bf16, true);
  ts.v = shape(v, DType::bf16, true);
  TensorRef lse_ref = shape(lse, DType::f32, false);
  ForwardCall fwd;
  fwd.problem = make_problem(params_of(c), ts);
  fwd.in = ts;
  fwd.out = shape(o, DType::bf16, true);
  fwd.lse = &lse_ref;
  BackwardCall bwd;
  bwd.problem = fwd.problem;
  bwd.in = ts;
  bwd.out = fwd.out;
  bwd.lse = lse_ref;
  bwd.d_out = shape(d_o, DType::bf16, true);
  bwd.dq = shape(dq, DType::bf16, true);
  bwd.dk = shape(dk, DType::bf16, true);
  bwd.dv = shape(dv, DType::bf16, true);
  bwd.options.deterministic = deterministic;
  std::string why;
  if (!be.supports_backward(bwd, &why)) {
    std::printf("{\"case\": \"%s\", \"error\": \"%s\"}\n", c.name, why.c_str());
    return;
  }
  std::fprintf(stderr, "%s forward:\n", c.name);
  const auto f = time_ms([&] { fe.forward(fwd); }, 1, 100);
  std::fprintf(stderr, "%s backward:\n", c.name);
  const auto b = time_ms([&] { be.backward(bwd); }, reps_hint, 100);
  const auto fb = time_ms(
      [&] {
        fe.forward(fwd);
        be.backward(bwd);
      },
      reps_hint, 100);
  const double kpq = mean_keys_per_query(bwd.problem);
  const double flops = 2.5 * 4.0 * c.batch * c.heads * static_cast<double>(tokens) * kpq * c.dim;
  const hopper::BwdTiles t = hopper::choose_backward_tiles(bwd.problem, bwd.options);
  std::printf(
      "{\"case\": \"%s\", \"forward\": \"%s\", \"deterministic\": %d, \"bwd_ms\": %.4f, \"bwd_min_ms\": %.4f, "
      "\"fwd_bwd_ms\": %.4f, \"fwd_ms\": %.4f, \"tflops\": %.1f, \"keys_per_query\": %.1f, \"flop_bound\": %.3f, "
      "\"q_tile\": [%d, %d, %d], \"kv_tile\": [%d, %d, %d], \"visited_pairs\": %.0f, "
      "\"full_fraction\": %.3f}\n",
      c.name, forward_backend, deterministic ? 1 : 0, b.median_ms, b.min_ms, fb.median_ms, f.median_ms, flops / b.median_ms / 1e9, kpq,
      tokens / kpq, t.q.size[0], t.q.size[1], t.q.size[2], t.kv.size[0], t.kv.size[1],
      t.kv.size[2], t.visited_pairs, t.full_pairs / std::max(1.0, t.visited_pairs));
  std::fflush(stdout);
  for (void* p : {(void*)q, (void*)k, (void*)v, (void*)o, (void*)d_o, (void*)dq, (void*)dk,
                  (void*)dv, (void*)lse})
    cudaFree(p);
}

}  // namespace

int main(int argc, char** argv) {
  const char* only = nullptr;
  int reps = 0;
  bool deterministic = false;
  const char* forward_backend = "hopper";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--case") && i + 1 < argc) {
      only = argv[++i];
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--forward") && i + 1 < argc) {
      forward_backend = argv[++i];
    } else if (!std::strcmp(argv[i], "--deterministic")) {
      deterministic = true;
    } else if (!std::strcmp(argv[i], "--list")) {
      for (const Case& c : kCases) std::printf("%s\n", c.name);
      return 0;
    } else {
      std::fprintf(stderr, "usage: hopper_bwd_bench [--case NAME] [--reps N] [--deterministic] [--forward BACKEND] [--list]\n");
      return 2;
    }
  }
  bool found = false;
  for (const Case& c : kCases) {
    if (only && std::strcmp(only, c.name) != 0) continue;
    found = true;
    run_case(c, reps, deterministic, forward_backend);
  }
  if (!found) {
    std::fprintf(stderr, "unknown case %s\n", only);
    return 2;
  }
  return 0;
}
