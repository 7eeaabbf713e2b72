// The core's rule and inverse rule against a literal transcription of docs/rule.md section 2.3,
// and the special cases of section 2.5 and STA (section 4).
#include <gtest/gtest.h>

#include "gna/core/axis_rule.hpp"
#include "gna/core/problem.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

TEST(AxisRule, MatchesTheLiteralRuleOnAMillionRandomPairs) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int64_t pairs = 0;
  int configs = 0;
  bool saw_even_window = false, saw_partial_group = false, saw_uneven_dilation = false,
       saw_mixed_causal = false;
  while (pairs < 1'200'000) {
    const Problem p = random_problem(rng, rand_int(rng, 1, 3), 40);
    validate(p);
    ++configs;
    int causal_axes = 0;
    for (int a = 0; a < p.rank; ++a) {
      const AxisRule& r = p.axes[a];
      saw_even_window |= r.window % 2 == 0;
      saw_partial_group |= group_length(r, 0) % r.stride != 0;
      saw_uneven_dilation |= r.dilation > 1 && r.extent % r.dilation != 0;
      causal_axes += r.causal;
    }
    saw_mixed_causal |= causal_axes > 0 && causal_axes < p.rank;
    for (int t = 0; t < 2000; ++t, ++pairs) {
      int x[kMaxRank], y[kMaxRank];
      bool core = true;
      for (int a = 0; a < p.rank; ++a) {
        x[a] = rand_int(rng, 0, p.axes[a].extent - 1);
        // Bias keys towards the query's neighbourhood so that both outcomes are common.
        y[a] = rand_int(rng, 0, 1) ? rand_int(rng, 0, p.axes[a].extent - 1)
                                   : std::clamp(x[a] + rand_int(rng, -12, 12), 0, p.axes[a].extent - 1);
        core = core && axis_attends(p.axes[a], x[a], y[a]);
      }
      ASSERT_EQ(core, literal_attends(p, x, y)) << describe(p);
    }
  }
  EXPECT_TRUE(saw_even_window && saw_partial_group && saw_uneven_dilation && saw_mixed_causal);
  RecordProperty("pairs", std::to_string(pairs));
  std::printf("checked %lld random (query, key) pairs over %d configurations\n",
              static_cast<long long>(pairs), configs);
}

// Every axis of small extent, exhaustively: key windows, exact sizes and the inverse rule.
TEST(AxisRule, ExhaustiveSmallAxes) {
  int axes = 0;
  for (int L = 2; L <= 17; ++L)
    for (int d = 1; d <= 4; ++d)
      for (int K = 2; K * d <= L; ++K)
        for (int s = 1; s <= K; ++s)
          for (int c = 0; c < 2; ++c) {
            const AxisRule a{L, K, d, s, c == 1};
            ++axes;
            for (int i = 0; i < L; ++i) {
              int count = 0;
              for (int j = 0; j < L; ++j) {
                const bool expected = literal_attends(L, K, d, s, c == 1, i, j);
                ASSERT_EQ(axis_attends(a, i, j), expected) << L << " " << K << " " << d << " " << s << " " << c;
                count += expected;
              }
              if (!a.causal) ASSERT_EQ(count, K) << "non-causal queries see exactly K keys";
            }
            for (int g = 0; g < d; ++g) {
              const int n = group_length(a, g);
              for (int jg = 0; jg < n; ++jg) {
                const Range qw = query_window(a, n, jg);
                for (int ig = 0; ig < n; ++ig) {
                  const bool attends = literal_attends(L, K, d, s, c == 1, g + d * ig, g + d * jg);
                  ASSERT_EQ(qw.contains(ig), attends)
                      << "inverse rule L=" << L << " K=" << K << " d=" << d << " s=" << s
                      << " c=" << c << " ig=" << ig << " jg=" << jg;
                }
              }
            }
          }
  EXPECT_GT(axes, 1000);
}

TEST(AxisRule, StrideOneIsNeighborhoodAttention) {
  // Classic NA: window centred on the query, shifted inward at the borders.
  for (int L = 2; L <= 30; ++L)
    for (int K = 2; K <= L; ++K) {
      const AxisRule a{L, K, 1, 1, false};
      for (int i = 0; i < L; ++i) {
        const int start = std::min(std::max(i - K / 2, 0), L - K);
        const Range w = key_window(a, L, i);
        ASSERT_EQ(w.begin, start);
        ASSERT_EQ(w.end, start + K);
      }
    }
}

TEST(AxisRule, StrideEqualWindowIsBlockedAttention) {
  for (int L = 2; L <= 40; ++L)
    for (int K = 2; K <= L; ++K) {
      const AxisRule a{L, K, 1, K, false};
      for (int i = 0; i < L; ++i) {
        // Block b = i / K attends its own block; the last, partial block reuses the last K keys.
        const int start = std::min((i / K) * K, L - K);
        ASSERT_EQ(key_window(a, L, i).begin, start) << "L=" << L << " K=" << K << " i=" << i;
      }
    }
}

TEST(AxisRule, WindowEqualExtentIsFullAttention) {
  for (int L = 2; L <= 20; ++L)
    for (int s = 1; s <= L; ++s) {
      const AxisRule a{L, L, 1, s, false};
      for (int i = 0; i < L; ++i) {
        const Range w = key_window(a, L, i);
        ASSERT_EQ(w.begin, 0);
        ASSERT_EQ(w.end, L);
      }
    }
}

TEST(AxisRule, StaEqualsGnaWithStrideTile) {
  for (int T = 1; T <= 6; ++T)
    for (int nt = 1; nt <= 9; ++nt)
      for (int Wt = 1; Wt <= nt; Wt += 2) {
        const int L = nt * T, W = Wt * T;
        if (W < 2) continue;
        const AxisRule a = sta_axis_rule(StaAxis{L, T, W}, 0);
        for (int i = 0; i < L; ++i)
          for (int j = 0; j < L; ++j) {
            const int qt = i / T, kt = j / T;
            const int qc = std::clamp(qt, Wt / 2, nt - 1 - Wt / 2);
            const bool sta = std::abs(qc - kt) <= Wt / 2;
            ASSERT_EQ(axis_attends(a, i, j), sta) << "T=" << T << " nt=" << nt << " Wt=" << Wt;
          }
      }
}

TEST(AxisRule, MeanKeysPerQuery) {
  std::mt19937_64 rng(fresh_seed());
  for (int t = 0; t < 50; ++t) {
    Problem p = random_problem(rng, rand_int(rng, 1, 3), 14);
    double total = 0;
    int x[kMaxRank], y[kMaxRank];
    for (int64_t qi = 0; qi < p.tokens(); ++qi) {
      flat_to_coords(p, qi, x);
      for (int64_t kj = 0; kj < p.tokens(); ++kj) {
        flat_to_coords(p, kj, y);
        total += literal_attends(p, x, y);
      }
    }
    EXPECT_NEAR(mean_keys_per_query(p), total / p.tokens(), 1e-9) << describe(p);
  }
}

TEST(AxisRule, GroupLengthCountsTheGroupsTokens) {
  for (int L = 1; L <= 40; ++L)
    for (int d = 1; d <= L; ++d)
      for (int g = 0; g < d; ++g) {
        int count = 0;
        for (int i = 0; i < L; ++i) count += dilation_group(AxisRule{L, 1, d, 1, false}, i) == g;
        ASSERT_EQ(group_length(AxisRule{L, 1, d, 1, false}, g), count) << L << " " << d << " " << g;
      }
  // Extents near 2^31 (the simulator takes them): no overflow.
  const int big = 2147483647;
  EXPECT_EQ(group_length(AxisRule{big, big, 1, 1, false}, 0), big);
  EXPECT_EQ(group_length(AxisRule{big, 2, 2, 1, false}, 0), big / 2 + 1);
  EXPECT_EQ(group_length(AxisRule{big, 2, 2, 1, false}, 1), big / 2);
}

}  // namespace
}  // namespace gna::test
