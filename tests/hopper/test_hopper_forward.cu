// Randomized correctness sweep of the Hopper forward kernel against a float32 GPU loop over the
// core's rule (every 8th configuration also against the library's gpu_reference backend, whose
// outputs are rounded to the input dtype, with twice the tolerance). Fresh random inputs each run, outputs poisoned with NaN before each launch.
// Configurations per rank: GNA_HOPPER_SWEEP (default 24); seed: GNA_HOPPER_SEED (default: time).
// KV tiles: a third of the configurations force placed KV tiles, a third grid ones, a third leave
// the choice to the kernel; the sweep counts the launches whose placed tiles differ from the grid
// and fails when too few did.
// Per-batch counts of additional keys (AttentionTensors::additional_kv_counts): half of the
// configurations with additional keys give random counts (0, all, in between, or outside
// [0, Nadd]: clamped); AdditionalCountsSweep gives them to every configuration and asserts that
// each kind ran. The gpu_reference backend does not take counts: those configurations are not
// cross-checked.
// Tolerances (|out - ref| <= atol + rtol * |ref| per element, and LSE abs error):
//   bf16: atol 2e-2, rtol 2e-2, LSE 2e-2;  fp16: atol 4e-3, rtol 4e-3, LSE 4e-3.
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
#include "half_fill.cuh"
#include "gna/attention_params.hpp"
#include "gna/core/error.hpp"
#include "gna/core/tiling.hpp"
#include "gpu_reference.cuh"
#include "gna/core/column_mask.hpp"
#include "kernels/hopper/forward_launch.hpp"
#include "kernels/hopper/tma_host.hpp"

namespace gna {
namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x << ": " << cudaGetErrorString(x)

bool have_sm90() { return hopper::is_sm90(0); }

const Backend* backend_named(const char* name) {
  for (const Backend& b : registered_backends())
    if (b.name == name) return &b;
  return nullptr;
}
const Backend* hopper_backend() { return backend_named("hopper"); }

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

using hopper_test::fill_random;
using hopper_test::to_float;

struct Config {
  AttentionParams params;
  int rank = 1;
  int extent[3] = {1, 1, 1};
  int batch = 1, heads_q = 1, heads_kv = 1, dim = 64, additional = 0;
  bool bf16 = true;
  bool packed_qkv = false;  // Q, K, V as views of one [B, tokens, 3, H, D] buffer
  TileShape q_tile, kv_tile;  // zeros: default choice
  bool autotune = false;
  ForwardSchedule schedule;  // persistent on a few CTAs: every CTA walks many items
  KvPlacements kv_placements = KvPlacements::either;
  std::vector<int32_t> counts;  // per-batch counts of additional keys (empty: none)

  std::string describe() const {
    char buf[512];
    int n = std::snprintf(buf, sizeof buf, "rank %d extent", rank);
    for (int a = 0; a < rank; ++a)
      n += std::snprintf(buf + n, sizeof buf - n, " %d(K%d d%d s%d%s)", extent[a],
                         params.window[a], params.dilation[a], params.stride[a],
                         params.causal[a] ? " causal" : "");
    n += std::snprintf(buf + n, sizeof buf - n,
                       " B%d Hq%d Hkv%d D%d add%d %s%s scale %g qtile %dx%dx%d kvtile %dx%dx%d%s",
                       batch, heads_q, heads_kv, dim, additional, bf16 ? "bf16" : "fp16",
                       packed_qkv ? " packed" : "", params.scale, q_tile.size[0], q_tile.size[1],
                       q_tile.size[2], kv_tile.size[0], kv_tile.size[1], kv_tile.size[2],
                       autotune ? " autotune" : "");
    const char* kinds[] = {"auto", "grid", "persistent"};
    const char* placements[] = {"grid", "placed", "either"};
    n += std::snprintf(buf + n, sizeof buf - n, " schedule %s ctas %d %s %s, kv tiles %s",
                       kinds[schedule.kind], schedule.ctas,
                       schedule.dynamic ? "dynamic" : "round-robin",
                       schedule.longest_first ? "longest-first" : "plain",
                       placements[static_cast<int>(kv_placements)]);
    std::string s = buf;
    if (!counts.empty()) {
      s += ", counts";
      for (int32_t n : counts) s += " " + std::to_string(n);
    }
    return s;
  }
};

// Which kinds of count a sweep ran: 0, all the additional keys, in between, outside [0, Nadd].
struct CountKinds {
  int zero = 0, all = 0, between = 0, clamped = 0;
  void add(const std::vector<int32_t>& counts, int additional) {
    for (int32_t n : counts) {
      if (n < 0 || n > additional) ++clamped;
      else if (n == 0) ++zero;
      else if (n == additional) ++all;
      else ++between;
    }
  }
};

// Random per-batch counts of `additional` keys, each kind about as often.
std::vector<int32_t> random_counts(std::mt19937_64& rng, int batch, int additional) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<int32_t> counts(batch);
  for (int32_t& n : counts) {
    const int kind = uni(0, 6);
    n = kind <= 1 ? 0 : kind <= 3 ? additional : kind <= 5 ? uni(0, additional)
        : uni(0, 1) ? -uni(1, 9) : additional + uni(1, 200);
  }
  return counts;
}

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
    int K;
    const int pick = uni(0, 9);
    if (pick == 0) {
      K = L / d;  // whole group: dense along this axis (when d == 1)
    } else {
      K = uni(2, std::max(2, std::min(L / d, rank == 1 ? 200 : 16)));
    }
    const int s = uni(0, 2) == 0 ? uni(1, K) : 1;
    c.extent[a] = L;
    c.params.window[a] = K;
    c.params.dilation[a] = d;
    c.params.stride[a] = s;
    c.params.causal[a] = uni(0, 5) == 0;
  }
  c.batch = uni(1, 3);
  c.heads_kv = uni(1, 2);
  c.heads_q = c.heads_kv * uni(1, 3);
  const int dims[4] = {32, 64, 128, 256};
  c.dim = dims[uni(0, 3)];
  c.bf16 = uni(0, 1) == 0;
  c.additional = uni(0, 4) == 0 ? uni(1, 300) : 0;
  if (c.additional > 0 && uni(0, 1) == 0) c.counts = random_counts(rng, c.batch, c.additional);
  c.packed_qkv = uni(0, 3) == 0;
  c.params.scale = uni(0, 3) == 0 ? 0.5f / std::sqrt(static_cast<float>(c.dim)) : 0.f;
  for (int a = 0; a < 3; ++a) c.q_tile.size[a] = c.kv_tile.size[a] = 0;
  c.autotune = uni(0, 9) == 0;
  const int sched = uni(0, 9);
  if (sched >= 4) {
    c.schedule.kind = ForwardSchedule::persistent;
    c.schedule.ctas = uni(1, 7);
    c.schedule.dynamic = uni(0, 1) == 0;
    c.schedule.longest_first = uni(0, 1) == 0;
  } else if (sched == 3) {
    c.schedule.kind = ForwardSchedule::one_cta_per_item;
  }
  if (uni(0, 2) == 0) {  // force random tile shapes (powers of two; 128 tokens, KV 64 at d256)
    for (TileShape* t : {&c.q_tile, &c.kv_tile}) {
      int left = t == &c.kv_tile && c.dim > 128 ? 6 : 7;
      for (int a = 0; a < rank; ++a) {
        const int e = a == rank - 1 ? left : uni(0, left);
        t->size[a] = 1 << e;
        left -= e;
      }
    }
  }
  return c;
}

// How a launch used placed KV tiles, from the core's tiling math on the tiles it ran: whether
// they were placed, whether some Q tile's placed run differs from its grid run (the placed path
// really ran), and whether some run ends past its group on the outermost axis (with batches
// folded into it the next batch's keys, else zero fill, must be masked).
struct PlacedUse {
  bool known = false;  // false with autotune (the timed winner is not reported)
  bool placed = false;
  bool differs = false;
  bool past_end_axis0 = false;
};

PlacedUse placed_use(const Problem& p, const ScoredTiles& t) {
  PlacedUse u;
  u.known = true;
  u.placed = t.placement == KvPlacement::placed;
  if (!u.placed) return u;
  for (int a = 0; a < p.rank; ++a)
    for (int g = 0; g < p.axes[a].dilation; ++g) {
      const int n = group_length(p.axes[a], g), tq = t.q.size[a], tk = t.kv.size[a];
      for (int qt = 0; qt < tiles_along(n, tq); ++qt) {
        const KvTileRun placed = placed_kv_tiles(p.axes[a], n, qt, tq, tk);
        const KvTileRun grid = kv_tile_run(p.axes[a], n, qt, tq, tk, KvPlacement::grid);
        u.differs = u.differs || placed.first != grid.first || placed.count != grid.count;
        if (a == 0) u.past_end_axis0 = u.past_end_axis0 || placed.first + placed.count * tk > n;
      }
    }
  return u;
}

// Runs one configuration; returns an empty string when it passes. `use` (optional) tells how
// the launch used placed KV tiles.
std::string run_config(const Config& c, uint64_t seed, bool cross_check, PlacedUse* use = nullptr) {
  const Backend* be = hopper_backend();
  if (!be) return "no hopper backend registered";
  const int r = c.rank;
  int64_t tokens = 1;
  for (int a = 0; a < r; ++a) tokens *= c.extent[a];
  const int D = c.dim;
  const bool bf16 = c.bf16;
  const DType dt = bf16 ? DType::bf16 : DType::f16;

  // Token tensors [B, spatial.., H, D]: either separate or views of a packed buffer.
  auto make_ref = [&](void* data, int heads, int64_t tok_stride, int64_t head_stride) {
    TensorRef t;
    t.data = data;
    t.dtype = dt;
    t.device = 0;
    t.rank = r + 3;
    t.shape[0] = c.batch;
    for (int a = 0; a < r; ++a) t.shape[1 + a] = c.extent[a];
    t.shape[r + 1] = heads;
    t.shape[r + 2] = D;
    t.strides[r + 2] = 1;
    t.strides[r + 1] = head_stride;
    int64_t s = tok_stride;
    for (int a = r - 1; a >= 0; --a) {
      t.strides[1 + a] = s;
      s *= c.extent[a];
    }
    t.strides[0] = s;
    return t;
  };
  std::vector<void*> allocs;
  auto alloc = [&](size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return static_cast<void*>(nullptr);
    allocs.push_back(p);
    return p;
  };
  auto cleanup = [&] {
    for (void* p : allocs) cudaFree(p);
  };
  TensorRef q, k, v;
  int64_t qkv_elems = 0;
  std::vector<std::pair<void*, int64_t>> inputs;
  if (c.packed_qkv) {
    // [B, tokens, 3, Hq, D] with Hq >= Hkv: K and V use the first Hkv heads of their slots.
    const int64_t tok = 3LL * c.heads_q * D;
    qkv_elems = c.batch * tokens * tok;
    uint16_t* buf = static_cast<uint16_t*>(alloc(qkv_elems * 2));
    inputs.push_back({buf, qkv_elems});
    q = make_ref(buf, c.heads_q, tok, D);
    k = make_ref(buf + c.heads_q * D, c.heads_kv, tok, D);
    v = make_ref(buf + 2 * c.heads_q * D, c.heads_kv, tok, D);
  } else {
    const int64_t nq = c.batch * tokens * c.heads_q * D, nk = c.batch * tokens * c.heads_kv * D;
    void* bq = alloc(nq * 2);
    void* bk = alloc(nk * 2);
    void* bv = alloc(nk * 2);
    inputs.push_back({bq, nq});
    inputs.push_back({bk, nk});
    inputs.push_back({bv, nk});
    q = make_ref(bq, c.heads_q, c.heads_q * D, D);
    k = make_ref(bk, c.heads_kv, c.heads_kv * D, D);
    v = make_ref(bv, c.heads_kv, c.heads_kv * D, D);
  }
  TensorRef add_k, add_v;
  if (c.additional > 0) {
    const int64_t na = static_cast<int64_t>(c.batch) * c.additional * c.heads_kv * D;
    void* ak = alloc(na * 2);
    void* av = alloc(na * 2);
    inputs.push_back({ak, na});
    inputs.push_back({av, na});
    add_k = contiguous_tensor(ak, dt, {c.batch, c.additional, c.heads_kv, D}, 0);
    add_v = contiguous_tensor(av, dt, {c.batch, c.additional, c.heads_kv, D}, 0);
  }
  TensorRef counts;
  if (!c.counts.empty()) {
    void* dc = alloc(c.counts.size() * sizeof(int32_t));
    if (dc)
      cudaMemcpy(dc, c.counts.data(), c.counts.size() * sizeof(int32_t), cudaMemcpyHostToDevice);
    counts = contiguous_tensor(dc, DType::i32, {c.batch}, 0);
  }
  const int64_t no = c.batch * tokens * c.heads_q * D;
  const int64_t nl = c.batch * tokens * c.heads_q;
  void* out = alloc(no * 2);
  float* lse = static_cast<float*>(alloc(nl * 4));
  float* ref_o = static_cast<float*>(alloc(no * 4));
  float* ref_l = static_cast<float*>(alloc(nl * 4));
  float* out_f = static_cast<float*>(alloc(no * 4));
  void* out2 = cross_check ? alloc(no * 2) : out;  // gpu_reference backend output
  float* lse2 = cross_check ? static_cast<float*>(alloc(nl * 4)) : lse;
  float* out2_f = cross_check ? static_cast<float*>(alloc(no * 4)) : out_f;
  for (void* p : allocs)
    if (!p) {
      cleanup();
      return "cudaMalloc failed";
    }
  uint64_t s = seed;
  for (auto& in : inputs) fill_random<<<256, 256>>>(static_cast<uint16_t*>(in.first), in.second, s += 7919, bf16);
  cudaMemset(out, 0xFF, no * 2);  // NaN in both fp16 and bf16
  cudaMemset(lse, 0xFF, nl * 4);

  AttentionTensors ts;
  ts.q = q;
  ts.k = k;
  ts.v = v;
  if (c.additional > 0) {
    ts.additional_k = &add_k;
    ts.additional_v = &add_v;
  }
  if (!c.counts.empty()) ts.additional_kv_counts = &counts;
  ForwardCall call;
  try {
    call.problem = make_problem(c.params, ts);
  } catch (const Error& e) {
    cleanup();
    return std::string("make_problem: ") + e.what();
  }
  call.in = ts;
  int64_t oshape[kMaxTensorRank];
  output_shape(call.problem, oshape);
  call.out = make_ref(out, c.heads_q, c.heads_q * D, D);
  TensorRef lse_t = make_ref(lse, c.heads_q, c.heads_q, 1);
  lse_t.rank = r + 2;
  lse_t.dtype = DType::f32;
  call.lse = &lse_t;
  call.options.q_tile = c.q_tile;
  call.options.kv_tile = c.kv_tile;
  call.options.autotune = c.autotune;
  call.options.schedule = c.schedule;
  call.options.kv_placements = c.kv_placements;
  std::string why;
  if (!be->supports_forward(call, &why)) {
    cleanup();
    return "unsupported: " + why;
  }
  try {
    if (use && !c.autotune) *use = placed_use(call.problem, hopper::choose_tiles(call.problem, call.options));
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
  hopper_test::RefTensors rt{};
  rt.q = q.data;
  rt.k = k.data;
  rt.v = v.data;
  rt.q_tok = q.strides[r];
  rt.q_head = q.strides[r + 1];
  rt.q_batch = q.strides[0];
  rt.k_tok = k.strides[r];
  rt.k_head = k.strides[r + 1];
  rt.k_batch = k.strides[0];
  rt.v_tok = v.strides[r];
  rt.v_head = v.strides[r + 1];
  rt.v_batch = v.strides[0];
  if (c.additional > 0) {
    rt.add_k = add_k.data;
    rt.add_v = add_v.data;
    rt.add_tok = add_k.strides[1];
    rt.add_head = add_k.strides[2];
    rt.add_batch = add_k.strides[0];
  }
  rt.counts = c.counts.empty() ? nullptr : static_cast<const int32_t*>(counts.data);
  rt.o = ref_o;
  rt.lse = ref_l;
  std::vector<float> hx, hxl;  // gpu_reference backend output and LSE
  if (cross_check && c.counts.empty()) {  // the gpu_reference backend takes no counts
    const Backend* ref_be = backend_named("gpu_reference");
    if (!ref_be) {
      cleanup();
      return "no gpu_reference backend registered";
    }
    cudaMemset(out2, 0xFF, no * 2);
    cudaMemset(lse2, 0xFF, nl * 4);
    ForwardCall rc = call;
    rc.out.data = out2;
    TensorRef lse2_t = lse_t;
    lse2_t.data = lse2;
    rc.lse = &lse2_t;
    try {
      ref_be->forward(rc);
    } catch (const Error& e) {
      cleanup();
      return std::string("gpu_reference threw: ") + e.what();
    }
    to_float<<<256, 256>>>(static_cast<uint16_t*>(out2), out2_f, no, bf16);
    if (cudaDeviceSynchronize() != cudaSuccess) {
      cleanup();
      return "gpu_reference failed";
    }
    hx.resize(no);
    hxl.resize(nl);
    cudaMemcpy(hx.data(), out2_f, no * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(hxl.data(), lse2, nl * 4, cudaMemcpyDeviceToHost);
  }
  hopper_test::reference_forward<<<static_cast<int>((nl + 127) / 128), 128>>>(p, rt, bf16);
  to_float<<<256, 256>>>(static_cast<uint16_t*>(out), out_f, no, bf16);
  err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    cleanup();
    return std::string("reference error: ") + cudaGetErrorString(err);
  }
  std::vector<float> ho(no), hr(no), hl(nl), hrl(nl);
  cudaMemcpy(ho.data(), out_f, no * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(hr.data(), ref_o, no * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(hl.data(), lse, nl * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(hrl.data(), ref_l, nl * 4, cudaMemcpyDeviceToHost);
  cleanup();

  const float tol = bf16 ? 2e-2f : 4e-3f;
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < no; ++i) {
    const bool ok = std::isfinite(ho[i]) && std::fabs(ho[i] - hr[i]) <= tol + tol * std::fabs(hr[i]);
    if (!ok && bad++ == 0) first = i;
  }
  int64_t bad_lse = 0, first_lse = -1;
  for (int64_t i = 0; i < nl; ++i) {
    const bool ok = std::isfinite(hl[i]) && std::fabs(hl[i] - hrl[i]) <= tol;
    if (!ok && bad_lse++ == 0) first_lse = i;
  }
  int64_t bad_cross = 0;
  for (size_t i = 0; i < hx.size(); ++i)
    bad_cross += !(std::isfinite(hx[i]) && std::fabs(ho[i] - hx[i]) <= 2 * tol + 2 * tol * std::fabs(hx[i]));
  for (size_t i = 0; i < hxl.size(); ++i)
    bad_cross += !(std::isfinite(hxl[i]) && std::fabs(hl[i] - hxl[i]) <= 2 * tol);
  if (bad_cross > 0) return std::to_string(bad_cross) + " elements differ from the gpu_reference backend";
  if (bad == 0 && bad_lse == 0) return "";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%lld bad O (first %lld: %g vs %g), %lld bad LSE (first %lld: %g vs %g)",
                static_cast<long long>(bad), static_cast<long long>(first),
                first >= 0 ? ho[first] : 0.f, first >= 0 ? hr[first] : 0.f,
                static_cast<long long>(bad_lse), static_cast<long long>(first_lse),
                first_lse >= 0 ? hl[first_lse] : 0.f, first_lse >= 0 ? hrl[first_lse] : 0.f);
  return buf;
}

void sweep(int rank) {
  if (!have_sm90()) GTEST_SKIP() << "no sm_90 device";
  const int count = env_int("GNA_HOPPER_SWEEP", 24);
  const uint64_t seed = static_cast<uint64_t>(env_int(
      "GNA_HOPPER_SEED",
      static_cast<int>(std::chrono::steady_clock::now().time_since_epoch().count() & 0x7fffffff)));
  std::mt19937_64 rng(seed * 31 + rank);
  int failures = 0, unsupported = 0, cross_checked = 0;
  int placed = 0, differs = 0, past_end = 0, placed_persistent = 0;
  const KvPlacements placements[3] = {KvPlacements::placed, KvPlacements::either,
                                      KvPlacements::grid};
  // The configurations to run, then more (up to 4x) until enough launches ran placed KV tiles
  // that differ from the grid: whether a random rule gives such tiles is chance.
  const int wanted_differs = count / 8;
  int runs = 0;
  for (int i = 0; i < count || (differs < wanted_differs && i < 4 * count); ++i) {
    ++runs;
    Config c = random_config(rng, rank);
    c.kv_placements = placements[i % 3];
    const bool cross = i % 8 == 0 && c.counts.empty();
    cross_checked += cross;
    PlacedUse use;
    const std::string res = run_config(c, rng(), cross, &use);
    if (use.placed) {
      ++placed;
      differs += use.differs;
      past_end += use.differs && use.past_end_axis0;
      placed_persistent += use.differs && c.schedule.kind == ForwardSchedule::persistent;
    }
    if (res.rfind("unsupported", 0) == 0) ++unsupported;  // every generated case is supported
    if (!res.empty()) {
      ++failures;
      if (failures <= 10) ADD_FAILURE() << c.describe() << ": " << res;
    }
  }
  std::printf(
      "hopper sweep rank %d: %d configurations (%d also against gpu_reference), %d failures, "
      "%d unsupported (seed %llu); placed KV tiles: %d launches, %d differing from the grid (%d "
      "running past the outermost axis, %d persistent)\n",
      rank, runs, cross_checked, failures, unsupported, static_cast<unsigned long long>(seed),
      placed, differs, past_end, placed_persistent);
  EXPECT_EQ(failures, 0);
  // A third of the configurations force placed tiles (a tenth of them autotuned, whose tiles are
  // not reported); most of those differ from the grid.
  EXPECT_GE(differs, wanted_differs)
      << "too few launches ran placed KV tiles that differ from the grid in " << runs << " runs";
}

// A configuration with the given rule per axis ({extent, window, dilation, stride, causal}) and
// forced tiles.
Config fixed_config(std::initializer_list<AxisRule> axes, TileShape q, TileShape kv, int batch,
                    int heads_q, int heads_kv, int dim, int additional) {
  Config c;
  c.rank = c.params.rank = static_cast<int>(axes.size());
  int a = 0;
  for (const AxisRule& r : axes) {
    c.extent[a] = r.extent;
    c.params.window[a] = r.window;
    c.params.dilation[a] = r.dilation;
    c.params.stride[a] = r.stride;
    c.params.causal[a] = r.causal;
    ++a;
  }
  c.q_tile = q;
  c.kv_tile = kv;
  c.batch = batch;
  c.heads_q = heads_q;
  c.heads_kv = heads_kv;
  c.dim = dim;
  c.additional = additional;
  return c;
}

// Placed KV tiles on hand-picked problems whose placed tiles differ from the grid (checked), each
// run with grid and with placed tiles, one CTA per item and persistent, bf16 and fp16: runs past
// the outermost axis with batches folded into it (the next batch's keys masked; dilated too),
// causal, dilation with strides, additional keys, grouped heads, head dim 256 (64-key tiles).
TEST(HopperForward, PlacedKvTiles) {
  if (!have_sm90()) GTEST_SKIP() << "no sm_90 device";
  struct Case {
    const char* name;
    Config c;
    bool past_end_axis0;  // a placed run ends past the (folded) outermost axis
  };
  const Case cases[] = {
      {"folded axis 0, past its end",
       fixed_config({{10, 5, 1, 1, false}, {12, 5, 1, 1, false}, {16, 7, 1, 1, false}},
                    TileShape{{2, 8, 8}}, TileShape{{4, 4, 8}}, 3, 2, 1, 64, 0),
       true},
      {"dilated folded axis 0",
       fixed_config({{12, 4, 2, 1, false}, {10, 5, 1, 1, false}, {16, 7, 1, 1, false}},
                    TileShape{{4, 4, 8}}, TileShape{{4, 4, 8}}, 2, 2, 2, 128, 0),
       true},
      {"causal 1-D", fixed_config({{1000, 300, 1, 1, true}}, TileShape{{128, 0, 0}},
                                  TileShape{{128, 0, 0}}, 2, 2, 1, 128, 0),
       false},
      {"dilated strided 2-D",
       fixed_config({{40, 7, 2, 1, false}, {56, 9, 3, 2, false}}, TileShape{{8, 16, 0}},
                    TileShape{{16, 8, 0}}, 2, 4, 2, 64, 0),
       false},
      {"causal 3-D with additional keys",
       fixed_config({{12, 6, 1, 1, true}, {16, 8, 1, 1, false}, {20, 8, 1, 1, false}},
                    TileShape{{2, 8, 8}}, TileShape{{2, 8, 8}}, 2, 3, 1, 32, 77),
       true},
      {"head dim 256", fixed_config({{32, 9, 1, 1, false}, {48, 13, 1, 1, false}},
                                    TileShape{{8, 16, 0}}, TileShape{{8, 8, 0}}, 1, 2, 2, 256, 0),
       false},
  };
  std::mt19937_64 rng(env_int("GNA_HOPPER_SEED", 7));
  int runs = 0;
  for (const Case& k : cases)
    for (KvPlacements placement : {KvPlacements::grid, KvPlacements::placed})
      for (int persistent = 0; persistent < 2; ++persistent)
        for (int bf16 = 0; bf16 < 2; ++bf16) {
          Config c = k.c;
          c.kv_placements = placement;
          c.bf16 = bf16 != 0;
          if (persistent) {
            c.schedule.kind = ForwardSchedule::persistent;
            c.schedule.ctas = 3;
          } else {
            c.schedule.kind = ForwardSchedule::one_cta_per_item;
          }
          PlacedUse use;
          const std::string res = run_config(c, rng(), runs++ % 4 == 0, &use);
          EXPECT_EQ(res, "") << k.name << ": " << c.describe();
          ASSERT_TRUE(use.known);
          EXPECT_EQ(use.placed, placement == KvPlacements::placed) << k.name;
          if (use.placed) {
            EXPECT_TRUE(use.differs) << k.name << ": placed tiles equal the grid's";
            if (k.past_end_axis0) EXPECT_TRUE(use.past_end_axis0) << k.name;
          }
        }
}

TEST(HopperForward, RandomSweepRank1) { sweep(1); }
TEST(HopperForward, RandomSweepRank2) { sweep(2); }
TEST(HopperForward, RandomSweepRank3) { sweep(3); }

// Every configuration with additional keys and per-batch counts (ranks 1 to 3, 2 to 4 batch
// items); each kind of count must have run.
TEST(HopperForward, AdditionalCountsSweep) {
  if (!have_sm90()) GTEST_SKIP() << "no sm_90 device";
  const int count = env_int("GNA_HOPPER_SWEEP", 24);
  const uint64_t seed = static_cast<uint64_t>(env_int(
      "GNA_HOPPER_SEED",
      static_cast<int>(std::chrono::steady_clock::now().time_since_epoch().count() & 0x7fffffff)));
  std::mt19937_64 rng(seed * 31 + 7);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  CountKinds kinds;
  int failures = 0;
  for (int i = 0; i < count; ++i) {
    Config c = random_config(rng, 1 + i % 3);
    c.batch = uni(2, 4);
    c.additional = uni(1, 300);
    c.counts = random_counts(rng, c.batch, c.additional);
    kinds.add(c.counts, c.additional);
    const std::string res = run_config(c, rng(), false);
    if (!res.empty() && ++failures <= 10) ADD_FAILURE() << c.describe() << ": " << res;
  }
  std::printf("hopper counts sweep: %d configurations, %d failures (seed %llu); counts: %d zero, "
              "%d all, %d between, %d clamped\n",
              count, failures, static_cast<unsigned long long>(seed), kinds.zero, kinds.all,
              kinds.between, kinds.clamped);
  EXPECT_EQ(failures, 0);
  EXPECT_GT(kinds.zero, 0);
  EXPECT_GT(kinds.all, 0);
  EXPECT_GT(kinds.between, 0);
  EXPECT_GT(kinds.clamped, 0);
}

// One column mask per case on the device (the device's low_bits and log2_of_pow2 are not the
// host's): case k is tile shape size[k], thread quad quad[k], axis axis[k], window [lo, hi).
struct ColumnMaskCase {
  int size[3], quad, axis, lo, hi;
};
__global__ void column_masks_on_device(const ColumnMaskCase* cases, int n, uint32_t* masks) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const ColumnMaskCase c = cases[k];
  AxisColumns axes[3];
  tile_columns(c.size, c.quad, axes);
  const AxisColumns& ax = axes[c.axis];
  masks[k] = ax.within(c.lo - ax.base, c.hi - ax.base);
}

// The partial pairs' column masks (column_mask.hpp) built on the device equal the per-column
// test they replace (lo <= coordinate < hi) for every tile shape of 128 and of 64 tokens, every
// quad and axis, and windows from before the tile to past its end.
TEST(HopperForward, ColumnMasksOnDevice) {
  if (!have_sm90()) GTEST_SKIP() << "no sm_90 device";
  std::vector<ColumnMaskCase> cases;
  std::vector<uint32_t> want;
  for (int tokens_log2 : {7, 6})
    for (int l0 = 0; l0 <= tokens_log2; ++l0)
      for (int l1 = 0; l0 + l1 <= tokens_log2; ++l1) {
        const int log2[3] = {l0, l1, tokens_log2 - l0 - l1};
        for (int quad = 0; quad < 4; ++quad)
          for (int a = 0; a < 3; ++a) {
            const int size = 1 << log2[a];
            int shift = 0;
            for (int b = a + 1; b < 3; ++b) shift += log2[b];
            for (int lo = -2; lo <= size + 2; ++lo)
              for (int hi = lo - 1; hi <= size + 2; ++hi) {
                ColumnMaskCase c{{1 << log2[0], 1 << log2[1], 1 << log2[2]}, quad, a, lo, hi};
                uint32_t m = 0;
                for (int j = 0; j < (1 << tokens_log2) / 8; ++j)
                  for (int e = 0; e < 2; ++e) {
                    const int x = ((j * 8 + quad * 2 + e) >> shift) & (size - 1);
                    if (x >= lo && x < hi) m |= 1u << (2 * j + e);
                  }
                cases.push_back(c);
                want.push_back(m);
              }
          }
      }
  const int n = static_cast<int>(cases.size());
  ColumnMaskCase* d_cases = nullptr;
  uint32_t* d_masks = nullptr;
  CUDA_OK(cudaMalloc(&d_cases, n * sizeof(ColumnMaskCase)));
  CUDA_OK(cudaMalloc(&d_masks, n * sizeof(uint32_t)));
  CUDA_OK(cudaMemcpy(d_cases, cases.data(), n * sizeof(ColumnMaskCase), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d_masks, 0xA5, n * sizeof(uint32_t)));
  column_masks_on_device<<<(n + 255) / 256, 256>>>(d_cases, n, d_masks);
  CUDA_OK(cudaGetLastError());
  std::vector<uint32_t> got(n);
  CUDA_OK(cudaMemcpy(got.data(), d_masks, n * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  cudaFree(d_cases);
  cudaFree(d_masks);
  int bad = 0;
  for (int k = 0; k < n; ++k) {
    const ColumnMaskCase& c = cases[k];
    const uint32_t used = c.size[0] * c.size[1] * c.size[2] == 128 ? 0xffffffffu : 0xffffu;
    if ((got[k] & used) != want[k] && bad++ < 5)
      ADD_FAILURE() << "tile " << c.size[0] << "x" << c.size[1] << "x" << c.size[2] << " quad "
                    << c.quad << " axis " << c.axis << " window [" << c.lo << ", " << c.hi
                    << "): " << std::hex << got[k] << " want " << want[k];
  }
  std::printf("hopper column masks on the device: %d cases, %d wrong\n", n, bad);
  EXPECT_EQ(bad, 0);
}

TEST(HopperForward, RejectsHeadDim96WithReason) {
  if (!have_sm90()) GTEST_SKIP() << "no sm_90 device";
  const Backend* be = hopper_backend();
  ASSERT_NE(be, nullptr);
  ForwardCall call;
  call.problem.rank = 1;
  call.problem.dtype = DType::bf16;
  call.problem.dim_qk = call.problem.dim_v = 96;
  int dummy = 0;
  call.in.q = contiguous_tensor(&dummy, DType::bf16, {1, 16, 1, 96}, 0);
  call.in.k = call.in.v = call.out = call.in.q;
  call.in.q.data = call.in.k.data = call.in.v.data = call.out.data = nullptr;
  std::string why;
  EXPECT_FALSE(be->supports_forward(call, &why));
  EXPECT_NE(why.find("head dim 96"), std::string::npos) << why;
}

}  // namespace
}  // namespace gna
