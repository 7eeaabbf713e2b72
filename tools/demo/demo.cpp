// gna-demo: the built-in example. Runs 2-D neighborhood attention (a 48x48 image, 4 heads,
// head dim 64, window 7x7) on the best available backend (a CUDA GPU when present, the CPU
// reference otherwise), checks the result against the CPU reference and prints the timing.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gna/gna.hpp"
#include "gna/reference/reference.hpp"

#ifdef GNA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

constexpr int kX = 48, kY = 48, kHeads = 4, kDim = 64, kWindow = 7;

gna::AttentionParams example_params() {
  gna::AttentionParams p;
  p.rank = 2;
  p.window[0] = p.window[1] = kWindow;
  return p;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// bf16 bits of a float, round to nearest even (inputs are finite).
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Data {
  std::vector<float> q, k, v;
};

double max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, mag = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff = std::max(diff, double(std::abs(got[i] - want[i])));
    mag = std::max(mag, double(std::abs(want[i])));
  }
  return diff / mag;
}

std::vector<float> run_cpu(const Data& d, double* secs) {
  const int64_t n = int64_t{kX} * kY * kHeads * kDim;
  std::vector<float> out(n, NAN);
  auto q = d.q, k = d.k, v = d.v;
  gna::AttentionTensors in{gna::contiguous_tensor(q.data(), gna::DType::f32, {1, kX, kY, kHeads, kDim}),
                           gna::contiguous_tensor(k.data(), gna::DType::f32, {1, kX, kY, kHeads, kDim}),
                           gna::contiguous_tensor(v.data(), gna::DType::f32, {1, kX, kY, kHeads, kDim})};
  gna::TensorRef o = gna::contiguous_tensor(out.data(), gna::DType::f32, {1, kX, kY, kHeads, kDim});
  const auto t0 = std::chrono::steady_clock::now();
  gna::attention_forward(example_params(), in, o, nullptr);
  *secs = seconds_since(t0);
  return out;
}

#ifdef GNA_HAVE_CUDA
bool gpu_present() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// Runs the example in bf16 on the GPU; returns false (with a reason) if no backend can.
bool run_gpu(const Data& d, std::vector<float>* out, std::string* backend, double* ms) {
  const int64_t n = int64_t{kX} * kY * kHeads * kDim;
  std::vector<uint16_t> hq(n), hk(n), hv(n), ho(n);
  for (int64_t i = 0; i < n; ++i) {
    hq[i] = to_bf16(d.q[i]);
    hk[i] = to_bf16(d.k[i]);
    hv[i] = to_bf16(d.v[i]);
  }
  void *dq, *dk, *dv, *dout;
  for (void** p : {&dq, &dk, &dv, &dout})
    if (cudaMalloc(p, n * 2) != cudaSuccess) return false;
  cudaMemcpy(dq, hq.data(), n * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, hk.data(), n * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, hv.data(), n * 2, cudaMemcpyHostToDevice);
  cudaMemset(dout, 0xff, n * 2);  // NaN poison
  const gna::DType bf = gna::DType::bf16;
  gna::AttentionTensors in{gna::contiguous_tensor(dq, bf, {1, kX, kY, kHeads, kDim}, 0),
                           gna::contiguous_tensor(dk, bf, {1, kX, kY, kHeads, kDim}, 0),
                           gna::contiguous_tensor(dv, bf, {1, kX, kY, kHeads, kDim}, 0)};
  gna::TensorRef o = gna::contiguous_tensor(dout, bf, {1, kX, kY, kHeads, kDim}, 0);
  bool ok = true;
  try {
    *backend = gna::select_forward_backend(example_params(), in);
    gna::attention_forward(example_params(), in, o, nullptr);  // warm-up
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0);
    const int reps = 20;
    for (int r = 0; r < reps; ++r) gna::attention_forward(example_params(), in, o, nullptr);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float total = 0;
    cudaEventElapsedTime(&total, e0, e1);
    *ms = total / reps;
    cudaMemcpy(ho.data(), dout, n * 2, cudaMemcpyDeviceToHost);
    out->resize(n);
    for (int64_t i = 0; i < n; ++i) (*out)[i] = from_bf16(ho[i]);
  } catch (const gna::Error& e) {
    std::printf("GPU present, but no GPU backend ran the example: %s\n", e.what());
    ok = false;
  }
  for (void* p : {dq, dk, dv, dout}) cudaFree(p);
  return ok;
}
#endif

}  // namespace

int main() {
  std::printf("gna demo: 2-D neighborhood attention, image %dx%d, %d heads, head dim %d, window %dx%d\n",
              kX, kY, kHeads, kDim, kWindow, kWindow);
  std::printf("backends built in:");
  for (const auto& b : gna::backend_names()) std::printf(" %s", b.c_str());
  std::printf("\n");
  const int64_t n = int64_t{kX} * kY * kHeads * kDim;
  Data d{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> dist(0.f, 1.f);
  for (auto* t : {&d.q, &d.k, &d.v})
    for (auto& x : *t) x = dist(rng);

  double cpu_secs = 0;
  // Round the inputs to bf16 first, so the CPU result is the exact answer for the GPU's inputs.
  for (auto* t : {&d.q, &d.k, &d.v})
    for (auto& x : *t) x = from_bf16(to_bf16(x));
  const std::vector<float> reference = run_cpu(d, &cpu_secs);
  const double pairs = double(kX) * kY * kHeads * kWindow * kWindow;
  std::printf("CPU reference: %.1f ms (%.2f GFLOP/s effective)\n", cpu_secs * 1e3,
              4.0 * pairs * kDim / cpu_secs / 1e9);

#ifdef GNA_HAVE_CUDA
  if (gpu_present()) {
    std::vector<float> gpu;
    std::string backend;
    double ms = 0;
    if (run_gpu(d, &gpu, &backend, &ms)) {
      const double err = max_rel_error(gpu, reference);
      std::printf("GPU backend '%s' (bf16): %.3f ms (%.1f TFLOP/s effective), max relative error vs CPU %.2e\n",
                  backend.c_str(), ms, 4.0 * pairs * kDim / (ms * 1e-3) / 1e12, err);
      if (!(err < 2e-2)) {
        std::printf("FAILED: GPU result differs from the reference\n");
        return 1;
      }
      std::printf("OK\n");
      return 0;
    }
    return 1;
  }
  std::printf("no CUDA GPU found: ran on the CPU\n");
#else
  std::printf("built without CUDA: ran on the CPU\n");
#endif
  // Self-check of the CPU path: a second run must give the same bits.
  double again = 0;
  if (run_cpu(d, &again) != reference) {
    std::printf("FAILED: CPU runs disagree\n");
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
