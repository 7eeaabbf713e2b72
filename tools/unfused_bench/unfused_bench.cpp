// Times gna::na_qk (PN), na_av (NN), the inverse-neighborhood pass (IN, as dk of
// na_qk_backward) and the bias gradient on DiNAT-T's attention layers at 224x224 (56x56 ... 7x7
// tokens, 2-16 heads of dim 32, 7x7 window, the dilations DiNAT uses per stage), and prints
// milliseconds and effective bandwidth (bytes each operator must read and write once).
//   gna-unfused-bench [--batch 128] [--dtype f16|bf16|f32] [--iters 20]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "gna/gna.hpp"

namespace {

struct Stage {
  int extent, heads, dilation;
};
constexpr Stage kStages[] = {{56, 2, 1}, {56, 2, 8}, {28, 4, 1}, {28, 4, 4},
                             {14, 8, 1}, {14, 8, 2}, {7, 16, 1}};

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

gna::TensorRef device_tensor(gna::DType t, std::initializer_list<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  void* p = nullptr;
  check(cudaMalloc(&p, n * gna::dtype_size(t)), "cudaMalloc");
  check(cudaMemset(p, 0, n * gna::dtype_size(t)), "cudaMemset");
  return gna::contiguous_tensor(p, t, shape, 0);
}

double time_ms(const std::function<void()>& f, int iters) {
  f();
  check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < iters; ++i) f();
  cudaEventRecord(b);
  check(cudaEventSynchronize(b), "timing");
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms / iters;
}

}  // namespace

int main(int argc, char** argv) {
  int batch = 128, iters = 20;
  std::string dtype = "f16";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--batch")) batch = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dtype")) dtype = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  const gna::DType t = dtype == "f32" ? gna::DType::f32 : dtype == "bf16" ? gna::DType::bf16 : gna::DType::f16;
  const int D = 32, K = 7, S = K * K;
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "device");
  std::printf("gna-unfused-bench on %s, %s, batch %d, head dim %d, window %dx%d\n", prop.name,
              gna::dtype_name(t), batch, D, K, K);
  std::printf("%-22s %9s %9s %9s %9s %9s %9s %9s %9s\n", "stage", "PN ms", "PN GB/s", "NN ms",
              "NN GB/s", "IN ms", "IN GB/s", "rpb ms", "rpbGB/s");
  for (const Stage& s : kStages) {
    const int64_t B = batch, H = s.heads, L = s.extent;
    gna::TensorRef q = device_tensor(t, {B, H, L, L, D}), k = device_tensor(t, {B, H, L, L, D});
    gna::TensorRef attn = device_tensor(t, {B, H, L, L, S}), out = device_tensor(t, {B, H, L, L, D});
    gna::TensorRef rpb = device_tensor(t, {H, 2 * K - 1, 2 * K - 1});
    gna::TensorRef d_rpb = device_tensor(t, {H, 2 * K - 1, 2 * K - 1});
    gna::AttentionParams params;
    params.rank = 2;
    for (int a = 0; a < 2; ++a) {
      params.window[a] = K;
      params.dilation[a] = s.dilation;
    }
    const double e = gna::dtype_size(t);
    const double tokens_bytes = double(B * H * L * L) * D * e, weights_bytes = double(B * H * L * L) * S * e;
    const double pn = time_ms([&] { gna::na_qk(params, q, k, &rpb, attn); }, iters);
    const double nn = time_ms([&] { gna::na_av(params, attn, k, out); }, iters);
    const double in = time_ms([&] { gna::na_qk_backward(params, q, k, attn, nullptr, &out, nullptr); }, iters);
    const double rg = time_ms([&] { gna::na_qk_backward(params, q, k, attn, nullptr, nullptr, &d_rpb); }, iters);
    auto gbs = [](double bytes, double ms) { return bytes / (ms * 1e6); };
    char name[64];
    std::snprintf(name, sizeof name, "%lldx%lld h%lld d%d", (long long)L, (long long)L, (long long)H, s.dilation);
    std::printf("%-22s %9.3f %9.0f %9.3f %9.0f %9.3f %9.0f %9.3f %9.0f\n", name, pn,
                gbs(2 * tokens_bytes + weights_bytes, pn), nn, gbs(2 * tokens_bytes + weights_bytes, nn),
                in, gbs(2 * tokens_bytes + weights_bytes, in), rg, gbs(weights_bytes, rg));
    for (gna::TensorRef* x : {&q, &k, &attn, &out, &rpb, &d_rpb}) cudaFree(x->data);
  }
  return 0;
}
