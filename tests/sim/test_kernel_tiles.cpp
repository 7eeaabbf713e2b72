// The tiled kernels' tile descriptions (gna/core/kernel_tiles.hpp) and the simulator's use of
// them (gna::sim::kernel_tiles, gna_sim_kernel_tiles): the descriptions are the ones the kernels
// ran with, the simulator's tiles are the chooser's, and bad input names the parameter.
#include <gtest/gtest.h>

#include <string>

#include "gna/core/error.hpp"
#include "gna/core/kernel_tiles.hpp"
#include "gna/gna_sim.h"
#include "gna/sim/cases.hpp"
#include "gna/sim/kernel_tiles.hpp"
#include "gna/sim/simulator.hpp"

namespace gna::sim {
namespace {

void expect_kernel(const TileKernel& k, const std::string& name, int q_rows, int kv_rows,
                   PairWalk walk, TileLimit forced_q, TileLimit forced_kv,
                   KvPlacements placements) {
  EXPECT_EQ(std::string(k.name), name);
  EXPECT_EQ(k.q_rows, q_rows) << name;
  EXPECT_EQ(k.kv_rows, kv_rows) << name;
  EXPECT_EQ(k.walk, walk) << name;
  EXPECT_EQ(k.forced_q.tokens, forced_q.tokens) << name;
  EXPECT_EQ(k.forced_q.exact, forced_q.exact) << name;
  EXPECT_EQ(k.forced_kv.tokens, forced_kv.tokens) << name;
  EXPECT_EQ(k.forced_kv.exact, forced_kv.exact) << name;
  EXPECT_EQ(k.kv_placements, placements) << name;
}

// The descriptions the kernels' launch code held before they moved to the core.
TEST(KernelTiles, DescriptionsAreTheKernels) {
  for (int d : {32, 64, 128})
    expect_kernel(hopper_forward_tile_kernel(d, KvPlacements::either), "hopper forward", 128, 128,
                  PairWalk::per_q_tile, {128, true}, {128, true}, KvPlacements::either);
  expect_kernel(hopper_forward_tile_kernel(256, KvPlacements::grid), "hopper forward", 128, 64,
                PairWalk::per_q_tile, {128, true}, {64, true}, KvPlacements::grid);
  EXPECT_EQ(hopper_kv_tile_tokens(256), 64);
  EXPECT_EQ(hopper_kv_tile_tokens(128), 128);
  expect_kernel(hopper_backward_tile_kernel(128, KvPlacements::grid), "hopper backward", 64, 128,
                PairWalk::per_kv_tile, {64, true}, {128, true}, KvPlacements::grid);
  // Placed Q tiles only at the head dims that have placed kernels; the others stay on the grid.
  for (int d : {32, 64, 128})
    EXPECT_EQ(hopper_backward_tile_kernel(d, KvPlacements::either).kv_placements,
              hopper_backward_placed_q_head_dim(d) ? KvPlacements::either : KvPlacements::grid)
        << d;
  EXPECT_TRUE(hopper_backward_placed_q_head_dim(128));
  EXPECT_FALSE(hopper_backward_placed_q_head_dim(64));
  EXPECT_FALSE(hopper_backward_placed_q_head_dim(32));
  const TileKernel narrow = portable_forward_tile_kernel(64), wide = portable_forward_tile_kernel(128);
  expect_kernel(narrow, "portable forward", 64, 64, PairWalk::per_q_tile, {128, false}, {64, true},
                KvPlacements::either);
  expect_kernel(wide, "portable forward", 128, 64, PairWalk::per_q_tile, {128, false}, {64, true},
                KvPlacements::either);
  EXPECT_EQ(narrow.weights.rows, 1);
  EXPECT_EQ(narrow.weights.speedup, 1);
  EXPECT_EQ(wide.weights.rows, 2);
  EXPECT_EQ(wide.weights.speedup, 1.5);
  expect_kernel(portable_backward_tile_kernel(64), "portable backward", 64, 64,
                PairWalk::per_kv_tile, {64, false}, {128, false}, KvPlacements::either);
  expect_kernel(portable_backward_tile_kernel(128, KvPlacements::grid), "portable backward", 64,
                128, PairWalk::per_kv_tile, {64, false}, {128, false}, KvPlacements::grid);
}

gna_sim_config c_config(const BenchCase& c) {
  gna_sim_config g{};
  g.rank = c.rank;
  for (int a = 0; a < c.rank; ++a) {
    g.extent[a] = c.extent[a];
    g.window[a] = c.window[a];
    g.stride[a] = c.stride[a];
    g.dilation[a] = c.dilation[a];
    g.causal[a] = c.causal[a] ? 1 : 0;
  }
  return g;  // tiles 0, as a caller that leaves them to the kernel passes them
}

Problem problem_of(const BenchCase& c, int head_dim) {
  Problem p;
  p.rank = c.rank;
  for (int a = 0; a < c.rank; ++a)
    p.axes[a] = AxisRule{c.extent[a], c.window[a], c.dilation[a], c.stride[a], c.causal[a]};
  p.dim_qk = p.dim_v = head_dim;
  return p;
}

const char* const kCases[] = {"hunyuan 18x24x24 NA", "hunyuan 18x24x24 s16x8x8",
                              "hunyuan dense d256",  "wan 15x27x48",
                              "flux4k 80x80 NA",     "flux4k 80x80 s16x16",
                              "nat 56x56 b128 h2 d32 7x7", "dinat 28x28 b128 h4 d32 7x7 dil4"};

void expect_chosen(const gna_sim_config& chosen, const gna_sim_config& in, const ScoredTiles& s,
                   const std::string& name) {
  for (int a = 0; a < GNA_MAX_RANK; ++a) {
    EXPECT_EQ(chosen.q_tile[a], a < in.rank ? s.q.size[a] : 1) << name << " axis " << a;
    EXPECT_EQ(chosen.kv_tile[a], a < in.rank ? s.kv.size[a] : 1) << name << " axis " << a;
    EXPECT_EQ(chosen.extent[a], in.extent[a]) << name;
    EXPECT_EQ(chosen.window[a], in.window[a]) << name;
    EXPECT_EQ(chosen.stride[a], in.stride[a]) << name;
  }
  EXPECT_EQ(chosen.rank, in.rank);
  EXPECT_EQ(chosen.tiling, GNA_SIM_TILING_MULTI) << name;
  EXPECT_EQ(chosen.kv_tiling, s.placement == KvPlacement::placed ? GNA_SIM_KV_DYNAMIC
                                                                    : GNA_SIM_KV_STATIC)
      << name;
}

// The C function's tiles are the chooser's for the kernel's description, as dispatch asks for
// them (no forced tiles; the forward with either placement, KernelOptions' default).
TEST(KernelTiles, CAbiIsTheChoosersChoice) {
  for (const char* name : kCases) {
    const BenchCase* c = find_bench_case(name);
    ASSERT_NE(c, nullptr) << name;
    const gna_sim_config in = c_config(*c);
    gna_sim_config chosen{};
    ASSERT_EQ(gna_sim_kernel_tiles(&in, GNA_SIM_KERNEL_HOPPER_FORWARD, c->head_dim, &chosen),
              GNA_STATUS_OK)
        << name << ": " << gna_sim_last_error();
    expect_chosen(chosen, in,
                  tile_choice(problem_of(*c, c->head_dim),
                              hopper_forward_tile_kernel(c->head_dim, KvPlacements::either),
                              kNoForcedTile, kNoForcedTile),
                  name);
    if (!hopper_backward_head_dim(c->head_dim)) continue;
    ASSERT_EQ(gna_sim_kernel_tiles(&in, GNA_SIM_KERNEL_HOPPER_BACKWARD, c->head_dim, &chosen),
              GNA_STATUS_OK)
        << name << ": " << gna_sim_last_error();
    // The backward places its Q tiles (placed or not, its KV tiles are static).
    ScoredTiles backward = tile_choice(problem_of(*c, c->head_dim),
                                       hopper_backward_tile_kernel(c->head_dim, KvPlacements::either),
                                       kNoForcedTile, kNoForcedTile);
    backward.placement = KvPlacement::grid;
    expect_chosen(chosen, in, backward, name);
    EXPECT_EQ(chosen.kv_tiling, GNA_SIM_KV_STATIC) << name;
  }
}

// The Hopper forward places its KV tiles for the hunyuan and wan neighborhoods and keeps the grid
// for the block-sparse FLUX stride (tests/hopper/test_hopper_tiles.cpp, from the kernel's side).
TEST(KernelTiles, HopperForwardPlacement) {
  const struct {
    const char* name;
    int kv_tiling;
  } cases[] = {{"hunyuan 18x24x24 NA", GNA_SIM_KV_DYNAMIC},
               {"wan 15x27x48", GNA_SIM_KV_DYNAMIC},
               {"flux4k 80x80 s16x16", GNA_SIM_KV_STATIC}};
  for (const auto& e : cases) {
    const gna_sim_config in = c_config(*find_bench_case(e.name));
    gna_sim_config chosen{};
    ASSERT_EQ(gna_sim_kernel_tiles(&in, GNA_SIM_KERNEL_HOPPER_FORWARD, 128, &chosen), GNA_STATUS_OK);
    EXPECT_EQ(chosen.kv_tiling, e.kv_tiling) << e.name;
    int64_t q = 1, kv = 1;
    for (int a = 0; a < in.rank; ++a) {
      q *= chosen.q_tile[a];
      kv *= chosen.kv_tile[a];
    }
    EXPECT_EQ(q, 128) << e.name;
    EXPECT_EQ(kv, 128) << e.name;
  }
  // FLUX stride 16x16 with the chosen tiles is block-sparse at the FLOP-wise bound.
  const gna_sim_config in = c_config(*find_bench_case("flux4k 80x80 s16x16"));
  gna_sim_config chosen{};
  ASSERT_EQ(gna_sim_kernel_tiles(&in, GNA_SIM_KERNEL_HOPPER_FORWARD, 128, &chosen), GNA_STATUS_OK);
  gna_sim_result r{};
  ASSERT_EQ(gna_simulate(&chosen, &r), GNA_STATUS_OK) << gna_sim_last_error();
  EXPECT_EQ(r.block_sparse, 1);
  EXPECT_NEAR(r.tile_speedup, 10.24, 1e-9);
}

// Every case of the Hopper sets gets its kernel's tiles within the step limit, the dense 1-D
// sequence of 8192 tokens included (the backward's chooser takes its KV tiles' Q tile runs in
// closed form, and a dense axis once for both placements).
TEST(KernelTiles, HopperSetsAreWithinTheStepLimit) {
  int backward_cases = 0;
  for (const BenchCase& c : bench_cases()) {
    const bool fwd = in_set(c, "hopper"), bwd = in_set(c, "hopper-bwd");
    if (!fwd && !bwd) continue;
    const gna_sim_config in = c_config(c);
    gna_sim_config chosen{};
    if (fwd)
      EXPECT_EQ(gna_sim_kernel_tiles(&in, GNA_SIM_KERNEL_HOPPER_FORWARD, c.head_dim, &chosen),
                GNA_STATUS_OK)
          << c.name << ": " << gna_sim_last_error();
    if (bwd) {
      ++backward_cases;
      EXPECT_EQ(gna_sim_kernel_tiles(&in, GNA_SIM_KERNEL_HOPPER_BACKWARD, c.head_dim, &chosen),
                GNA_STATUS_OK)
          << c.name << ": " << gna_sim_last_error();
    }
  }
  EXPECT_GT(backward_cases, 3);
  ASSERT_NE(find_bench_case("1d dense 8k h4"), nullptr);
  EXPECT_TRUE(in_set(*find_bench_case("1d dense 8k h4"), "hopper-bwd"));
}

// The C++ function and the C one agree, and simulating the chosen config is simulating its
// explicit tiles.
TEST(KernelTiles, CppAndCAgree) {
  const BenchCase* c = find_bench_case("hunyuan 18x24x24 NA");
  Config config;
  config.rank = c->rank;
  for (int a = 0; a < c->rank; ++a)
    config.axes[a] = AxisRule{c->extent[a], c->window[a], c->dilation[a], c->stride[a], false};
  const Config k = kernel_tiles(config, TiledKernel::hopper_forward, 128);
  const gna_sim_config in = c_config(*c);
  gna_sim_config chosen{};
  ASSERT_EQ(gna_sim_kernel_tiles(&in, GNA_SIM_KERNEL_HOPPER_FORWARD, 128, &chosen), GNA_STATUS_OK);
  for (int a = 0; a < c->rank; ++a) {
    EXPECT_EQ(k.q_tile[a], chosen.q_tile[a]);
    EXPECT_EQ(k.kv_tile[a], chosen.kv_tile[a]);
  }
  EXPECT_EQ(k.kv_tiling, KvTiling::dynamic_tiles);
  gna_sim_result r{};
  ASSERT_EQ(gna_simulate(&chosen, &r), GNA_STATUS_OK);
  const Result s = simulate(k);
  EXPECT_EQ(r.visited_pairs, s.visited_pairs);
  EXPECT_EQ(r.partial_pairs, s.pairs.partial);
  TiledKernel parsed;
  EXPECT_TRUE(parse_kernel("hopper forward", &parsed));
  EXPECT_EQ(parsed, TiledKernel::hopper_forward);
  EXPECT_TRUE(parse_kernel("hopper_backward", &parsed));
  EXPECT_EQ(parsed, TiledKernel::hopper_backward);
  EXPECT_TRUE(parse_kernel("portable forward", &parsed));
  EXPECT_EQ(parsed, TiledKernel::portable_forward);
  EXPECT_TRUE(parse_kernel("portable-backward", &parsed));
  EXPECT_EQ(parsed, TiledKernel::portable_backward);
  EXPECT_TRUE(parse_kernel("portable backward 99kb", &parsed));
  EXPECT_EQ(parsed, TiledKernel::portable_backward_99kb);
  EXPECT_FALSE(parse_kernel("portable sideways", &parsed));
}

Config config_of(const BenchCase& c) {
  Config config;
  config.rank = c.rank;
  for (int a = 0; a < c.rank; ++a)
    config.axes[a] = AxisRule{c.extent[a], c.window[a], c.dilation[a], c.stride[a], c.causal[a]};
  return config;
}

// On one axis the forward's only tiles are its rows: the choice of every 1-D case (32k tokens)
// is within the simulator's step limit.
TEST(KernelTiles, OneAxisForwardChoiceIsWithinTheStepLimit) {
  int cases = 0;
  for (const BenchCase& c : bench_cases()) {
    if (c.rank != 1) continue;
    ++cases;
    const Config k = kernel_tiles(config_of(c), TiledKernel::hopper_forward, 128);
    EXPECT_EQ(k.q_tile[0], kHopperTileTokens) << c.name;
    EXPECT_EQ(k.kv_tile[0], hopper_kv_tile_tokens(128)) << c.name;
  }
  EXPECT_GE(cases, 2);
}

// The portable backward's variant: 128-key tiles where few pairs are partial or the head dims
// have no 64-key kernel, 64-key ones where many are (the neighborhood cases) or the 128-key
// kernel does not fit; the simulator's tiles are that choice on a device where both fit.
TEST(KernelTiles, PortableBackwardVariant) {
  const struct {
    const char* name;
    int kv_rows;
  } cases[] = {{"hunyuan 18x24x24 NA", 64}, {"flux4k 80x80 NA", 64}, {"wan 15x27x48", 64},
               {"hunyuan 18x24x24 s16x8x8", 128}, {"flux4k 80x80 s16x16", 128},
               {"hunyuan dense", 128}};
  for (const auto& e : cases) {
    const BenchCase* c = find_bench_case(e.name);
    ASSERT_NE(c, nullptr) << e.name;
    const Problem p = problem_of(*c, 128);
    const ScoredTiles s = portable_backward_tile_choice(p, kNoForcedTile, kNoForcedTile, true,
                                                        true, KvPlacements::either);
    EXPECT_EQ(s.kv.volume(p.rank), e.kv_rows) << e.name;
    EXPECT_EQ(s.q.volume(p.rank), kPortableBackwardRowsQ) << e.name;
    // Without the 64-key kernel, or where only it fits.
    EXPECT_EQ(portable_backward_tile_choice(p, kNoForcedTile, kNoForcedTile, true, false,
                                            KvPlacements::either)
                  .kv.volume(p.rank),
              kPortableBackwardRowsKV)
        << e.name;
    EXPECT_EQ(portable_backward_tile_choice(p, kNoForcedTile, kNoForcedTile, false, true,
                                            KvPlacements::either)
                  .kv.volume(p.rank),
              kPortableBackwardRowsKVSmall)
        << e.name;
    const Config tiles = kernel_tiles(config_of(*c), TiledKernel::portable_backward, 128);
    for (int a = 0; a < p.rank; ++a) {
      EXPECT_EQ(tiles.q_tile[a], s.q.size[a]) << e.name;
      EXPECT_EQ(tiles.kv_tile[a], s.kv.size[a]) << e.name;
    }
    EXPECT_EQ(tiles.kv_tiling, KvTiling::static_tiles) << e.name;
  }
  // The neighborhood cases place their Q tiles (fewer pairs than the grid's).
  const Problem na = problem_of(*find_bench_case("hunyuan 18x24x24 NA"), 128);
  const ScoredTiles placed = portable_backward_tile_choice(na, kNoForcedTile, kNoForcedTile, true,
                                                           true, KvPlacements::either);
  const ScoredTiles grid = portable_backward_tile_choice(na, kNoForcedTile, kNoForcedTile, true,
                                                         true, KvPlacements::grid);
  EXPECT_EQ(placed.placement, KvPlacement::placed);
  EXPECT_EQ(grid.placement, KvPlacement::grid);
  EXPECT_LT(placed.cost, grid.cost);
  // A head dim the backward does not run is named.
  try {
    kernel_tiles(config_of(*find_bench_case("hunyuan 18x24x24 NA")), TiledKernel::portable_backward,
                 256);
    ADD_FAILURE() << "head dim 256 taken";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("head_dim: the portable backward runs 32, 64 or 128, got 256"),
              std::string::npos)
        << err.what();
  }
}

// The prediction is the core's cost model over the simulated counts: pairs, partial pairs at the
// model's weight, a work item per walked tile, and the model's time per pair at head dim 128;
// dense attention over the same tokens (no padding) predicts exactly 1.
TEST(KernelTiles, PredictionIsTheCostModel) {
  for (TiledKernel kernel : tiled_kernels()) {
    const bool portable = kernel == TiledKernel::portable_forward ||
                          kernel == TiledKernel::portable_forward_99kb;
    const bool portable_bwd = kernel == TiledKernel::portable_backward ||
                              kernel == TiledKernel::portable_backward_99kb;
    const bool fwd = kernel != TiledKernel::hopper_backward && !portable_bwd;
    for (const char* name : {"hunyuan 18x24x24 NA", "hunyuan 18x24x24 s16x8x8", "wan 15x27x48",
                             "hunyuan dense"}) {
      SCOPED_TRACE(std::string(kernel_name(kernel)) + " " + name);
      const BenchCase* c = find_bench_case(name);
      ASSERT_NE(c, nullptr);
      const Config tiles = kernel_tiles(config_of(*c), kernel, 128);
      const Result r = simulate(tiles);
      const KernelPrediction p = predict(tiles, r, kernel, 128);
      int rows_q = 1, rows_kv = 1;
      for (int a = 0; a < tiles.rank; ++a) {
        rows_q *= tiles.q_tile[a];
        rows_kv *= tiles.kv_tile[a];
      }
      // The portable backward's 64-key tiles are priced by their own kernel's model.
      const KernelCostModel& model = portable       ? kPortableForwardCost
                                     : portable_bwd ? portable_backward_cost(rows_kv)
                                     : fwd          ? kHopperForwardCost
                                                    : kHopperBackwardCost;
      const double item = model.item_pairs;
      const double walked = static_cast<double>(fwd ? r.q_tiles : r.kv_tiles);
      EXPECT_NEAR(p.cost,
                  static_cast<double>(r.visited_pairs) +
                      model.partial * static_cast<double>(r.pairs.partial) + item * walked,
                  1e-6 * p.cost);
      const int q_rows = portable       ? rows_q
                         : portable_bwd ? kPortableBackwardRowsQ
                         : fwd          ? kHopperTileTokens
                                        : kHopperBwdQRows;
      const int kv_rows = portable       ? kPortableForwardRowsKV
                          : portable_bwd ? rows_kv
                          : fwd          ? kHopperTileTokens
                                         : kHopperBwdKvRows;
      const double q = r.tokens / double(q_rows), kv = r.tokens / double(kv_rows);
      EXPECT_NEAR(p.dense_cost, q * kv + item * (fwd ? q : kv), 1e-6 * p.dense_cost);
      EXPECT_DOUBLE_EQ(p.speedup, p.dense_cost / p.cost);
      // The portable forward's 64-row tiles run at the narrow kernel's pair time, its
      // single-stage kernel (99 KB, 128-row tiles at head dim 128) at its slowdown.
      const bool single = kernel == TiledKernel::portable_forward_99kb && rows_q == 128;
      const double pair_ns = model.pair_ns * (portable ? portable_forward_pair_scale(rows_q) : 1) *
                             (single ? kPortableSingleStageForwardSlowdown : 1);
      EXPECT_DOUBLE_EQ(p.ns_per_head, p.cost * pair_ns);
      if (std::string(name) == "hunyuan dense") EXPECT_NEAR(p.speedup, 1.0, 1e-12);
      if (r.block_sparse) EXPECT_EQ(r.pairs.partial, 0);
      else EXPECT_GT(r.pairs.partial, 0);
    }
    // Times were measured at head dim 128 only.
    const BenchCase* c = find_bench_case("hunyuan 18x24x24 NA");
    ASSERT_NE(c, nullptr);
    const Config tiles64 = kernel_tiles(config_of(*c), kernel, 64);
    EXPECT_EQ(predict(tiles64, simulate(tiles64), kernel, 64).ns_per_head, 0.0);
  }
}

// On 99 KB devices the portable forward keeps its tiles (128-row ones at head dim 128 with one K/V
// stage, priced at its slowdown) and the backward runs 64-key tiles where it has them (head dims 64
// and 128; at 32 its 128-key kernel fits).
TEST(KernelTiles, PortableKernelsOn99KbDevices) {
  const Config rule = config_of(*find_bench_case("hunyuan 18x24x24 s16x8x8"));
  auto rows = [](const Config& t, bool q) {
    int n = 1;
    for (int a = 0; a < t.rank; ++a) n *= q ? t.q_tile[a] : t.kv_tile[a];
    return n;
  };
  const Config fwd = kernel_tiles(rule, TiledKernel::portable_forward, 128);
  const Config fwd99 = kernel_tiles(rule, TiledKernel::portable_forward_99kb, 128);
  for (int a = 0; a < rule.rank; ++a) {
    EXPECT_EQ(fwd99.q_tile[a], fwd.q_tile[a]);
    EXPECT_EQ(fwd99.kv_tile[a], fwd.kv_tile[a]);
  }
  ASSERT_EQ(rows(fwd, true), 128);
  const double ns = predict(fwd, simulate(fwd), TiledKernel::portable_forward, 128).ns_per_head;
  EXPECT_NEAR(predict(fwd99, simulate(fwd99), TiledKernel::portable_forward_99kb, 128).ns_per_head,
              ns * kPortableSingleStageForwardSlowdown, 1e-9 * ns);
  const Config bwd = kernel_tiles(rule, TiledKernel::portable_backward, 128);
  const Config bwd99 = kernel_tiles(rule, TiledKernel::portable_backward_99kb, 128);
  EXPECT_EQ(rows(bwd, false), kPortableBackwardRowsKV);  // block-sparse: the 128-key kernel
  EXPECT_EQ(rows(bwd99, false), kPortableBackwardRowsKVSmall);
  EXPECT_EQ(rows(kernel_tiles(rule, TiledKernel::portable_backward_99kb, 32), false),
            kPortableBackwardRowsKV);
}

// The C ABI's prediction is the C++ one at the kernel's tiles; a missing output is named.
TEST(KernelTiles, CAbiPredictionIsTheCppOne) {
  const BenchCase* c = find_bench_case("wan 15x27x48");
  ASSERT_NE(c, nullptr);
  const gna_sim_config in = c_config(*c);
  for (TiledKernel kernel : tiled_kernels()) {
    gna_sim_prediction got{};
    ASSERT_EQ(gna_sim_predict(&in, static_cast<int32_t>(kernel), 128, &got), GNA_STATUS_OK)
        << gna_sim_last_error();
    const Config tiles = kernel_tiles(config_of(*c), kernel, 128);
    const KernelPrediction want = predict(tiles, simulate(tiles), kernel, 128);
    EXPECT_DOUBLE_EQ(got.cost, want.cost);
    EXPECT_DOUBLE_EQ(got.dense_cost, want.dense_cost);
    EXPECT_DOUBLE_EQ(got.speedup, want.speedup);
    EXPECT_DOUBLE_EQ(got.ns_per_head, want.ns_per_head);
    EXPECT_GT(got.ns_per_head, 0.0);
  }
  EXPECT_NE(gna_sim_predict(&in, GNA_SIM_KERNEL_HOPPER_FORWARD, 128, nullptr), GNA_STATUS_OK);
  EXPECT_NE(std::string(gna_sim_last_error()).find("prediction"), std::string::npos);
  gna_sim_prediction out{};
  EXPECT_NE(gna_sim_predict(&in, GNA_SIM_KERNEL_HOPPER_FORWARD, 48, &out), GNA_STATUS_OK);
  EXPECT_NE(std::string(gna_sim_last_error()).find("head_dim"), std::string::npos);
}

std::string error_of(const gna_sim_config* in, int kernel, int head_dim) {
  gna_sim_config chosen{};
  EXPECT_NE(gna_sim_kernel_tiles(in, kernel, head_dim, &chosen), GNA_STATUS_OK);
  return gna_sim_last_error();
}

TEST(KernelTiles, CAbiErrorsNameTheParameter) {
  const gna_sim_config in = c_config(*find_bench_case("flux4k 80x80 NA"));
  EXPECT_NE(error_of(&in, 7, 128).find("kernel must be 0 (hopper forward), 1 (hopper backward), "
                                       "2 (portable forward), 3 (portable backward), 4 (portable "
                                       "forward, 99 KB) or 5 (portable backward, 99 KB), got 7"),
            std::string::npos);
  EXPECT_NE(error_of(&in, GNA_SIM_KERNEL_PORTABLE_BACKWARD, 256).find("got 256"), std::string::npos);
  EXPECT_NE(error_of(&in, GNA_SIM_KERNEL_PORTABLE_FORWARD, 256).find("got 256"), std::string::npos);
  EXPECT_NE(error_of(&in, -1, 128).find("got -1"), std::string::npos);
  EXPECT_NE(error_of(&in, GNA_SIM_KERNEL_HOPPER_FORWARD, 96).find("head_dim"), std::string::npos);
  EXPECT_NE(error_of(&in, GNA_SIM_KERNEL_HOPPER_FORWARD, 96).find("got 96"), std::string::npos);
  EXPECT_NE(error_of(&in, GNA_SIM_KERNEL_HOPPER_BACKWARD, 256).find("got 256"), std::string::npos);
  gna_sim_config bad = in;
  bad.window[1] = 0;
  EXPECT_NE(error_of(&bad, GNA_SIM_KERNEL_HOPPER_FORWARD, 128).find("window"), std::string::npos);
  bad = in;
  bad.rank = 4;
  EXPECT_NE(error_of(&bad, GNA_SIM_KERNEL_HOPPER_FORWARD, 128).find("rank"), std::string::npos);
  EXPECT_NE(error_of(nullptr, GNA_SIM_KERNEL_HOPPER_FORWARD, 128).find("config"),
            std::string::npos);
  gna_sim_config chosen{};
  EXPECT_NE(gna_sim_kernel_tiles(&in, GNA_SIM_KERNEL_HOPPER_FORWARD, 128, nullptr), GNA_STATUS_OK);
  EXPECT_NE(std::string(gna_sim_last_error()).find("output"), std::string::npos);
  // The config's own tiles and tilings are ignored, whatever they hold.
  bad = in;
  bad.tiling = 9;
  bad.kv_tiling = -3;
  bad.q_tile[0] = -5;
  EXPECT_EQ(gna_sim_kernel_tiles(&bad, GNA_SIM_KERNEL_HOPPER_FORWARD, 128, &chosen), GNA_STATUS_OK)
      << gna_sim_last_error();
  // Too large to score is refused with the estimate, quickly.
  bad = in;
  bad.rank = 1;
  bad.extent[0] = bad.window[0] = 2147483647;
  EXPECT_NE(error_of(&bad, GNA_SIM_KERNEL_HOPPER_FORWARD, 128).find("steps"), std::string::npos);
}

}  // namespace
}  // namespace gna::sim
