// The one tile chooser of the tiled kernels (host only): a kernel describes its candidate tiles,
// how it walks the pairs, what a pair costs and which forced tiles it runs; the chooser ranks the
// candidates with the core's pair statistics (tile_candidates.hpp) and keeps the choice per rule
// for the process.
#pragma once

#include <vector>

#include "gna/core/problem.hpp"
#include "gna/core/tile_candidates.hpp"

namespace gna {

// Cost of a candidate in units of one dense (Q tile, KV tile) pair of the kernel's reference
// tiles: a partial (masked) pair costs 1 + partial dense pairs; rows / speedup scales the pairs of
// a kernel variant whose Q tiles hold `rows` times the reference rows and run `speedup` times
// as many rows per unit of time (1 / 1 for a kernel with one variant). The Hopper kernels'
// partial weight is measured (kernel_tiles.hpp).
struct TileCostWeights {
  double partial = 0.25;
  double rows = 1;
  double speedup = 1;
};
double tile_cost(double visited_pairs, double full_pairs, const TileCostWeights& w);

// Forced tiles a kernel runs: every side >= 1 and the volume exactly `tokens` (exact) or at most
// `tokens`.
struct TileLimit {
  int tokens = 0;
  bool exact = true;
};

// What one kernel's choice depends on besides the rule.
struct TileKernel {
  const char* name = "";  // the kernel, in errors ("hopper forward")
  int q_rows = 0;         // tokens of the candidate Q tiles (a power of two)
  int kv_rows = 0;        // tokens of the candidate KV tiles (a power of two)
  PairWalk walk = PairWalk::per_q_tile;
  TileCostWeights weights;
  TileLimit forced_q, forced_kv;
  // The placements of the walked tiles the kernel may run (tiling.hpp): KV tiles of a per_q_tile
  // walk, Q tiles of a per_kv_tile walk. With `either` every candidate is scored with grid and
  // with placed tiles and keeps the cheaper, the grid on ties.
  KvPlacements kv_placements = KvPlacements::grid;
};

// One candidate scored over one image and head (dilation group 0 of every axis): the pair
// counts, the largest box (per_q_tile: KV tiles of the worst Q tile; per_kv_tile: Q tiles of the
// worst KV tile), the tile counts (kv_tiles: those of dense attention over the same tiling), and
// the cost. The kernels launch with it as chosen.
struct ScoredTiles {
  TileShape q, kv;
  // The placement of the walked tiles (TileKernel::kv_placements): where each Q tile's KV tiles
  // start in a per_q_tile walk (the forward), where each KV tile's Q tiles start in a
  // per_kv_tile walk (the backward).
  KvPlacement placement = KvPlacement::grid;
  double visited_pairs = 0;
  double full_pairs = 0;
  double max_box = 0;
  double q_tiles = 0;
  double kv_tiles = 0;
  double cost = 0;
  double partial_pairs() const { return visited_pairs - full_pairs; }
};

// Whether the caller forces the tile: any of the problem's axes nonzero. All zeros (KernelOptions'
// default, kNoForcedTile) leave the tile to the chooser.
constexpr TileShape kNoForcedTile{{0, 0, 0}};
bool tile_forced(const TileShape& t, int rank);

// Throws gna::Error (invalid_argument) naming the option (q_tile / kv_tile), its value and the
// kernel's rule when a forced tile is not one the kernel runs.
void check_forced_tiles(const TileKernel& k, int rank, const TileShape& q, const TileShape& kv);

// Scores one candidate (with the cheaper of the kernel's KV tile placements).
ScoredTiles score_tile_choice(const Problem& p, const TileKernel& k, const TileShape& q,
                              const TileShape& kv);

// Every candidate, cheapest first (ties in candidate order: Q shapes outer, KV shapes inner, each
// in power_of_two_tile_shapes order). A forced tile (the caller's q_tile / kv_tile, checked first)
// replaces that side's candidates.
std::vector<ScoredTiles> ranked_tile_choices(const Problem& p, const TileKernel& k,
                                             const TileShape& forced_q, const TileShape& forced_kv);

// The cheapest candidate, kept per rule, kernel parameters and forced tiles for the process
// (thread-safe): dispatch asks on every call, and scoring walks every axis (14 ms for a 1-D
// problem of 70000 tokens).
ScoredTiles tile_choice(const Problem& p, const TileKernel& k, const TileShape& forced_q,
                        const TileShape& forced_kv);

// Several problems sharing one tile shape and one KV placement (a launch running every head-rule
// group of a problem: a TMA box is fixed per launch), each with a weight (its heads). They share
// the rank and the extents.
struct WeightedProblem {
  Problem problem;
  double weight = 1;
};

// The groups of a problem with head rules (problem_of_group), each weighted by its query heads;
// groups without heads are left out. Without head rules: the problem itself, weight 1.
std::vector<WeightedProblem> head_rule_groups(const Problem& p);

// Every candidate scored over the problems: pair counts and cost are the weighted means over the
// problems (per image and head, as for one problem), max_box the largest of theirs; with
// KvPlacements::either each candidate keeps the placement whose summed cost is lower (the grid
// on ties), one placement for all problems. One problem of weight 1 ranks as
// ranked_tile_choices.
std::vector<ScoredTiles> ranked_tile_choices_for_groups(const std::vector<WeightedProblem>& ps,
                                                        const TileKernel& k,
                                                        const TileShape& forced_q,
                                                        const TileShape& forced_kv);

// The cheapest candidate over the problems, kept per rules, weights, kernel parameters and forced
// tiles for the process (thread-safe).
ScoredTiles tile_choice_for_groups(const std::vector<WeightedProblem>& ps, const TileKernel& k,
                                   const TileShape& forced_q, const TileShape& forced_kv);

}  // namespace gna
