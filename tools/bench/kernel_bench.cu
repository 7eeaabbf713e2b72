// gna-kernel-bench: times forward and backward of the registered device backends with CUDA events
// (median of repetitions after warm-up, inputs random), prints a table and writes JSON. Effective
// TFLOP/s count attended pairs only: forward 4 * B * H * N * keys_per_query * D, backward 2.5x
// that. --image runs the image-model cases (small windows, batches, dilation), also reporting bytes
// moved per time against a device copy measured in the same run; --graph times CUDA-graph replays
// of each call (kernels only, without the host's dispatch between calls).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api/backend.hpp"
#include "bench_support/bench_support.cuh"
#include "gna/gna.hpp"

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

struct Case {
  std::string name;
  int rank;
  int extent[3], window[3], stride[3];
  int heads, dim;
  bool backward;
  int batch = 1;
  int dilation[3] = {1, 1, 1};
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

template <typename F>
double median_ms(F&& f, int warmup, int reps) {
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
  return t[t.size() / 2];
}

// Median per call of `replays` back-to-back replays of a CUDA graph holding one call of f on
// `stream` (capture fails where a backend synchronizes: then -1).
template <typename F>
double graph_median_ms(F&& f, cudaStream_t stream, int warmup, int reps, int replays = 20) {
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
    return -1;
  }
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  auto run = [&] {
    for (int i = 0; i < replays; ++i) CHECK(cudaGraphLaunch(exec, stream));
  };
  const double ms = median_ms(run, warmup, reps) / replays;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms;
}

struct Row {
  std::string what, backend, pass;
  double ms, value;
  std::string unit;
  double bytes = 0;  // fewest bytes the pass must move (image cases), 0: not reported
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
bool parse_shape(const std::string& text, Case* c) {
  const std::vector<std::string> parts = split(text, ':');
  if (parts.size() != 4) return false;
  const std::vector<std::string> e = split(parts[0], 'x'), w = split(parts[1], 'x'),
                                  st = split(parts[2], 'x');
  if (e.empty() || e.size() > 3 || w.size() != e.size() || st.size() != e.size()) return false;
  c->name = "shape " + text;
  c->rank = static_cast<int>(e.size());
  for (int a = 0; a < 3; ++a) {
    const bool on = a < c->rank;
    c->extent[a] = on ? std::atoi(e[a].c_str()) : 1;
    c->window[a] = on ? std::atoi(w[a].c_str()) : 1;
    c->stride[a] = on ? std::atoi(st[a].c_str()) : 1;
    if (c->extent[a] < 1 || c->window[a] < 1 || c->stride[a] < 1) return false;
  }
  c->heads = std::atoi(parts[3].c_str());
  c->dim = 128;
  c->backward = true;
  return c->heads >= 1;
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

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, only, backends_arg, tiles_text;
  KernelOptions forced;
  int reps = 10, warmup = 2, shape_dim = 128;
  bool quick = false, forward_only = false, image = false, graph = false;
  std::vector<Case> shapes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--json") json_path = next();
    else if (a == "--cases") only = next();
    else if (a == "--backends") backends_arg = next();
    else if (a == "--reps") reps = std::atoi(next().c_str());
    else if (a == "--warmup") warmup = std::atoi(next().c_str());
    else if (a == "--quick") quick = true;
    else if (a == "--forward-only") forward_only = true;
    else if (a == "--image") image = true;
    else if (a == "--graph") graph = true;
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
      Case c;
      const std::string text = next();
      if (!parse_shape(text, &c)) {
        std::fprintf(stderr, "gna-kernel-bench: --shape '%s' is not EXTENTS:WINDOW:STRIDE:HEADS "
                     "(axes joined by 'x', e.g. 128x128:128x128:1x1:16)\n", text.c_str());
        return 2;
      }
      shapes.push_back(c);
    } else {
      std::printf(
          "usage: gna-kernel-bench [--cases a,b] [--backends portable,...] [--reps N] [--warmup N]\n"
          "                        [--quick] [--forward-only] [--json file]\n"
          "                        [--shape EXTENTS:WINDOW:STRIDE:HEADS]... [--head-dim D]\n"
          "                        [--tiles Q:KV] [--image] [--graph]\n"
          "  --shape adds a bf16 case (e.g. 128x128:128x128:1x1:16) with head dim D for Q, K and\n"
          "  V (default 128); with --shape and no --cases only the --shape cases run.\n"
          "  --tiles forces the Q and KV tile shapes of every\n"
          "  call (e.g. 1x8x8:1x8x8; the portable backward runs its 64-key variant for KV tiles\n"
          "  of at most 64 tokens at head dims 64 and 128).\n"
          "  --image runs the image-model cases (NAT, DiNAT, hourglass DiT, 3-D; bf16, batches),\n"
          "  with bytes moved per time against a device copy of the same run; --graph times\n"
          "  replays of a CUDA graph of each call (kernels only).\n");
      return a == "--help" ? 0 : 2;
    }
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

  // bf16, d128, batch 1 (docs/rule.md section 9 shapes; "dense 128x128" is a small dense case that
  // times quickly, "hunyuan dense" the video model's full attention).
  std::vector<Case> cases = {
      {"dense 128x128", 2, {128, 128, 1}, {128, 128, 1}, {1, 1, 1}, 16, 128, true},
      {"hunyuan dense", 3, {30, 48, 80}, {30, 48, 80}, {1, 1, 1}, 24, 128, true},
      {"hunyuan 18x24x24 s16x8x8", 3, {30, 48, 80}, {18, 24, 24}, {16, 8, 8}, 24, 128, true},
      {"flux4k 80x80 s16x16", 2, {256, 256, 1}, {80, 80, 1}, {16, 16, 1}, 24, 128, true},
      {"hunyuan 18x24x24 NA", 3, {30, 48, 80}, {18, 24, 24}, {1, 1, 1}, 24, 128, false},
      {"flux4k 80x80 NA", 2, {256, 256, 1}, {80, 80, 1}, {1, 1, 1}, 24, 128, false},
  };
  // Image-model cases of issue 16 (bf16): NAT / DiNAT backbones (head dim 32, large batches),
  // hourglass DiT levels (head dim 64), a 3-D neighborhood.
  const std::vector<Case> image_cases = {
      {"nat 56x56 b128 h2 d32 7x7", 2, {56, 56, 1}, {7, 7, 1}, {1, 1, 1}, 2, 32, true, 128},
      {"dinat 56x56 b128 h2 d32 7x7 dil8", 2, {56, 56, 1}, {7, 7, 1}, {1, 1, 1}, 2, 32, true, 128, {8, 8, 1}},
      {"nat 28x28 b128 h4 d32 7x7", 2, {28, 28, 1}, {7, 7, 1}, {1, 1, 1}, 4, 32, true, 128},
      {"dinat 28x28 b128 h4 d32 7x7 dil4", 2, {28, 28, 1}, {7, 7, 1}, {1, 1, 1}, 4, 32, true, 128, {4, 4, 1}},
      {"nat 14x14 b128 h8 d32 7x7", 2, {14, 14, 1}, {7, 7, 1}, {1, 1, 1}, 8, 32, true, 128},
      {"hdit 128x128 b16 h4 d64 7x7", 2, {128, 128, 1}, {7, 7, 1}, {1, 1, 1}, 4, 64, true, 16},
      {"hdit 128x128 b16 h4 d64 13x13", 2, {128, 128, 1}, {13, 13, 1}, {1, 1, 1}, 4, 64, true, 16},
      {"3d 16x32x32 b8 h4 d64 7x7x7", 3, {16, 32, 32}, {7, 7, 7}, {1, 1, 1}, 4, 64, true, 8},
  };
  if (quick) reps = std::min(reps, 3);
  std::vector<std::string> wanted = split(only);
  if ((!shapes.empty() || image) && wanted.empty()) wanted.push_back("");  // only those cases
  if (image) {
    for (const Case& c : image_cases) {
      cases.push_back(c);
      wanted.push_back(c.name);
    }
  }
  for (Case c : shapes) {
    c.dim = shape_dim;
    if (shape_dim != 128) c.name += " d" + std::to_string(shape_dim);
    cases.push_back(c);
    wanted.push_back(c.name);
  }
  std::vector<Row> rows;
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));  // blocking: the timing events on stream 0 wait for it
  // Device copy bandwidth of this run (read + write bytes over time), the image cases' yardstick.
  double copy_tbs = 0;
  if (image) {
    Tensor src({int64_t(1) << 28}, DType::bf16, 21), dst({int64_t(1) << 28}, DType::bf16, 22);
    const double ms = median_ms(
        [&] { CHECK(cudaMemcpyAsync(dst.ptr, src.ptr, src.bytes(), cudaMemcpyDeviceToDevice)); },
        warmup, reps);
    copy_tbs = 2.0 * src.bytes() / ms / 1e9;
    rows.push_back({"copy 537 MB", "cudaMemcpy", "copy", ms, copy_tbs, "TB/s"});
  }

  for (const Case& c : cases) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), c.name) == wanted.end()) continue;
    AttentionParams params;
    params.rank = c.rank;
    std::vector<int64_t> shape{c.batch};
    for (int a = 0; a < c.rank; ++a) {
      params.window[a] = c.window[a];
      params.stride[a] = c.stride[a];
      params.dilation[a] = c.dilation[a];
      shape.push_back(c.extent[a]);
    }
    shape.push_back(c.heads);
    shape.push_back(c.dim);
    std::vector<int64_t> lse_shape(shape.begin(), shape.end() - 1);
    const DType t = DType::bf16;
    Tensor q(shape, t, 1), k(shape, t, 2), v(shape, t, 3), o(shape, t, 4), d_o(shape, t, 5);
    Tensor dq(shape, t, 6), dk(shape, t, 7), dv(shape, t, 8), lse(lse_shape, DType::f32, 9);
    AttentionTensors in{q.ref, k.ref, v.ref};
    const Problem p = make_problem(params, in);
    const double flops = 4.0 * p.batch * p.heads_q * double(p.tokens()) * mean_keys_per_query(p) * c.dim;
    // Fewest bytes: forward reads Q, K, V and writes O and LSE; backward reads Q, K, V, O, dO,
    // LSE and writes dQ, dK, dV.
    const double fwd_bytes = image ? 4.0 * q.bytes() + lse.bytes() : 0;
    const double bwd_bytes = image ? 8.0 * q.bytes() + lse.bytes() : 0;
    for (const std::string& be : backends) {
      CallOptions opt;
      opt.backend = be;
      opt.kernel = forced;
      if (graph) opt.stream = stream;
      auto time = [&](auto&& f) {
        const double ms = graph ? graph_median_ms(f, stream, warmup, reps) : -1;
        return ms > 0 ? ms : median_ms(f, warmup, reps);
      };
      const std::string label = tiles_text.empty() ? be : be + " (tiles " + tiles_text + ")";
      try {
        TensorRef out = o.ref, l = lse.ref;
        const double ms = time([&] { attention_forward(params, in, out, &l, opt); });
        CHECK(cudaDeviceSynchronize());
        rows.push_back({c.name, label + " [" + select_forward_backend(params, in, opt) + "]", "forward", ms,
                        flops / ms / 1e9, "TFLOP/s", fwd_bytes});
      } catch (const Error& e) {
        std::printf("# %s forward on %s: %s\n", c.name.c_str(), be.c_str(), e.what());
      }
      if (!c.backward || forward_only) continue;
      try {
        AttentionGradients g{dq.ref, dk.ref, dv.ref};
        const double ms = time([&] { attention_backward(params, in, o.ref, lse.ref, d_o.ref, g, opt); });
        CHECK(cudaDeviceSynchronize());
        rows.push_back({c.name, label + " [" + select_backward_backend(params, in, opt) + "]", "backward", ms,
                        2.5 * flops / ms / 1e9, "TFLOP/s", bwd_bytes});
      } catch (const Error& e) {
        std::printf("# %s backward on %s: %s\n", c.name.c_str(), be.c_str(), e.what());
      }
    }
  }

  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f) {
      std::fprintf(f, "{\"device\": \"%s\", \"dtype\": \"bf16\", \"results\": [\n", prop.name);
      for (size_t i = 0; i < rows.size(); ++i)
        std::fprintf(f, "  {\"case\": \"%s\", \"backend\": \"%s\", \"pass\": \"%s\", \"ms\": %.4f, \"%s\": %.2f}%s\n",
                     rows[i].what.c_str(), rows[i].backend.c_str(), rows[i].pass.c_str(), rows[i].ms,
                     rows[i].unit.c_str(), rows[i].value, i + 1 < rows.size() ? "," : "");
      std::fprintf(f, "]}\n");
      std::fclose(f);
    }
  }
  std::printf("\ngna-kernel-bench on %s (bf16%s; median of %d after %d warm-up%s)\n",
              prop.name, image ? "" : ", d128, batch 1", reps, warmup,
              graph ? ", CUDA-graph replays" : "");
  std::printf("| case | backend [ran] | pass | ms | effective | bytes / time |\n|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    char moved[64] = "";
    if (r.bytes > 0 && copy_tbs > 0)
      std::snprintf(moved, sizeof moved, "%.2f TB/s (%.0f%% of copy)", r.bytes / r.ms / 1e9,
                    100.0 * r.bytes / r.ms / 1e9 / copy_tbs);
    std::printf("| %s | %s | %s | %.4f | %.1f %s | %s |\n", r.what.c_str(), r.backend.c_str(),
                r.pass.c_str(), r.ms, r.value, r.unit.c_str(), moved);
  }
  return 0;
}
