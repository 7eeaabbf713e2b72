// The simulator (docs/rule.md section 8): which KV tiles each Q tile must visit, and the speedup
// bounds that follow, computed exactly from the core's tiling math.
#pragma once

#include <cstdint>

#include "gna/sim/config.hpp"

namespace gna::sim {

// Counts of (Q tile, KV tile) pairs. The universe is every pair of a Q tile and a KV tile of
// the same dilation group (what a kernel that folds dilation groups into the batch could
// visit). With dynamic KV tiles, `empty` counts the pairs of the static grid's universe that
// are not visited.
struct PairCounts {
  int64_t empty = 0;
  int64_t full = 0;     // every query attends every key slot: no mask needed
  int64_t partial = 0;  // visited but needs the per-element mask (or holds padding slots)
};

struct Result {
  int64_t tokens = 0;          // N
  int64_t q_tiles = 0;         // Q tiles (per dilation group, partial edge tiles included)
  int64_t kv_tiles = 0;        // KV tiles of the static grid (per dilation group)
  int64_t dense_kv_tiles = 0;  // KV tiles each Q tile of a dense kernel visits (no groups)
  int64_t max_kv_tiles = 0;    // most KV tiles any Q tile visits
  double mean_kv_tiles = 0;    // KV tiles visited, averaged over Q tiles
  int64_t visited_pairs = 0;   // (Q tile, KV tile) pairs visited = full + partial
  int64_t attended_pairs = 0;  // (query, key) pairs attended = N * mean_keys_per_query
  double mean_keys_per_query = 0;
  double sparsity = 0;              // 1 - mean_keys_per_query / N
  double flop_speedup = 0;          // N / mean_keys_per_query = 1 / (1 - sparsity)
  double tile_speedup = 0;          // dense_kv_tiles / max_kv_tiles (the worst Q tile bounds)
  PairCounts pairs;
  bool block_sparse = false;        // no partial pairs: the kernel needs no mask at all
  double wasted_flop_fraction = 0;  // share of visited tile work (full tile volumes) masked out
};

// Validates (gna::Error with the core's messages) and simulates one configuration.
Result simulate(const Config& c);

// End-to-end model: attention is `attention_share` of the model's runtime and the first
// `dense_steps` of `total_steps` diffusion steps run dense attention.
struct EndToEnd {
  double attention_share = 1.0;
  int dense_steps = 0;
  int total_steps = 1;
};

void validate(const EndToEnd& e);
// 1 / ((1 - p) + p * (k/n + (1 - k/n) / op_speedup))
double end_to_end_speedup(const EndToEnd& e, double op_speedup);

}  // namespace gna::sim
