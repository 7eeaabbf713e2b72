// The core's slab pieces that kernels running one dilation group at a time need: a slab's rows
// inside a dilation group (slab_group_rows) and a tile run cut to a slab's rows (clip_tile_run),
// each against a literal enumeration; whole_layout.
#include <gtest/gtest.h>

#include <vector>

#include "gna/core/problem.hpp"
#include "gna/core/slab.hpp"
#include "gna/core/tiling.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

TEST(SlabGroupRows, EveryRowOfTheSlabInItsGroup) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 3000; ++trial) {
    const AxisRule a = random_axis(rng, 40);
    const int offset = rand_int(rng, 0, a.extent - 1);
    const int rows = rand_int(rng, 1, a.extent - offset);
    for (int g = 0; g < a.dilation; ++g) {
      // Literal: the slab's tensor rows in group g, in order.
      std::vector<int> tensor_rows;
      for (int r = 0; r < rows; ++r)
        if (dilation_group(a, offset + r) == g) tensor_rows.push_back(r);
      const SlabGroupRows got = slab_group_rows(a, g, offset, rows);
      ASSERT_EQ(got.count, static_cast<int>(tensor_rows.size()))
          << "L=" << a.extent << " d=" << a.dilation << " g=" << g << " offset=" << offset
          << " rows=" << rows;
      for (int i = 0; i < got.count; ++i) {
        // Row i of the group's slab: tensor row first + i d at group coordinate begin + i.
        ASSERT_EQ(got.first + i * a.dilation, tensor_rows[i]);
        ASSERT_EQ(index_in_group(a, offset + tensor_rows[i]), got.begin + i);
      }
    }
  }
}

TEST(SlabGroupRows, WithoutASlabTheWholeGroup) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 500; ++trial) {
    const AxisRule a = random_axis(rng, 40);
    for (int g = 0; g < a.dilation; ++g) {
      const SlabGroupRows r = slab_group_rows(a, g, 0, a.extent);
      EXPECT_EQ(r.first, g);
      EXPECT_EQ(r.begin, 0);
      EXPECT_EQ(r.count, group_length(a, g));
    }
  }
}

// clip_tile_run keeps exactly the rows of the run inside the clip, with tiles that start at the
// clip's begin or the run's first, whichever is later, and no tile beyond what they need.
TEST(ClipTileRun, CoversTheRunsRowsInsideTheClip) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 5000; ++trial) {
    const int tile = 1 << rand_int(rng, 0, 4);
    const KvTileRun run{rand_int(rng, 0, 40), rand_int(rng, 0, 6)};
    const int b = rand_int(rng, 0, 60), e = rand_int(rng, b, 70);
    const KvTileRun got = clip_tile_run(run, tile, Range{b, e});
    const int run_end = run.first + run.count * tile;
    const int lo = std::max(run.first, b), hi = std::min(run_end, e);
    if (hi <= lo) {
      ASSERT_EQ(got.count, 0) << "run " << run.first << "+" << run.count << "x" << tile << " clip ["
                              << b << ", " << e << ")";
      continue;
    }
    ASSERT_EQ(got.first, lo);
    ASSERT_GE(got.first + got.count * tile, hi);         // covers
    ASSERT_LT(got.first + (got.count - 1) * tile, hi);   // no tile without a row inside
  }
}

TEST(ClipTileRun, ARunInsideTheGroupClippedToItIsItself) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 2000; ++trial) {
    const AxisRule a = random_axis(rng, 40);
    const int n = group_length(a, 0);
    AxisRule g = a;
    g.extent = n;
    g.dilation = 1;
    const int tile_q = 1 << rand_int(rng, 0, 3), tile_kv = 1 << rand_int(rng, 0, 3);
    const int kt = rand_int(rng, 0, tiles_along(n, tile_kv) - 1);
    const QTileRun run = q_tile_run(g, n, kt, tile_q, tile_kv, KvPlacement::placed);
    const QTileRun clipped = clip_tile_run(run, tile_q, Range{0, n});
    ASSERT_EQ(clipped.first, run.first);
    ASSERT_EQ(clipped.count, run.count);
  }
}

TEST(WholeLayout, TheRuleOverTheWholeLayout) {
  Problem p;
  p.rank = 2;
  p.axes[0] = AxisRule{5, 7, 1, 2, false};  // a slab of 5 query rows of a 30-row layout
  p.axes[1] = AxisRule{12, 3, 2, 1, true};
  p.slab.active = true;
  p.slab.extent[0] = 30;
  p.slab.extent[1] = 12;
  p.slab.query_offset[0] = 10;
  p.slab.key_offset[0] = 4;
  p.slab.key_extent[0] = 20;
  p.slab.key_extent[1] = 12;
  const Problem w = whole_layout(p);
  EXPECT_FALSE(w.slab.active);
  EXPECT_EQ(w.axes[0].extent, 30);
  EXPECT_EQ(w.axes[0].window, 7);
  EXPECT_EQ(w.axes[0].stride, 2);
  EXPECT_EQ(w.axes[1].extent, 12);
  EXPECT_TRUE(w.axes[1].causal);
  EXPECT_EQ(w.axes[1].dilation, 2);
  p.slab.active = false;
  EXPECT_EQ(whole_layout(p).axes[0].extent, 5);
}

}  // namespace
}  // namespace gna::test
