#include "gna/sim/cases.hpp"

#include <sstream>

namespace gna::sim {

namespace {

// Shorthand for one row: unused axes are 1 (window, stride, dilation) or 0 (flex tile).
struct Axes {
  int v[3];
};

BenchCase row(const char* name, const char* model, const char* sets, Axes extent, Axes window,
              Axes stride, int batch, int heads, int head_dim, Axes flex_tile = {{0, 0, 0}},
              Axes dilation = {{1, 1, 1}}) {
  BenchCase c{};
  c.name = name;
  c.model = model;
  c.sets = sets;
  c.rank = extent.v[2] > 0 ? 3 : extent.v[1] > 0 ? 2 : 1;
  for (int a = 0; a < 3; ++a) {
    const bool on = a < c.rank;
    c.extent[a] = on ? extent.v[a] : 1;
    c.window[a] = on ? window.v[a] : 1;
    c.stride[a] = on ? stride.v[a] : 1;
    c.dilation[a] = on ? dilation.v[a] : 1;
    c.causal[a] = false;
    c.flex_tile[a] = on ? flex_tile.v[a] : 0;
  }
  c.batch = batch;
  c.heads = heads;
  c.head_dim = head_dim;
  c.dtype = "bf16";
  c.additional_tokens = 0;
  return c;
}

}  // namespace

// The use cases of docs/rule.md section 9 (video and image generation at d 128), the image
// backbones (NAT / DiNAT: small windows and head dims, large batches), pixel-space diffusion
// (hourglass DiT), a 3-D neighborhood, long 1-D sequences, and small smoke cases. Within a
// model, the order is the one `gna.bench --cases MODEL:i` counts in.
const std::vector<BenchCase>& bench_cases() {
  static const std::vector<BenchCase> all = {
      row("dense 128x128", "dense", "kernel", {{128, 128, 0}}, {{128, 128}}, {{1, 1}}, 1, 16, 128),
      row("hunyuan 18x24x24 NA", "hunyuan", "kernel peers hopper hopper-bwd", {{30, 48, 80}},
          {{18, 24, 24}}, {{1, 1, 1}}, 1, 24, 128, {{2, 8, 8}}),
      row("hunyuan 18x24x24 s16x8x8", "hunyuan", "kernel peers hopper hopper-bwd",
          {{30, 48, 80}}, {{18, 24, 24}}, {{16, 8, 8}}, 1, 24, 128, {{2, 8, 8}}),
      row("hunyuan 30x40x40 NA", "hunyuan", "peers hopper", {{30, 48, 80}}, {{30, 40, 40}},
          {{1, 1, 1}}, 1, 24, 128, {{2, 8, 8}}),
      row("hunyuan dense", "hunyuan", "kernel hopper hopper-bwd", {{30, 48, 80}},
          {{30, 48, 80}}, {{1, 1, 1}}, 1, 24, 128, {{2, 8, 8}}),
      row("hunyuan dense d64", "hunyuan", "hopper hopper-bwd", {{30, 48, 80}}, {{30, 48, 80}},
          {{1, 1, 1}}, 1, 24, 64, {{2, 8, 8}}),
      row("hunyuan dense d256", "hunyuan", "hopper", {{30, 48, 80}}, {{30, 48, 80}},
          {{1, 1, 1}}, 1, 24, 256, {{2, 8, 8}}),
      row("cosmos 16x24x16", "cosmos", "peers", {{16, 44, 80}}, {{16, 24, 16}}, {{1, 1, 1}}, 1,
          32, 128, {{4, 4, 8}}),
      row("cosmos 16x32x48", "cosmos", "peers", {{16, 44, 80}}, {{16, 32, 48}}, {{1, 1, 1}}, 1,
          32, 128, {{4, 4, 8}}),
      row("wan 15x27x48", "wan", "peers", {{21, 45, 80}}, {{15, 27, 48}}, {{1, 1, 1}}, 1, 40, 128,
          {{3, 5, 8}}),
      row("flux4k 80x80 NA", "flux4k", "kernel peers hopper hopper-bwd", {{256, 256, 0}},
          {{80, 80}}, {{1, 1}}, 1, 24, 128, {{16, 8}}),
      row("flux4k 80x80 s16x16", "flux4k", "kernel peers hopper hopper-bwd", {{256, 256, 0}},
          {{80, 80}}, {{16, 16}}, 1, 24, 128, {{16, 8}}),
      row("nat 56x56 b128 h2 d32 7x7", "nat", "image peers hopper", {{56, 56, 0}}, {{7, 7}},
          {{1, 1}}, 128, 2, 32),
      row("nat 28x28 b128 h4 d32 7x7", "nat", "image peers", {{28, 28, 0}}, {{7, 7}}, {{1, 1}},
          128, 4, 32),
      row("nat 14x14 b128 h8 d32 7x7", "nat", "image peers", {{14, 14, 0}}, {{7, 7}}, {{1, 1}},
          128, 8, 32),
      row("dinat 56x56 b128 h2 d32 7x7 dil8", "dinat", "image peers", {{56, 56, 0}}, {{7, 7}},
          {{1, 1}}, 128, 2, 32, {{0, 0}}, {{8, 8}}),
      row("dinat 28x28 b128 h4 d32 7x7 dil4", "dinat", "image peers", {{28, 28, 0}}, {{7, 7}},
          {{1, 1}}, 128, 4, 32, {{0, 0}}, {{4, 4}}),
      row("hdit 128x128 b16 h4 d64 7x7", "hdit", "image peers", {{128, 128, 0}}, {{7, 7}},
          {{1, 1}}, 16, 4, 64),
      row("hdit 128x128 b16 h4 d64 13x13", "hdit", "image peers", {{128, 128, 0}}, {{13, 13}},
          {{1, 1}}, 16, 4, 64),
      row("3d 16x32x32 b8 h4 d64 7x7x7", "na3d", "image peers", {{16, 32, 32}}, {{7, 7, 7}},
          {{1, 1, 1}}, 8, 4, 64),
      row("long1d 2048", "long1d", "peers", {{32768, 0, 0}}, {{2048}}, {{1}}, 1, 8, 128),
      row("long1d 2048 s256", "long1d", "peers", {{32768, 0, 0}}, {{2048}}, {{256}}, 1, 8, 128),
      row("1d dense 8k h4", "long1d", "hopper-bwd", {{8192, 0, 0}}, {{8192}}, {{1}}, 1, 4, 128),
      // A minute-sized smoke set: small enough for any GPU, every code path of gna.bench.
      row("quick2d 64x64 16x16", "quick2d", "quick", {{64, 64, 0}}, {{16, 16}}, {{1, 1}}, 1, 4,
          64, {{16, 8}}),
      row("quick3d 8x16x32 4x8x8 s2x4x4", "quick3d", "quick", {{8, 16, 32}}, {{4, 8, 8}},
          {{2, 4, 4}}, 1, 4, 128, {{2, 8, 8}}),
  };
  return all;
}

const BenchCase* find_bench_case(const std::string& name) {
  for (const BenchCase& c : bench_cases())
    if (name == c.name) return &c;
  return nullptr;
}

bool in_set(const BenchCase& c, const std::string& set) {
  std::istringstream words(c.sets);
  std::string w;
  while (words >> w)
    if (w == set) return true;
  return false;
}

}  // namespace gna::sim
