// The tile chooser (gna/core/tile_choice.hpp): ranking, cache, forced tiles and their errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "gna/core/error.hpp"
#include "gna/core/tile_choice.hpp"

namespace gna {
namespace {

Problem make(std::initializer_list<AxisRule> axes) {
  Problem p;
  p.rank = static_cast<int>(axes.size());
  int a = 0;
  for (const AxisRule& r : axes) p.axes[a++] = r;
  validate(p);
  return p;
}

// A neighborhood layout with partial pairs, a strided and a causal axis.
Problem layout() {
  return make({{30, 18, 1, 1, false}, {48, 24, 1, 8, false}, {80, 24, 2, 1, true}});
}

TileKernel kernel(PairWalk walk = PairWalk::per_q_tile) {
  TileKernel k;
  k.name = "test kernel";
  k.q_rows = 64;
  k.kv_rows = 128;
  k.walk = walk;
  k.forced_q = {64, true};
  k.forced_kv = {128, false};
  return k;
}

TileShape shape(int a, int b, int c) { return TileShape{{a, b, c}}; }

void expect_same(const ScoredTiles& a, const ScoredTiles& b) {
  for (int i = 0; i < kMaxRank; ++i) {
    EXPECT_EQ(a.q.size[i], b.q.size[i]);
    EXPECT_EQ(a.kv.size[i], b.kv.size[i]);
  }
  EXPECT_EQ(a.visited_pairs, b.visited_pairs);
  EXPECT_EQ(a.full_pairs, b.full_pairs);
  EXPECT_EQ(a.max_box, b.max_box);
  EXPECT_EQ(a.q_tiles, b.q_tiles);
  EXPECT_EQ(a.kv_tiles, b.kv_tiles);
  EXPECT_EQ(a.cost, b.cost);
}

TEST(TileChoice, CostWeightsAreExplicit) {
  EXPECT_EQ(tile_cost(10, 6, TileCostWeights{}), 11);
  EXPECT_EQ(tile_cost(10, 6, TileCostWeights{1, 1, 1}), 14);
  EXPECT_EQ(tile_cost(10, 6, TileCostWeights{0.25, 2, 1.5}), 11 * 2 / 1.5);
}

// Every candidate once, cheapest first, ties in candidate order, the same on every call.
TEST(TileChoice, RankingIsDeterministic) {
  const Problem p = layout();
  for (PairWalk walk : {PairWalk::per_q_tile, PairWalk::per_kv_tile}) {
    const std::vector<ScoredTiles> a =
        ranked_tile_choices(p, kernel(walk), kNoForcedTile, kNoForcedTile);
    const std::vector<ScoredTiles> b =
        ranked_tile_choices(p, kernel(walk), kNoForcedTile, kNoForcedTile);
    const std::vector<TileShape> qs = power_of_two_tile_shapes(3, 64),
                                 kvs = power_of_two_tile_shapes(3, 128);
    ASSERT_EQ(a.size(), qs.size() * kvs.size());
    ASSERT_EQ(b.size(), a.size());
    auto index = [&](const ScoredTiles& s) {
      size_t qi = 0, ki = 0;
      while (qi < qs.size() && !std::equal(qs[qi].size, qs[qi].size + 3, s.q.size)) ++qi;
      while (ki < kvs.size() && !std::equal(kvs[ki].size, kvs[ki].size + 3, s.kv.size)) ++ki;
      return qi * kvs.size() + ki;
    };
    for (size_t i = 0; i < a.size(); ++i) {
      expect_same(a[i], b[i]);
      expect_same(a[i], score_tile_choice(p, kernel(walk), a[i].q, a[i].kv));
      if (i + 1 < a.size()) {
        EXPECT_LE(a[i].cost, a[i + 1].cost);
        if (a[i].cost == a[i + 1].cost) EXPECT_LT(index(a[i]), index(a[i + 1]));
      }
    }
  }
}

// A cached choice (second call) equals the first and a fresh ranking's best, per kernel
// parameters: other weights or rows are other entries.
TEST(TileChoice, CacheHitEqualsFreshChoice) {
  const Problem p = layout();
  TileKernel masked = kernel();
  masked.weights.partial = 4;
  TileKernel wide = kernel();
  wide.q_rows = 128;
  for (const TileKernel& k : {kernel(), kernel(PairWalk::per_kv_tile), masked, wide}) {
    const ScoredTiles first = tile_choice(p, k, kNoForcedTile, kNoForcedTile);
    const ScoredTiles hit = tile_choice(p, k, kNoForcedTile, kNoForcedTile);
    const ScoredTiles fresh = ranked_tile_choices(p, k, kNoForcedTile, kNoForcedTile).front();
    expect_same(first, fresh);
    expect_same(hit, fresh);
  }
  EXPECT_EQ(tile_choice(p, wide, kNoForcedTile, kNoForcedTile).q.volume(3), 128);
}

// Threads asking at once (some filling the cache, some hitting it) get the fresh choice.
TEST(TileChoice, ConcurrentChoicesAgree) {
  std::vector<Problem> problems;
  for (int w = 3; w <= 17; w += 2)
    problems.push_back(make({{40, w, 1, 1, false}, {56, w, 1, 1, w % 4 == 1}}));
  std::vector<ScoredTiles> fresh;
  for (const Problem& p : problems)
    fresh.push_back(ranked_tile_choices(p, kernel(), kNoForcedTile, kNoForcedTile).front());
  std::vector<std::vector<ScoredTiles>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (const Problem& p : problems)
          got[t].push_back(tile_choice(p, kernel(), kNoForcedTile, kNoForcedTile));
    });
  for (std::thread& t : threads) t.join();
  for (const std::vector<ScoredTiles>& g : got) {
    ASSERT_EQ(g.size(), 3 * problems.size());
    for (size_t i = 0; i < g.size(); ++i) expect_same(g[i], fresh[i % problems.size()]);
  }
}

// A forced tile is the only candidate of its side; the other side is still chosen.
TEST(TileChoice, ForcedTilesAreHonoured) {
  const Problem p = layout();
  const TileKernel k = kernel();
  const TileShape q = shape(2, 8, 4), kv = shape(4, 4, 4);  // KV: at most 128 tokens
  const std::vector<ScoredTiles> q_only = ranked_tile_choices(p, k, q, kNoForcedTile);
  EXPECT_EQ(q_only.size(), power_of_two_tile_shapes(3, 128).size());
  for (const ScoredTiles& s : q_only) EXPECT_TRUE(std::equal(q.size, q.size + 3, s.q.size));
  expect_same(tile_choice(p, k, q, kNoForcedTile), q_only.front());
  const std::vector<ScoredTiles> kv_only = ranked_tile_choices(p, k, kNoForcedTile, kv);
  EXPECT_EQ(kv_only.size(), power_of_two_tile_shapes(3, 64).size());
  expect_same(tile_choice(p, k, kNoForcedTile, kv), kv_only.front());
  EXPECT_TRUE(std::equal(kv.size, kv.size + 3, kv_only.front().kv.size));
  const ScoredTiles both = tile_choice(p, k, q, kv);
  expect_same(both, score_tile_choice(p, k, q, kv));
  // Axes past the problem's rank do not count (a 2-D problem's third side is ignored).
  const Problem flat = make({{64, 9, 1, 1, false}, {64, 9, 1, 1, false}});
  EXPECT_FALSE(tile_forced(shape(0, 0, 8), 2));
  EXPECT_TRUE(tile_forced(shape(0, 8, 0), 2));
  const ScoredTiles honoured = tile_choice(flat, k, shape(8, 8, 0), kNoForcedTile);
  EXPECT_EQ(honoured.q.size[0], 8);
  EXPECT_EQ(honoured.q.size[1], 8);
  EXPECT_EQ(honoured.q.size[2], 1);
}

std::string error_of(const Problem& p, const TileShape& q, const TileShape& kv) {
  try {
    tile_choice(p, kernel(), q, kv);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    try {  // the ranking checks the same way
      ranked_tile_choices(p, kernel(), q, kv);
    } catch (const Error& again) {
      EXPECT_STREQ(again.what(), e.what());
      return e.what();
    }
    ADD_FAILURE() << "ranked_tile_choices accepted what tile_choice refused";
    return e.what();
  }
  return "";
}

// A forced tile the kernel does not run is one error naming the option and the value; valid
// forced tiles are still checked when the choice is cached.
TEST(TileChoice, BadForcedTilesAreErrors) {
  const Problem p = layout();
  tile_choice(p, kernel(), kNoForcedTile, kNoForcedTile);
  EXPECT_EQ(error_of(p, shape(8, 8, 2), kNoForcedTile),
            "options: q_tile 8x8x2 (128 tokens) is not a tile of the test kernel (every side >= 1, "
            "exactly 64 tokens; all zeros: the kernel chooses)");
  EXPECT_EQ(error_of(p, kNoForcedTile, shape(16, 16, 1)),
            "options: kv_tile 16x16x1 (256 tokens) is not a tile of the test kernel (every side "
            ">= 1, at most 128 tokens; all zeros: the kernel chooses)");
  EXPECT_EQ(error_of(p, shape(8, 0, 8), kNoForcedTile),
            "options: q_tile 8x0x8 (0 tokens) is not a tile of the test kernel (every side >= 1, "
            "exactly 64 tokens; all zeros: the kernel chooses)");
  // Ones are a tile of one token, not "choose".
  const Problem line = make({{4096, 7, 1, 1, false}});
  EXPECT_NE(error_of(line, shape(1, 0, 0), kNoForcedTile).find("q_tile 1 (1 token)"),
            std::string::npos);
  EXPECT_EQ(error_of(line, shape(64, 0, 0), shape(100, 0, 0)), "");
}

// A kernel that places its KV tiles (KvPlacements::either) keeps, for every candidate, the cheaper
// of its grid and placed scores, the grid on ties; forcing one placement scores every candidate
// with it; a per_kv_tile walk has grid tiles only. The cache keeps the three apart.
TEST(TileChoice, KvPlacements) {
  const Problem p = layout();
  TileKernel k[3] = {kernel(), kernel(), kernel()};
  const KvPlacements modes[3] = {KvPlacements::grid, KvPlacements::placed, KvPlacements::either};
  std::vector<ScoredTiles> ranked[3];
  for (int i = 0; i < 3; ++i) {
    k[i].kv_placements = modes[i];
    ranked[i] = ranked_tile_choices(p, k[i], kNoForcedTile, kNoForcedTile);
    ASSERT_EQ(ranked[i].size(), ranked[0].size());
  }
  auto find = [](const std::vector<ScoredTiles>& v, const ScoredTiles& c) {
    for (const ScoredTiles& s : v)
      if (std::equal(s.q.size, s.q.size + kMaxRank, c.q.size) &&
          std::equal(s.kv.size, s.kv.size + kMaxRank, c.kv.size))
        return s;
    ADD_FAILURE() << "candidate missing";
    return ScoredTiles{};
  };
  int placed_cheaper = 0;
  for (const ScoredTiles& e : ranked[2]) {
    const ScoredTiles g = find(ranked[0], e), pl = find(ranked[1], e);
    EXPECT_EQ(g.placement, KvPlacement::grid);
    EXPECT_EQ(pl.placement, KvPlacement::placed);
    EXPECT_LE(pl.visited_pairs, g.visited_pairs);  // never more tiles than the grid
    EXPECT_LE(pl.max_box, g.max_box);
    const ScoredTiles& expected = pl.cost < g.cost ? pl : g;
    expect_same(e, expected);
    EXPECT_EQ(e.placement, expected.placement);
    placed_cheaper += pl.cost < g.cost;
  }
  EXPECT_GT(placed_cheaper, 0);
  const ScoredTiles chosen[3] = {tile_choice(p, k[0], kNoForcedTile, kNoForcedTile),
                                 tile_choice(p, k[1], kNoForcedTile, kNoForcedTile),
                                 tile_choice(p, k[2], kNoForcedTile, kNoForcedTile)};
  for (int i = 0; i < 3; ++i) expect_same(chosen[i], ranked[i].front());
  EXPECT_EQ(chosen[0].placement, KvPlacement::grid);
  EXPECT_EQ(chosen[1].placement, KvPlacement::placed);
  EXPECT_LT(chosen[2].cost, chosen[0].cost);
  // A per_kv_tile walk places its Q tiles with the same rule: each candidate keeps the cheaper of
  // grid and placed Q tiles, placed never visiting more pairs.
  TileKernel backward[3] = {kernel(PairWalk::per_kv_tile), kernel(PairWalk::per_kv_tile),
                            kernel(PairWalk::per_kv_tile)};
  std::vector<ScoredTiles> b[3];
  for (int i = 0; i < 3; ++i) {
    backward[i].kv_placements = modes[i];
    b[i] = ranked_tile_choices(p, backward[i], kNoForcedTile, kNoForcedTile);
    ASSERT_EQ(b[i].size(), b[0].size());
  }
  int placed_q_cheaper = 0;
  for (const ScoredTiles& e : b[2]) {
    const ScoredTiles g = find(b[0], e), pl = find(b[1], e);
    EXPECT_EQ(g.placement, KvPlacement::grid);
    EXPECT_EQ(pl.placement, KvPlacement::placed);
    EXPECT_LE(pl.visited_pairs, g.visited_pairs);
    EXPECT_LE(pl.max_box, g.max_box);
    const ScoredTiles& expected = pl.cost < g.cost ? pl : g;
    expect_same(e, expected);
    EXPECT_EQ(e.placement, expected.placement);
    placed_q_cheaper += pl.cost < g.cost;
  }
  EXPECT_GT(placed_q_cheaper, 0);
  EXPECT_LE(tile_choice(p, backward[2], kNoForcedTile, kNoForcedTile).cost,
            tile_choice(p, backward[0], kNoForcedTile, kNoForcedTile).cost);
}

// Head-rule groups: every candidate's pair counts and cost are the head-weighted means of the
// groups' own scores with one placement for all groups (the cheaper summed cost under `either`);
// one problem of weight 1 ranks exactly as the plain chooser; the cached choice is the ranking's
// first; a problem without head rules is its own single group.
TEST(TileChoice, GroupsScoreTheHeadWeightedSum) {
  Problem p = layout();
  p.heads_q = 6;
  p.head_rules.groups = 3;
  const AxisRule group_axes[3][3] = {
      {{30, 18, 1, 1, false}, {48, 24, 1, 8, false}, {80, 24, 2, 1, true}},
      {{30, 6, 1, 2, false}, {48, 9, 1, 1, false}, {80, 5, 2, 1, false}},
      {{30, 30, 1, 1, true}, {48, 48, 1, 1, false}, {80, 12, 2, 4, false}}};
  for (int g = 0; g < 3; ++g)
    for (int a = 0; a < 3; ++a) p.head_rules.axes[g][a] = group_axes[g][a];
  const uint8_t map[6] = {0, 1, 1, 2, 1, 0};  // heads: 2, 3, 1
  std::copy(map, map + 6, p.head_rules.group_of_head);
  validate(p);
  const std::vector<WeightedProblem> groups = head_rule_groups(p);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].weight, 2);
  EXPECT_EQ(groups[1].weight, 3);
  EXPECT_EQ(groups[2].weight, 1);
  for (int g = 0; g < 3; ++g) EXPECT_EQ(groups[g].problem.axes[0].window, group_axes[g][0].window);

  for (KvPlacements placements :
       {KvPlacements::grid, KvPlacements::placed, KvPlacements::either}) {
    TileKernel k = kernel();
    k.kv_placements = placements;
    const std::vector<ScoredTiles> ranked =
        ranked_tile_choices_for_groups(groups, k, kNoForcedTile, kNoForcedTile);
    ASSERT_EQ(ranked.size(), power_of_two_tile_shapes(3, 64).size() *
                                 power_of_two_tile_shapes(3, 128).size());
    for (size_t i = 1; i < ranked.size(); ++i) EXPECT_LE(ranked[i - 1].cost, ranked[i].cost);
    for (const ScoredTiles& c : ranked) {
      double cost[2] = {0, 0}, visited[2] = {0, 0}, full[2] = {0, 0}, box[2] = {0, 0};
      for (int pl = 0; pl < 2; ++pl) {
        TileKernel one = k;
        one.kv_placements = pl == 0 ? KvPlacements::grid : KvPlacements::placed;
        for (const WeightedProblem& w : groups) {
          const ScoredTiles s = score_tile_choice(w.problem, one, c.q, c.kv);
          cost[pl] += w.weight * s.cost / 6;
          visited[pl] += w.weight * s.visited_pairs / 6;
          full[pl] += w.weight * s.full_pairs / 6;
          box[pl] = std::max(box[pl], s.max_box);
        }
      }
      const int pl = placements == KvPlacements::grid     ? 0
                     : placements == KvPlacements::placed ? 1
                     : cost[1] < cost[0]                  ? 1
                                                          : 0;
      EXPECT_EQ(c.placement, pl == 0 ? KvPlacement::grid : KvPlacement::placed);
      EXPECT_NEAR(c.cost, cost[pl], 1e-9 * cost[pl]);
      EXPECT_NEAR(c.visited_pairs, visited[pl], 1e-9 * visited[pl]);
      EXPECT_NEAR(c.full_pairs, full[pl], 1e-9 * std::max(1.0, full[pl]));
      EXPECT_EQ(c.max_box, box[pl]);
    }
    expect_same(tile_choice_for_groups(groups, k, kNoForcedTile, kNoForcedTile), ranked.front());
    // Forced tiles replace the candidates, as for one problem.
    const std::vector<ScoredTiles> forced =
        ranked_tile_choices_for_groups(groups, k, shape(4, 4, 4), shape(2, 8, 8));
    ASSERT_EQ(forced.size(), 1u);
    EXPECT_EQ(forced[0].kv.size[1], 8);
  }

  const Problem plain = layout();
  const std::vector<WeightedProblem> one = head_rule_groups(plain);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].weight, 1);
  const std::vector<ScoredTiles> a =
      ranked_tile_choices_for_groups(one, kernel(), kNoForcedTile, kNoForcedTile);
  const std::vector<ScoredTiles> b = ranked_tile_choices(plain, kernel(), kNoForcedTile, kNoForcedTile);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) expect_same(a[i], b[i]);
  EXPECT_THROW(ranked_tile_choices_for_groups({}, kernel(), kNoForcedTile, kNoForcedTile), Error);
}

}  // namespace
}  // namespace gna
