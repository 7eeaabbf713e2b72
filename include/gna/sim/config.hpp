// What the simulator is asked about (docs/rule.md section 8): a token layout with the GNA rule of
// each axis, a Q tile and a KV tile shape, and the tiling design of the kernel. Plain data, so the
// C ABI and the Python package can pass it through unchanged.
#pragma once

#include <cstdint>

#include "gna/core/axis_rule.hpp"
#include "gna/core/problem.hpp"
#include "gna/core/tiling.hpp"

namespace gna::sim {

// How tokens are grouped into tiles.
enum class Tiling : int32_t {
  multi_dim = 0,  // tiles are boxes of the layout (inside dilation groups); what a TMA kernel does
  one_dim = 1,    // tokens in row-major order, tiles are runs of consecutive tokens
};

// Where the KV tiles of a Q tile sit (multi-dimensional tiling only).
enum class KvTiling : int32_t {
  static_tiles = 0,   // a fixed grid: the Q tile visits the grid tiles covering its windows
  dynamic_tiles = 1,  // tiles start where the Q tile's key windows start, per axis
};

const char* tiling_name(Tiling t);     // "multi" or "1d"
const char* kv_tiling_name(KvTiling t);  // "static" or "dynamic"
// The core's placement of the design (gna/core/tiling.hpp): static tiles on the grid, dynamic
// ones placed.
inline KvPlacement kv_placement(KvTiling t) {
  return t == KvTiling::dynamic_tiles ? KvPlacement::placed : KvPlacement::grid;
}

struct Config {
  int rank = 1;
  AxisRule axes[kMaxRank];
  // Tile shapes per axis. With one_dim tiling the tile sizes are the volumes of these shapes
  // (e.g. {128, 1, 1}).
  int q_tile[kMaxRank] = {1, 1, 1};
  int kv_tile[kMaxRank] = {1, 1, 1};
  Tiling tiling = Tiling::multi_dim;
  KvTiling kv_tiling = KvTiling::static_tiles;
};

// The attention problem of the configuration (one batch, one head), as the core validates it.
Problem to_problem(const Config& c);

// gna::validate on the problem (same messages), then the tile shapes and design choices.
void validate(const Config& c);

int64_t q_tile_volume(const Config& c);
int64_t kv_tile_volume(const Config& c);

// The simulator's work, estimated from above in elementary steps (a KV tile visited, a key row
// walked), and the most one call takes on: about two seconds. Real layouts need far less (the
// 10,368-stride hunyuan sweep some 10^5 steps); a call beyond is refused with the estimate
// instead of running for minutes or allocating gigabytes.
constexpr double kMaxSimulationSteps = double(int64_t{1} << 28);
constexpr int64_t kMaxSweepStrides = int64_t{1} << 20;  // sweep entries (about 150 MB)
constexpr int64_t kMaxPictureCells = int64_t{1} << 22;  // cells of a picture's panels

double simulation_steps(const Config& c);  // one simulate(c)
double sweep_steps(const Config& c);       // sweep(c): every stride up to the window
// Refuse what exceeds the limits above (ErrorKind::invalid_argument, naming the estimate).
void check_simulation_size(const Config& c);
void check_sweep_size(const Config& c);

}  // namespace gna::sim
