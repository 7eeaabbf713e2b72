#include "gna/sim/describe.hpp"

namespace gna::sim {

std::string shape_string(const int* values, int rank) {
  std::string s;
  for (int a = 0; a < rank; ++a) s += (a ? "x" : "") + std::to_string(values[a]);
  return s;
}

std::string problem_description(const Config& c, bool with_stride) {
  int extent[kMaxRank], window[kMaxRank], stride[kMaxRank], dilation[kMaxRank], causal[kMaxRank];
  for (int a = 0; a < c.rank && a < kMaxRank; ++a) {
    extent[a] = c.axes[a].extent;
    window[a] = c.axes[a].window;
    stride[a] = c.axes[a].stride;
    dilation[a] = c.axes[a].dilation;
    causal[a] = c.axes[a].causal ? 1 : 0;
  }
  return "shape " + shape_string(extent, c.rank) + ", window " + shape_string(window, c.rank) +
         (with_stride ? ", stride " + shape_string(stride, c.rank) : std::string()) +
         ", dilation " + shape_string(dilation, c.rank) + ", causal " +
         shape_string(causal, c.rank);
}

std::string tiling_description(const Config& c) {
  if (c.tiling == Tiling::one_dim)
    return "1-D tiling (row-major runs): Q tile " + std::to_string(q_tile_volume(c)) +
           " tokens, KV tile " + std::to_string(kv_tile_volume(c)) + " tokens";
  return std::string("multi-dimensional tiling, ") + kv_tiling_name(c.kv_tiling) +
         " KV tiles: Q tile " + shape_string(c.q_tile, c.rank) + ", KV tile " +
         shape_string(c.kv_tile, c.rank);
}

}  // namespace gna::sim
