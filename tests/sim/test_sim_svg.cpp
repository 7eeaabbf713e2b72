// The pictures: well-formed enough to open, and the per-Q-tile counts they print agree with
// brute-force enumeration.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <regex>

#include "brute_force.hpp"
#include "gna/core/error.hpp"
#include "gna/sim/presets.hpp"
#include "gna/sim/svg.hpp"

namespace gna::sim {
namespace {

struct Visits {
  int64_t visited = -1, full = -1;
};

Visits parse_visits(const std::string& svg) {
  std::smatch m;
  Visits v;
  if (std::regex_search(svg, m, std::regex("visits (\\d+) KV tiles \\((\\d+) full, (\\d+) partial"))) {
    v.visited = std::stoll(m[1]);
    v.full = std::stoll(m[2]);
    EXPECT_EQ(v.visited, v.full + std::stoll(m[3]));
  }
  return v;
}

std::vector<int> coords_of(const Config& c, int64_t flat) {
  std::vector<int> k(c.rank);
  for (int a = c.rank - 1; a >= 0; --a) {
    k[a] = static_cast<int>(flat % c.axes[a].extent);
    flat /= c.axes[a].extent;
  }
  return k;
}

bool attends(const Config& c, const std::vector<int>& q, const std::vector<int>& k) {
  for (int a = 0; a < c.rank; ++a)
    if (!axis_attends(c.axes[a], q[a], k[a])) return false;
  return true;
}

// Tile of a coordinate on one axis (multi-dimensional tiling): group and index in the group.
std::pair<int, int> axis_tile(const AxisRule& a, int coord, int tile) {
  return {coord % a.dilation, coord / a.dilation / tile};
}

// Visited and full KV tiles of the Q tile holding `query`, by enumeration (static KV tiles or
// 1-D tiling).
Visits brute_visits(const Config& c, const std::vector<int>& query) {
  int64_t n = 1;
  for (int a = 0; a < c.rank; ++a) n *= c.axes[a].extent;
  auto tile_key = [&](const std::vector<int>& x, const int* tile, int64_t flat, int64_t volume) {
    std::vector<int64_t> key;
    if (c.tiling == Tiling::one_dim) return std::vector<int64_t>{flat / volume};
    for (int a = 0; a < c.rank; ++a) {
      const auto t = axis_tile(c.axes[a], x[a], tile[a]);
      key.push_back(t.first);
      key.push_back(t.second);
    }
    return key;
  };
  int64_t qflat = 0;
  for (int a = 0; a < c.rank; ++a) qflat = qflat * c.axes[a].extent + query[a];
  const auto q_key = tile_key(query, c.q_tile, qflat, q_tile_volume(c));
  std::vector<std::vector<int>> queries;
  std::map<std::vector<int64_t>, std::vector<std::vector<int>>> kv_tiles;
  for (int64_t f = 0; f < n; ++f) {
    const auto x = coords_of(c, f);
    if (tile_key(x, c.q_tile, f, q_tile_volume(c)) == q_key) queries.push_back(x);
    kv_tiles[tile_key(x, c.kv_tile, f, kv_tile_volume(c))].push_back(x);
  }
  Visits v{0, 0};
  for (const auto& [key, keys] : kv_tiles) {
    int64_t attended = 0;
    for (const auto& q : queries)
      for (const auto& k : keys) attended += attends(c, q, k);
    if (attended == 0) continue;
    ++v.visited;
    const bool all_slots = static_cast<int64_t>(keys.size()) == kv_tile_volume(c);
    v.full += all_slots && attended == static_cast<int64_t>(queries.size() * keys.size());
  }
  return v;
}

TEST(SimSvg, PerQTileCountsMatchBruteForce) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int i = 0; i < 150; ++i) {
    const Tiling t = i % 2 ? Tiling::one_dim : Tiling::multi_dim;
    const Config c = testing::random_config(rng, 200, t, KvTiling::static_tiles);
    std::vector<int> q(c.rank);
    for (int a = 0; a < c.rank; ++a)
      q[a] = std::uniform_int_distribution<int>(0, c.axes[a].extent - 1)(rng);
    SCOPED_TRACE(testing::describe(c));
    for (const bool q_tile_union : {false, true}) {
      const std::string svg = query_svg(c, q.data(), q_tile_union);
      ASSERT_EQ(svg.rfind("<svg", 0), 0u);
      ASSERT_NE(svg.find("</svg>"), std::string::npos);
      const Visits got = parse_visits(svg), want = brute_visits(c, q);
      EXPECT_EQ(got.visited, want.visited);
      EXPECT_EQ(got.full, want.full);
    }
    if (HasFailure()) return;
  }
}

TEST(SimSvg, BlockSparseExamplesShowOnlyFullTiles) {
  Config flux = find_preset("flux4k")->config;
  flux.axes[0].stride = flux.axes[1].stride = 16;
  const int q[] = {100, 37};
  const Visits f = parse_visits(query_svg(flux, q, true));
  EXPECT_EQ(f.visited, 50);
  EXPECT_EQ(f.full, 50);
  Config hunyuan = find_preset("hunyuan")->config;
  hunyuan.axes[0].stride = 2;
  hunyuan.axes[1].stride = hunyuan.axes[2].stride = 8;
  const int hq[] = {12, 20, 33};
  const std::string svg = query_svg(hunyuan, hq, false);
  const Visits h = parse_visits(svg);
  EXPECT_EQ(h.visited, 81);
  EXPECT_EQ(h.full, 81);
  // 3-D layouts are drawn as the three slices through the query.
  EXPECT_NE(svg.find("axis 0 = 12"), std::string::npos);
  EXPECT_NE(svg.find("axis 1 = 20"), std::string::npos);
  EXPECT_NE(svg.find("axis 2 = 33"), std::string::npos);
}

TEST(SimSvg, DynamicTilesAndSweepChartRender) {
  Config c = find_preset("cosmos")->config;
  c.kv_tiling = KvTiling::dynamic_tiles;
  const int q[] = {3, 10, 70};
  EXPECT_GT(parse_visits(query_svg(c, q, true)).visited, 0);
  const std::vector<SweepEntry> kept = pruned(sweep(c));
  const std::string chart = sweep_svg(c, kept);
  ASSERT_EQ(chart.rfind("<svg", 0), 0u);
  for (const SweepEntry& e : kept)
    EXPECT_NE(chart.find(">" + std::to_string(e.stride[0]) + "x" + std::to_string(e.stride[1]) +
                         "x" + std::to_string(e.stride[2]) + "<"),
              std::string::npos);
}

TEST(SimSvg, QueryOutsideTheLayoutIsRejected) {
  const Config c = find_preset("flux4k")->config;
  const int q[] = {10, 256};
  try {
    query_svg(c, q, false);
    FAIL() << "accepted a query outside the layout";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "axis 1: query coordinate must be in [0, 256), got 256");
  }
}

}  // namespace
}  // namespace gna::sim
