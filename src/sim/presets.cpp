#include "gna/sim/presets.hpp"

namespace gna::sim {

namespace {

// Tile shapes: the Hopper kernel runs 128-query Q tiles (two consumer warpgroups of 64 rows) and
// 128-key KV tiles at head dim 128; shapes are chosen to divide the layout where it can be done.
Preset make(const char* name, const char* description, std::vector<int> extent,
            std::vector<int> window, std::vector<int> q_tile, std::vector<int> kv_tile) {
  Preset p;
  p.name = name;
  p.description = description;
  p.config.rank = static_cast<int>(extent.size());
  for (int a = 0; a < p.config.rank; ++a) {
    p.config.axes[a].extent = extent[a];
    p.config.axes[a].window = window[a];
    p.config.q_tile[a] = q_tile[a];
    p.config.kv_tile[a] = kv_tile[a];
  }
  return p;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      make("hunyuan", "HunyuanVideo 720p: 24 heads, d 128; windows 18x24x24 (91%), 30x40x40 (58%)",
           {30, 48, 80}, {18, 24, 24}, {2, 8, 8}, {2, 8, 8}),
      make("cosmos", "Cosmos: 32 heads, d 128; windows 16x24x16 (89%), 16x32x48 (56%)",
           {16, 44, 80}, {16, 24, 16}, {2, 4, 16}, {2, 4, 16}),
      make("wan", "Wan 2.1: 40 heads, d 128; window 15x27x48", {21, 45, 80}, {15, 27, 48},
           {1, 8, 16}, {1, 8, 16}),
      make("flux4k", "FLUX at 4K: 24 heads, d 128; window 80x80 (90%)", {256, 256}, {80, 80},
           {16, 16}, {16, 8}),
      make("nat", "NAT image models: batch 128, 2-4 heads, d 32; window 7x7 (also 28x28)",
           {56, 56}, {7, 7}, {8, 8}, {8, 8}),
      make("long1d", "long sequence: 8 heads, d 128; window 2048", {32768}, {2048}, {128},
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
