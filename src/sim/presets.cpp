#include "gna/sim/presets.hpp"

#include <stdexcept>
#include <string>

#include "gna/sim/cases.hpp"

namespace gna::sim {

namespace {

// The problem comes from the benchmark case table (gna/sim/cases.hpp); the tile shapes are the
// simulator's own: the Hopper kernel runs 128-query Q tiles (two consumer warpgroups of 64 rows)
// and 128-key KV tiles at head dim 128; shapes are chosen to divide the layout where it can be
// done.
Preset make(const char* name, const char* description, const char* case_name,
            std::vector<int> q_tile, std::vector<int> kv_tile) {
  const BenchCase* c = find_bench_case(case_name);
  if (c == nullptr)
    throw std::logic_error(std::string("preset ") + name + ": no benchmark case " + case_name);
  Preset p;
  p.name = name;
  p.description = description;
  p.config.rank = c->rank;
  for (int a = 0; a < c->rank; ++a) {
    p.config.axes[a].extent = c->extent[a];
    p.config.axes[a].window = c->window[a];
    p.config.axes[a].stride = c->stride[a];
    p.config.axes[a].dilation = c->dilation[a];
    p.config.axes[a].causal = c->causal[a];
    p.config.q_tile[a] = q_tile[a];
    p.config.kv_tile[a] = kv_tile[a];
  }
  return p;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      make("hunyuan", "HunyuanVideo 720p: 24 heads, d 128; windows 18x24x24 (91%), 30x40x40 (58%)",
           "hunyuan 18x24x24 NA", {2, 8, 8}, {2, 8, 8}),
      make("cosmos", "Cosmos: 32 heads, d 128; windows 16x24x16 (89%), 16x32x48 (56%)",
           "cosmos 16x24x16", {2, 4, 16}, {2, 4, 16}),
      make("wan", "Wan 2.1: 40 heads, d 128; window 15x27x48", "wan 15x27x48", {1, 8, 16},
           {1, 8, 16}),
      make("flux4k", "FLUX at 4K: 24 heads, d 128; window 80x80 (90%)", "flux4k 80x80 NA",
           {16, 16}, {16, 8}),
      make("nat", "NAT image models: batch 128, 2-4 heads, d 32; window 7x7 (also 28x28)",
           "nat 56x56 b128 h2 d32 7x7", {8, 8}, {8, 8}),
      make("long1d", "long sequence: 8 heads, d 128; window 2048", "long1d 2048", {128},
           {128}),
  };
  return all;
}

const Preset* find_preset(const std::string& name) {
  for (const Preset& p : presets())
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace gna::sim
