// Shared harness of the GPU tests: random valid GNA configurations, host inputs exactly
// representable in fp16 and bf16 (so one CPU reference serves every dtype), device buffers
// poisoned with NaN before each run, and error metrics against the reference.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gna/gna.hpp"
#include "gna/reference/reference.hpp"

namespace gna::testing {

inline bool cuda_device_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define GNA_SKIP_WITHOUT_GPU() \
  if (!::gna::testing::cuda_device_present()) GTEST_SKIP() << "no CUDA device"

#define GNA_CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// Number of random configurations per rank: GNA_TEST_CONFIGS overrides the default (small
// values select the subset used under compute-sanitizer).
inline int configs_per_rank(int fallback) {
  const char* env = std::getenv("GNA_TEST_CONFIGS");
  return env ? std::max(1, std::atoi(env)) : fallback;
}

inline uint64_t test_seed() {
  const char* env = std::getenv("GNA_TEST_SEED");
  return env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
}

struct Config {
  AttentionParams params;
  int extent[kMaxRank] = {1, 1, 1};
  int batch = 1, heads_q = 1, heads_kv = 1, dim_qk = 32, dim_v = 32, additional = 0;
  // Per-batch counts of additional keys (AttentionTensors::additional_kv_counts; empty: none).
  std::vector<int32_t> counts;

  std::string describe() const {
    std::ostringstream os;
    os << "rank " << params.rank << " extent";
    for (int a = 0; a < params.rank; ++a) os << (a ? "x" : " ") << extent[a];
    os << " window";
    for (int a = 0; a < params.rank; ++a) os << (a ? "x" : " ") << params.window[a];
    os << " stride";
    for (int a = 0; a < params.rank; ++a) os << (a ? "x" : " ") << params.stride[a];
    os << " dilation";
    for (int a = 0; a < params.rank; ++a) os << (a ? "x" : " ") << params.dilation[a];
    os << " causal";
    for (int a = 0; a < params.rank; ++a) os << (a ? "x" : " ") << params.causal[a];
    os << " batch " << batch << " heads " << heads_q << "/" << heads_kv << " dims " << dim_qk
       << "/" << dim_v << " additional " << additional;
    if (!counts.empty()) {
      os << " counts";
      for (int32_t n : counts) os << " " << n;
    }
    return os.str();
  }
  int64_t tokens() const {
    int64_t t = 1;
    for (int a = 0; a < params.rank; ++a) t *= extent[a];
    return t;
  }
};

struct ConfigLimits {
  int max_extent[kMaxRank + 1] = {0, 300, 40, 14};  // by rank
  int64_t max_pairs = 150000;                        // tokens * keys per query, per head
  std::vector<std::pair<int, int>> dims = {{32, 32}, {64, 64}, {128, 128}, {64, 128}, {128, 64}};
  int max_additional = 80;
};

inline int uniform(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

inline Config random_config(std::mt19937_64& rng, int rank, const ConfigLimits& lim) {
  Config c;
  c.params.rank = rank;
  int64_t keys = 1, tokens = 1;
  for (int a = 0; a < rank; ++a) {
    const int L = uniform(rng, 2, lim.max_extent[rank]);
    c.extent[a] = L;
    tokens *= L;
  }
  for (int a = 0; a < rank; ++a) {
    const int L = c.extent[a];
    const int d = uniform(rng, 0, 3) == 0 ? uniform(rng, 2, std::max(2, std::min(4, L / 2))) : 1;
    const int max_k = std::max(2, L / d);
    int K = uniform(rng, 0, 4) == 0 ? max_k : uniform(rng, 2, max_k);
    c.params.dilation[a] = K * d <= L ? d : 1;
    c.params.window[a] = K;
    c.params.stride[a] = uniform(rng, 0, 2) == 0 ? 1 : uniform(rng, 1, K);
    c.params.causal[a] = uniform(rng, 0, 3) == 0;
    keys *= K;
  }
  // Keep the CPU reference cheap: shrink windows while tokens * keys is too large.
  while (tokens * keys > lim.max_pairs) {
    int a = uniform(rng, 0, rank - 1);
    if (c.params.window[a] <= 2) continue;
    keys = keys / c.params.window[a] * (c.params.window[a] / 2 + 1);
    c.params.window[a] = std::max(2, c.params.window[a] / 2 + 1);
    c.params.stride[a] = std::min(c.params.stride[a], c.params.window[a]);
  }
  c.batch = uniform(rng, 1, 2);
  c.heads_kv = uniform(rng, 1, 2);
  c.heads_q = c.heads_kv * uniform(rng, 1, 2);
  const auto& dd = lim.dims[uniform(rng, 0, static_cast<int>(lim.dims.size()) - 1)];
  c.dim_qk = dd.first;
  c.dim_v = dd.second;
  c.additional = uniform(rng, 0, 3) == 0 ? uniform(rng, 1, lim.max_additional) : 0;
  return c;
}

// Host values k/64, |k| <= 64: exact in fp16, bf16 and fp32.
inline std::vector<float> random_values(std::mt19937_64& rng, int64_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = uniform(rng, -64, 64) / 64.f;
  return v;
}

inline void to_bits(const std::vector<float>& src, DType t, std::vector<uint8_t>* out) {
  const size_t e = dtype_size(t);
  out->resize(src.size() * e);
  for (size_t i = 0; i < src.size(); ++i) {
    if (t == DType::f32) {
      std::memcpy(out->data() + i * e, &src[i], 4);
    } else if (t == DType::f16) {
      __half h = __float2half(src[i]);
      std::memcpy(out->data() + i * e, &h, 2);
    } else {
      __nv_bfloat16 h = __float2bfloat16(src[i]);
      std::memcpy(out->data() + i * e, &h, 2);
    }
  }
}

inline std::vector<float> from_bits(const std::vector<uint8_t>& bits, DType t) {
  const size_t e = dtype_size(t);
  std::vector<float> v(bits.size() / e);
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::f32) {
      std::memcpy(&v[i], bits.data() + i * e, 4);
    } else if (t == DType::f16) {
      __half h;
      std::memcpy(&h, bits.data() + i * e, 2);
      v[i] = __half2float(h);
    } else {
      __nv_bfloat16 h;
      std::memcpy(&h, bits.data() + i * e, 2);
      v[i] = __bfloat162float(h);
    }
  }
  return v;
}

// A host float32 tensor and its device copy in some dtype.
struct Buffer {
  std::vector<int64_t> shape;
  std::vector<float> host;
  DType dtype = DType::f32;
  void* device = nullptr;

  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (device) cudaFree(device);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }
  size_t bytes() const { return numel() * dtype_size(dtype); }
  void allocate(std::vector<int64_t> s, DType t) {
    shape = std::move(s);
    dtype = t;
    host.assign(numel(), 0.f);
    if (device) cudaFree(device);
    device = nullptr;
    if (cudaMalloc(&device, std::max<size_t>(bytes(), 16)) != cudaSuccess) device = nullptr;
  }
  void upload() {
    std::vector<uint8_t> bits;
    to_bits(host, dtype, &bits);
    cudaMemcpy(device, bits.data(), bits.size(), cudaMemcpyHostToDevice);
  }
  void poison() { cudaMemset(device, 0xFF, bytes()); }  // NaN in every float dtype
  std::vector<float> download() const {
    std::vector<uint8_t> bits(bytes());
    cudaMemcpy(bits.data(), device, bits.size(), cudaMemcpyDeviceToHost);
    return from_bits(bits, dtype);
  }
  TensorRef device_ref() const { return view(device, dtype, 0); }
  TensorRef host_ref() { return view(host.data(), DType::f32, -1); }
  TensorRef view(void* data, DType t, int dev) const {
    return contiguous_tensor(data, t, shape.data(), static_cast<int>(shape.size()), dev);
  }

};

// Int32 values on the host and their device copy (per-batch counts of additional keys).
struct IntBuffer {
  std::vector<int32_t> host;
  void* device = nullptr;

  IntBuffer() = default;
  IntBuffer(const IntBuffer&) = delete;
  IntBuffer& operator=(const IntBuffer&) = delete;
  ~IntBuffer() {
    if (device) cudaFree(device);
  }
  void assign(const std::vector<int32_t>& values) {
    host = values;
    if (device) cudaFree(device);
    device = nullptr;
    if (host.empty()) return;
    if (cudaMalloc(&device, host.size() * sizeof(int32_t)) != cudaSuccess) device = nullptr;
    else cudaMemcpy(device, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice);
  }
  TensorRef ref(bool on_device) {
    if (!on_device) return view(host.data(), -1);
    return device_ref();
  }
  TensorRef device_ref() const { return view(device, 0); }

 private:
  TensorRef view(void* data, int dev) const {
    const int64_t n = static_cast<int64_t>(host.size());
    return contiguous_tensor(data, DType::i32, &n, 1, dev);
  }
};

// Normalized max error max|got - want| / max|want| (NaN in got: infinity).
inline double normalized_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 1e-6;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return err / scale;
}

// Max |got - want| / max(1, |want|) (for LSE).
inline double lse_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::fabs(double(got[i]) - want[i]) / std::max(1.0, std::fabs(double(want[i]))));
  }
  return err;
}

// Device views of the inputs (storage: 5 TensorRefs that outlive the views; additional K and V
// only with `additional`).
inline AttentionTensors device_attention_tensors(const Buffer& q, const Buffer& k, const Buffer& v,
                                                 const Buffer& ak, const Buffer& av,
                                                 bool additional, TensorRef* storage) {
  storage[0] = q.device_ref();
  storage[1] = k.device_ref();
  storage[2] = v.device_ref();
  AttentionTensors in{storage[0], storage[1], storage[2]};
  if (additional) {
    storage[3] = ak.device_ref();
    storage[4] = av.device_ref();
    in.additional_k = &storage[3];
    in.additional_v = &storage[4];
  }
  return in;
}

struct Tolerance {
  double out, lse, grad;
};

// fp32: the GPU reference's own accumulation order; fp16/bf16: output rounding plus the
// rounding of P (and dS) to the input dtype inside the fused kernels.
inline Tolerance tolerance(DType t) {
  switch (t) {
    case DType::f32: return {1e-4, 1e-5, 1e-4};
    case DType::f16: return {4e-3, 1e-4, 1.5e-2};
    default: return {2e-2, 1e-4, 5e-2};
  }
}

// All tensors of one problem: inputs, the CPU reference's outputs and gradients, and device
// copies in one dtype.
struct Case {
  Config cfg;
  Buffer q, k, v, ak, av, o, lse, d_o, dq, dk, dv, dak, dav;
  IntBuffer counts;  // cfg.counts
  std::vector<float> ref_o, ref_lse, ref_dq, ref_dk, ref_dv, ref_dak, ref_dav;

  std::vector<int64_t> token_shape(int heads, int dim) const {
    std::vector<int64_t> s{cfg.batch};
    for (int a = 0; a < cfg.params.rank; ++a) s.push_back(cfg.extent[a]);
    s.push_back(heads);
    if (dim > 0) s.push_back(dim);
    return s;
  }

  // Allocates every tensor in dtype, fills inputs, runs the CPU reference (forward and, when
  // `backward`, backward).
  void build(const Config& c, DType dtype, std::mt19937_64& rng, bool backward) {
    cfg = c;
    q.allocate(token_shape(c.heads_q, c.dim_qk), dtype);
    k.allocate(token_shape(c.heads_kv, c.dim_qk), dtype);
    v.allocate(token_shape(c.heads_kv, c.dim_v), dtype);
    o.allocate(token_shape(c.heads_q, c.dim_v), dtype);
    lse.allocate(token_shape(c.heads_q, 0), DType::f32);
    d_o.allocate(token_shape(c.heads_q, c.dim_v), dtype);
    dq.allocate(token_shape(c.heads_q, c.dim_qk), dtype);
    dk.allocate(token_shape(c.heads_kv, c.dim_qk), dtype);
    dv.allocate(token_shape(c.heads_kv, c.dim_v), dtype);
    if (c.additional > 0) {
      ak.allocate({c.batch, c.additional, c.heads_kv, c.dim_qk}, dtype);
      av.allocate({c.batch, c.additional, c.heads_kv, c.dim_v}, dtype);
      dak.allocate({c.batch, c.additional, c.heads_kv, c.dim_qk}, dtype);
      dav.allocate({c.batch, c.additional, c.heads_kv, c.dim_v}, dtype);
    }
    for (Buffer* b : {&q, &k, &v, &d_o, &ak, &av}) {
      if (b->shape.empty()) continue;
      b->host = random_values(rng, b->numel());
      b->upload();
    }
    counts.assign(c.counts);
    TensorRef hq = q.host_ref(), hk = k.host_ref(), hv = v.host_ref();
    TensorRef hak, hav, hc = counts.ref(false);
    AttentionTensors in{hq, hk, hv};
    if (c.additional > 0) {
      hak = ak.host_ref();
      hav = av.host_ref();
      in.additional_k = &hak;
      in.additional_v = &hav;
    }
    if (!c.counts.empty()) in.additional_kv_counts = &hc;
    const Problem p = make_problem(c.params, in);
    TensorRef ho = o.host_ref(), hl = lse.host_ref();
    reference::forward(p, in, ho, &hl);
    ref_o = o.host;
    ref_lse = lse.host;
    if (!backward) return;
    // The backward consumes the forward's outputs as the device dtype holds them.
    o.upload();
    o.host = o.download();
    lse.upload();
    TensorRef hdo = d_o.host_ref();
    reference::Gradients g{dq.host_ref(), dk.host_ref(), dv.host_ref()};
    TensorRef hdak, hdav;
    if (c.additional > 0) {
      hdak = dak.host_ref();
      hdav = dav.host_ref();
      g.d_additional_k = &hdak;
      g.d_additional_v = &hdav;
    }
    TensorRef ho2 = o.host_ref();
    reference::backward(p, in, ho2, hl, hdo, g);
    ref_dq = dq.host;
    ref_dk = dk.host;
    ref_dv = dv.host;
    if (c.additional > 0) {
      ref_dak = dak.host;
      ref_dav = dav.host;
    }
  }

  // The same problem and reference results as `other`, with device tensors in `dtype` (inputs
  // are exact in every dtype; the backward's O is re-rounded to `dtype`).
  void copy_as(const Case& other, DType dtype) {
    cfg = other.cfg;
    const Buffer* from[] = {&other.q, &other.k, &other.v, &other.ak, &other.av, &other.o,
                            &other.lse, &other.d_o, &other.dq, &other.dk, &other.dv,
                            &other.dak, &other.dav};
    Buffer* to[] = {&q, &k, &v, &ak, &av, &o, &lse, &d_o, &dq, &dk, &dv, &dak, &dav};
    for (int i = 0; i < 13; ++i) {
      if (from[i]->shape.empty()) continue;
      to[i]->allocate(from[i]->shape, from[i] == &other.lse ? DType::f32 : dtype);
      to[i]->host = from[i]->host;
    }
    for (Buffer* b : {&q, &k, &v, &ak, &av, &d_o, &lse})
      if (!b->shape.empty()) b->upload();
    counts.assign(other.counts.host);
    o.host = other.ref_o;
    o.upload();
    ref_o = other.ref_o;
    ref_lse = other.ref_lse;
    ref_dq = other.ref_dq;
    ref_dk = other.ref_dk;
    ref_dv = other.ref_dv;
    ref_dak = other.ref_dak;
    ref_dav = other.ref_dav;
  }

  // storage's sixth entry holds the counts (with cfg.counts); the array's size is in the type
  // so a shorter one does not compile.
  AttentionTensors device_inputs(TensorRef (&storage)[6]) const {
    AttentionTensors in = device_attention_tensors(q, k, v, ak, av, cfg.additional > 0, storage);
    if (!cfg.counts.empty()) {
      storage[5] = counts.device_ref();
      in.additional_kv_counts = &storage[5];
    }
    return in;
  }

  // Runs the forward on `backend` into poisoned outputs; returns "" or a failure description.
  std::string check_forward(const std::string& backend, const KernelOptions& kopt = {}) {
    return check_forward_with(cfg.params, backend, kopt);
  }
  // The same with other parameters for the same tensors (a slab of cfg's problem, say).
  std::string check_forward_with(const AttentionParams& params, const std::string& backend,
                                 const KernelOptions& kopt) {
    TensorRef storage[6];
    AttentionTensors in = device_inputs(storage);
    o.poison();
    lse.poison();
    TensorRef out = o.device_ref(), l = lse.device_ref();
    CallOptions opt;
    opt.backend = backend;
    opt.kernel = kopt;
    attention_forward(params, in, out, &l, opt);
    if (cudaDeviceSynchronize() != cudaSuccess) return "CUDA error after forward";
    const Tolerance tol = tolerance(q.dtype);
    const double eo = normalized_error(o.download(), ref_o);
    const double el = lse_error(lse.download(), ref_lse);
    std::ostringstream os;
    if (!(eo <= tol.out)) os << "out error " << eo << " > " << tol.out << "; ";
    if (!(el <= tol.lse)) os << "lse error " << el << " > " << tol.lse << "; ";
    return os.str();
  }

  std::string check_backward(const std::string& backend, const KernelOptions& kopt = {}) {
    return check_backward_with(cfg.params, backend, kopt);
  }
  std::string check_backward_with(const AttentionParams& params, const std::string& backend,
                                  const KernelOptions& kopt) {
    TensorRef storage[6];
    AttentionTensors in = device_inputs(storage);
    o.upload();  // the reference forward's O and LSE (the forward check overwrote them)
    lse.upload();
    for (Buffer* b : {&dq, &dk, &dv, &dak, &dav})
      if (!b->shape.empty()) b->poison();
    AttentionGradients g{dq.device_ref(), dk.device_ref(), dv.device_ref()};
    TensorRef gak, gav;
    if (cfg.additional > 0) {
      gak = dak.device_ref();
      gav = dav.device_ref();
      g.d_additional_k = &gak;
      g.d_additional_v = &gav;
    }
    CallOptions opt;
    opt.backend = backend;
    opt.kernel = kopt;
    attention_backward(params, in, o.device_ref(), lse.device_ref(), d_o.device_ref(), g, opt);
    if (cudaDeviceSynchronize() != cudaSuccess) return "CUDA error after backward";
    const Tolerance tol = tolerance(q.dtype);
    std::ostringstream os;
    auto check = [&](const char* name, const Buffer& b, const std::vector<float>& want) {
      const double e = normalized_error(b.download(), want);
      if (!(e <= tol.grad)) os << name << " error " << e << " > " << tol.grad << "; ";
    };
    check("dq", dq, ref_dq);
    check("dk", dk, ref_dk);
    check("dv", dv, ref_dv);
    if (cfg.additional > 0) {
      check("d_additional_k", dak, ref_dak);
      check("d_additional_v", dav, ref_dav);
    }
    return os.str();
  }
};

}  // namespace gna::testing
