// Times the Hopper forward kernel on the docs/rule.md section 9 cases (or one case given on the
// command line) and prints one JSON object per case: median milliseconds over the repetitions,
// effective TFLOP/s (attended pairs only, 4 * B * H * N * keys_per_query * D), the tiles used and
// the tile-wise bound of those tiles (dense KV tiles / KV tiles of the worst Q tile).
//   hopper_bench [--case NAME] [--reps N] [--schedule S] [--list]
// S: auto (default), grid (one CTA per item), persistent, persistent-static (round robin),
// persistent-plain (dynamic, plain order).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_support/bench_support.cuh"
#include "api/backend.hpp"
#include "gna/attention_params.hpp"
#include "kernels/hopper/forward_launch.hpp"

namespace {

using gna::bench::Case;

// window == extent on every axis is dense attention.
const Case kCases[] = {
    {"hunyuan_dense", 3, {30, 48, 80}, {30, 48, 80}, {1, 1, 1}, 1, 24, 128},
    {"hunyuan_18x24x24_s16x8x8", 3, {30, 48, 80}, {18, 24, 24}, {16, 8, 8}, 1, 24, 128},
    {"hunyuan_18x24x24_s1", 3, {30, 48, 80}, {18, 24, 24}, {1, 1, 1}, 1, 24, 128},
    {"hunyuan_30x40x40_s1", 3, {30, 48, 80}, {30, 40, 40}, {1, 1, 1}, 1, 24, 128},
    {"flux4k_80x80_s16", 2, {256, 256, 1}, {80, 80, 1}, {16, 16, 1}, 1, 24, 128},
    {"flux4k_80x80_s1", 2, {256, 256, 1}, {80, 80, 1}, {1, 1, 1}, 1, 24, 128},
    {"hunyuan_dense_d64", 3, {30, 48, 80}, {30, 48, 80}, {1, 1, 1}, 1, 24, 64},
    {"hunyuan_dense_d256", 3, {30, 48, 80}, {30, 48, 80}, {1, 1, 1}, 1, 24, 256},
    {"nat_56x56_7x7_b128_d32", 2, {56, 56, 1}, {7, 7, 1}, {1, 1, 1}, 128, 2, 32},
};

#define CHECK(x) GNA_BENCH_CHECK(x)

void run_case(const Case& c, int reps_hint, const gna::ForwardSchedule& schedule) {
  using namespace gna;
  using namespace gna::bench;
  const Backend& be = backend_named("hopper");
  const int64_t tokens = tokens_of(c);
  const size_t n = static_cast<size_t>(c.batch) * tokens * c.heads * c.dim;
  uint16_t *q, *k, *v, *o;
  CHECK(cudaMalloc(&q, n * 2));
  CHECK(cudaMalloc(&k, n * 2));
  CHECK(cudaMalloc(&v, n * 2));
  CHECK(cudaMalloc(&o, n * 2));
  fill_bf16<<<1024, 256>>>(q, n, 1);
  fill_bf16<<<1024, 256>>>(k, n, 2);
  fill_bf16<<<1024, 256>>>(v, n, 3);
  AttentionTensors ts;
  ts.q = heads_last(c, q, DType::bf16, true);
  ts.k = heads_last(c, k, DType::bf16, true);
  ts.v = heads_last(c, v, DType::bf16, true);
  ForwardCall call;
  call.problem = make_problem(params_of(c), ts);
  call.in = ts;
  call.out = heads_last(c, o, DType::bf16, true);
  call.options.schedule = schedule;
  std::string why;
  if (!be.supports_forward(call, &why)) {
    std::printf("{\"case\": \"%s\", \"error\": \"%s\"}\n", c.name, why.c_str());
    return;
  }
  const Timing timing = time_ms([&] { be.forward(call); }, reps_hint, 200);
  const double ms = timing.median_ms;
  const int reps = timing.reps;
  const double kpq = mean_keys_per_query(call.problem);
  const double flops = 4.0 * c.batch * c.heads * static_cast<double>(tokens) * kpq * c.dim;
  const hopper::TileChoice t = hopper::choose_tiles(call.problem, call.options);
  std::printf(
      "{\"case\": \"%s\", \"ms\": %.4f, \"min_ms\": %.4f, \"reps\": %d, \"tflops\": %.1f, "
      "\"keys_per_query\": %.1f, \"flop_bound\": %.3f, \"q_tile\": [%d, %d, %d], "
      "\"kv_tile\": [%d, %d, %d], \"dense_kv_tiles\": %.0f, \"max_kv_tiles\": %.0f, "
      "\"mean_kv_tiles\": %.2f, \"full_fraction\": %.3f, \"tile_bound\": %.3f}\n",
      c.name, ms, timing.min_ms, reps, flops / ms / 1e9, kpq, tokens / kpq, t.q.size[0],
      t.q.size[1], t.q.size[2], t.kv.size[0], t.kv.size[1], t.kv.size[2], t.dense_kv_tiles,
      t.max_kv_per_q, t.visited_pairs / t.q_tiles,
      t.full_pairs / std::max(1.0, t.visited_pairs), t.dense_kv_tiles / t.max_kv_per_q);
  std::fflush(stdout);
  cudaFree(q);
  cudaFree(k);
  cudaFree(v);
  cudaFree(o);
}

}  // namespace

bool parse_schedule(const char* name, gna::ForwardSchedule* s) {
  using gna::ForwardSchedule;
  *s = ForwardSchedule{};
  if (!std::strcmp(name, "auto")) return true;
  if (!std::strcmp(name, "grid")) {
    s->kind = ForwardSchedule::one_cta_per_item;
    return true;
  }
  s->kind = ForwardSchedule::persistent;
  if (!std::strcmp(name, "persistent")) return true;
  if (!std::strcmp(name, "persistent-static")) {
    s->dynamic = false;
    return true;
  }
  if (!std::strcmp(name, "persistent-plain")) {
    s->longest_first = false;
    return true;
  }
  return false;
}

int main(int argc, char** argv) {
  const char* only = nullptr;
  int reps = 0;
  gna::ForwardSchedule schedule;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--case") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--schedule") && i + 1 < argc) {
      if (!parse_schedule(argv[++i], &schedule)) {
        std::fprintf(stderr, "unknown schedule %s\n", argv[i]);
        return 2;
      }
    }
    else if (!std::strcmp(argv[i], "--list")) {
      for (const Case& c : kCases) std::printf("%s\n", c.name);
      return 0;
    }
  }
  for (const Case& c : kCases)
    if (!only || !std::strcmp(only, c.name)) run_case(c, reps, schedule);
  return 0;
}
