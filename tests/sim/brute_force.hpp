// Brute-force oracle for the simulator: enumerates every (query, key) pair of every
// (Q tile, KV tile) pair with gna::axis_attends, using no tiling math of the core.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gna/core/axis_rule.hpp"
#include "gna/sim/config.hpp"
#include "gna/sim/simulator.hpp"

namespace gna::sim::testing {

struct BruteCounts {
  int64_t q_tiles = 0;
  int64_t kv_tiles = 0;
  int64_t dense_kv_tiles = 0;
  int64_t max_kv_tiles = 0;
  int64_t visited = 0;
  int64_t empty = 0;
  int64_t full = 0;
  int64_t partial = 0;
  int64_t attended = 0;
};

BruteCounts brute_force(const Config& c);

// A random valid configuration with at most about `max_tokens` tokens.
Config random_config(std::mt19937& rng, int max_tokens, Tiling tiling, KvTiling kv_tiling);

std::string describe(const Config& c);

}  // namespace gna::sim::testing
