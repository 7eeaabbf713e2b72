// Tile candidates and per-axis pair statistics against brute-force enumeration of the pairs.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "gna/core/tile_candidates.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

// Calls f(a, tq, tk) for `count` random axes inside one dilation group (the pair statistics are
// per group) with Q / KV tile sizes of 1 to 17, drawn from a fresh seed that failures name.
template <typename F>
void for_random_axes_and_tiles(int count, F&& f) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int t = 0; t < count; ++t) {
    AxisRule a = random_axis(rng, 64);
    a.extent = group_length(a, 0);
    a.dilation = 1;
    const int tq = rand_int(rng, 1, 17), tk = rand_int(rng, 1, 17);
    SCOPED_TRACE("L=" + std::to_string(a.extent) + " K=" + std::to_string(a.window) + " s=" +
                 std::to_string(a.stride) + " c=" + std::to_string(a.causal) + " tq=" +
                 std::to_string(tq) + " tk=" + std::to_string(tk));
    f(a, tq, tk);
  }
}

TEST(TileCandidates, PowerOfTwoShapesAreEveryFactorisationOnce) {
  for (int rank = 1; rank <= 3; ++rank)
    for (int tokens : {1, 2, 64, 128}) {
      const std::vector<TileShape> shapes = power_of_two_tile_shapes(rank, tokens);
      std::set<std::tuple<int, int, int>> seen;
      for (const TileShape& t : shapes) {
        EXPECT_EQ(t.volume(rank), tokens);
        for (int a = 0; a < 3; ++a) {
          EXPECT_EQ(t.size[a] & (t.size[a] - 1), 0) << "side not a power of two";
          if (a >= rank) EXPECT_EQ(t.size[a], 1) << "unused axis must stay 1";
        }
        EXPECT_TRUE(seen.insert({t.size[0], t.size[1], t.size[2]}).second) << "duplicate shape";
      }
      int e = 0;
      while ((1 << e) < tokens) ++e;
      // Compositions of e into `rank` non-negative parts.
      const size_t expected = rank == 1 ? 1 : rank == 2 ? e + 1 : (e + 1) * (e + 2) / 2;
      EXPECT_EQ(shapes.size(), expected) << "rank " << rank << " tokens " << tokens;
      // Ordered by axis 0, then axis 1.
      EXPECT_TRUE(std::is_sorted(shapes.begin(), shapes.end(), [](const TileShape& x,
                                                                  const TileShape& y) {
        return std::make_pair(x.size[0], x.size[1]) < std::make_pair(y.size[0], y.size[1]);
      }));
    }
}

TEST(TileCandidates, AxisPairStatsCountTheNonEmptyAndFullPairs) {
  for_random_axes_and_tiles(2000, [](const AxisRule& a, int tq, int tk) {
    const int n = a.extent;
    double nonempty = 0, full = 0;
    std::vector<int> per_q(tiles_along(n, tq)), per_kv(tiles_along(n, tk));
    for (int qt = 0; qt < tiles_along(n, tq); ++qt)
      for (int kt = 0; kt < tiles_along(n, tk); ++kt) {
        const Range qs = tile_rows(n, tq, qt), ks = tile_rows(n, tk, kt);
        bool any = false, all = true;
        for (int i = qs.begin; i < qs.end; ++i)
          for (int j = kt * tk; j < (kt + 1) * tk; ++j) {
            const bool att = j < ks.end && axis_attends(a, i, j);
            any |= att;
            all &= att;
          }
        nonempty += any;
        full += any && all;
        per_q[qt] += any;
        per_kv[kt] += any;
      }
    const auto fwd = axis_pair_stats(a, n, tq, tk, PairWalk::per_q_tile);
    const auto bwd = axis_pair_stats(a, n, tq, tk, PairWalk::per_kv_tile);
    EXPECT_EQ(fwd.visited, nonempty);
    EXPECT_EQ(bwd.visited, nonempty);
    EXPECT_EQ(fwd.full, full);
    EXPECT_EQ(bwd.full, full);
    EXPECT_EQ(fwd.max_box, *std::max_element(per_q.begin(), per_q.end()));
    EXPECT_EQ(bwd.max_box, *std::max_element(per_kv.begin(), per_kv.end()));
    EXPECT_EQ(fwd.q_tiles, tiles_along(n, tq));
    EXPECT_EQ(fwd.kv_tiles, tiles_along(n, tk));
  });
}

// With placed KV tiles a Q tile visits the tiles of tk keys from its first attended key up to
// its last (brute force); full ones are those every query attends whole, padding excluded.
TEST(TileCandidates, AxisPairStatsOfPlacedKvTiles) {
  for_random_axes_and_tiles(2000, [](const AxisRule& a, int tq, int tk) {
    const int n = a.extent;
    double visited = 0, full = 0, most = 0;
    for (int qt = 0; qt < tiles_along(n, tq); ++qt) {
      const Range qs = tile_rows(n, tq, qt);
      int lo = n, hi = -1;
      for (int i = qs.begin; i < qs.end; ++i)
        for (int j = 0; j < n; ++j)
          if (axis_attends(a, i, j)) {
            lo = std::min(lo, j);
            hi = std::max(hi, j);
          }
      const int count = (hi - lo + tk) / tk;
      visited += count;
      most = std::max<double>(most, count);
      for (int m = 0; m < count; ++m) {
        bool all = true;
        for (int i = qs.begin; i < qs.end; ++i)
          for (int j = lo + m * tk; j < lo + (m + 1) * tk; ++j) all &= j < n && axis_attends(a, i, j);
        full += all;
      }
    }
    const auto st = axis_pair_stats(a, n, tq, tk, PairWalk::per_q_tile, KvPlacement::placed);
    EXPECT_EQ(st.visited, visited);
    EXPECT_EQ(st.full, full);
    EXPECT_EQ(st.max_box, most);
    EXPECT_EQ(st.q_tiles, tiles_along(n, tq));
    EXPECT_EQ(st.kv_tiles, tiles_along(n, tk));
  });
}

// With placed Q tiles a KV tile visits the tiles of tq queries from the first query attending
// any of its keys up to the last (brute force); full ones are those whose queries all attend
// every key of the KV tile, padding excluded.
TEST(TileCandidates, AxisPairStatsOfPlacedQTiles) {
  for_random_axes_and_tiles(2000, [](const AxisRule& a, int tq, int tk) {
    const int n = a.extent;
    double visited = 0, full = 0, most = 0;
    for (int kt = 0; kt < tiles_along(n, tk); ++kt) {
      const Range ks = tile_rows(n, tk, kt);
      int lo = n, hi = -1;
      for (int j = ks.begin; j < ks.end; ++j)
        for (int i = 0; i < n; ++i)
          if (axis_attends(a, i, j)) {
            lo = std::min(lo, i);
            hi = std::max(hi, i);
          }
      const int count = (hi - lo + tq) / tq;
      visited += count;
      most = std::max<double>(most, count);
      const bool real = (kt + 1) * tk <= n;
      for (int m = 0; m < count; ++m) {
        bool all = real;
        for (int i = lo + m * tq; i < std::min(lo + (m + 1) * tq, n); ++i)
          for (int j = ks.begin; j < ks.end; ++j) all &= axis_attends(a, i, j);
        full += all;
      }
    }
    const auto st = axis_pair_stats(a, n, tq, tk, PairWalk::per_kv_tile, KvPlacement::placed);
    EXPECT_EQ(st.visited, visited);
    EXPECT_EQ(st.full, full);
    EXPECT_EQ(st.max_box, most);
    EXPECT_EQ(st.q_tiles, tiles_along(n, tq));
    EXPECT_EQ(st.kv_tiles, tiles_along(n, tk));
    // Never more pairs than the grid's Q tiles.
    EXPECT_LE(st.visited, axis_pair_stats(a, n, tq, tk, PairWalk::per_kv_tile).visited);
  });
}

// Where placement cannot differ (a non-causal window covering the group), placed tiles have the
// grid's statistics on both walks, so the chooser scores such an axis once; random axes where it
// can differ keep theirs (checked above against brute force).
TEST(TileCandidates, PlacementCannotDifferOnADenseAxis) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int t = 0; t < 500; ++t) {
    AxisRule a;
    a.extent = a.window = rand_int(rng, 2, 300);
    a.stride = rand_int(rng, 1, a.window);
    a.dilation = 1;
    a.causal = false;
    const int n = a.extent, tq = rand_int(rng, 1, 70), tk = rand_int(rng, 1, 140);
    SCOPED_TRACE("L=K=" + std::to_string(n) + " s=" + std::to_string(a.stride) + " tq=" +
                 std::to_string(tq) + " tk=" + std::to_string(tk));
    ASSERT_FALSE(placement_can_differ(a, n));
    for (PairWalk walk : {PairWalk::per_q_tile, PairWalk::per_kv_tile}) {
      const auto grid = axis_pair_stats(a, n, tq, tk, walk, KvPlacement::grid);
      const auto placed = axis_pair_stats(a, n, tq, tk, walk, KvPlacement::placed);
      EXPECT_EQ(placed.visited, grid.visited);
      EXPECT_EQ(placed.full, grid.full);
      EXPECT_EQ(placed.max_box, grid.max_box);
    }
    a.causal = true;  // causal windows differ per query: placement can move the runs
    EXPECT_TRUE(placement_can_differ(a, n));
    a.causal = false;
    a.window = n - 1;
    if (a.window >= 2) EXPECT_TRUE(placement_can_differ(a, n));
  }
}

}  // namespace
}  // namespace gna::test
