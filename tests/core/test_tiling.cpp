// Tiling math against brute force: every (Q tile, KV tile) pair classified by enumerating its
// (query, key) pairs with the literal
// transcription of the rule (docs/rule.md section 2.3).
#include <gtest/gtest.h>

#include "gna/core/tiling.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

// Brute-force class on one axis (group g) of the pair (tq queries from group coordinate q_begin,
// tk keys from k_begin): coordinates outside the group are padding rows (never attend).
PairClass brute_class_of_ranges(const AxisRule& a, int g, int q_begin, int tq, int k_begin,
                                int tk) {
  const int n = group_length(a, g);
  bool any = false, all = true;
  for (int ig = std::max(q_begin, 0); ig < std::min(q_begin + tq, n); ++ig)
    for (int jg = k_begin; jg < k_begin + tk; ++jg) {
      const bool att = jg >= 0 && jg < n &&
                       literal_attends(a.extent, a.window, a.dilation, a.stride, a.causal,
                                       g + a.dilation * ig, g + a.dilation * jg);
      any |= att;
      all &= att;
    }
  return !any ? PairClass::empty : (all ? PairClass::full : PairClass::partial);
}

// The same for grid tiles (Q tile qt, KV tile kt).
PairClass brute_class(const AxisRule& a, int g, int qt, int kt, int tq, int tk) {
  return brute_class_of_ranges(a, g, qt * tq, tq, kt * tk, tk);
}

TEST(Tiling, AxisPairsMatchBruteForce) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int64_t checked = 0;
  for (int t = 0; t < 3000; ++t) {
    const AxisRule a = random_axis(rng, 48);
    const int tq = rand_int(rng, 1, 9), tk = rand_int(rng, 1, 9);
    for (int g = 0; g < a.dilation; ++g) {
      const int n = group_length(a, g);
      for (int qt = 0; qt < tiles_along(n, tq); ++qt) {
        const Range box = kv_tiles_for_q_tile(a, n, qt, tq, tk);
        for (int kt = 0; kt < tiles_along(n, tk); ++kt) {
          const PairClass expected = brute_class(a, g, qt, kt, tq, tk);
          ASSERT_EQ(classify_axis_tiles(a, n, qt, kt, tq, tk), expected)
              << "L=" << a.extent << " K=" << a.window << " d=" << a.dilation << " s=" << a.stride
              << " c=" << a.causal << " tq=" << tq << " tk=" << tk << " qt=" << qt << " kt=" << kt;
          // The visited box is exactly the span of non-empty KV tiles.
          ASSERT_EQ(box.contains(kt), expected != PairClass::empty);
          // And the inverse: KV tile kt lists Q tile qt iff the pair is non-empty.
          ASSERT_EQ(q_tiles_for_kv_tile(a, n, kt, tq, tk).contains(qt), expected != PairClass::empty);
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

// The Q tiles that visit a KV tile (inverse rule) are exactly the Q tiles whose KV range contains
// that KV tile (forward rule), per axis, on long axes with the kernels' power-of-two tiles: the
// KV-stationary backward walks the first and orders its deterministic dQ sums by the second.
TEST(Tiling, InverseTileRangesMirrorForward) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 3000; ++trial) {
    AxisRule a;
    a.extent = rand_int(rng, 1, 300);
    a.window = rand_int(rng, 1, a.extent);
    a.stride = rand_int(rng, 1, a.window);
    a.causal = rand_int(rng, 0, 1);
    const int tq = 1 << rand_int(rng, 0, 6), tkv = 1 << rand_int(rng, 0, 7);
    const int n = a.extent;
    for (int kt = 0; kt < tiles_along(n, tkv); ++kt) {
      const Range qr = q_tiles_for_kv_tile(a, n, kt, tq, tkv);
      for (int qt = 0; qt < tiles_along(n, tq); ++qt) {
        const Range kr = kv_tiles_for_q_tile(a, n, qt, tq, tkv);
        ASSERT_EQ(qr.contains(qt), kr.contains(kt))
            << "extent " << n << " window " << a.window << " stride " << a.stride << " causal "
            << a.causal << " tiles " << tq << "/" << tkv << " qt " << qt << " kt " << kt;
      }
    }
  }
}

// The axis rule and tile sizes of a check, for its failure messages.
std::string axis_and_tiles_text(const AxisRule& a, int tq, int tk) {
  return "L=" + std::to_string(a.extent) + " K=" + std::to_string(a.window) +
         " d=" + std::to_string(a.dilation) + " s=" + std::to_string(a.stride) +
         " c=" + std::to_string(a.causal) + " tq=" + std::to_string(tq) + " tk=" + std::to_string(tk);
}

// A long axis (up to 300) with a wide window, for the kernels' power-of-two tiles.
AxisRule random_long_axis(std::mt19937_64& rng) {
  AxisRule a;
  a.dilation = rand_int(rng, 1, 3);
  a.extent = rand_int(rng, 2 * a.dilation, 300);
  a.window = rand_int(rng, 2, a.extent / a.dilation);
  a.stride = rand_int(rng, 0, 2) == 0 ? rand_int(rng, 1, a.window) : 1;
  a.causal = rand_int(rng, 0, 4) == 0;
  return a;
}

// The first and last group coordinates (group g) on the other side of the rule from rows
// [begin, end): the keys those queries attend (`of_queries`), else the queries attending those
// keys; {n, -1} when there are none. A run that starts at the first and spans the last holds
// every one of them.
std::pair<int, int> attended_span(const AxisRule& a, int g, int begin, int end, bool of_queries) {
  const int n = group_length(a, g);
  int lo = n, hi = -1;
  for (int r = begin; r < end; ++r)
    for (int o = 0; o < n; ++o) {
      const int ig = of_queries ? r : o, jg = of_queries ? o : r;
      if (literal_attends(a.extent, a.window, a.dilation, a.stride, a.causal,
                          g + a.dilation * ig, g + a.dilation * jg)) {
        lo = std::min(lo, o);
        hi = std::max(hi, o);
      }
    }
  return {lo, hi};
}

// Placed KV tiles against brute force over the rule: they start at the first attended key of
// the Q tile (so never below 0), every attended key lies inside them, their count is
// ceil(attended span / tile), the fewest that can cover it (never more than the grid's), and
// every tile's class is the brute-force one (never empty), the full ones a range of the run
// (full_tiles_of_run, grid runs too; and of every KV tile, full_q_tiles_of_kv_tile, the Q tiles
// whose pair with it is full). Grid runs are kv_tiles_for_q_tile.
void check_placed_tiles(const AxisRule& a, int tq, int tk) {
  SCOPED_TRACE(axis_and_tiles_text(a, tq, tk));
  for (int g = 0; g < a.dilation; ++g) {
    const int n = group_length(a, g);
    for (int qt = 0; qt < tiles_along(n, tq); ++qt) {
      SCOPED_TRACE("group " + std::to_string(g) + " qt " + std::to_string(qt));
      const KvTileRun run = placed_kv_tiles(a, n, qt, tq, tk);
      const KvTileRun same = kv_tile_run(a, n, qt, tq, tk, KvPlacement::placed);
      ASSERT_EQ(same.first, run.first);
      ASSERT_EQ(same.count, run.count);
      const auto [lo, hi] = attended_span(a, g, qt * tq, std::min((qt + 1) * tq, n), true);
      ASSERT_LE(lo, hi);  // every query attends at least itself or its window
      ASSERT_EQ(run.first, lo);
      ASSERT_EQ(run.count, (hi - lo + 1 + tk - 1) / tk);
      const Range grid = kv_tiles_for_q_tile(a, n, qt, tq, tk);
      ASSERT_LE(run.count, grid.size());
      const KvTileRun grid_run = kv_tile_run(a, n, qt, tq, tk, KvPlacement::grid);
      ASSERT_EQ(grid_run.first, grid.begin * tk);
      ASSERT_EQ(grid_run.count, grid.size());
      const Range full = full_tiles_of_run(a, n, qt, tq, tk, run);
      for (int m = 0; m < run.count; ++m) {
        const int k_begin = run.first + m * tk;
        const PairClass expected = brute_class_of_ranges(a, g, qt * tq, tq, k_begin, tk);
        ASSERT_NE(expected, PairClass::empty) << "m " << m;
        ASSERT_EQ(classify_q_tile_keys(a, n, qt, tq, k_begin, tk), expected) << "m " << m;
        ASSERT_EQ(full.contains(m), expected == PairClass::full) << "m " << m;
      }
      // The inverse: the full Q tiles of every KV tile (full_q_tiles_of_kv_tile).
      for (int kt = 0; kt < tiles_along(n, tk); ++kt) {
        ASSERT_EQ(full_q_tiles_of_kv_tile(a, n, kt, tq, tk).contains(qt),
                  brute_class(a, g, qt, kt, tq, tk) == PairClass::full)
            << "kt " << kt;
      }
      const Range grid_full = full_tiles_of_run(a, n, qt, tq, tk, grid_run);
      for (int m = 0; m < grid_run.count; ++m)
        ASSERT_EQ(grid_full.contains(m),
                  brute_class_of_ranges(a, g, qt * tq, tq, grid_run.first + m * tk, tk) == PairClass::full)
            << "grid m " << m;
    }
  }
}

TEST(Tiling, PlacedKvTilesMatchBruteForce) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int t = 0; t < 2000; ++t) {
    check_placed_tiles(random_axis(rng, 48), rand_int(rng, 1, 9), rand_int(rng, 1, 9));
    if (HasFatalFailure()) return;
  }
  // Long axes, wide windows and the kernels' power-of-two tiles.
  for (int t = 0; t < 300; ++t) {
    const AxisRule a = random_long_axis(rng);
    check_placed_tiles(a, 1 << rand_int(rng, 0, 7), 1 << rand_int(rng, 0, 7));
    if (HasFatalFailure()) return;
  }
}

// Placed Q tiles of a KV tile against brute force over the rule (the mirror of
// check_placed_tiles, for the KV-stationary backward): the run starts at the first query that
// attends a key of the KV tile, every such query lies inside it, its count is
// ceil(query span / tq), never more than the grid's, every tile's class is the brute-force one
// (never empty) and the full ones are full_q_tiles_of_run. Grid runs are q_tiles_for_kv_tile,
// with the same classes and full ranges.
void check_placed_q_tiles(const AxisRule& a, int tq, int tk) {
  SCOPED_TRACE(axis_and_tiles_text(a, tq, tk));
  for (int g = 0; g < a.dilation; ++g) {
    const int n = group_length(a, g);
    for (int kt = 0; kt < tiles_along(n, tk); ++kt) {
      SCOPED_TRACE("group " + std::to_string(g) + " kt " + std::to_string(kt));
      const QTileRun run = q_tile_run(a, n, kt, tq, tk, KvPlacement::placed);
      const auto [lo, hi] = attended_span(a, g, kt * tk, std::min((kt + 1) * tk, n), false);
      ASSERT_LE(lo, hi);  // every key is attended by some query
      ASSERT_EQ(run.first, lo);
      ASSERT_EQ(run.count, (hi - lo + 1 + tq - 1) / tq);
      const Range grid = q_tiles_for_kv_tile(a, n, kt, tq, tk);
      ASSERT_LE(run.count, grid.size());
      const QTileRun grid_run = q_tile_run(a, n, kt, tq, tk, KvPlacement::grid);
      ASSERT_EQ(grid_run.first, grid.begin * tq);
      ASSERT_EQ(grid_run.count, grid.size());
      for (const QTileRun& r : {run, grid_run}) {
        const Range full = full_q_tiles_of_run(a, n, kt, tq, tk, r);
        for (int m = 0; m < r.count; ++m) {
          const PairClass expected = brute_class_of_ranges(a, g, r.first + m * tq, tq, kt * tk, tk);
          ASSERT_NE(expected, PairClass::empty) << "first " << r.first << " m " << m;
          ASSERT_EQ(classify_run_q_tile(a, n, r, m, tq, kt, tk), expected)
              << "first " << r.first << " m " << m;
          ASSERT_EQ(full.contains(m), expected == PairClass::full)
              << "first " << r.first << " m " << m;
        }
      }
    }
  }
}

TEST(Tiling, PlacedQTilesMatchBruteForce) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int64_t moved = 0;  // KV tiles whose placed run differs from the grid's
  for (int t = 0; t < 2000; ++t) {
    const AxisRule a = random_axis(rng, 48);
    const int tq = rand_int(rng, 1, 9), tk = rand_int(rng, 1, 9);
    check_placed_q_tiles(a, tq, tk);
    if (HasFatalFailure()) return;
    const int n = group_length(a, 0);
    for (int kt = 0; kt < tiles_along(n, tk); ++kt)
      moved += q_tile_run(a, n, kt, tq, tk, KvPlacement::placed).first !=
               q_tile_run(a, n, kt, tq, tk, KvPlacement::grid).first;
  }
  EXPECT_GT(moved, 0);
  // Long axes, wide windows and the kernels' power-of-two tiles.
  for (int t = 0; t < 300; ++t) {
    const AxisRule a = random_long_axis(rng);
    check_placed_q_tiles(a, 1 << rand_int(rng, 0, 7), 1 << rand_int(rng, 0, 7));
    if (HasFatalFailure()) return;
  }
}

// Over several axes the placed tiles of a Q tile form a product box: every attended (query,
// key) pair lies in it and each pair's class is the lowest over the axes (never empty), what the
// Hopper forward relies on when it walks the box without testing for empty pairs.
TEST(Tiling, PlacedKvTilesMultiDimensional) {
  std::mt19937_64 rng(fresh_seed());
  for (int t = 0; t < 40; ++t) {
    const Problem p = random_problem(rng, rand_int(rng, 2, 3), 10);
    int tq[3] = {1, 1, 1}, tk[3] = {1, 1, 1}, n[3] = {1, 1, 1}, nq[3] = {1, 1, 1};
    for (int a = 0; a < p.rank; ++a) {
      tq[a] = rand_int(rng, 1, 4);
      tk[a] = rand_int(rng, 1, 4);
      n[a] = group_length(p.axes[a], 0);
      nq[a] = tiles_along(n[a], tq[a]);
    }
    for (int q0 = 0; q0 < nq[0]; ++q0) for (int q1 = 0; q1 < nq[1]; ++q1) for (int q2 = 0; q2 < nq[2]; ++q2) {
      const int qt[3] = {q0, q1, q2};
      KvTileRun run[3] = {{0, 1}, {0, 1}, {0, 1}};  // axes past the rank: one key
      for (int a = 0; a < p.rank; ++a) run[a] = placed_kv_tiles(p.axes[a], n[a], qt[a], tq[a], tk[a]);
      int64_t attended = 0, attended_in_box = 0;
      int ig[3] = {0, 0, 0}, jg[3] = {0, 0, 0};
      auto attends = [&] {
        for (int a = 0; a < p.rank; ++a) {
          const AxisRule& r = p.axes[a];
          if (jg[a] < 0 || jg[a] >= n[a] ||
              !literal_attends(r.extent, r.window, r.dilation, r.stride, r.causal,
                               r.dilation * ig[a], r.dilation * jg[a]))
            return false;
        }
        return true;
      };
      for (ig[0] = qt[0] * tq[0]; ig[0] < std::min((qt[0] + 1) * tq[0], n[0]); ++ig[0])
      for (ig[1] = qt[1] * tq[1]; ig[1] < std::min((qt[1] + 1) * tq[1], n[1]); ++ig[1])
      for (ig[2] = qt[2] * tq[2]; ig[2] < std::min((qt[2] + 1) * tq[2], n[2]); ++ig[2])
      for (jg[0] = 0; jg[0] < n[0]; ++jg[0]) for (jg[1] = 0; jg[1] < n[1]; ++jg[1]) for (jg[2] = 0; jg[2] < n[2]; ++jg[2]) {
        if (!attends()) continue;
        ++attended;
        bool in_box = true;
        for (int a = 0; a < p.rank; ++a)
          in_box = in_box && jg[a] >= run[a].first && jg[a] < run[a].first + run[a].count * tk[a];
        attended_in_box += in_box;
      }
      ASSERT_EQ(attended_in_box, attended) << describe(p);
      for (int m0 = 0; m0 < run[0].count; ++m0) for (int m1 = 0; m1 < run[1].count; ++m1) for (int m2 = 0; m2 < run[2].count; ++m2) {
        const int m[3] = {m0, m1, m2};
        PairClass c = PairClass::full;
        for (int a = 0; a < p.rank; ++a)
          c = combine(c, classify_q_tile_keys(p.axes[a], n[a], qt[a], tq[a],
                                              run[a].first + m[a] * tk[a], tk[a]));
        bool any = false, all = true;
        int kb[3];
        for (int a = 0; a < 3; ++a) kb[a] = run[a].first + m[a] * tk[a];
        for (ig[0] = qt[0] * tq[0]; ig[0] < std::min((qt[0] + 1) * tq[0], n[0]); ++ig[0])
        for (ig[1] = qt[1] * tq[1]; ig[1] < std::min((qt[1] + 1) * tq[1], n[1]); ++ig[1])
        for (ig[2] = qt[2] * tq[2]; ig[2] < std::min((qt[2] + 1) * tq[2], n[2]); ++ig[2])
        for (jg[0] = kb[0]; jg[0] < kb[0] + tk[0]; ++jg[0])
        for (jg[1] = kb[1]; jg[1] < kb[1] + tk[1]; ++jg[1])
        for (jg[2] = kb[2]; jg[2] < kb[2] + tk[2]; ++jg[2]) {
          const bool att = attends();
          any |= att;
          all &= att;
        }
        const PairClass expected = !any ? PairClass::empty : (all ? PairClass::full : PairClass::partial);
        ASSERT_NE(expected, PairClass::empty) << describe(p);
        ASSERT_EQ(c, expected) << describe(p);
      }
    }
  }
}

TEST(Tiling, MultiDimensionalClassesCombineAxes) {
  std::mt19937_64 rng(fresh_seed());
  for (int t = 0; t < 40; ++t) {
    const Problem p = random_problem(rng, rand_int(rng, 2, 3), 10);
    TileShape tq, tk;
    for (int a = 0; a < p.rank; ++a) {
      tq.size[a] = rand_int(rng, 1, 4);
      tk.size[a] = rand_int(rng, 1, 4);
    }
    // Group 0 on every axis; enumerate all tile pairs and compare with full enumeration.
    int nq[3] = {1, 1, 1}, nk[3] = {1, 1, 1}, n[3] = {1, 1, 1};
    for (int a = 0; a < p.rank; ++a) {
      n[a] = group_length(p.axes[a], 0);
      nq[a] = tiles_along(n[a], tq.size[a]);
      nk[a] = tiles_along(n[a], tk.size[a]);
    }
    for (int q0 = 0; q0 < nq[0]; ++q0) for (int q1 = 0; q1 < nq[1]; ++q1) for (int q2 = 0; q2 < nq[2]; ++q2)
    for (int k0 = 0; k0 < nk[0]; ++k0) for (int k1 = 0; k1 < nk[1]; ++k1) for (int k2 = 0; k2 < nk[2]; ++k2) {
      const int qt[3] = {q0, q1, q2}, kt[3] = {k0, k1, k2};
      PairClass c = PairClass::full;
      for (int a = 0; a < p.rank; ++a)
        c = combine(c, classify_axis_tiles(p.axes[a], n[a], qt[a], kt[a], tq.size[a], tk.size[a]));
      // Brute force over the product of tiles.
      bool any = false, all = true;
      int ig[3], jg[3];
      for (ig[0] = qt[0] * tq.size[0]; ig[0] < std::min((qt[0] + 1) * tq.size[0], n[0]); ++ig[0])
      for (ig[1] = qt[1] * tq.size[1]; ig[1] < std::min((qt[1] + 1) * tq.size[1], n[1]); ++ig[1])
      for (ig[2] = qt[2] * tq.size[2]; ig[2] < std::min((qt[2] + 1) * tq.size[2], n[2]); ++ig[2])
      for (jg[0] = kt[0] * tk.size[0]; jg[0] < (kt[0] + 1) * tk.size[0]; ++jg[0])
      for (jg[1] = kt[1] * tk.size[1]; jg[1] < (kt[1] + 1) * tk.size[1]; ++jg[1])
      for (jg[2] = kt[2] * tk.size[2]; jg[2] < (kt[2] + 1) * tk.size[2]; ++jg[2]) {
        bool att = true;
        for (int a = 0; a < p.rank; ++a) {
          const AxisRule& r = p.axes[a];
          att = att && jg[a] < n[a] &&
                literal_attends(r.extent, r.window, r.dilation, r.stride, r.causal,
                                r.dilation * ig[a], r.dilation * jg[a]);
        }
        any |= att;
        all &= att;
      }
      const PairClass expected = !any ? PairClass::empty : (all ? PairClass::full : PairClass::partial);
      ASSERT_EQ(c, expected) << describe(p);
    }
  }
}

}  // namespace
}  // namespace gna::test
