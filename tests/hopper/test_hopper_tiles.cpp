// The Hopper forward's and backward's tile choice, on the host (no GPU needed, label cpu).
#include <gtest/gtest.h>

#include <string>

#include "gna/core/error.hpp"
#include "gna/sim/cases.hpp"
#include "gna/sim/kernel_tiles.hpp"
#include "kernels/hopper/backward_launch.hpp"
#include "kernels/hopper/forward_launch.hpp"
#include "support/rule_text.hpp"

namespace gna {
namespace {

// FLUX 4K, window 80x80, stride 16x16 is perfectly block-sparse with the chosen tiles and
// reaches the FLOP-wise bound 65536 / 6400 = 10.24 (docs/rule.md section 8.3).
TEST(HopperTiles, Flux4kStride16IsBlockSparse) {
  Problem p;
  p.rank = 2;
  for (int a = 0; a < 2; ++a) p.axes[a] = AxisRule{256, 80, 1, 16, false};
  const ScoredTiles c = hopper::choose_tiles(p, KernelOptions{});
  EXPECT_EQ(c.visited_pairs, c.full_pairs);
  EXPECT_NEAR(c.kv_tiles / c.max_box, 10.24, 1e-9);
}

// Placed KV tiles where they visit fewer tiles: the hunyuan and wan neighborhoods (docs/rule.md
// section 9) choose them, with a worst Q tile below the grid's best; a forced placement is
// honoured, and a block-sparse stride keeps the grid (a tie).
TEST(HopperTiles, PlacedKvTilesWhereCheaper) {
  struct Expect {
    const char* rule;
    double grid_max, placed_max;  // KV tiles of the worst Q tile, each mode's own best tiles
  };
  const Expect cases[] = {
      {"30,18,1,1,0 48,24,1,1,0 80,24,1,1,0", 196, 160},
      {"21,15,1,1,0 45,27,1,1,0 80,48,1,1,0", 320, 252},
  };
  for (const Expect& e : cases) {
    Problem p = test::rule_from_text(e.rule);
    p.dim_qk = p.dim_v = 128;
    KernelOptions o;
    const ScoredTiles either = hopper::choose_tiles(p, o);
    o.kv_placements = KvPlacements::grid;
    const ScoredTiles grid = hopper::choose_tiles(p, o);
    o.kv_placements = KvPlacements::placed;
    const ScoredTiles placed = hopper::choose_tiles(p, o);
    EXPECT_EQ(either.placement, KvPlacement::placed) << e.rule;
    EXPECT_EQ(grid.placement, KvPlacement::grid);
    EXPECT_EQ(placed.placement, KvPlacement::placed);
    EXPECT_EQ(grid.max_box, e.grid_max) << e.rule;
    EXPECT_EQ(either.max_box, e.placed_max) << e.rule;
    EXPECT_LT(either.visited_pairs, grid.visited_pairs) << e.rule;
    // Autotune ranks the same candidates, each with its placement.
    EXPECT_EQ(hopper::ranked_tiles(p, KernelOptions{}).front().placement, KvPlacement::placed);
  }
  Problem p;
  p.rank = 2;
  for (int a = 0; a < 2; ++a) p.axes[a] = AxisRule{256, 80, 1, 16, false};
  EXPECT_EQ(hopper::choose_tiles(p, KernelOptions{}).placement, KvPlacement::grid);
}

Problem flux() {
  Problem p;
  p.rank = 2;
  for (int a = 0; a < 2; ++a) p.axes[a] = AxisRule{256, 80, 1, 1, false};
  p.dim_qk = p.dim_v = 128;
  return p;
}

template <typename Choose>
std::string error_of(Choose choose) {
  try {
    choose();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    return e.what();
  }
  return "";
}

// The ranking's best is the choice (cached or not), with or without a forced side.
TEST(HopperTiles, ChoiceIsTheRankingsBest) {
  const Problem p = flux();
  KernelOptions o;
  for (int forced = 0; forced < 2; ++forced) {
    if (forced) o.q_tile = TileShape{{4, 32, 0}};
    const ScoredTiles a = hopper::choose_tiles(p, o), b = hopper::choose_tiles(p, o);
    const ScoredTiles best = hopper::ranked_tiles(p, o).front();
    for (const ScoredTiles& c : {a, b}) {
      EXPECT_EQ(c.q.size[0], best.q.size[0]);
      EXPECT_EQ(c.q.size[1], best.q.size[1]);
      EXPECT_EQ(c.kv.size[0], best.kv.size[0]);
      EXPECT_EQ(c.kv.size[1], best.kv.size[1]);
      EXPECT_EQ(c.visited_pairs, best.visited_pairs);
      EXPECT_EQ(c.full_pairs, best.full_pairs);
    }
  }
  EXPECT_EQ(hopper::choose_tiles(p, o).q.size[0], 4);
  EXPECT_EQ(hopper::choose_tiles(p, o).q.size[1], 32);
}

// Forced tiles are honoured when they are tiles of the kernel (forward: Q 128 tokens, KV 128, 64
// at head dim 256; backward: Q 64, KV 128), else one error naming the option and the value.
TEST(HopperTiles, ForcedTiles) {
  Problem p = flux();
  KernelOptions o;
  o.kv_tile = TileShape{{8, 8, 0}};
  EXPECT_EQ(
      error_of([&] { hopper::choose_tiles(p, o); }),
      "options: kv_tile 8x8 (64 tokens) is not a tile of the hopper forward (every side >= 1, "
      "exactly 128 tokens; all zeros: the kernel chooses)");
  const ScoredTiles b = hopper::choose_backward_tiles(p, KernelOptions{});
  EXPECT_EQ(b.kv.volume(2), hopper::kBwdKvRows);
  EXPECT_NE(error_of([&] {
              hopper::choose_backward_tiles(p, o);
            }).find("kv_tile 8x8 (64 tokens) is not a tile of the hopper backward"),
            std::string::npos);
  p.dim_qk = p.dim_v = 256;
  const ScoredTiles d256 = hopper::choose_tiles(p, o);
  EXPECT_EQ(d256.kv.size[0], 8);
  EXPECT_EQ(d256.kv.size[1], 8);
  EXPECT_EQ(d256.q.volume(2), 128);
  o = KernelOptions{};
  o.q_tile = TileShape{{8, 8, 0}};
  const ScoredTiles bq = hopper::choose_backward_tiles(p, o);
  EXPECT_EQ(bq.q.size[0], 8);
  EXPECT_EQ(bq.kv.volume(2), hopper::kBwdKvRows);
  o.q_tile = TileShape{{1, 1, 0}};  // ones are a forced tile of one token, not "choose"
  EXPECT_NE(error_of([&] { hopper::choose_tiles(p, o); }).find("q_tile 1x1 (1 token)"),
            std::string::npos);
}

// The simulator's tiles for a kernel (gna-sim --kernel, gna_sim_kernel_tiles) are the tiles the
// kernel chooses with default options, for every case of the Hopper sets.
TEST(HopperTiles, SimulatorModelsTheChosenTiles) {
  int forward_cases = 0, backward_cases = 0;
  for (const sim::BenchCase& c : sim::bench_cases()) {
    const bool fwd = sim::in_set(c, "hopper"), bwd = sim::in_set(c, "hopper-bwd");
    if (!fwd && !bwd) continue;
    sim::Config config;
    config.rank = c.rank;
    Problem p;
    p.rank = c.rank;
    for (int a = 0; a < c.rank; ++a)
      config.axes[a] = p.axes[a] =
          AxisRule{c.extent[a], c.window[a], c.dilation[a], c.stride[a], c.causal[a]};
    p.dim_qk = p.dim_v = c.head_dim;
    if (fwd) {
      ++forward_cases;
      const ScoredTiles k = hopper::choose_tiles(p, KernelOptions{});
      const sim::Config s = sim::kernel_tiles(config, sim::TiledKernel::hopper_forward, c.head_dim);
      for (int a = 0; a < c.rank; ++a) {
        EXPECT_EQ(s.q_tile[a], k.q.size[a]) << c.name;
        EXPECT_EQ(s.kv_tile[a], k.kv.size[a]) << c.name;
      }
      EXPECT_EQ(sim::kv_placement(s.kv_tiling), k.placement) << c.name;
    }
    if (bwd) {
      ++backward_cases;
      const ScoredTiles k = hopper::choose_backward_tiles(p, KernelOptions{});
      const sim::Config s =
          sim::kernel_tiles(config, sim::TiledKernel::hopper_backward, c.head_dim);
      for (int a = 0; a < c.rank; ++a) {
        EXPECT_EQ(s.q_tile[a], k.q.size[a]) << c.name;
        EXPECT_EQ(s.kv_tile[a], k.kv.size[a]) << c.name;
      }
      EXPECT_EQ(s.kv_tiling, sim::KvTiling::static_tiles) << c.name;
    }
  }
  EXPECT_GT(forward_cases, 5);
  EXPECT_GT(backward_cases, 3);
}

}  // namespace
}  // namespace gna
