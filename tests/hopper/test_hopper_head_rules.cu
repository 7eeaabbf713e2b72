// Per-head rules (Problem::head_rules) on the Hopper forward and backward, one launch per
// dilation group: random sweeps against the gpu_reference backend on float32 copies of the
// inputs (2-4 groups with random windows / strides / causal flags and a shared dilation, random
// head -> group maps including GQA where a KV head serves query heads of several groups, ranks
// 1-3, fp16 / bf16, head dims 32 / 64 / 128, additional keys on some), outputs and gradients
// poisoned with NaN; the launch counters say that each call ran one launch per dilation group
// and batch run with the rules. Also: the one-launch result equals running each group as its own
// problem on its heads' slices (same tiles, bit for bit), and groups of different dilations are
// refused with a reason naming them.
// Configurations per rank: GNA_HOPPER_HEAD_RULES_SWEEP (default 16); seed: GNA_TEST_SEED.
// Tolerances: forward |out - ref| <= atol + rtol |ref| (bf16 2e-2, fp16 4e-3; LSE the same
// absolute); backward max |grad - ref| / max |ref| (bf16 5e-2, fp16 1.5e-2).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "half_fill.cuh"
#include "gna/core/error.hpp"
#include "kernels/hopper/backward_launch.hpp"
#include "kernels/hopper/forward_launch.hpp"
#include "kernels/hopper/head_rules.hpp"
#include "kernels/hopper/tma_host.hpp"

namespace gna {
namespace {

const Backend* backend_named(const char* name) {
  for (const Backend& b : registered_backends())
    if (b.name == name) return &b;
  return nullptr;
}

#define SKIP_WITHOUT_SM90() \
  if (!hopper::is_sm90(0)) GTEST_SKIP() << "no sm_90 device"

int sweep_size() {
  const char* v = std::getenv("GNA_HOPPER_HEAD_RULES_SWEEP");
  return v ? std::max(1, std::atoi(v)) : 16;
}

uint64_t test_seed() {
  const char* env = std::getenv("GNA_TEST_SEED");
  return env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
}

using hopper_test::fill_random;
using hopper_test::to_float;

// A device tensor [shape] in a 16-bit dtype (or float32) with a float32 copy.
struct Tensor {
  std::vector<int64_t> shape;
  DType dtype = DType::bf16;
  void* data = nullptr;  // dtype
  float* wide = nullptr; // float32 copy (16-bit tensors)
  Tensor() = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() {
    cudaFree(data);
    cudaFree(wide);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  void allocate(std::vector<int64_t> s, DType t) {
    shape = std::move(s);
    dtype = t;
    cudaMalloc(&data, std::max<int64_t>(numel() * dtype_size(t), 16));
    if (t != DType::f32) cudaMalloc(&wide, std::max<int64_t>(numel() * 4, 16));
  }
  void randomize(uint64_t seed) {
    fill_random<<<256, 256>>>(static_cast<uint16_t*>(data), numel(), seed, dtype == DType::bf16);
    refresh_wide();
  }
  void refresh_wide() {
    if (wide) to_float<<<256, 256>>>(static_cast<uint16_t*>(data), wide, numel(), dtype == DType::bf16);
  }
  void poison() { cudaMemset(data, 0xFF, numel() * dtype_size(dtype)); }  // NaN
  TensorRef ref(bool as_wide = false) const {
    return contiguous_tensor(as_wide ? static_cast<void*>(wide) : data,
                             as_wide ? DType::f32 : dtype, shape.data(),
                             static_cast<int>(shape.size()), 0);
  }
  std::vector<float> host() const {
    std::vector<float> out(numel());
    if (dtype == DType::f32) {
      cudaMemcpy(out.data(), data, numel() * 4, cudaMemcpyDeviceToHost);
    } else {
      float* tmp = nullptr;
      cudaMalloc(&tmp, numel() * 4);
      to_float<<<256, 256>>>(static_cast<uint16_t*>(data), tmp, numel(), dtype == DType::bf16);
      cudaMemcpy(out.data(), tmp, numel() * 4, cudaMemcpyDeviceToHost);
      cudaFree(tmp);
    }
    return out;
  }
};

// The tensors of one problem: inputs in dtype (with float32 copies), outputs and gradients.
struct Tensors {
  Tensor q, k, v, ak, av, o, lse, d_o, dq, dk, dv, dak, dav;
  Tensor ref_o, ref_lse, ref_dq, ref_dk, ref_dv, ref_dak, ref_dav;  // float32

  std::vector<int64_t> token_shape(const Problem& p, int heads, int dim) const {
    std::vector<int64_t> s{p.batch};
    for (int a = 0; a < p.rank; ++a) s.push_back(p.axes[a].extent);
    s.push_back(heads);
    if (dim > 0) s.push_back(dim);
    return s;
  }
  void build(const Problem& p, uint64_t seed) {
    const DType t = p.dtype;
    const int D = p.dim_qk;
    q.allocate(token_shape(p, p.heads_q, D), t);
    k.allocate(token_shape(p, p.heads_kv, D), t);
    v.allocate(token_shape(p, p.heads_kv, D), t);
    o.allocate(token_shape(p, p.heads_q, D), t);
    d_o.allocate(token_shape(p, p.heads_q, D), t);
    dq.allocate(token_shape(p, p.heads_q, D), t);
    dk.allocate(token_shape(p, p.heads_kv, D), t);
    dv.allocate(token_shape(p, p.heads_kv, D), t);
    lse.allocate(token_shape(p, p.heads_q, 0), DType::f32);
    ref_o.allocate(token_shape(p, p.heads_q, D), DType::f32);
    ref_lse.allocate(token_shape(p, p.heads_q, 0), DType::f32);
    ref_dq.allocate(token_shape(p, p.heads_q, D), DType::f32);
    ref_dk.allocate(token_shape(p, p.heads_kv, D), DType::f32);
    ref_dv.allocate(token_shape(p, p.heads_kv, D), DType::f32);
    q.randomize(seed + 1);
    k.randomize(seed + 2);
    v.randomize(seed + 3);
    d_o.randomize(seed + 4);
    if (p.additional_kv > 0) {
      const std::vector<int64_t> s{p.batch, p.additional_kv, p.heads_kv, D};
      ak.allocate(s, t);
      av.allocate(s, t);
      dak.allocate(s, t);
      dav.allocate(s, t);
      ref_dak.allocate(s, DType::f32);
      ref_dav.allocate(s, DType::f32);
      ak.randomize(seed + 5);
      av.randomize(seed + 6);
    }
  }
};

// Per-head problem of the sweep: 2-4 groups, random windows / strides / causal flags per group
// and axis, one dilation per axis for all groups, a random head -> group map.
Problem random_problem(std::mt19937_64& rng, int rank) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Problem p;
  p.rank = rank;
  const int lo_ext[4] = {0, 16, 6, 3}, hi_ext[4] = {0, 400, 40, 14};
  int dilation[3];
  for (int a = 0; a < rank; ++a) {
    p.axes[a].extent = uni(lo_ext[rank], hi_ext[rank]);
    // Dilation 2 only where a window of 2 fits it (window * dilation <= extent): every group's
    // window is at most extent / dilation.
    dilation[a] = p.axes[a].extent >= 4 && uni(0, 4) == 0 ? 2 : 1;
  }
  p.head_rules.groups = uni(2, 4);
  for (int g = 0; g < p.head_rules.groups; ++g)
    for (int a = 0; a < rank; ++a) {
      AxisRule& r = p.head_rules.axes[g][a];
      r.extent = p.axes[a].extent;
      r.dilation = dilation[a];
      const int n = r.extent / r.dilation;
      r.window = uni(2, std::max(2, std::min(n, rank == 1 ? 120 : 12)));
      r.stride = uni(0, 2) == 0 ? uni(1, r.window) : 1;
      r.causal = uni(0, 4) == 0;
    }
  for (int a = 0; a < rank; ++a) p.axes[a] = p.head_rules.axes[0][a];
  p.batch = uni(1, 2);
  p.heads_kv = uni(1, 3);
  p.heads_q = p.heads_kv * uni(1, 4);
  for (int h = 0; h < p.heads_q; ++h) p.head_rules.group_of_head[h] = uni(0, p.head_rules.groups - 1);
  const int dims[3] = {32, 64, 128};
  p.dim_qk = p.dim_v = dims[uni(0, 2)];
  p.dtype = uni(0, 1) ? DType::bf16 : DType::f16;
  p.additional_kv = uni(0, 4) == 0 ? uni(1, 150) : 0;
  validate(p);
  return p;
}

std::string describe(const Problem& p) {
  std::ostringstream os;
  os << "rank " << p.rank << " extent";
  for (int a = 0; a < p.rank; ++a) os << (a ? "x" : " ") << p.axes[a].extent;
  for (int g = 0; g < p.head_rules.groups; ++g) {
    os << " | group " << g << ":";
    for (int a = 0; a < p.rank; ++a) {
      const AxisRule& r = p.head_rules.axes[g][a];
      os << " K" << r.window << " s" << r.stride << " d" << r.dilation << (r.causal ? "c" : "");
    }
  }
  os << " | heads";
  for (int h = 0; h < p.heads_q; ++h) os << " " << int(p.head_rules.group_of_head[h]);
  os << " / kv " << p.heads_kv << " B" << p.batch << " D" << p.dim_qk << " "
     << dtype_name(p.dtype) << " add " << p.additional_kv;
  return os.str();
}

AttentionTensors inputs(const Tensors& t, const Problem& p, bool wide, TensorRef* storage) {
  storage[0] = t.q.ref(wide);
  storage[1] = t.k.ref(wide);
  storage[2] = t.v.ref(wide);
  AttentionTensors in{storage[0], storage[1], storage[2]};
  if (p.additional_kv > 0) {
    storage[3] = t.ak.ref(wide);
    storage[4] = t.av.ref(wide);
    in.additional_k = &storage[3];
    in.additional_v = &storage[4];
  }
  return in;
}

// Forward on the backend into `o` / `lse` (hopper: the 16-bit tensors; gpu_reference: float32
// copies and float32 outputs).
// A call's problem (float32 for the reference), inputs (refs kept in `storage`) and options.
template <typename Call>
Call prepared_call(const Problem& p, Tensors& t, bool reference, TensorRef (&storage)[5],
                   const KernelOptions& kopt) {
  Call call;
  call.problem = p;
  if (reference) call.problem.dtype = DType::f32;
  call.in = inputs(t, p, reference, storage);
  call.options = kopt;
  return call;
}

void run_forward(const Backend& b, const Problem& p, Tensors& t, bool reference,
                 const KernelOptions& kopt = {}) {
  TensorRef storage[5];
  ForwardCall call = prepared_call<ForwardCall>(p, t, reference, storage, kopt);
  call.out = reference ? t.ref_o.ref() : t.o.ref();
  TensorRef l = reference ? t.ref_lse.ref() : t.lse.ref();
  call.lse = &l;
  b.forward(call);
}

void run_backward(const Backend& b, const Problem& p, Tensors& t, bool reference,
                  const KernelOptions& kopt = {}) {
  TensorRef storage[5];
  BackwardCall call = prepared_call<BackwardCall>(p, t, reference, storage, kopt);
  call.out = t.o.ref(reference);
  call.lse = t.lse.ref();
  call.d_out = t.d_o.ref(reference);
  call.dq = reference ? t.ref_dq.ref() : t.dq.ref();
  call.dk = reference ? t.ref_dk.ref() : t.dk.ref();
  call.dv = reference ? t.ref_dv.ref() : t.dv.ref();
  TensorRef dak, dav;
  if (p.additional_kv > 0) {
    dak = reference ? t.ref_dak.ref() : t.dak.ref();
    dav = reference ? t.ref_dav.ref() : t.dav.ref();
    call.d_additional_k = &dak;
    call.d_additional_v = &dav;
  }
  b.backward(call);
}

// Forward: |got - want| <= atol + rtol |want| per element; "" or the first failure.
std::string compare_elementwise(const char* name, const std::vector<float>& got,
                                const std::vector<float>& want, double atol, double rtol) {
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(double(got[i]) - want[i]) <= atol + rtol * std::fabs(double(want[i])))) {
      std::ostringstream os;
      os << name << "[" << i << "] = " << got[i] << ", reference " << want[i] << "; ";
      return os.str();
    }
  return "";
}

// Backward: max |got - want| / max |want| (NaN: infinity).
std::string compare_normalized(const char* name, const std::vector<float>& got,
                               const std::vector<float>& want, double tol) {
  double err = 0, scale = 1e-6;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) {
      err = INFINITY;
      break;
    }
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  if (err / scale <= tol) return "";
  std::ostringstream os;
  os << name << " error " << err / scale << " > " << tol << "; ";
  return os.str();
}

// Launches a call runs: one per dilation group and batch run, all with the head rules (`rules`),
// and for the backward those of the additional keys (`additional`, without rules); or, where the
// backward splits by group (hopper::backward_group_calls), each group's call's launches without
// rules (`per_group`, counted in `groups_split`).
struct Launches {
  int64_t rules = 0, additional = 0, per_group = 0;
  int groups_split = 0;
};
Launches expected_launches(const Problem& p, const Tensors& t, bool backward,
                           const KernelOptions& kopt = {}) {
  const Problem lp = hopper::launch_problem(p);
  const TensorRef q = t.q.ref(), k = t.k.ref(), v = t.v.ref(), o = t.o.ref(), l = t.lse.ref(),
                  d_o = t.d_o.ref(), dk = t.dk.ref(), dv = t.dv.ref();
  Launches n;
  if (!backward) {
    n.rules = hopper::plan_launches(lp, {&q, &k, &v, &o, &l}).slices.size();
    return n;
  }
  BackwardCall call;
  call.problem = p;
  call.in = AttentionTensors{q, k, v};
  call.out = o;
  call.lse = l;
  call.d_out = d_o;
  call.dq = t.dq.ref();
  call.dk = dk;
  call.dv = dv;
  call.options = kopt;
  const std::vector<BackwardCall> parts = hopper::backward_group_calls(call);
  for (const BackwardCall& c : parts)
    n.per_group += hopper::plan_launches(c.problem, {&c.in.q, &c.in.k, &c.in.v, &c.d_out, &c.dk,
                                                     &c.dv}).slices.size();
  n.groups_split = static_cast<int>(parts.size());
  if (!parts.empty()) return n;
  n.rules = hopper::plan_launches(lp, {&q, &k, &v, &d_o, &dk, &dv}).slices.size();
  if (p.additional_kv > 0) {
    Problem pa = lp;
    for (int a = 0; a < p.rank; ++a) pa.axes[a].dilation = 1;
    n.additional = hopper::plan_launches(pa, {&q, &d_o}).slices.size();
  }
  return n;
}

std::string launch_error(const char* pass, int64_t launches, int64_t with_rules, Launches want) {
  const int64_t total = want.rules + want.additional + want.per_group;
  if (launches == total && with_rules == want.rules) return "";
  std::ostringstream os;
  os << pass << " ran " << launches << " launches (" << with_rules << " with head rules), expected "
     << total << " (" << want.rules << ")" << (want.groups_split ? " split by group" : "") << "; ";
  return os.str();
}

void sweep(int rank) {
  SKIP_WITHOUT_SM90();
  const Backend* hopper_b = backend_named("hopper");
  const Backend* ref_b = backend_named("gpu_reference");
  ASSERT_TRUE(hopper_b && ref_b);
  ASSERT_TRUE(hopper_b->head_rules && ref_b->head_rules);
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed + 977 * rank);
  const int configs = sweep_size();
  int failures = 0, gqa_mixed = 0, persistent = 0, deterministic = 0, split = 0, one_launch = 0;
  for (int i = 0; i < configs && failures < 5; ++i) {
    const Problem p = random_problem(rng, rank);
    // A KV head whose query heads belong to several groups.
    const int per_kv = p.heads_q / p.heads_kv;
    for (int hk = 0; hk < p.heads_kv; ++hk) {
      bool mixed = false;
      for (int h = hk * per_kv; h < (hk + 1) * per_kv; ++h)
        mixed = mixed || p.head_rules.group_of_head[h] != p.head_rules.group_of_head[hk * per_kv];
      if (mixed) {
        ++gqa_mixed;
        break;
      }
    }
    KernelOptions fwd_opt;
    if (rng() % 3 == 0) {  // the persistent kernel on a few CTAs: each walks items of all groups
      fwd_opt.schedule.kind = ForwardSchedule::persistent;
      fwd_opt.schedule.ctas = 1 + static_cast<int>(rng() % 5);
      fwd_opt.schedule.dynamic = rng() % 2 == 0;
      ++persistent;
    }
    fwd_opt.kv_placements = static_cast<KvPlacements>(rng() % 3);
    KernelOptions bwd_opt;
    bwd_opt.deterministic = rng() % 4 == 0;
    deterministic += bwd_opt.deterministic;
    std::string why;
    Tensors t;
    t.build(p, rng());
    {
      ForwardCall probe;
      probe.problem = p;
      TensorRef st[5];
      probe.in = inputs(t, p, false, st);
      probe.out = t.o.ref();
      ASSERT_TRUE(hopper_b->supports_forward(probe, &why)) << why << ": " << describe(p);
    }
    const bool bf16 = p.dtype == DType::bf16;
    const double atol = bf16 ? 2e-2 : 4e-3, gtol = bf16 ? 5e-2 : 1.5e-2;
    std::string err;

    run_forward(*ref_b, p, t, true);
    t.o.poison();
    t.lse.poison();
    const hopper::ForwardLaunchCount f0 = hopper::forward_launch_count();
    run_forward(*hopper_b, p, t, false, fwd_opt);
    const hopper::ForwardLaunchCount f1 = hopper::forward_launch_count();
    if (cudaDeviceSynchronize() != cudaSuccess) err += "CUDA error after forward; ";
    err += launch_error("forward", f1.launches - f0.launches,
                        f1.with_head_rules - f0.with_head_rules, expected_launches(p, t, false));
    err += compare_elementwise("O", t.o.host(), t.ref_o.host(), atol, atol);
    err += compare_elementwise("LSE", t.lse.host(), t.ref_lse.host(), atol, 0);

    // Backward from the Hopper forward's O and LSE (its float32 copy for the reference).
    t.o.refresh_wide();
    run_backward(*ref_b, p, t, true);
    for (Tensor* g : {&t.dq, &t.dk, &t.dv, &t.dak, &t.dav})
      if (g->data) g->poison();
    const hopper::BackwardLaunchCount b0 = hopper::backward_launch_count();
    run_backward(*hopper_b, p, t, false, bwd_opt);
    const hopper::BackwardLaunchCount b1 = hopper::backward_launch_count();
    if (cudaDeviceSynchronize() != cudaSuccess) err += "CUDA error after backward; ";
    const Launches want = expected_launches(p, t, true, bwd_opt);
    split += want.groups_split > 0;
    one_launch += want.rules > 0;
    err += launch_error("backward", b1.launches - b0.launches,
                        b1.with_head_rules - b0.with_head_rules, want);
    err += compare_normalized("dQ", t.dq.host(), t.ref_dq.host(), gtol);
    err += compare_normalized("dK", t.dk.host(), t.ref_dk.host(), gtol);
    err += compare_normalized("dV", t.dv.host(), t.ref_dv.host(), gtol);
    if (p.additional_kv > 0) {
      err += compare_normalized("dK additional", t.dak.host(), t.ref_dak.host(), gtol);
      err += compare_normalized("dV additional", t.dav.host(), t.ref_dav.host(), gtol);
    }
    if (!err.empty()) {
      ++failures;
      ADD_FAILURE() << "config " << i << ": " << describe(p)
                    << (fwd_opt.schedule.kind == ForwardSchedule::persistent ? " persistent" : "")
                    << (bwd_opt.deterministic ? " deterministic" : "") << ": " << err
                    << " (GNA_TEST_SEED=" << seed << ")";
    }
  }
  std::printf("hopper head rules sweep rank %d: %d configurations (%d with a KV head serving "
              "several groups, %d persistent forward, %d deterministic backward; backward: %d "
              "one launch with head rules, %d split by group), %d failed, seed %llu\n",
              rank, configs, gqa_mixed, persistent, deterministic, one_launch, split, failures,
              static_cast<unsigned long long>(seed));
  EXPECT_GT(gqa_mixed, 0) << "no configuration mixed groups under one KV head";
  EXPECT_GT(one_launch, 0) << "no backward ran the head rules in one launch";
}

TEST(HopperHeadRules, RandomSweepRank1) { sweep(1); }
TEST(HopperHeadRules, RandomSweepRank2) { sweep(2); }
TEST(HopperHeadRules, RandomSweepRank3) { sweep(3); }

// Two groups whose own backward tiles differ from the shape they would share (windows 5 and 16
// per axis): the backward runs one call per group on strided views of their heads (heads round
// robin), checked against the reference on gradients poisoned with NaN, with the launch counts
// of a split (none with head rules).
TEST(HopperHeadRules, BackwardSplitsByGroupWhereTilesDiffer) {
  SKIP_WITHOUT_SM90();
  const Backend* hopper_b = backend_named("hopper");
  const Backend* ref_b = backend_named("gpu_reference");
  ASSERT_TRUE(hopper_b && ref_b);
  for (DType dtype : {DType::bf16, DType::f16}) {
    Problem p;
    p.rank = 3;
    const int extent[3] = {16, 16, 32}, window[2][3] = {{5, 5, 5}, {16, 16, 16}};
    p.head_rules.groups = 2;
    for (int g = 0; g < 2; ++g)
      for (int a = 0; a < 3; ++a) p.head_rules.axes[g][a] = {extent[a], window[g][a], 1, 1, false};
    for (int a = 0; a < 3; ++a) p.axes[a] = p.head_rules.axes[0][a];
    p.batch = 1;
    p.heads_q = p.heads_kv = 4;
    for (int h = 0; h < 4; ++h) p.head_rules.group_of_head[h] = h % 2;
    p.dim_qk = p.dim_v = 64;
    p.dtype = dtype;
    validate(p);
    ASSERT_TRUE(hopper::backward_splits_by_group(p, KernelOptions{}))
        << "the case no longer splits by the tile chooser's cost";
    Tensors t;
    t.build(p, test_seed());
    run_forward(*ref_b, p, t, true);
    run_forward(*hopper_b, p, t, false);
    t.o.refresh_wide();
    run_backward(*ref_b, p, t, true);
    for (Tensor* g : {&t.dq, &t.dk, &t.dv}) g->poison();
    const Launches want = expected_launches(p, t, true);
    ASSERT_EQ(want.groups_split, 2);
    const hopper::BackwardLaunchCount b0 = hopper::backward_launch_count();
    run_backward(*hopper_b, p, t, false);
    const hopper::BackwardLaunchCount b1 = hopper::backward_launch_count();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const double gtol = dtype == DType::bf16 ? 5e-2 : 1.5e-2;
    std::string err = launch_error("backward", b1.launches - b0.launches,
                                   b1.with_head_rules - b0.with_head_rules, want);
    err += compare_normalized("dQ", t.dq.host(), t.ref_dq.host(), gtol);
    err += compare_normalized("dK", t.dk.host(), t.ref_dk.host(), gtol);
    err += compare_normalized("dV", t.dv.host(), t.ref_dv.host(), gtol);
    EXPECT_TRUE(err.empty()) << (dtype == DType::bf16 ? "bf16: " : "f16: ") << err;
  }
}

// The one-launch result equals each group run as its own problem (problem_of_group) on its
// heads' slices, with the same tiles, placement and schedule: bit for bit, forward and
// (deterministic) backward. Groups own contiguous heads and whole KV heads, so that a group's
// heads are a strided view.
TEST(HopperHeadRules, OneLaunchEqualsPerGroupCalls) {
  SKIP_WITHOUT_SM90();
  const Backend* hopper_b = backend_named("hopper");
  ASSERT_NE(hopper_b, nullptr);
  Problem p;
  p.rank = 3;
  p.axes[0] = {6, 3, 1, 1, false};
  p.axes[1] = {20, 7, 1, 1, false};
  p.axes[2] = {24, 9, 1, 1, false};
  p.head_rules.groups = 3;
  const AxisRule rules[3][3] = {{{6, 3, 1, 1, false}, {20, 7, 1, 1, false}, {24, 9, 1, 1, false}},
                                {{6, 6, 1, 1, true}, {20, 12, 1, 4, false}, {24, 8, 1, 8, false}},
                                {{6, 2, 1, 1, false}, {20, 20, 1, 1, false}, {24, 3, 1, 1, true}}};
  for (int g = 0; g < 3; ++g)
    for (int a = 0; a < 3; ++a) p.head_rules.axes[g][a] = rules[g][a];
  p.batch = 2;
  p.heads_q = 6;
  p.heads_kv = 3;
  for (int h = 0; h < 6; ++h) p.head_rules.group_of_head[h] = h / 2;  // KV head g: group g
  p.dim_qk = p.dim_v = 64;
  p.dtype = DType::bf16;
  validate(p);
  Tensors t;
  t.build(p, test_seed());
  for (bool persistent : {false, true}) {
    const ScoredTiles tiles = hopper::choose_tiles(p, KernelOptions{});
    KernelOptions kopt;
    kopt.q_tile = tiles.q;
    kopt.kv_tile = tiles.kv;
    kopt.kv_placements =
        tiles.placement == KvPlacement::grid ? KvPlacements::grid : KvPlacements::placed;
    kopt.schedule.kind = persistent ? ForwardSchedule::persistent : ForwardSchedule::one_cta_per_item;
    kopt.schedule.ctas = 3;
    kopt.deterministic = true;
    const ScoredTiles btiles = hopper::choose_backward_tiles(p, KernelOptions{});
    KernelOptions bopt = kopt;
    bopt.q_tile = btiles.q;
    bopt.kv_tile = btiles.kv;

    run_forward(*hopper_b, p, t, false, kopt);
    run_backward(*hopper_b, p, t, false, bopt);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> o = t.o.host(), lse = t.lse.host(), dq = t.dq.host(),
                             dk = t.dk.host(), dv = t.dv.host();

    // Per group: its heads' slices of every tensor, as a problem without head rules.
    Tensor go, glse, gdq, gdk, gdv;
    go.allocate(t.o.shape, p.dtype);
    glse.allocate(t.lse.shape, DType::f32);
    gdq.allocate(t.dq.shape, p.dtype);
    gdk.allocate(t.dk.shape, p.dtype);
    gdv.allocate(t.dv.shape, p.dtype);
    for (Tensor* x : {&go, &glse, &gdq, &gdk, &gdv}) x->poison();
    for (int g = 0; g < 3; ++g) {
      Problem pg = problem_of_group(p, g);
      pg.heads_q = 2;
      pg.heads_kv = 1;
      auto slice = [&](const Tensor& x, int begin, int heads) {
        TensorRef r = x.ref();
        const int hd = x.dtype == DType::f32 ? r.rank - 1 : r.rank - 2;
        r.shape[hd] = heads;
        r.data = static_cast<char*>(r.data) + begin * r.strides[hd] * dtype_size(x.dtype);
        return r;
      };
      ForwardCall fc;
      fc.problem = pg;
      fc.in = AttentionTensors{slice(t.q, 2 * g, 2), slice(t.k, g, 1), slice(t.v, g, 1)};
      fc.out = slice(go, 2 * g, 2);
      TensorRef l = slice(glse, 2 * g, 2);
      fc.lse = &l;
      fc.options = kopt;
      hopper_b->forward(fc);
      BackwardCall bc;
      bc.problem = pg;
      bc.in = fc.in;
      bc.out = slice(t.o, 2 * g, 2);
      bc.lse = slice(t.lse, 2 * g, 2);
      bc.d_out = slice(t.d_o, 2 * g, 2);
      bc.dq = slice(gdq, 2 * g, 2);
      bc.dk = slice(gdk, g, 1);
      bc.dv = slice(gdv, g, 1);
      bc.options = bopt;
      hopper_b->backward(bc);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const char* what = persistent ? "persistent" : "one CTA per item";
    EXPECT_TRUE(go.host() == o) << "O differs, " << what;
    EXPECT_TRUE(glse.host() == lse) << "LSE differs, " << what;
    EXPECT_TRUE(gdq.host() == dq) << "dQ differs, " << what;
    EXPECT_TRUE(gdk.host() == dk) << "dK differs, " << what;
    EXPECT_TRUE(gdv.host() == dv) << "dV differs, " << what;
  }
}

// Groups whose dilations differ cannot share a launch: refused with a reason naming the groups,
// the axis and the dilations (forward and backward).
TEST(HopperHeadRules, DifferentDilationsAreRefused) {
  Problem p;
  p.rank = 2;
  p.axes[0] = {16, 3, 1, 1, false};
  p.axes[1] = {16, 3, 1, 1, false};
  p.head_rules.groups = 2;
  p.head_rules.axes[0][0] = p.head_rules.axes[1][0] = p.axes[0];
  p.head_rules.axes[0][1] = p.axes[1];
  p.head_rules.axes[1][1] = {16, 3, 2, 1, false};
  p.heads_q = 2;
  p.head_rules.group_of_head[1] = 1;
  validate(p);
  std::string why;
  EXPECT_FALSE(hopper::head_rules_supported(p, &why));
  EXPECT_NE(why.find("groups 0 and 1"), std::string::npos) << why;
  EXPECT_NE(why.find("axis 1 (1 and 2)"), std::string::npos) << why;
  p.head_rules.axes[1][1].dilation = 1;
  EXPECT_TRUE(hopper::head_rules_supported(p, &why));
}

}  // namespace
}  // namespace gna
