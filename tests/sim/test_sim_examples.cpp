// The example of docs/rule.md section 8.3, errors from the core's validation, the end-to-end
// model and the presets.
#include <gtest/gtest.h>

#include <string>

#include "gna/core/error.hpp"
#include "gna/core/problem.hpp"
#include "gna/sim/presets.hpp"
#include "gna/sim/simulator.hpp"

namespace gna::sim {
namespace {

Config flux_example() {
  Config c;
  c.rank = 2;
  for (int a = 0; a < 2; ++a) {
    c.axes[a].extent = 256;
    c.axes[a].window = 80;
    c.axes[a].stride = 16;
  }
  c.q_tile[0] = 16;
  c.q_tile[1] = 16;
  c.kv_tile[0] = 16;
  c.kv_tile[1] = 8;
  return c;
}

// FLUX at 4K, window 80x80, Q tile 16x16, KV tile 16x8, stride 16x16: dense has 16*32 = 512
// KV tiles, every Q tile visits 5*10 = 50, perfectly block-sparse, both bounds 10.24x.
TEST(SimExamples, FluxWorkedExample) {
  const Result r = simulate(flux_example());
  EXPECT_EQ(r.tokens, 65536);
  EXPECT_EQ(r.dense_kv_tiles, 512);
  EXPECT_EQ(r.q_tiles, 256);
  EXPECT_EQ(r.max_kv_tiles, 50);
  EXPECT_EQ(r.mean_kv_tiles, 50.0);
  EXPECT_EQ(r.mean_keys_per_query, 6400.0);
  EXPECT_TRUE(r.block_sparse);
  EXPECT_EQ(r.pairs.partial, 0);
  EXPECT_EQ(r.pairs.full, 256 * 50);
  EXPECT_EQ(r.pairs.empty, 256 * 512 - 256 * 50);
  EXPECT_EQ(r.tile_speedup, 65536.0 / 6400.0);
  EXPECT_EQ(r.flop_speedup, 65536.0 / 6400.0);
  EXPECT_EQ(r.tile_speedup, 10.24);
  EXPECT_NEAR(r.sparsity, 1.0 - 6400.0 / 65536.0, 1e-15);
  EXPECT_EQ(r.wasted_flop_fraction, 0.0);
}

// The same layout as standard NA (stride 1) is not block-sparse and visits more tiles.
TEST(SimExamples, FluxNeighborhoodAttentionIsNotBlockSparse) {
  Config c = flux_example();
  c.axes[0].stride = c.axes[1].stride = 1;
  const Result r = simulate(c);
  EXPECT_FALSE(r.block_sparse);
  EXPECT_GT(r.pairs.partial, 0);
  EXPECT_GT(r.max_kv_tiles, 50);
  EXPECT_LT(r.tile_speedup, r.flop_speedup);
  EXPECT_GT(r.wasted_flop_fraction, 0.0);
}

std::string core_message(const Config& c) {
  try {
    gna::validate(to_problem(c));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string sim_message(const Config& c) {
  try {
    simulate(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SimExamples, InvalidProblemsFailWithTheCoreMessage) {
  std::vector<Config> bad;
  Config c = flux_example();
  c.axes[1].window = 1;
  bad.push_back(c);
  c = flux_example();
  c.axes[0].stride = 81;
  bad.push_back(c);
  c = flux_example();
  c.axes[1].dilation = 4;  // 80 * 4 > 256
  bad.push_back(c);
  c = flux_example();
  c.axes[0].dilation = 0;
  bad.push_back(c);
  c = flux_example();
  c.axes[1].extent = 0;
  bad.push_back(c);
  c = flux_example();
  c.rank = 4;
  bad.push_back(c);
  for (const Config& b : bad) {
    const std::string expected = core_message(b);
    ASSERT_FALSE(expected.empty());
    EXPECT_EQ(sim_message(b), expected);
  }
}

TEST(SimExamples, InvalidTilesAndDesignsAreRejected) {
  Config c = flux_example();
  c.q_tile[1] = 0;
  EXPECT_EQ(sim_message(c), "axis 1: Q tile must be >= 1, got 0");
  c = flux_example();
  c.kv_tile[0] = -3;
  EXPECT_EQ(sim_message(c), "axis 0: KV tile must be >= 1, got -3");
  c = flux_example();
  c.tiling = Tiling::one_dim;
  c.kv_tiling = KvTiling::dynamic_tiles;
  try {
    simulate(c);
    FAIL() << "1-D tiling with dynamic KV tiles was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
  }
}

TEST(SimExamples, EndToEndModel) {
  EndToEnd e;
  e.attention_share = 0.8;
  e.dense_steps = 10;
  e.total_steps = 50;
  // 1 / (0.2 + 0.8 * (0.2 + 0.8 / 10))
  EXPECT_NEAR(end_to_end_speedup(e, 10.0), 1.0 / 0.424, 1e-12);
  e.dense_steps = 50;
  EXPECT_DOUBLE_EQ(end_to_end_speedup(e, 10.0), 1.0);
  e.dense_steps = 0;
  e.attention_share = 1.0;
  EXPECT_DOUBLE_EQ(end_to_end_speedup(e, 7.5), 7.5);
  e.attention_share = 0.0;
  EXPECT_DOUBLE_EQ(end_to_end_speedup(e, 7.5), 1.0);
  EndToEnd bad;
  bad.attention_share = 1.5;
  EXPECT_THROW(validate(bad), Error);
  bad = EndToEnd{};
  bad.total_steps = 0;
  EXPECT_THROW(validate(bad), Error);
  bad = EndToEnd{};
  bad.dense_steps = 2;
  EXPECT_THROW(validate(bad), Error);
}

TEST(SimExamples, PresetsAreValidAndDistinct) {
  const char* names[] = {"hunyuan", "cosmos", "wan", "flux4k", "nat", "long1d"};
  for (const char* name : names) {
    const Preset* p = find_preset(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_NO_THROW(validate(p->config)) << name;
    const Result r = simulate(p->config);
    EXPECT_GT(r.flop_speedup, 1.0) << name;
    EXPECT_GE(r.flop_speedup, r.tile_speedup - 1e-9) << name;
  }
  EXPECT_EQ(find_preset("nope"), nullptr);
  EXPECT_EQ(find_preset("hunyuan")->config.axes[2].extent, 80);
  EXPECT_EQ(find_preset("flux4k")->config.kv_tile[1], 8);
}

}  // namespace
}  // namespace gna::sim
