// The stride sweep against per-stride simulation and a brute-force reading of its pruning rule.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "brute_force.hpp"
#include "gna/sim/presets.hpp"
#include "gna/sim/sweep.hpp"

namespace gna::sim {
namespace {

bool smaller_or_equal(const SweepEntry& x, const SweepEntry& y, int rank) {
  for (int a = 0; a < rank; ++a)
    if (x.stride[a] > y.stride[a]) return false;
  return true;
}

void expect_same(const Result& x, const Result& y) {
  EXPECT_EQ(x.max_kv_tiles, y.max_kv_tiles);
  EXPECT_DOUBLE_EQ(x.mean_kv_tiles, y.mean_kv_tiles);
  EXPECT_EQ(x.visited_pairs, y.visited_pairs);
  EXPECT_EQ(x.pairs.empty, y.pairs.empty);
  EXPECT_EQ(x.pairs.full, y.pairs.full);
  EXPECT_EQ(x.pairs.partial, y.pairs.partial);
  EXPECT_EQ(x.attended_pairs, y.attended_pairs);
  EXPECT_DOUBLE_EQ(x.tile_speedup, y.tile_speedup);
}

void check_sweep(const Config& c) {
  SCOPED_TRACE(testing::describe(c));
  const std::vector<SweepEntry> all = sweep(c);
  int64_t expected = 1;
  for (int a = 0; a < c.rank; ++a) expected *= c.axes[a].window;
  ASSERT_EQ(static_cast<int64_t>(all.size()), expected);
  auto product = [&](const SweepEntry& e) {
    int64_t p = 1;
    for (int a = 0; a < c.rank; ++a) p *= e.stride[a];
    return p;
  };
  for (size_t i = 0; i < all.size(); ++i) {
    const SweepEntry& e = all[i];
    Config at = c;
    for (int a = 0; a < c.rank; ++a) at.axes[a].stride = e.stride[a];
    expect_same(e.result, simulate(at));
    if (i > 0) EXPECT_LE(product(all[i - 1]), product(e));
    bool beats_all_smaller = true;
    for (const SweepEntry& o : all)
      if (&o != &e && smaller_or_equal(o, e, c.rank) &&
          o.result.max_kv_tiles <= e.result.max_kv_tiles)
        beats_all_smaller = false;
    EXPECT_EQ(e.kept, beats_all_smaller);
  }
  for (const SweepEntry& e : pruned(all)) EXPECT_TRUE(e.kept);
  size_t block_sparse = 0;
  for (const SweepEntry& e : all) block_sparse += e.result.block_sparse;
  EXPECT_EQ(block_sparse_strides(all).size(), block_sparse);
  EXPECT_TRUE(all.front().kept);  // stride 1 everywhere has no smaller stride
}

TEST(SimSweep, MatchesPerStrideSimulationRandom) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int i = 0; i < 60; ++i) {
    const Tiling t = i % 3 == 2 ? Tiling::one_dim : Tiling::multi_dim;
    const KvTiling kv = i % 3 == 1 ? KvTiling::dynamic_tiles : KvTiling::static_tiles;
    check_sweep(testing::random_config(rng, 200, t, kv));
    if (HasFailure()) return;
  }
}

TEST(SimSweep, OrderedByStrideProductThenLexicographic) {
  Config c;
  c.rank = 2;
  c.axes[0].extent = 12;
  c.axes[0].window = 4;
  c.axes[1].extent = 10;
  c.axes[1].window = 3;
  c.q_tile[0] = c.q_tile[1] = 2;
  c.kv_tile[0] = c.kv_tile[1] = 2;
  const std::vector<SweepEntry> all = sweep(c);
  const int expected[][2] = {{1, 1}, {1, 2}, {2, 1}, {1, 3}, {3, 1}, {2, 2}, {4, 1},
                             {2, 3}, {3, 2}, {4, 2}, {3, 3}, {4, 3}};
  ASSERT_EQ(all.size(), 12u);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(all[i].stride[0], expected[i][0]) << i;
    EXPECT_EQ(all[i].stride[1], expected[i][1]) << i;
  }
}

// The full hunyuan sweep (18*24*24 strides) in well under a second; its known answers.
TEST(SimSweep, HunyuanFullSweepIsFast) {
  const Config c = find_preset("hunyuan")->config;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<SweepEntry> all = sweep(c);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 1.0);
  ASSERT_EQ(all.size(), 18u * 24u * 24u);
  bool found = false;
  for (const SweepEntry& e : all)
    if (e.stride[0] == 2 && e.stride[1] == 8 && e.stride[2] == 8) {
      found = true;
      EXPECT_TRUE(e.kept);
      EXPECT_TRUE(e.result.block_sparse);
      EXPECT_EQ(e.result.max_kv_tiles, 81);  // 3*3*9 KV tiles of 2x8x8
      EXPECT_DOUBLE_EQ(e.result.tile_speedup, 900.0 / 81.0);
    }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace gna::sim
