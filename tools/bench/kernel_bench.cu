// gna-kernel-bench: times forward, backward and forward + backward of the registered device
// backends with CUDA events (median of repetitions after warm-up, inputs random), prints a table
// and writes JSON. The cases come from the benchmark case table (gna/sim/cases.hpp) by set or by
// name, or from --shape. Effective TFLOP/s count attended pairs only: forward
// 4 * B * H * N * keys_per_query * D, backward 2.5x that. --image runs the image-model set (small
// windows, batches, dilation), also reporting bytes moved per time against a device copy measured
// in the same run; --graph times CUDA-graph replays of each call (kernels only, without the
// host's dispatch between calls); --schedule times each forward schedule of the Hopper backend
// (A/B in one run); --tiles forces tile shapes; --head-windows times per-head windows in one call
// against one call per window (head_windows_rows).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "bench_support/bench_support.cuh"
#include "gna/gna.hpp"
#include "gna/sim/cases.hpp"

namespace {

using namespace gna;

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t e = (call);                                                           \
    if (e != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e));          \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

__global__ void fill_random(uint16_t* p, int64_t n, uint32_t seed, bool bf16) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const float v = (h & 0xffff) / 32768.f - 1.f;  // [-1, 1)
    if (bf16) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      p[i] = static_cast<uint16_t>(bits >> 16);
    } else {
      p[i] = __half_as_ushort(__float2half(v));
    }
  }
}

// A case of the table, or one given with --shape (which owns its name).
struct Case {
  std::string name;
  sim::BenchCase c;
};

struct Tensor {
  void* ptr = nullptr;
  TensorRef ref;
  Tensor(std::vector<int64_t> shape, DType t, uint32_t seed) {
    ref.dtype = t;
    ref.device = 0;
    ref.rank = static_cast<int>(shape.size());
    int64_t s = 1;
    for (int i = ref.rank - 1; i >= 0; --i) {
      ref.shape[i] = shape[i];
      ref.strides[i] = s;
      s *= shape[i];
    }
    CHECK(cudaMalloc(&ptr, s * dtype_size(t)));
    ref.data = ptr;
    if (t == DType::f32) {
      CHECK(cudaMemset(ptr, 0, s * 4));
    } else {
      fill_random<<<1024, 256>>>(static_cast<uint16_t*>(ptr), s, seed, t == DType::bf16);
      CHECK(cudaGetLastError());
    }
  }
  ~Tensor() { cudaFree(ptr); }
  int64_t bytes() const { return ref.numel() * dtype_size(ref.dtype); }
};

// Warm-up before timing: at least `warmup` calls and at least kWarmupSeconds of back-to-back
// work, so that the GPU has left its idle clocks (a case timed right after start-up or a pause
// ran up to 20% slow on an H100: the dense forward, first in the list, at 9 ms per call).
constexpr double kWarmupSeconds = 0.25;

struct Time {
  double median_ms, min_ms;
};

template <typename F>
Time time_ms(F&& f, int warmup, int reps) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  for (int i = 0; i < warmup || seconds() < kWarmupSeconds; ++i) {
    f();
    CHECK(cudaDeviceSynchronize());
  }
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) t.push_back(bench::event_ms(a, b, f));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

// Median per call of `replays` back-to-back replays of a CUDA graph holding one call of f on
// `stream` (capture fails where a backend synchronizes: then -1).
template <typename F>
Time graph_time_ms(F&& f, cudaStream_t stream, int warmup, int reps, int replays = 20) {
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  bool ok = true;
  try {
    f();
  } catch (const Error&) {
    ok = false;
  }
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || !ok || !graph) {
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    return {-1, -1};
  }
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  auto run = [&] {
    for (int i = 0; i < replays; ++i) CHECK(cudaGraphLaunch(exec, stream));
  };
  const Time t = time_ms(run, warmup, reps);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return {t.median_ms / replays, t.min_ms / replays};
}

struct Row {
  std::string what, backend, pass;
  double ms, value;
  std::string unit;
  double bytes = 0;  // fewest bytes the pass must move (image cases), 0: not reported
  double min_ms = 0;
  std::string schedule;
};

std::vector<std::string> split(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(sep, b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

// A case from --shape EXTENTS:WINDOW:STRIDE:HEADS (axes joined by 'x', e.g.
// 128x128:128x128:1x1:16); false if the text is not of that form.
bool parse_shape(const std::string& text, int head_dim, Case* out) {
  const std::vector<std::string> parts = split(text, ':');
  if (parts.size() != 4) return false;
  const std::vector<std::string> e = split(parts[0], 'x'), w = split(parts[1], 'x'),
                                  st = split(parts[2], 'x');
  if (e.empty() || e.size() > 3 || w.size() != e.size() || st.size() != e.size()) return false;
  out->name = "shape " + text + (head_dim != 128 ? " d" + std::to_string(head_dim) : "");
  sim::BenchCase& c = out->c;
  c = sim::BenchCase{};
  c.model = "shape";
  c.sets = "";
  c.dtype = "bf16";
  c.rank = static_cast<int>(e.size());
  for (int a = 0; a < 3; ++a) {
    const bool on = a < c.rank;
    c.extent[a] = on ? std::atoi(e[a].c_str()) : 1;
    c.window[a] = on ? std::atoi(w[a].c_str()) : 1;
    c.stride[a] = on ? std::atoi(st[a].c_str()) : 1;
    c.dilation[a] = 1;
    if (c.extent[a] < 1 || c.window[a] < 1 || c.stride[a] < 1) return false;
  }
  c.batch = 1;
  c.heads = std::atoi(parts[3].c_str());
  c.head_dim = head_dim;
  return c.heads >= 1;
}

// --kv-tiles NAME: where the Hopper and portable forwards' KV tiles start; --q-tiles NAME: where
// the Hopper and portable backwards' Q tiles start (other backends ignore both).
bool parse_kv_tiles(const std::string& name, KvPlacements* k) {
  if (name == "either") *k = KvPlacements::either;
  else if (name == "grid") *k = KvPlacements::grid;
  else if (name == "placed") *k = KvPlacements::placed;
  else return false;
  return true;
}

// --schedule NAME: a forward schedule of the Hopper backend (other backends ignore it).
bool parse_schedule(const std::string& name, ForwardSchedule* s) {
  *s = ForwardSchedule{};
  if (name == "auto") return true;
  if (name == "grid") {
    s->kind = ForwardSchedule::one_cta_per_item;
    return true;
  }
  s->kind = ForwardSchedule::persistent;
  if (name == "persistent") return true;
  if (name == "persistent-static") {
    s->dynamic = false;
    return true;
  }
  if (name == "persistent-plain") {
    s->longest_first = false;
    return true;
  }
  return false;
}

// --tiles Q:KV (axes joined by 'x', e.g. 1x8x8:1x8x8): forced tile shapes for every call.
bool parse_tiles(const std::string& text, KernelOptions* k) {
  const std::vector<std::string> parts = split(text, ':');
  if (parts.size() != 2) return false;
  TileShape* shapes[2] = {&k->q_tile, &k->kv_tile};
  for (int i = 0; i < 2; ++i) {
    const std::vector<std::string> sides = split(parts[i], 'x');
    if (sides.empty() || sides.size() > 3) return false;
    for (size_t a = 0; a < sides.size(); ++a) {
      shapes[i]->size[a] = std::atoi(sides[a].c_str());
      if (shapes[i]->size[a] < 1) return false;
    }
  }
  return true;
}


// --head-windows W1,W2,..: windows (axes joined by 'x') of head-rule groups; false if malformed.
bool parse_head_windows(const std::string& text, int rank, std::vector<std::vector<int>>* out) {
  out->clear();
  for (const std::string& w : split(text)) {
    const std::vector<std::string> axes = split(w, 'x');
    if (static_cast<int>(axes.size()) != rank) return false;
    std::vector<int> v;
    for (const std::string& a : axes) v.push_back(std::atoi(a.c_str()));
    out->push_back(v);
  }
  return out->size() >= 1 && static_cast<int>(out->size()) <= kMaxHeadGroups;
}

// Per-head windows: the case's heads take the windows round robin (head h: window h % groups,
// the case's stride, dilation and causal flags), timed on `backend` as one call with head rules
// ("head rules") and as one call per window on that window's heads ("per window"), forward and
// backward (O and LSE from the same backend's forward).
void head_windows_rows(const Case& k, const Problem& base, const std::vector<std::vector<int>>& ws,
                       const Backend& b, const KernelOptions& kopt, int warmup, int reps,
                       bool want_fwd, bool want_bwd, std::vector<Row>* rows) {
  const int groups = static_cast<int>(ws.size());
  Problem p = base;
  p.head_rules.groups = groups;
  for (int g = 0; g < groups; ++g)
    for (int a = 0; a < p.rank; ++a) {
      p.head_rules.axes[g][a] = p.axes[a];
      p.head_rules.axes[g][a].window = ws[g][a];
      if (p.head_rules.axes[g][a].stride > ws[g][a]) p.head_rules.axes[g][a].stride = ws[g][a];
    }
  for (int h = 0; h < p.heads_q; ++h) p.head_rules.group_of_head[h] = h % groups;
  for (int a = 0; a < p.rank; ++a) p.axes[a] = p.head_rules.axes[0][a];
  try {
    validate(p);
  } catch (const Error& e) {
    std::printf("# %s --head-windows: %s\n", k.name.c_str(), e.what());
    return;
  }
  if (p.heads_kv != p.heads_q || p.additional_kv > 0) {
    std::printf("# %s --head-windows: needs a case without GQA or additional tokens\n",
                k.name.c_str());
    return;
  }
  // One set of tensors per call: all heads, and per window its heads.
  struct Set {
    Problem p;
    std::vector<std::unique_ptr<Tensor>> t;  // q, k, v, o, d_o, dq, dk, dv, lse
  };
  auto make_set = [&](const Problem& sp, uint32_t seed) {
    Set s{sp, {}};
    std::vector<int64_t> shape{sp.batch};
    for (int a = 0; a < sp.rank; ++a) shape.push_back(sp.axes[a].extent);
    shape.push_back(sp.heads_q);
    std::vector<int64_t> lse_shape = shape;
    shape.push_back(sp.dim_qk);
    for (int i = 0; i < 8; ++i) s.t.emplace_back(new Tensor(shape, sp.dtype, seed + i));
    s.t.emplace_back(new Tensor(lse_shape, DType::f32, seed + 8));
    return s;
  };
  std::vector<Set> sets;
  sets.push_back(make_set(p, 100));
  for (int g = 0; g < groups; ++g) {
    Problem pg = problem_of_group(p, g);
    int heads = 0;
    for (int h = 0; h < p.heads_q; ++h) heads += p.head_rules.group_of_head[h] == g;
    if (heads == 0) continue;
    pg.heads_q = pg.heads_kv = heads;
    sets.push_back(make_set(pg, 200 + 16 * g));
  }
  auto fwd = [&](Set& s) {
    ForwardCall c;
    c.problem = s.p;
    c.in = AttentionTensors{s.t[0]->ref, s.t[1]->ref, s.t[2]->ref};
    c.out = s.t[3]->ref;
    c.lse = &s.t[8]->ref;
    c.options = kopt;
    b.forward(c);
  };
  auto bwd = [&](Set& s) {
    BackwardCall c;
    c.problem = s.p;
    c.in = AttentionTensors{s.t[0]->ref, s.t[1]->ref, s.t[2]->ref};
    c.out = s.t[3]->ref;
    c.lse = s.t[8]->ref;
    c.d_out = s.t[4]->ref;
    c.dq = s.t[5]->ref;
    c.dk = s.t[6]->ref;
    c.dv = s.t[7]->ref;
    c.options = kopt;
    b.backward(c);
  };
  const double flops = 4.0 * p.batch * p.heads_q * double(p.tokens()) * mean_keys_per_query(p) *
                       p.dim_qk;
  const std::string what = k.name + " (head windows " + std::to_string(groups) + ")";
  try {
    for (Set& s : sets) fwd(s);  // O and LSE for the backward
    CHECK(cudaDeviceSynchronize());
    for (int mode = 0; mode < 2; ++mode) {
      const std::string label = b.name + (mode == 0 ? " [head rules, 1 call]"
                                                    : " [per window, " +
                                                          std::to_string(sets.size() - 1) +
                                                          " calls]");
      auto over = [&](auto&& f) {
        return [&, f] {
          if (mode == 0) f(sets[0]);
          else for (size_t i = 1; i < sets.size(); ++i) f(sets[i]);
        };
      };
      if (want_fwd) {
        const Time t = time_ms(over(fwd), warmup, reps);
        rows->push_back({what, label, "forward", t.median_ms, flops / t.median_ms / 1e9,
                         "TFLOP/s", 0, t.min_ms, ""});
      }
      if (want_bwd) {
        const Time t = time_ms(over(bwd), warmup, reps);
        rows->push_back({what, label, "backward", t.median_ms, 2.5 * flops / t.median_ms / 1e9,
                         "TFLOP/s", 0, t.min_ms, ""});
      }
    }
  } catch (const Error& e) {
    std::printf("# %s --head-windows on %s: %s\n", k.name.c_str(), b.name.c_str(), e.what());
  }
}

const char kUsage[] =
    "usage: gna-kernel-bench [--set NAME | --image] [--cases a,b] [--list]\n"
    "                        [--backends portable,...] [--passes fwd,bwd,fwd+bwd]\n"
    "                        [--forward-only]\n"
    "                        [--reps N] [--warmup N] [--quick] [--json file]\n"
    "                        [--shape EXTENTS:WINDOW:STRIDE:HEADS]... [--head-dim D]\n"
    "                        [--tiles Q:KV] [--schedule S,...] [--kv-tiles K,...]\n"
    "                        [--q-tiles K,...]\n"
    "                        [--deterministic] [--graph] [--forward-backend NAME]\n"
    "                        [--head-windows W1,W2,...]\n"
    "  Cases come from the benchmark case table: --set picks a set (kernel, the default; image,\n"
    "  peers, quick, hopper, hopper-bwd), --cases names cases of the whole table instead, --list\n"
    "  lists them with their sets. --shape adds a bf16 case (e.g. 128x128:128x128:1x1:16) with\n"
    "  head dim D (default 128); with --shape and no --cases or --set only the --shape cases\n"
    "  run.\n"
    "  --passes: fwd, bwd (O and LSE from the same backend's forward), fwd+bwd (default\n"
    "  fwd,bwd).\n"
    "  --tiles forces the Q and KV tile shapes of every call (e.g. 1x8x8:1x8x8; the portable\n"
    "  backward runs its 64-key variant for KV tiles of at most 64 tokens at head dims 64 and\n"
    "  128). --schedule times each Hopper forward schedule given (auto, grid, persistent,\n"
    "  persistent-static, persistent-plain). --kv-tiles times each KV tile placement of the\n"
    "  Hopper and portable forwards given (either: its choice, the default; grid; placed).\n"
    "  --q-tiles times\n"
    "  each Q tile placement of the Hopper and portable backwards given (either, the default;\n"
    "  grid; placed; the Hopper's placed kernels exist at head dim 128 only, its other head dims\n"
    "  run the grid).\n"
    "  --deterministic: the backward's deterministic mode.\n"
    "  --forward-backend: the backend whose forward gives the backward its O and LSE (and runs\n"
    "  the forward passes; default: the backend under test).\n"
    "  --image is --set image, with bytes moved per time against a device copy of the same run;\n"
    "  --graph times replays of a CUDA graph of each call (kernels only).\n"
    "  --head-windows (e.g. 18x24x24,30x48x48): per-head windows, heads round robin over them,\n"
    "  on each backend that runs head rules: one call with the rules against one call per\n"
    "  window on its heads (forward and backward of --passes; cases without GQA).\n";

std::string axes_text(const int* v, int rank) {
  std::string s;
  for (int a = 0; a < rank; ++a) s += (a ? "x" : "") + std::to_string(v[a]);
  return s;
}

void list_cases() {
  std::printf("| case | sets | layout | window | stride | dilation | causal | batch | heads | dim "
              "| dtype | additional tokens |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const sim::BenchCase& c : sim::bench_cases()) {
    int causal[3];
    for (int a = 0; a < 3; ++a) causal[a] = c.causal[a] ? 1 : 0;
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %d | %d | %d | %s | %d |\n", c.name, c.sets,
                axes_text(c.extent, c.rank).c_str(), axes_text(c.window, c.rank).c_str(),
                axes_text(c.stride, c.rank).c_str(), axes_text(c.dilation, c.rank).c_str(),
                axes_text(causal, c.rank).c_str(), c.batch, c.heads, c.head_dim, c.dtype,
                c.additional_tokens);
  }
}

DType dtype_named(const char* name) {
  if (!std::strcmp(name, "f16")) return DType::f16;
  return DType::bf16;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, only, backends_arg, tiles_text, set, passes_arg = "fwd,bwd";
  std::string forward_backend, head_windows_arg;
  std::string schedules_arg = "auto", kv_tiles_arg = "either", q_tiles_arg = "either";
  KernelOptions forced;
  int reps = 10, warmup = 2, shape_dim = 128;
  bool quick = false, image = false, graph = false, deterministic = false;
  std::vector<std::string> shape_texts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--json") json_path = next();
    else if (a == "--cases") only = next();
    else if (a == "--set") set = next();
    else if (a == "--backends") backends_arg = next();
    else if (a == "--reps") reps = std::atoi(next().c_str());
    else if (a == "--warmup") warmup = std::atoi(next().c_str());
    else if (a == "--quick") quick = true;
    else if (a == "--forward-only") passes_arg = "fwd";
    else if (a == "--passes") passes_arg = next();
    else if (a == "--image") image = true;
    else if (a == "--graph") graph = true;
    else if (a == "--deterministic") deterministic = true;
    else if (a == "--forward-backend") forward_backend = next();
    else if (a == "--schedule") schedules_arg = next();
    else if (a == "--kv-tiles") kv_tiles_arg = next();
    else if (a == "--q-tiles") q_tiles_arg = next();
    else if (a == "--head-windows") head_windows_arg = next();
    else if (a == "--list") {
      list_cases();
      return 0;
    }
    else if (a == "--head-dim") {
      const std::string text = next();
      shape_dim = std::atoi(text.c_str());
      if (shape_dim <= 0) {
        std::fprintf(stderr, "gna-kernel-bench: --head-dim '%s' is not a positive integer\n",
                     text.c_str());
        return 2;
      }
    }
    else if (a == "--tiles") {
      tiles_text = next();
      if (!parse_tiles(tiles_text, &forced)) {
        std::fprintf(stderr, "gna-kernel-bench: --tiles '%s' is not Q:KV (axes joined by 'x', "
                     "e.g. 1x8x8:1x8x8)\n", tiles_text.c_str());
        return 2;
      }
    }
    else if (a == "--shape") {
      shape_texts.push_back(next());
    } else {
      std::printf("%s", kUsage);
      return a == "--help" ? 0 : 2;
    }
  }
  if (image) set = "image";
  const std::vector<std::string> passes = split(passes_arg);
  for (const std::string& p : passes) {
    if (p != "fwd" && p != "bwd" && p != "fwd+bwd") {
      std::fprintf(stderr, "gna-kernel-bench: --passes '%s': expected fwd, bwd and/or fwd+bwd\n",
                   passes_arg.c_str());
      return 2;
    }
  }
  auto wants = [&](const char* p) {
    return std::find(passes.begin(), passes.end(), p) != passes.end();
  };
  std::vector<std::pair<std::string, ForwardSchedule>> schedules;
  for (const std::string& name : split(schedules_arg)) {
    ForwardSchedule s;
    if (!parse_schedule(name, &s)) {
      std::fprintf(stderr, "gna-kernel-bench: --schedule '%s': expected auto, grid, persistent, "
                   "persistent-static or persistent-plain\n", name.c_str());
      return 2;
    }
    schedules.push_back({name, s});
  }
  std::vector<std::pair<std::string, KvPlacements>> kv_tiles;
  for (const std::string& name : split(kv_tiles_arg)) {
    KvPlacements k;
    if (!parse_kv_tiles(name, &k)) {
      std::fprintf(stderr, "gna-kernel-bench: --kv-tiles '%s': expected either, grid or placed\n",
                   name.c_str());
      return 2;
    }
    kv_tiles.push_back({name, k});
  }
  std::vector<std::pair<std::string, KvPlacements>> q_tiles;
  for (const std::string& name : split(q_tiles_arg)) {
    KvPlacements k;
    if (!parse_kv_tiles(name, &k)) {
      std::fprintf(stderr, "gna-kernel-bench: --q-tiles '%s': expected either, grid or placed\n",
                   name.c_str());
      return 2;
    }
    q_tiles.push_back({name, k});
  }
  // The cases: the named ones (--cases) or else a set's, then the --shape ones; the kernel set
  // when none is given.
  std::vector<Case> cases;
  std::vector<std::string> named = split(only);
  for (const std::string& name : named) {
    const sim::BenchCase* c = sim::find_bench_case(name);
    if (c == nullptr) {
      std::fprintf(stderr, "gna-kernel-bench: --cases: no case '%s' (--list lists them)\n",
                   name.c_str());
      return 2;
    }
    cases.push_back({c->name, *c});
  }
  if (set.empty() && named.empty() && shape_texts.empty()) set = "kernel";
  if (!set.empty() && named.empty()) {
    bool any = false;
    for (const sim::BenchCase& c : sim::bench_cases()) {
      if (!sim::in_set(c, set)) continue;
      any = true;
      cases.push_back({c.name, c});
    }
    if (!any) {
      std::fprintf(stderr, "gna-kernel-bench: --set '%s' has no case (--list lists the sets)\n",
                   set.c_str());
      return 2;
    }
  }
  for (const std::string& text : shape_texts) {
    Case c;
    if (!parse_shape(text, shape_dim, &c)) {
      std::fprintf(stderr, "gna-kernel-bench: --shape '%s' is not EXTENTS:WINDOW:STRIDE:HEADS "
                   "(axes joined by 'x', e.g. 128x128:128x128:1x1:16)\n", text.c_str());
      return 2;
    }
    cases.push_back(c);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gna-kernel-bench: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));

  std::vector<std::string> backends;
  if (!backends_arg.empty()) {
    backends = split(backends_arg);
  } else {
    for (const Backend& b : registered_backends())
      if (b.device && b.name != "gpu_reference") backends.push_back(b.name);
  }
  if (quick) reps = std::min(reps, 3);
  std::vector<Row> rows;
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));  // blocking: the timing events on stream 0 wait for it
  // Device copy bandwidth of this run (read + write bytes over time), the image cases' yardstick.
  double copy_tbs = 0;
  if (image) {
    Tensor src({int64_t(1) << 28}, DType::bf16, 21), dst({int64_t(1) << 28}, DType::bf16, 22);
    const double ms = time_ms(
        [&] { CHECK(cudaMemcpyAsync(dst.ptr, src.ptr, src.bytes(), cudaMemcpyDeviceToDevice)); },
        warmup, reps).median_ms;
    copy_tbs = 2.0 * src.bytes() / ms / 1e9;
    rows.push_back({"copy 537 MB", "cudaMemcpy", "copy", ms, copy_tbs, "TB/s"});
  }

  for (const Case& k : cases) {
    const sim::BenchCase& c = k.c;
    AttentionParams params;
    params.rank = c.rank;
    std::vector<int64_t> shape{c.batch};
    for (int a = 0; a < c.rank; ++a) {
      params.window[a] = c.window[a];
      params.stride[a] = c.stride[a];
      params.dilation[a] = c.dilation[a];
      params.causal[a] = c.causal[a];
      shape.push_back(c.extent[a]);
    }
    shape.push_back(c.heads);
    shape.push_back(c.head_dim);
    std::vector<int64_t> lse_shape(shape.begin(), shape.end() - 1);
    const DType t = dtype_named(c.dtype);
    Tensor q(shape, t, 1), k_(shape, t, 2), v(shape, t, 3), o(shape, t, 4), d_o(shape, t, 5);
    Tensor dq(shape, t, 6), dk(shape, t, 7), dv(shape, t, 8), lse(lse_shape, DType::f32, 9);
    // Extra tokens every query attends: [B, tokens, heads, dim].
    const int64_t extra = std::max(c.additional_tokens, 1);
    const std::vector<int64_t> extra_shape{c.batch, extra, c.heads, c.head_dim};
    Tensor ak(extra_shape, t, 10), av(extra_shape, t, 11), dak(extra_shape, t, 12),
        dav(extra_shape, t, 13);
    AttentionTensors in{q.ref, k_.ref, v.ref};
    if (c.additional_tokens > 0) {
      in.additional_k = &ak.ref;
      in.additional_v = &av.ref;
    }
    const Problem p = make_problem(params, in);
    if (!head_windows_arg.empty()) {
      std::vector<std::vector<int>> ws;
      if (!parse_head_windows(head_windows_arg, p.rank, &ws)) {
        std::fprintf(stderr, "gna-kernel-bench: --head-windows '%s': expected 1 to %d windows "
                     "of %d axes joined by 'x' (case %s)\n", head_windows_arg.c_str(),
                     kMaxHeadGroups, p.rank, k.name.c_str());
        return 2;
      }
      for (const std::string& be : backends)
        for (const Backend& b : registered_backends())
          if (b.name == be && b.head_rules) {
            KernelOptions kopt = forced;
            kopt.deterministic = deterministic;
            head_windows_rows(k, p, ws, b, kopt, warmup, reps, wants("fwd"), wants("bwd"), &rows);
          }
      continue;
    }
    const double flops =
        4.0 * p.batch * p.heads_q * double(p.tokens()) * mean_keys_per_query(p) * c.head_dim;
    // Fewest bytes: forward reads Q, K, V and writes O and LSE; backward reads Q, K, V, O, dO,
    // LSE and writes dQ, dK, dV.
    const double fwd_bytes = image ? 4.0 * q.bytes() + lse.bytes() : 0;
    const double bwd_bytes = image ? 8.0 * q.bytes() + lse.bytes() : 0;
    for (const std::string& be : backends) {
      for (const auto& named_schedule : schedules)
      for (const auto& named_kv_tiles : kv_tiles)
      for (const auto& named_q_tiles : q_tiles) {
        const std::string& schedule_name = named_schedule.first;
        CallOptions opt;
        opt.backend = be;
        opt.kernel = forced;
        opt.kernel.schedule = named_schedule.second;
        opt.kernel.kv_placements = named_kv_tiles.second;
        opt.kernel.q_placements = named_q_tiles.second;
        opt.kernel.deterministic = deterministic;
        if (graph) opt.stream = stream;
        auto time = [&](auto&& f) {
          const Time g = graph ? graph_time_ms(f, stream, warmup, reps) : Time{-1, -1};
          return g.median_ms > 0 ? g : time_ms(f, warmup, reps);
        };
        std::string label = be;
        if (!tiles_text.empty()) label += " (tiles " + tiles_text + ")";
        if (kv_tiles.size() > 1 || named_kv_tiles.first != "either")
          label += " (kv tiles " + named_kv_tiles.first + ")";
        if (q_tiles.size() > 1 || named_q_tiles.first != "either")
          label += " (q tiles " + named_q_tiles.first + ")";
        if (deterministic) label += " (deterministic)";
        CallOptions fwd_opt = opt;
        if (!forward_backend.empty() && forward_backend != be) {
          fwd_opt.backend = forward_backend;
          label += " (forward " + forward_backend + ")";
        }
        TensorRef out = o.ref, l = lse.ref;
        AttentionGradients g{dq.ref, dk.ref, dv.ref};
        if (c.additional_tokens > 0) {
          g.d_additional_k = &dak.ref;
          g.d_additional_v = &dav.ref;
        }
        auto forward = [&] { attention_forward(params, in, out, &l, fwd_opt); };
        auto backward = [&] { attention_backward(params, in, o.ref, lse.ref, d_o.ref, g, opt); };
        auto add = [&](const char* pass, const std::string& ran, const Time& tm, double scale,
                       double bytes) {
          rows.push_back({k.name, label + " [" + ran + "]", pass, tm.median_ms,
                          scale * flops / tm.median_ms / 1e9, "TFLOP/s", bytes, tm.min_ms,
                          schedule_name});
        };
        try {
          // The forward runs first in any case: the backward reads its O and LSE.
          if (wants("fwd")) {
            const Time tf = time(forward);
            add("forward", select_forward_backend(params, in, fwd_opt), tf, 1.0, fwd_bytes);
          } else {
            forward();
          }
          CHECK(cudaDeviceSynchronize());
        } catch (const Error& e) {
          std::printf("# %s forward on %s: %s\n", k.name.c_str(), fwd_opt.backend.c_str(),
                      e.what());
          continue;
        }
        try {
          if (wants("bwd")) {
            const Time tb = time(backward);
            CHECK(cudaDeviceSynchronize());
            add("backward", select_backward_backend(params, in, opt), tb, 2.5, bwd_bytes);
          }
          if (wants("fwd+bwd")) {
            const Time tfb = time([&] {
              forward();
              backward();
            });
            CHECK(cudaDeviceSynchronize());
            const std::string ran = select_forward_backend(params, in, fwd_opt) + "/" +
                                    select_backward_backend(params, in, opt);
            add("fwd+bwd", ran, tfb, 3.5, fwd_bytes > 0 ? fwd_bytes + bwd_bytes : 0);
          }
        } catch (const Error& e) {
          std::printf("# %s backward on %s: %s\n", k.name.c_str(), be.c_str(), e.what());
        }
      }
    }
  }

  const bool multi_schedule = schedules.size() > 1;
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f) {
      std::fprintf(f, "{\"device\": \"%s\", \"reps\": %d, \"warmup\": %d, \"graph\": %s, "
                   "\"results\": [\n", prop.name, reps, warmup, graph ? "true" : "false");
      for (size_t i = 0; i < rows.size(); ++i)
        std::fprintf(f, "  {\"case\": \"%s\", \"backend\": \"%s\", \"pass\": \"%s\", "
                     "\"schedule\": \"%s\", \"ms\": %.4f, \"min_ms\": %.4f, \"%s\": %.2f}%s\n",
                     rows[i].what.c_str(), rows[i].backend.c_str(), rows[i].pass.c_str(),
                     rows[i].schedule.c_str(), rows[i].ms, rows[i].min_ms, rows[i].unit.c_str(),
                     rows[i].value, i + 1 < rows.size() ? "," : "");
      std::fprintf(f, "]}\n");
      std::fclose(f);
    }
  }
  std::printf("\ngna-kernel-bench on %s (median of %d after %d warm-up%s)\n", prop.name, reps,
              warmup, graph ? ", CUDA-graph replays" : "");
  std::printf("| case | backend [ran] | %spass | ms | effective | bytes / time |\n"
              "|---|---|%s---|---|---|---|\n", multi_schedule ? "schedule | " : "",
              multi_schedule ? "---|" : "");
  for (const Row& r : rows) {
    char moved[64] = "";
    if (r.bytes > 0 && copy_tbs > 0)
      std::snprintf(moved, sizeof moved, "%.2f TB/s (%.0f%% of copy)", r.bytes / r.ms / 1e9,
                    100.0 * r.bytes / r.ms / 1e9 / copy_tbs);
    std::printf("| %s | %s | %s%s | %.4f | %.1f %s | %s |\n", r.what.c_str(), r.backend.c_str(),
                multi_schedule ? (r.schedule + " | ").c_str() : "", r.pass.c_str(), r.ms, r.value,
                r.unit.c_str(), moved);
  }
  return 0;
}
