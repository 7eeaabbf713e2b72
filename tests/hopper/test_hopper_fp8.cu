// Randomized sweep of the Hopper forward's e4m3 kernels (the FP8 scheme: e4m3 Q, K, V and P,
// per-token q_scale / k_scale, per-channel v_scale, lse_bias) against an emulation of the scheme
// on the GPU (one thread per query row and head, every key checked against the core's rule,
// additional keys always attended; the row's global max where the kernel keeps a running one).
// Random e4m3 operands and scales, outputs poisoned with NaN before each launch.
// Configurations per rank: GNA_HOPPER_FP8_SWEEP (default 40); seed: GNA_HOPPER_SEED (default:
// time).
// Tolerances, from what the emulation computes per row and element:
// * S: the e4m3 tensor cores do not accumulate in full fp32 (S measured up to 2^-13 of
//   A_j = scale q_scale k_scale_j sum_d |q8_d k8_jd| below the fp32 sum, on an H100); allowed
//   |dS_j| <= 2^-11 A_max (A_max: the row's largest A_j), so LSE within 2e-3 + 2^-11 A_max.
// * P: the running max quantizes P against another scale than the row's global max, and each
//   e4m3(448 p) is within 2^-4 relative (normal) or 2^-10 absolute (subnormal) of 448 p; with
//   the S error (p_j and l within 2^-10 A_max relative) the outputs differ by at most
//     bound_c = v_scale_c sum_j ((2^-3 + 2^-9 A_max) p_j + 2^-9 / 448) |v8_jc| / l,
//   and |O - ref| <= bound_c + 1e-3 + rel |ref|, rel the output dtype's half ulp (bf16 2^-8,
//   fp16 2^-11).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "gna/attention_params.hpp"
#include "gna/core/axis_rule.hpp"
#include "gna/core/error.hpp"
#include "gna/core/fp8.hpp"
#include "gna/core/tiling.hpp"
#include "half_fill.cuh"
#include "kernels/hopper/forward_launch.hpp"
#include "kernels/hopper/tma_host.hpp"

namespace gna {
namespace {

const Backend* hopper_backend() {
  for (const Backend& b : registered_backends())
    if (b.name == "hopper") return &b;
  return nullptr;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

__device__ uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Uniform in [0, 1) from (seed, index).
__device__ float uniform(uint64_t seed, int64_t i) {
  return static_cast<float>(mix(seed + 0x9E3779B97F4A7C15ull * (i + 1)) >> 40) /
         static_cast<float>(1 << 24);
}
// e4m3 codes of 448 u, u uniform in [-1, 1).
__global__ void fill_e4m3(uint8_t* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = e4m3_from_float(kE4m3Max * (2.f * uniform(seed, i) - 1.f));
}
// lo + (hi - lo) u.
__global__ void fill_floats(float* x, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = lo + (hi - lo) * uniform(seed, i);
}

// Contiguous operands of one configuration: tokens [B, N, H, D] (N: the flattened spatial
// axes), scales [B, N, H], v_scale [B, Hk, D], additional [B, Na, Hk, D] / [B, Na, Hk].
struct EmuTensors {
  const uint8_t *q8, *k8, *v8, *add_k8, *add_v8;
  const float *q_scale, *k_scale, *v_scale, *add_k_scale, *lse_bias;
  float* o;          // [B, N, Hq, D]
  float* bound;      // [B, N, Hq, D]: the tolerance's bound_c
  float* lse;        // [B, N, Hq]
  float* lse_bound;  // [B, N, Hq]: the LSE's tolerance
};

__global__ void emulate_forward(Problem p, EmuTensors t) {
  const int64_t n = p.tokens();
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= p.batch * n * p.heads_q) return;
  const int h = static_cast<int>(row % p.heads_q);
  const int64_t tok = (row / p.heads_q) % n;
  const int b = static_cast<int>(row / (p.heads_q * n));
  const int hk = h / (p.heads_q / p.heads_kv);
  const int D = p.dim_qk, Na = p.additional_kv;
  int qc[3];
  {
    int64_t rest = tok;
    for (int a = p.rank - 1; a >= 0; --a) {
      qc[a] = static_cast<int>(rest % p.axes[a].extent);
      rest /= p.axes[a].extent;
    }
  }
  float qv[128];
  for (int d = 0; d < D; ++d) qv[d] = e4m3_to_float(t.q8[row * D + d]);
  const float q_scale = t.q_scale[row];
  auto attends = [&](int64_t key) {
    if (key >= n) return true;
    int64_t rest = key;
    for (int a = p.rank - 1; a >= 0; --a) {
      const int kc = static_cast<int>(rest % p.axes[a].extent);
      rest /= p.axes[a].extent;
      if (!axis_attends(p.axes[a], qc[a], kc)) return false;
    }
    return true;
  };
  // Key j (spatial below n, additional from n): its e4m3 rows and k_scale.
  auto key_row = [&](int64_t j, const uint8_t*& k8, const uint8_t*& v8, float& ks) {
    if (j < n) {
      const int64_t kr = (b * n + j) * p.heads_kv + hk;
      k8 = t.k8 + kr * D;
      v8 = t.v8 + kr * D;
      ks = t.k_scale[kr];
    } else {
      const int64_t kr = (static_cast<int64_t>(b) * Na + (j - n)) * p.heads_kv + hk;
      k8 = t.add_k8 + kr * D;
      v8 = t.add_v8 + kr * D;
      ks = t.add_k_scale[kr];
    }
  };
  auto score = [&](const uint8_t* k8, float ks) {
    float s = 0.f;
    for (int d = 0; d < D; ++d) s += qv[d] * e4m3_to_float(k8[d]);
    return p.scale * q_scale * ks * s;
  };
  float mx = -INFINITY, a_max = 0.f;
  for (int64_t j = 0; j < n + Na; ++j) {
    if (!attends(j)) continue;
    const uint8_t *k8, *v8;
    float ks;
    key_row(j, k8, v8, ks);
    mx = fmaxf(mx, score(k8, ks));
    float a = 0.f;
    for (int d = 0; d < D; ++d) a += fabsf(qv[d] * e4m3_to_float(k8[d]));
    a_max = fmaxf(a_max, p.scale * q_scale * ks * a);
  }
  float acc[128], err[128];
  for (int d = 0; d < D; ++d) acc[d] = err[d] = 0.f;
  float l = 0.f;
  for (int64_t j = 0; j < n + Na; ++j) {
    if (!attends(j)) continue;
    const uint8_t *k8, *v8;
    float ks;
    key_row(j, k8, v8, ks);
    const float pj = expf(score(k8, ks) - mx);
    l += pj;
    const float p8 = e4m3_to_float(e4m3_probability(pj));
    const float pe = (0.125f + a_max / 512.f) * pj + 1.f / 512.f / kE4m3Max;
    for (int d = 0; d < D; ++d) {
      const float v = e4m3_to_float(v8[d]);
      acc[d] += p8 * v;
      err[d] += pe * fabsf(v);
    }
  }
  const float* vs = t.v_scale + (static_cast<int64_t>(b) * p.heads_kv + hk) * D;
  for (int d = 0; d < D; ++d) {
    t.o[row * D + d] = acc[d] * vs[d] / (kE4m3Max * l);
    t.bound[row * D + d] = err[d] * vs[d] / l;
  }
  t.lse[row] = mx + logf(l) + (t.lse_bias ? t.lse_bias[row] : 0.f);
  t.lse_bound[row] = 2e-3f + a_max / 2048.f;
}

struct Config {
  AttentionParams params;
  int rank = 1;
  int extent[3] = {1, 1, 1};
  int batch = 1, heads_q = 1, heads_kv = 1, dim = 64, additional = 0;
  bool bf16_out = true, lse_bias = true;
  ForwardSchedule schedule;
  KvPlacements kv_placements = KvPlacements::either;

  std::string describe() const {
    char buf[512];
    int n = std::snprintf(buf, sizeof buf, "rank %d extent", rank);
    for (int a = 0; a < rank; ++a)
      n += std::snprintf(buf + n, sizeof buf - n, " %d(K%d d%d s%d%s)", extent[a], params.window[a],
                         params.dilation[a], params.stride[a], params.causal[a] ? " causal" : "");
    const char* kinds[] = {"auto", "grid", "persistent"};
    std::snprintf(buf + n, sizeof buf - n,
                  " B%d Hq%d Hkv%d D%d add%d out %s%s scale %g schedule %s ctas %d kv tiles %d",
                  batch, heads_q, heads_kv, dim, additional, bf16_out ? "bf16" : "fp16",
                  lse_bias ? " lse_bias" : "", params.scale, kinds[schedule.kind], schedule.ctas,
                  static_cast<int>(kv_placements));
    return buf;
  }
};

Config random_config(std::mt19937_64& rng, int rank) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Config c;
  c.rank = rank;
  c.params.rank = rank;
  const int lo_ext[4] = {0, 8, 4, 3};
  const int hi_ext[4] = {0, 700, 48, 16};
  for (int a = 0; a < rank; ++a) {
    const int L = uni(lo_ext[rank], hi_ext[rank]);
    int d = uni(0, 9) < 7 ? 1 : uni(2, 3);
    while (d > 1 && 2 * d > L) --d;
    const int K =
        uni(0, 9) == 0 ? L / d : uni(2, std::max(2, std::min(L / d, rank == 1 ? 200 : 16)));
    c.extent[a] = L;
    c.params.window[a] = K;
    c.params.dilation[a] = d;
    c.params.stride[a] = uni(0, 2) == 0 ? uni(1, K) : 1;
    c.params.causal[a] = uni(0, 5) == 0;
  }
  c.batch = uni(1, 3);
  c.heads_kv = uni(1, 2);
  c.heads_q = c.heads_kv * uni(1, 3);
  c.dim = uni(0, 1) ? 64 : 128;
  c.bf16_out = uni(0, 1) == 0;
  c.lse_bias = uni(0, 3) != 0;
  c.additional = uni(0, 4) == 0 ? uni(1, 300) : 0;
  c.params.scale = uni(0, 3) == 0 ? 0.5f / std::sqrt(static_cast<float>(c.dim)) : 0.f;
  const int sched = uni(0, 9);
  if (sched >= 6) {
    c.schedule.kind = ForwardSchedule::persistent;
    c.schedule.ctas = uni(1, 7);
    c.schedule.dynamic = uni(0, 1) == 0;
    c.schedule.longest_first = uni(0, 1) == 0;
  } else if (sched == 5) {
    c.schedule.kind = ForwardSchedule::one_cta_per_item;
  }
  const int placement = uni(0, 2);
  c.kv_placements = placement == 0   ? KvPlacements::grid
                    : placement == 1 ? KvPlacements::placed
                                     : KvPlacements::either;
  return c;
}

// Runs one configuration; returns an empty string when it passes.
std::string run_config(const Config& c, uint64_t seed) {
  const Backend* be = hopper_backend();
  if (!be) return "no hopper backend registered";
  const int r = c.rank, D = c.dim;
  int64_t tokens = 1;
  for (int a = 0; a < r; ++a) tokens *= c.extent[a];
  const DType out_dt = c.bf16_out ? DType::bf16 : DType::f16;
  std::vector<void*> allocs;
  auto alloc = [&](size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes < 16 ? 16 : bytes) != cudaSuccess) return static_cast<void*>(nullptr);
    allocs.push_back(p);
    return p;
  };
  auto cleanup = [&] {
    for (void* p : allocs) cudaFree(p);
  };
  // [B, spatial.., H, (inner)] contiguous views.
  auto token_ref = [&](void* data, DType dt, int heads, int inner) {
    std::vector<int64_t> shape = {c.batch};
    for (int a = 0; a < r; ++a) shape.push_back(c.extent[a]);
    shape.push_back(heads);
    if (inner > 0) shape.push_back(inner);
    return contiguous_tensor(data, dt, shape.data(), static_cast<int>(shape.size()), 0);
  };
  const int64_t nq = c.batch * tokens * c.heads_q, nk = c.batch * tokens * c.heads_kv;
  const int64_t na = static_cast<int64_t>(c.batch) * c.additional * c.heads_kv;
  uint8_t* q8 = static_cast<uint8_t*>(alloc(nq * D));
  uint8_t* k8 = static_cast<uint8_t*>(alloc(nk * D));
  uint8_t* v8 = static_cast<uint8_t*>(alloc(nk * D));
  float* qs = static_cast<float*>(alloc(nq * 4));
  float* ks = static_cast<float*>(alloc(nk * 4));
  float* lb = static_cast<float*>(alloc(nq * 4));
  float* vs = static_cast<float*>(alloc(c.batch * c.heads_kv * D * 4));
  uint8_t* ak8 = static_cast<uint8_t*>(alloc(na * D));
  uint8_t* av8 = static_cast<uint8_t*>(alloc(na * D));
  float* aks = static_cast<float*>(alloc(na * 4));
  void* out = alloc(nq * D * 2);
  float* lse = static_cast<float*>(alloc(nq * 4));
  float* out_f = static_cast<float*>(alloc(nq * D * 4));
  float* ref_o = static_cast<float*>(alloc(nq * D * 4));
  float* ref_b = static_cast<float*>(alloc(nq * D * 4));
  float* ref_l = static_cast<float*>(alloc(nq * 4));
  float* ref_lb = static_cast<float*>(alloc(nq * 4));
  for (void* p : allocs)
    if (!p) {
      cleanup();
      return "cudaMalloc failed";
    }
  // Scores scale * q_scale * k_scale * dot ~ a few units: dot of D e4m3 values of 448 u has a
  // spread of about sqrt(D) 448^2 / 3.
  const float scale =
      c.params.scale > 0.f ? c.params.scale : 1.f / std::sqrt(static_cast<float>(D));
  const float qk =
      std::sqrt(3.f / (scale * std::sqrt(static_cast<float>(D)) * 448.f * 448.f / 3.f));
  uint64_t s = seed;
  fill_e4m3<<<256, 256>>>(q8, nq * D, s += 7919);
  fill_e4m3<<<256, 256>>>(k8, nk * D, s += 7919);
  fill_e4m3<<<256, 256>>>(v8, nk * D, s += 7919);
  fill_e4m3<<<256, 256>>>(ak8, na * D, s += 7919);
  fill_e4m3<<<256, 256>>>(av8, na * D, s += 7919);
  fill_floats<<<256, 256>>>(qs, nq, s += 7919, 0.5f * qk, 1.5f * qk);
  fill_floats<<<256, 256>>>(ks, nk, s += 7919, 0.5f * qk, 1.5f * qk);
  fill_floats<<<256, 256>>>(aks, na, s += 7919, 0.5f * qk, 1.5f * qk);
  fill_floats<<<256, 256>>>(vs, c.batch * c.heads_kv * D, s += 7919, 0.5f / 448.f, 1.5f / 448.f);
  fill_floats<<<256, 256>>>(lb, nq, s += 7919, -2.f, 2.f);
  cudaMemset(out, 0xFF, nq * D * 2);  // NaN in both fp16 and bf16
  cudaMemset(lse, 0xFF, nq * 4);

  // The problem as an FP8 call sees it: the output's dtype, the operands' shapes (call.in is
  // read by the problem's validation only).
  AttentionTensors ts;
  ts.q = token_ref(q8, out_dt, c.heads_q, D);
  ts.k = token_ref(k8, out_dt, c.heads_kv, D);
  ts.v = token_ref(v8, out_dt, c.heads_kv, D);
  TensorRef add_k, add_v;
  if (c.additional > 0) {
    add_k = contiguous_tensor(ak8, out_dt, {c.batch, c.additional, c.heads_kv, D}, 0);
    add_v = contiguous_tensor(av8, out_dt, {c.batch, c.additional, c.heads_kv, D}, 0);
    ts.additional_k = &add_k;
    ts.additional_v = &add_v;
  }
  Fp8Operands f;
  f.q8 = token_ref(q8, DType::e4m3, c.heads_q, D);
  f.k8 = token_ref(k8, DType::e4m3, c.heads_kv, D);
  f.v8 = token_ref(v8, DType::e4m3, c.heads_kv, D);
  f.q_scale = token_ref(qs, DType::f32, c.heads_q, 0);
  f.k_scale = token_ref(ks, DType::f32, c.heads_kv, 0);
  f.v_scale = contiguous_tensor(vs, DType::f32, {c.batch, c.heads_kv, D}, 0);
  if (c.additional > 0) {
    f.add_k8 = contiguous_tensor(ak8, DType::e4m3, {c.batch, c.additional, c.heads_kv, D}, 0);
    f.add_v8 = contiguous_tensor(av8, DType::e4m3, {c.batch, c.additional, c.heads_kv, D}, 0);
    f.add_k_scale = contiguous_tensor(aks, DType::f32, {c.batch, c.additional, c.heads_kv}, 0);
  }
  if (c.lse_bias) f.lse_bias = token_ref(lb, DType::f32, c.heads_q, 0);

  ForwardCall call;
  try {
    call.problem = make_problem(c.params, ts);
  } catch (const Error& e) {
    cleanup();
    return std::string("make_problem: ") + e.what();
  }
  call.in = ts;
  call.out = token_ref(out, out_dt, c.heads_q, D);
  TensorRef lse_t = token_ref(lse, DType::f32, c.heads_q, 0);
  call.lse = &lse_t;
  call.options.schedule = c.schedule;
  call.options.kv_placements = c.kv_placements;
  call.fp8 = &f;
  std::string why;
  if (!be->supports_forward(call, &why)) {
    cleanup();
    return "unsupported: " + why;
  }
  try {
    be->forward(call);
  } catch (const Error& e) {
    cleanup();
    return std::string("forward threw: ") + e.what();
  }
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    cleanup();
    return std::string("kernel error: ") + cudaGetErrorString(err);
  }
  Problem p = call.problem;
  p.scale = effective_scale(p);
  EmuTensors et{q8,    k8,    v8,    ak8,   av8, qs, ks, vs, aks, c.lse_bias ? lb : nullptr,
                ref_o, ref_b, ref_l, ref_lb};
  emulate_forward<<<static_cast<int>((nq + 127) / 128), 128>>>(p, et);
  hopper_test::to_float<<<256, 256>>>(static_cast<uint16_t*>(out), out_f, nq * D, c.bf16_out);
  err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    cleanup();
    return std::string("emulation error: ") + cudaGetErrorString(err);
  }
  std::vector<float> ho(nq * D), hr(nq * D), hb(nq * D), hl(nq), hrl(nq), hlb(nq);
  cudaMemcpy(ho.data(), out_f, nq * D * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(hr.data(), ref_o, nq * D * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(hb.data(), ref_b, nq * D * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(hl.data(), lse, nq * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(hrl.data(), ref_l, nq * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(hlb.data(), ref_lb, nq * 4, cudaMemcpyDeviceToHost);
  cleanup();

  const float rel = c.bf16_out ? 1.f / 256.f : 1.f / 2048.f;
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < nq * D; ++i) {
    const bool ok =
        std::isfinite(ho[i]) && std::fabs(ho[i] - hr[i]) <= hb[i] + 1e-3f + rel * std::fabs(hr[i]);
    if (!ok && bad++ == 0) first = i;
  }
  int64_t bad_lse = 0, first_lse = -1;
  for (int64_t i = 0; i < nq; ++i) {
    const bool ok = std::isfinite(hl[i]) && std::fabs(hl[i] - hrl[i]) <= hlb[i];
    if (!ok && bad_lse++ == 0) first_lse = i;
  }
  if (bad == 0 && bad_lse == 0) return "";
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%lld bad O (first %lld: %g vs %g, bound %g), %lld bad LSE (first %lld: %g vs %g, "
                "bound %g)",
                static_cast<long long>(bad), static_cast<long long>(first),
                first >= 0 ? ho[first] : 0.f, first >= 0 ? hr[first] : 0.f,
                first >= 0 ? hb[first] : 0.f, static_cast<long long>(bad_lse),
                static_cast<long long>(first_lse), first_lse >= 0 ? hl[first_lse] : 0.f,
                first_lse >= 0 ? hrl[first_lse] : 0.f, first_lse >= 0 ? hlb[first_lse] : 0.f);
  return buf;
}

void sweep(int rank) {
  if (!hopper::is_sm90(0)) GTEST_SKIP() << "no sm_90 device";
  const int count = env_int("GNA_HOPPER_FP8_SWEEP", 40);
  const uint64_t seed = static_cast<uint64_t>(env_int(
      "GNA_HOPPER_SEED",
      static_cast<int>(std::chrono::steady_clock::now().time_since_epoch().count() & 0x7fffffff)));
  std::mt19937_64 rng(seed * 37 + rank);
  // What the sweep reached (asserted below when it ran enough configurations).
  int d64 = 0, d128 = 0, fp16 = 0, persistent = 0, extra = 0, gqa = 0, causal = 0, dilated = 0,
      strided = 0, no_bias = 0, failures = 0;
  for (int i = 0; i < count; ++i) {
    const Config c = random_config(rng, rank);
    const std::string res = run_config(c, seed + 1000003ull * i);
    if (!res.empty()) {
      ADD_FAILURE() << "seed " << seed << " config " << i << ": " << c.describe() << ": " << res;
      if (++failures >= 5) break;
    }
    d64 += c.dim == 64;
    d128 += c.dim == 128;
    fp16 += !c.bf16_out;
    persistent += c.schedule.kind == ForwardSchedule::persistent;
    extra += c.additional > 0;
    gqa += c.heads_q > c.heads_kv;
    no_bias += !c.lse_bias;
    for (int a = 0; a < rank; ++a) {
      causal += c.params.causal[a];
      dilated += c.params.dilation[a] > 1;
      strided += c.params.stride[a] > 1;
    }
  }
  std::printf(
      "fp8 sweep rank %d: %d configurations (seed %llu): d64 %d, d128 %d, fp16 out %d, "
      "persistent %d, extra tokens %d, GQA %d, causal axes %d, dilated axes %d, strided "
      "axes %d, no lse_bias %d\n",
      rank, count, static_cast<unsigned long long>(seed), d64, d128, fp16, persistent, extra, gqa,
      causal, dilated, strided, no_bias);
  if (count >= 40) {
    for (int reached : {d64, d128, fp16, persistent, extra, gqa, causal, dilated, strided, no_bias})
      EXPECT_GT(reached, 0) << "the sweep missed a path; raise GNA_HOPPER_FP8_SWEEP";
  }
}

TEST(HopperFp8, RandomSweepRank1) { sweep(1); }
TEST(HopperFp8, RandomSweepRank2) { sweep(2); }
TEST(HopperFp8, RandomSweepRank3) { sweep(3); }

// Head dims other than 64 and 128 are refused with the reason; the backend takes FP8 calls.
TEST(HopperFp8, RefusesHeadDim32WithReason) {
  if (!hopper::is_sm90(0)) GTEST_SKIP() << "no sm_90 device";
  const Backend* be = hopper_backend();
  ASSERT_NE(be, nullptr);
  EXPECT_TRUE(be->fp8);
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 1 << 20), cudaSuccess);
  AttentionParams params;
  params.rank = 1;
  params.window[0] = 7;
  AttentionTensors ts;
  ts.q = contiguous_tensor(buf, DType::bf16, {1, 64, 1, 32}, 0);
  ts.k = ts.q;
  ts.v = ts.q;
  Fp8Operands f;
  f.q8 = contiguous_tensor(buf, DType::e4m3, {1, 64, 1, 32}, 0);
  f.k8 = f.q8;
  f.v8 = f.q8;
  f.q_scale = contiguous_tensor(buf, DType::f32, {1, 64, 1}, 0);
  f.k_scale = f.q_scale;
  f.v_scale = contiguous_tensor(buf, DType::f32, {1, 1, 32}, 0);
  ForwardCall call;
  call.problem = make_problem(params, ts);
  call.in = ts;
  call.out = ts.q;
  call.fp8 = &f;
  std::string why;
  EXPECT_FALSE(be->supports_forward(call, &why));
  EXPECT_NE(why.find("head dim 32"), std::string::npos) << why;
  cudaFree(buf);
}

}  // namespace
}  // namespace gna
