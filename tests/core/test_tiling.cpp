// Tiling math against brute force: every (Q tile, KV tile) pair classified by enumerating its
// (query, key) pairs with the literal
// transcription of the rule (docs/rule.md section 2.3).
#include <gtest/gtest.h>

#include "gna/core/tiling.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

// Brute-force class of the pair on one axis (group g, tiles of the given sizes).
PairClass brute_class(const AxisRule& a, int g, int qt, int kt, int tq, int tk) {
  const int n = group_length(a, g);
  bool any = false, all = true;
  for (int ig = qt * tq; ig < std::min((qt + 1) * tq, n); ++ig)
    for (int jg = kt * tk; jg < (kt + 1) * tk; ++jg) {
      const bool att = jg < n && literal_attends(a.extent, a.window, a.dilation, a.stride,
                                                 a.causal, g + a.dilation * ig, g + a.dilation * jg);
      any |= att;
      all &= att;
    }
  return !any ? PairClass::empty : (all ? PairClass::full : PairClass::partial);
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
