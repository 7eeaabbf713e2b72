// gna-hopper-fp8-bench: kernel-only timings of the Hopper forward with e4m3 operands (the FP8
// scheme) beside the bf16 kernel on the same case, in one process: the hopper backend is called
// directly, the FP8 operands (e4m3 Q, K, V, their scales and lse_bias) made up front, so the
// FP8 row is the kernel alone, without quantization.
//
//   gna-hopper-fp8-bench [--cases 'a,b'] [--reps N]
//
// Cases are the benchmark case table's (gna/sim/cases.hpp; default: the video and image cases
// of issue 33). Prints per case and dtype the median ms, effective TFLOP/s (attended pairs, as
// gna-kernel-bench counts them) and the FP8 speedup over bf16.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "bench_support/bench_support.cuh"
#include "gna/attention_params.hpp"
#include "gna/core/error.hpp"
#include "gna/core/fp8.hpp"
#include "gna/sim/cases.hpp"

namespace gna {
namespace {

#define CHECK(x) GNA_BENCH_CHECK(x)

__global__ void fill_bytes(uint8_t* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t z = static_cast<uint32_t>(i) * 2654435761u + seed;
    z ^= z >> 15;
    z *= 2246822519u;
    z ^= z >> 13;
    // Finite e4m3 codes of magnitude below 448 (0x7e), random sign.
    x[i] = static_cast<uint8_t>((z % 0x7e) | (z & 0x80));
  }
}
__global__ void fill_value(float* x, int64_t n, float v) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = v;
}

struct Buffer {
  void* ptr = nullptr;
  explicit Buffer(int64_t bytes) { CHECK(cudaMalloc(&ptr, bytes)); }
  ~Buffer() { cudaFree(ptr); }
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

const Backend* hopper_backend() {
  for (const Backend& b : registered_backends())
    if (b.name == "hopper") return &b;
  return nullptr;
}

double median_ms(const std::function<void()>& f, int reps) {
  for (int i = 0; i < 3; ++i) f();  // warm-up
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) t.push_back(bench::event_ms(a, b, f));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int run(int argc, char** argv) {
  std::string cases_arg =
      "hunyuan 18x24x24 NA,hunyuan 18x24x24 s16x8x8,hunyuan dense,hunyuan dense d64,"
      "flux4k 80x80 NA,flux4k 80x80 s16x16,wan 15x27x48,cosmos 16x24x16";
  int reps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--cases" && i + 1 < argc)
      cases_arg = argv[++i];
    else if (a == "--reps" && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: gna-hopper-fp8-bench [--cases 'a,b'] [--reps N]\n");
      return 2;
    }
  }
  const Backend* be = hopper_backend();
  int devices = 0;
  if (!be || cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gna-hopper-fp8-bench: no CUDA device or no hopper backend\n");
    return 0;
  }
  std::printf("%-28s %-6s %10s %10s %8s\n", "case", "dtype", "ms", "TFLOP/s", "vs bf16");
  for (const std::string& name : split(cases_arg)) {
    const sim::BenchCase* c = sim::find_bench_case(name);
    if (!c) {
      std::fprintf(stderr, "gna-hopper-fp8-bench: no case '%s'\n", name.c_str());
      return 2;
    }
    AttentionParams params;
    params.rank = c->rank;
    std::vector<int64_t> shape{c->batch};
    for (int a = 0; a < c->rank; ++a) {
      params.window[a] = c->window[a];
      params.stride[a] = c->stride[a];
      params.dilation[a] = c->dilation[a];
      params.causal[a] = c->causal[a];
      shape.push_back(c->extent[a]);
    }
    shape.push_back(c->heads);
    std::vector<int64_t> row_shape = shape;  // [B, spatial.., H]
    shape.push_back(c->head_dim);
    int64_t rows = 1;
    for (int64_t s : row_shape) rows *= s;
    const int64_t elems = rows * c->head_dim;
    const int rank = static_cast<int>(shape.size());
    Buffer q(elems * 2), k(elems * 2), v(elems * 2), o(elems * 2), lse(rows * 4);
    Buffer q8(elems), k8(elems), v8(elems), qs(rows * 4), ks(rows * 4), lb(rows * 4),
        vs(int64_t(c->batch) * c->heads * c->head_dim * 4);
    for (Buffer* b : {&q, &k, &v})
      fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(b->ptr), elems * 2, 7);
    for (Buffer* b : {&q8, &k8, &v8})
      fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(b->ptr), elems, 9);
    fill_value<<<1024, 256>>>(static_cast<float*>(qs.ptr), rows, 1e-3f);
    fill_value<<<1024, 256>>>(static_cast<float*>(ks.ptr), rows, 1e-3f);
    fill_value<<<1024, 256>>>(static_cast<float*>(lb.ptr), rows, 0.f);
    fill_value<<<1024, 256>>>(static_cast<float*>(vs.ptr),
                              int64_t(c->batch) * c->heads * c->head_dim, 1.f / kE4m3Max);
    CHECK(cudaDeviceSynchronize());
    const DType bf16 = DType::bf16;
    AttentionTensors in{contiguous_tensor(q.ptr, bf16, shape.data(), rank, 0),
                        contiguous_tensor(k.ptr, bf16, shape.data(), rank, 0),
                        contiguous_tensor(v.ptr, bf16, shape.data(), rank, 0)};
    ForwardCall call;
    call.problem = make_problem(params, in);
    call.in = in;
    call.out = contiguous_tensor(o.ptr, bf16, shape.data(), rank, 0);
    TensorRef lse_t = contiguous_tensor(lse.ptr, DType::f32, row_shape.data(), rank - 1, 0);
    call.lse = &lse_t;
    Fp8Operands f;
    f.q8 = contiguous_tensor(q8.ptr, DType::e4m3, shape.data(), rank, 0);
    f.k8 = contiguous_tensor(k8.ptr, DType::e4m3, shape.data(), rank, 0);
    f.v8 = contiguous_tensor(v8.ptr, DType::e4m3, shape.data(), rank, 0);
    f.q_scale = contiguous_tensor(qs.ptr, DType::f32, row_shape.data(), rank - 1, 0);
    f.k_scale = contiguous_tensor(ks.ptr, DType::f32, row_shape.data(), rank - 1, 0);
    f.lse_bias = contiguous_tensor(lb.ptr, DType::f32, row_shape.data(), rank - 1, 0);
    f.v_scale = contiguous_tensor(vs.ptr, DType::f32, {c->batch, c->heads, c->head_dim}, 0);
    ForwardCall fp8_call = call;
    fp8_call.fp8 = &f;
    const Problem& p = call.problem;
    const double flops =
        4.0 * p.batch * p.heads_q * double(p.tokens()) * mean_keys_per_query(p) * c->head_dim;
    double bf16_ms = 0;
    for (const ForwardCall* fc : {&call, &fp8_call}) {
      std::string why;
      const char* dt = fc->fp8 ? "e4m3" : "bf16";
      if (!be->supports_forward(*fc, &why)) {
        std::printf("%-28s %-6s unsupported: %s\n", name.c_str(), dt, why.c_str());
        continue;
      }
      const double ms = median_ms([&] { be->forward(*fc); }, reps);
      CHECK(cudaDeviceSynchronize());
      if (!fc->fp8) bf16_ms = ms;
      std::printf(
          "%-28s %-6s %10.3f %10.1f %8s\n", name.c_str(), dt, ms, flops / ms / 1e9,
          fc->fp8 && bf16_ms > 0 ? (std::to_string(bf16_ms / ms).substr(0, 5) + "x").c_str() : "");
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace gna

int main(int argc, char** argv) {
  try {
    return gna::run(argc, argv);
  } catch (const gna::Error& e) {
    std::fprintf(stderr, "gna-hopper-fp8-bench: %s\n", e.what());
    return 1;
  }
}
