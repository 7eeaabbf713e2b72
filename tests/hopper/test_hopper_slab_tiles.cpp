// The tiles a slab runs on the Hopper kernels (kernels/hopper/slab_tiles.hpp), on the host: for
// random slabs of rank 1-3 (along axis 0, on some along axis 1 too), every TMA box the forward
// and the backward would place, from the core's tiling math as the kernels walk it, starts at or
// after its tensor's first row (no negative box coordinate); slabs of rank >= 2 along axis 0
// alone always run; the others run or are refused with the reason. slab_alignment against a
// literal enumeration.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "gna/core/slab.hpp"
#include "gna/core/tiling.hpp"
#include "kernels/hopper/backward_launch.hpp"
#include "kernels/hopper/forward_launch.hpp"
#include "kernels/hopper/slab_tiles.hpp"
#include "support/test_support.hpp"

namespace gna {
namespace {

using test::rand_int;

// A random slab problem: the rule of a random layout, queries a random run of rows along axis 0
// (and, when `second`, axis 1), keys the rows they attend plus a random margin.
Problem random_slab(std::mt19937_64& rng, int rank, bool second) {
  Problem p;
  p.rank = rank;
  p.dim_qk = p.dim_v = rand_int(rng, 0, 1) ? 64 : 128;
  p.dtype = DType::bf16;
  p.slab.active = true;
  for (int a = 0; a < rank; ++a) {
    const AxisRule whole = test::random_axis(rng, rank == 1 ? 600 : 40);
    const int L = whole.extent;
    int q0 = 0, q1 = L;
    if (a == 0 || (a == 1 && second)) {
      q0 = rank == 1 && rand_int(rng, 0, 1) ? 128 * rand_int(rng, 0, (L - 1) / 128)
                                             : rand_int(rng, 0, L - 1);
      q1 = rand_int(rng, q0 + 1, L);
    }
    const Range keys = key_range(whole, Range{q0, q1});
    const int k0 = std::max(0, keys.begin - rand_int(rng, 0, 2));
    const int k1 = std::min(L, keys.end + rand_int(rng, 0, 2));
    p.axes[a] = whole;
    p.axes[a].extent = q1 - q0;
    p.slab.extent[a] = L;
    p.slab.query_offset[a] = q0;
    p.slab.key_offset[a] = k0;
    p.slab.key_extent[a] = k1 - k0;
  }
  validate(p);
  return p;
}

// Every box coordinate (group coordinate less the tensor's first row) of the forward's Q tiles
// and KV runs and of the backward's KV tiles and Q boxes, as the kernels compute them, is >= 0.
void expect_boxes_inside(const Problem& p, const ScoredTiles& fwd, const ScoredTiles& bwd,
                         const std::string& where) {
  for (int a = 0; a < p.rank; ++a) {
    const AxisRule whole = slab_axis(p, a);
    for (int g = 0; g < whole.dilation; ++g) {
      const SlabGroupRows q = slab_group_rows(whole, g, p.slab.query_offset[a], p.axes[a].extent);
      const SlabGroupRows k =
          slab_group_rows(whole, g, p.slab.key_offset[a], p.slab.key_extent[a]);
      if (q.count == 0 || k.count == 0) continue;
      const int n = group_length(whole, g);
      AxisRule r = whole;
      r.extent = n;
      r.dilation = 1;
      const Range q_rows{q.begin, q.begin + q.count};
      // Forward: Q tiles meeting the query rows, each with its KV run.
      const int tq = fwd.q.size[a], tk = fwd.kv.size[a];
      for (int qt = q.begin / tq; qt * tq < q_rows.end; ++qt) {
        ASSERT_GE(qt * tq - q.begin, 0) << where << " forward Q axis " << a;
        const KvTileRun run = kv_tile_run(r, n, qt, tq, tk, fwd.placement);
        ASSERT_GE(run.first - k.begin, 0) << where << " forward KV axis " << a << " qt " << qt;
      }
      // Backward: KV tiles meeting the key rows, each with its Q box cut to the query rows.
      const int bq = bwd.q.size[a], bk = bwd.kv.size[a];
      const int q_first = q.begin / bq, q_tiles = ceil_div(q_rows.end, bq) - q_first;
      for (int kt = k.begin / bk; kt * bk < k.begin + k.count; ++kt) {
        ASSERT_GE(kt * bk - k.begin, 0) << where << " backward KV axis " << a;
        if (bwd.placement == KvPlacement::placed) {
          const QTileRun run = clip_tile_run(q_tile_run(r, n, kt, bq, bk, KvPlacement::placed),
                                             bq, q_rows);
          if (run.count > 0) ASSERT_GE(run.first - q.begin, 0) << where << " backward placed Q";
        } else {
          const Range box = q_tiles_for_kv_tile(r, n, kt, bq, bk);
          for (int qt = std::max(box.begin, q_first); qt < std::min(box.end, q_first + q_tiles);
               ++qt)
            ASSERT_GE(qt * bq - q.begin, 0) << where << " backward grid Q axis " << a;
        }
      }
    }
  }
}

std::string describe(const Problem& p) {
  std::string s = "rank " + std::to_string(p.rank) + " d" + std::to_string(p.dim_qk);
  for (int a = 0; a < p.rank; ++a) {
    const AxisRule& r = p.axes[a];
    s += " | L " + std::to_string(p.slab.extent[a]) + " K " + std::to_string(r.window) + " d " +
         std::to_string(r.dilation) + " s " + std::to_string(r.stride) +
         (r.causal ? " causal" : "") + " q [" + std::to_string(p.slab.query_offset[a]) + "+" +
         std::to_string(r.extent) + "] k [" + std::to_string(p.slab.key_offset[a]) + "+" +
         std::to_string(p.slab.key_extent[a]) + "]";
  }
  return s;
}

TEST(HopperSlabTiles, NoBoxStartsBeforeASlabTensor) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  int runs[4] = {0, 0, 0, 0}, refused[4] = {0, 0, 0, 0};
  for (int trial = 0; trial < 240; ++trial) {
    const int rank = 1 + trial % 3;
    const bool second = rank >= 2 && rand_int(rng, 0, 3) == 0;
    const Problem p = random_slab(rng, rank, second);
    const std::string where = describe(p) + " (GNA_TEST_SEED=" + std::to_string(seed) + ")";
    ForwardCall fc;
    fc.problem = p;
    BackwardCall bc;
    bc.problem = p;
    ScoredTiles fwd, bwd;
    std::string why_f, why_b;
    const bool f = hopper::call_tiles(fc, &fwd, &why_f);
    const bool b = hopper::backward_call_tiles(bc, &bwd, &why_b);
    if (rank >= 2 && !second) {
      ASSERT_TRUE(f) << where << ": " << why_f;
      ASSERT_TRUE(b) << where << ": " << why_b;
    }
    for (const std::string* why : {&why_f, &why_b})
      if (!why->empty())
        EXPECT_NE(why->find("tile starts on the slab's first rows"), std::string::npos) << *why;
    if (!f || !b) {
      ++refused[rank];
      continue;
    }
    ++runs[rank];
    expect_boxes_inside(p, fwd, bwd, where);
  }
  for (int rank = 1; rank <= 3; ++rank) EXPECT_GT(runs[rank], 0) << "rank " << rank;
  EXPECT_GT(refused[1], 0);
}

TEST(HopperSlabTiles, AlignmentIsTheLargestPowerOfTwoDividingEveryGroupsFirstRow) {
  std::mt19937_64 rng(test::fresh_seed());
  for (int trial = 0; trial < 200; ++trial) {
    const Problem p = random_slab(rng, 1 + trial % 3, true);
    const hopper::SlabAlignment al = hopper::slab_alignment(p);
    for (int a = 0; a < p.rank; ++a) {
      const AxisRule whole = slab_axis(p, a);
      for (const bool keys : {false, true}) {
        int want = 128;
        for (int g = 0; g < whole.dilation; ++g) {
          const SlabGroupRows r =
              keys ? slab_group_rows(whole, g, p.slab.key_offset[a], p.slab.key_extent[a])
                   : slab_group_rows(whole, g, p.slab.query_offset[a], p.axes[a].extent);
          if (r.count == 0) continue;
          while (r.begin % want != 0) want /= 2;
        }
        EXPECT_EQ(keys ? al.k[a] : al.q[a], want) << describe(p) << " axis " << a;
      }
    }
  }
}

}  // namespace
}  // namespace gna
