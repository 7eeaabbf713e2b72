// The benchmark case table: names unique, every case a valid simulator configuration in at least
// one set, and the presets built from it.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "gna/sim/cases.hpp"
#include "gna/sim/config.hpp"
#include "gna/sim/presets.hpp"

namespace gna::sim {
namespace {

Config config_of(const BenchCase& c) {
  Config config;
  config.rank = c.rank;
  for (int a = 0; a < c.rank; ++a) {
    config.axes[a].extent = c.extent[a];
    config.axes[a].window = c.window[a];
    config.axes[a].stride = c.stride[a];
    config.axes[a].dilation = c.dilation[a];
    config.axes[a].causal = c.causal[a];
  }
  return config;
}

TEST(BenchCases, NamesAreUniqueAndCasesValid) {
  std::set<std::string> names;
  for (const BenchCase& c : bench_cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
    EXPECT_NO_THROW(validate(config_of(c))) << c.name;
    EXPECT_GT(std::string(c.sets).size(), 0u) << c.name;
    EXPECT_GE(c.batch, 1) << c.name;
    EXPECT_GE(c.heads, 1) << c.name;
    EXPECT_TRUE(std::string(c.dtype) == "bf16" || std::string(c.dtype) == "f16") << c.name;
    EXPECT_EQ(find_bench_case(c.name), &c);
  }
  EXPECT_EQ(find_bench_case("nope"), nullptr);
}

TEST(BenchCases, SetsHoldTheBenchmarksCases) {
  int kernel = 0, image = 0, quick = 0;
  for (const BenchCase& c : bench_cases()) {
    kernel += in_set(c, "kernel");
    image += in_set(c, "image");
    quick += in_set(c, "quick");
  }
  EXPECT_EQ(kernel, 6);
  EXPECT_EQ(image, 8);
  EXPECT_EQ(quick, 2);
  EXPECT_FALSE(in_set(*find_bench_case("hunyuan dense"), "hopper-b"));  // whole words only
}

TEST(BenchCases, PresetsTakeTheirProblemFromTheTable) {
  const BenchCase* c = find_bench_case("flux4k 80x80 NA");
  const Preset* p = find_preset("flux4k");
  ASSERT_NE(c, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->config.rank, c->rank);
  for (int a = 0; a < c->rank; ++a) {
    EXPECT_EQ(p->config.axes[a].extent, c->extent[a]);
    EXPECT_EQ(p->config.axes[a].window, c->window[a]);
  }
}

}  // namespace
}  // namespace gna::sim
