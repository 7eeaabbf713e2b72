// Every count of the simulator against brute-force enumeration of (query, key) pairs on small
// random problems: all three designs, dilation, causal axes, partial edge tiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "brute_force.hpp"
#include "gna/core/problem.hpp"
#include "gna/core/tiling.hpp"
#include "gna/sim/axis_stats.hpp"
#include "gna/sim/simulator.hpp"

namespace gna::sim {
namespace {

using testing::brute_force;
using testing::BruteCounts;
using testing::describe;
using testing::random_config;

void expect_matches(const Config& c) {
  SCOPED_TRACE(describe(c));
  const Result r = simulate(c);
  const BruteCounts b = brute_force(c);
  int64_t tokens = 1;
  for (int a = 0; a < c.rank; ++a) tokens *= c.axes[a].extent;
  EXPECT_EQ(r.tokens, tokens);
  EXPECT_EQ(r.q_tiles, b.q_tiles);
  EXPECT_EQ(r.kv_tiles, b.kv_tiles);
  EXPECT_EQ(r.dense_kv_tiles, b.dense_kv_tiles);
  EXPECT_EQ(r.max_kv_tiles, b.max_kv_tiles);
  EXPECT_DOUBLE_EQ(r.mean_kv_tiles, static_cast<double>(b.visited) / b.q_tiles);
  EXPECT_EQ(r.visited_pairs, b.visited);
  EXPECT_EQ(r.pairs.empty, b.empty);
  EXPECT_EQ(r.pairs.full, b.full);
  EXPECT_EQ(r.pairs.partial, b.partial);
  EXPECT_EQ(r.block_sparse, b.partial == 0);
  EXPECT_EQ(r.attended_pairs, b.attended);
  EXPECT_NEAR(r.mean_keys_per_query, mean_keys_per_query(to_problem(c)),
              1e-12 * r.mean_keys_per_query);
  EXPECT_DOUBLE_EQ(r.flop_speedup, static_cast<double>(tokens) * tokens / b.attended);
  EXPECT_DOUBLE_EQ(r.tile_speedup, static_cast<double>(b.dense_kv_tiles) / b.max_kv_tiles);
  const double computed = static_cast<double>(b.visited) * q_tile_volume(c) * kv_tile_volume(c);
  EXPECT_NEAR(r.wasted_flop_fraction, 1.0 - b.attended / computed, 1e-12);
  EXPECT_GE(r.wasted_flop_fraction, -1e-12);
}

void run_random(Tiling tiling, KvTiling kv_tiling, int cases, int max_tokens) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int i = 0; i < cases; ++i) {
    expect_matches(random_config(rng, max_tokens, tiling, kv_tiling));
    if (::testing::Test::HasFailure()) return;  // one described failure is enough
  }
}

TEST(SimBruteForce, MultiDimStaticRandom) {
  run_random(Tiling::multi_dim, KvTiling::static_tiles, 300, 240);
}

TEST(SimBruteForce, MultiDimDynamicRandom) {
  run_random(Tiling::multi_dim, KvTiling::dynamic_tiles, 200, 200);
}

TEST(SimBruteForce, OneDimRandom) { run_random(Tiling::one_dim, KvTiling::static_tiles, 300, 240); }

Config make(int rank, const int* extent, const int* window, const int* stride, const int* dilation,
            const int* causal, const int* q_tile, const int* kv_tile) {
  Config c;
  c.rank = rank;
  for (int a = 0; a < rank; ++a) {
    c.axes[a].extent = extent[a];
    c.axes[a].window = window[a];
    c.axes[a].stride = stride[a];
    c.axes[a].dilation = dilation[a];
    c.axes[a].causal = causal[a] != 0;
    c.q_tile[a] = q_tile[a];
    c.kv_tile[a] = kv_tile[a];
  }
  return c;
}

// Hand-picked corners the random generator hits rarely: every axis dilated and causal,
// windows equal to the group length, tiles larger than a group, a 1-D run wrapping rows.
TEST(SimBruteForce, Corners) {
  const int e[] = {7, 9, 10}, k[] = {3, 4, 5}, s[] = {3, 2, 5}, d[] = {2, 2, 2}, c1[] = {1, 1, 1};
  const int qt[] = {2, 3, 4}, kt[] = {3, 2, 8}, one[] = {1, 1, 1}, zero[] = {0, 0, 0};
  for (const Tiling t : {Tiling::multi_dim, Tiling::one_dim})
    for (const KvTiling kv : {KvTiling::static_tiles, KvTiling::dynamic_tiles}) {
      if (t == Tiling::one_dim && kv == KvTiling::dynamic_tiles) continue;
      for (const int* causal : {c1, zero}) {
        Config c = make(3, e, k, s, d, causal, qt, kt);
        c.tiling = t;
        c.kv_tiling = kv;
        expect_matches(c);
        const int full_k[] = {3, 4, 5};  // n of group 0 is 4, 5, 5: near-full windows
        Config w = make(3, e, full_k, one, d, causal, kt, qt);
        w.tiling = t;
        w.kv_tiling = kv;
        expect_matches(w);
      }
    }
  // Window equal to the whole group: every tile of the group is full (1-D run wrap included).
  const int e2[] = {4, 6}, k2[] = {2, 6}, d2[] = {2, 1}, q2[] = {5, 1}, kv2[] = {3, 1};
  Config w = make(2, e2, k2, one, d2, zero, q2, kv2);
  w.tiling = Tiling::one_dim;
  expect_matches(w);
  w.tiling = Tiling::multi_dim;
  expect_matches(w);
}

// The dynamic design's per-axis numbers are the core's placed KV tiles (gna/core/tiling.hpp),
// which the Hopper forward loads: tiles, worst Q tile and full pairs summed over groups and Q
// tiles from placed_kv_tiles and classify_q_tile_keys; static ones from kv_tiles_for_q_tile.
TEST(SimBruteForce, DynamicKvTilesAreTheCoresPlacedTiles) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int t = 0; t < 500; ++t) {
    AxisRule a;
    a.dilation = uni(1, 3);
    a.extent = uni(2 * a.dilation, 400);
    a.window = uni(2, a.extent / a.dilation);
    a.stride = uni(0, 1) ? uni(1, a.window) : 1;
    a.causal = uni(0, 4) == 0;
    const int tq = 1 << uni(0, 6), tk = 1 << uni(0, 7);
    SCOPED_TRACE("L=" + std::to_string(a.extent) + " K=" + std::to_string(a.window) +
                 " d=" + std::to_string(a.dilation) + " s=" + std::to_string(a.stride) +
                 " c=" + std::to_string(a.causal) + " tq=" + std::to_string(tq) +
                 " tk=" + std::to_string(tk));
    int64_t visited[2] = {0, 0}, full[2] = {0, 0}, most[2] = {0, 0};
    for (int g = 0; g < a.dilation; ++g) {
      const int n = group_length(a, g);
      for (int qt = 0; qt < tiles_along(n, tq); ++qt) {
        const Range grid = kv_tiles_for_q_tile(a, n, qt, tq, tk);
        const KvTileRun placed = placed_kv_tiles(a, n, qt, tq, tk);
        visited[0] += grid.size();
        visited[1] += placed.count;
        most[0] = std::max<int64_t>(most[0], grid.size());
        most[1] = std::max<int64_t>(most[1], placed.count);
        for (int kt = grid.begin; kt < grid.end; ++kt)
          full[0] += classify_axis_tiles(a, n, qt, kt, tq, tk) == PairClass::full;
        for (int m = 0; m < placed.count; ++m)
          full[1] += classify_q_tile_keys(a, n, qt, tq, placed.first + m * tk, tk) ==
                     PairClass::full;
      }
    }
    const KvTiling designs[2] = {KvTiling::static_tiles, KvTiling::dynamic_tiles};
    for (int i = 0; i < 2; ++i) {
      const AxisStats st = axis_tile_stats(a, tq, tk, designs[i]);
      ASSERT_EQ(st.visited, visited[i]) << kv_tiling_name(designs[i]);
      ASSERT_EQ(st.full, full[i]) << kv_tiling_name(designs[i]);
      ASSERT_EQ(st.max_visited, most[i]) << kv_tiling_name(designs[i]);
    }
  }
}

}  // namespace
}  // namespace gna::sim
