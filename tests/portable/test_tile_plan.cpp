// CPU-only tests of the portable kernels' tile choice (run in CI without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "gna/attention_params.hpp"
#include "gna/core/error.hpp"
#include "kernels/portable/portable.hpp"
#include "kernels/portable/tile_plan.hpp"

namespace gna::portable {
namespace {

Problem make(int rank, std::initializer_list<int> extent, std::initializer_list<int> window,
             std::initializer_list<int> stride) {
  Problem p;
  p.rank = rank;
  int a = 0;
  for (int e : extent) p.axes[a++].extent = e;
  a = 0;
  for (int w : window) p.axes[a++].window = w;
  a = 0;
  for (int s : stride) p.axes[a++].stride = s;
  validate(p);
  return p;
}

TEST(TilePlan, ShapesHaveTheKernelsRowCounts) {
  const Problem p = make(3, {30, 48, 80}, {18, 24, 24}, {1, 1, 1});
  const TilePlan t = choose_tiles(p, 64, 64);
  EXPECT_EQ(t.q.volume(3), 64);
  EXPECT_EQ(t.kv.volume(3), 64);
}

// Perfectly block-sparse configurations (docs/rule.md section 7.4) come out with no partial pair.
TEST(TilePlan, FluxStride16IsPerfectlyBlockSparse) {
  const Problem p = make(2, {256, 256}, {80, 80}, {16, 16});
  const TilePlan t = choose_tiles(p, 64, 64);
  EXPECT_EQ(t.partial_pairs, 0) << t.q.size[0] << "x" << t.q.size[1] << " / " << t.kv.size[0]
                                << "x" << t.kv.size[1];
}

TEST(TilePlan, HunyuanStride16x8x8IsPerfectlyBlockSparse) {
  const Problem p = make(3, {30, 48, 80}, {18, 24, 24}, {16, 8, 8});
  const TilePlan t = choose_tiles(p, 64, 64);
  EXPECT_EQ(t.partial_pairs, 0);
  // Every Q tile visits the window's tiles only: 18*24*24 keys in 64-token tiles.
  const double q_tiles = 30.0 * 48 * 80 / 64;
  EXPECT_DOUBLE_EQ(t.visited_pairs / q_tiles, 18.0 * 24 * 24 / 64);
}

TEST(TilePlan, DenseLayoutVisitsEveryTileWithoutMasks) {
  const Problem p = make(2, {64, 64}, {64, 64}, {1, 1});
  const TilePlan t = choose_tiles(p, 64, 64);
  EXPECT_EQ(t.partial_pairs, 0);
  EXPECT_DOUBLE_EQ(t.visited_pairs, (64.0 * 64 / 64) * (64.0 * 64 / 64));
}

TEST(TilePlan, ScoreMatchesChoice) {
  const Problem p = make(2, {100, 37}, {13, 9}, {3, 1});
  const TilePlan t = choose_tiles(p, 64, 64);
  const TilePlan s = score_tiles(p, t.q, t.kv);
  EXPECT_EQ(s.visited_pairs, t.visited_pairs);
  EXPECT_EQ(s.partial_pairs, t.partial_pairs);
}

// The choice is cached per rule: problems that differ in one axis parameter get their own, and
// asking again returns the same.
TEST(TilePlan, CachedChoiceFollowsTheRule) {
  const Problem a = make(2, {100, 37}, {13, 9}, {3, 1});
  Problem b = a;
  b.axes[0].stride = 13;
  const TilePlan ta = choose_tiles(a, 64, 64), tb = choose_tiles(b, 64, 64);
  EXPECT_NE(ta.visited_pairs, tb.visited_pairs);
  EXPECT_EQ(score_tiles(b, tb.q, tb.kv).visited_pairs, tb.visited_pairs);
  const TilePlan again = choose_tiles(a, 64, 64);
  EXPECT_EQ(again.visited_pairs, ta.visited_pairs);
  EXPECT_EQ(again.q.volume(2), ta.q.volume(2));
  EXPECT_NE(choose_tiles(a, 64, 128).kv.volume(2), ta.kv.volume(2));
}

// The forward picks between its 64-row and 128-row Q tiles: dense layouts take the wide one
// (half the pairs at the same mask-free cost), and the pick is always one of the two best shapes,
// the wide one where its pairs scaled by 2 rows over its 1.5x speed cost less.
TEST(TilePlan, ForwardPicksOneOfItsTwoVariants) {
  const Problem dense = make(2, {128, 128}, {128, 128}, {1, 1});
  const TilePlan d = choose_forward_tiles(dense);
  EXPECT_EQ(d.q.volume(2), 128);
  EXPECT_EQ(d.kv.volume(2), 64);
  EXPECT_EQ(d.partial_pairs, 0);
  for (int window : {7, 33, 129, 1025}) {
    const Problem na = make(1, {4096}, {window}, {1});
    // On the grid, as choose_tiles scores.
    const TilePlan t = choose_forward_tiles(na, kNoForcedTile, kNoForcedTile, true, KvPlacements::grid);
    const TilePlan narrow = choose_tiles(na, 64, 64), wide = choose_tiles(na, 128, 64);
    const bool picked_wide = wide.cost * 2 / 1.5 < narrow.cost;
    const TilePlan& expected = picked_wide ? wide : narrow;
    EXPECT_EQ(t.q.size[0], expected.q.size[0]) << window;
    EXPECT_EQ(t.kv.size[0], expected.kv.size[0]) << window;
    EXPECT_EQ(t.visited_pairs, expected.visited_pairs) << window;
    EXPECT_EQ(t.cost, picked_wide ? wide.cost * 2 / 1.5 : narrow.cost) << window;
  }
}

// The forward's KV placement: by default the cheaper of grid and placed tiles per shape (grid on
// ties), as the options allow. Hunyuan 18x24x24 NA is cheaper with placed tiles, the
// block-sparse stride 16x8x8 costs the same (grid kept).
TEST(TilePlan, ForwardPlacement) {
  const Problem na = make(3, {30, 48, 80}, {18, 24, 24}, {1, 1, 1});
  const Problem strided = make(3, {30, 48, 80}, {18, 24, 24}, {16, 8, 8});
  KernelOptions grid, placed;
  grid.kv_placements = KvPlacements::grid;
  placed.kv_placements = KvPlacements::placed;
  const TilePlan either_na = forward_tiles(na, KernelOptions{});
  const TilePlan grid_na = forward_tiles(na, grid), placed_na = forward_tiles(na, placed);
  EXPECT_EQ(grid_na.placement, KvPlacement::grid);
  EXPECT_EQ(placed_na.placement, KvPlacement::placed);
  EXPECT_EQ(either_na.placement, KvPlacement::placed);
  EXPECT_LT(either_na.cost, grid_na.cost);
  EXPECT_EQ(either_na.cost, placed_na.cost);
  EXPECT_EQ(forward_tiles(strided, KernelOptions{}).placement, KvPlacement::grid);
  EXPECT_EQ(forward_tiles(strided, KernelOptions{}).partial_pairs, 0);
}

// The backward places its Q tiles per KV tile where that visits fewer pairs (hunyuan NA: fewer
// partial pairs, at the same 64-key tiles), keeps the grid where placing gains nothing (the
// block-sparse stride), and runs what KernelOptions::q_placements forces.
TEST(TilePlan, BackwardPlacement) {
  Problem na = make(3, {30, 48, 80}, {18, 24, 24}, {1, 1, 1});
  Problem strided = make(3, {30, 48, 80}, {18, 24, 24}, {16, 8, 8});
  na.dim_qk = na.dim_v = strided.dim_qk = strided.dim_v = 128;
  KernelOptions grid, placed;
  grid.q_placements = KvPlacements::grid;
  placed.q_placements = KvPlacements::placed;
  const TilePlan either_na = backward_tiles(na, KernelOptions{}, 232448);
  const TilePlan grid_na = backward_tiles(na, grid, 232448);
  const TilePlan placed_na = backward_tiles(na, placed, 232448);
  EXPECT_EQ(grid_na.placement, KvPlacement::grid);
  EXPECT_EQ(placed_na.placement, KvPlacement::placed);
  EXPECT_EQ(either_na.placement, KvPlacement::placed);
  EXPECT_LT(either_na.cost, grid_na.cost);
  EXPECT_LT(either_na.partial_pairs, grid_na.partial_pairs);
  EXPECT_EQ(either_na.cost, placed_na.cost);
  EXPECT_EQ(either_na.kv.volume(3), kBackwardRowsKVSmall);
  const TilePlan s = backward_tiles(strided, KernelOptions{}, 232448);
  EXPECT_EQ(s.placement, KvPlacement::grid);
  EXPECT_EQ(s.partial_pairs, 0);
  EXPECT_EQ(s.kv.volume(3), kBackwardRowsKV);
}

// A forced tile is honoured whatever the other side: that side is still chosen.
TEST(TilePlan, ForcedTilesAreHonoured) {
  const Problem p = make(2, {100, 37}, {13, 9}, {3, 1});
  KernelOptions q_only;
  q_only.q_tile = TileShape{{12, 5, 0}};  // any sides, at most 128 tokens
  const TilePlan f = forward_tiles(p, q_only);
  EXPECT_EQ(f.q.size[0], 12);
  EXPECT_EQ(f.q.size[1], 5);
  EXPECT_EQ(f.kv.volume(2), 64);
  KernelOptions kv_only;
  kv_only.kv_tile = TileShape{{4, 16, 0}};
  const TilePlan b = backward_tiles(p, kv_only, 232448);
  EXPECT_EQ(b.q.volume(2), kBackwardRowsQ);
  EXPECT_EQ(b.kv.size[0], 4);
  EXPECT_EQ(b.kv.size[1], 16);
  KernelOptions both;
  both.q_tile = TileShape{{8, 8, 0}};
  both.kv_tile = TileShape{{8, 8, 0}};
  both.kv_placements = KvPlacements::grid;  // score_tiles counts grid KV tiles
  both.q_placements = KvPlacements::grid;   // and the backward's grid Q tiles
  const TilePlan s = score_tiles(p, both.q_tile, both.kv_tile);
  for (const TilePlan& t : {forward_tiles(p, both), backward_tiles(p, both)}) {
    EXPECT_EQ(t.visited_pairs, s.visited_pairs);
    EXPECT_EQ(t.partial_pairs, s.partial_pairs);
  }
}

std::string error_of(TilePlan (*tiles)(const Problem&, const KernelOptions&, int),
                     const Problem& p, const KernelOptions& o) {
  try {
    tiles(p, o, 0);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    return e.what();
  }
  return "";
}

TEST(TilePlan, BadForcedTilesAreErrors) {
  const Problem p = make(2, {100, 37}, {13, 9}, {3, 1});
  KernelOptions o;
  o.q_tile = TileShape{{16, 16, 0}};
  EXPECT_EQ(error_of(forward_tiles, p, o),
            "options: q_tile 16x16 (256 tokens) is not a tile of the portable forward (every side "
            ">= 1, at most 128 tokens; all zeros: the kernel chooses)");
  o.q_tile = TileShape{{8, 16, 0}};
  EXPECT_EQ(error_of(forward_tiles, p, o), "");
  EXPECT_NE(error_of(backward_tiles, p, o).find("q_tile 8x16 (128 tokens) is not a tile of the "
                                                "portable backward (every side >= 1, at most 64"),
            std::string::npos);
  o = KernelOptions{};
  o.kv_tile = TileShape{{8, 4, 0}};
  EXPECT_NE(error_of(forward_tiles, p, o).find("kv_tile 8x4 (32 tokens)"), std::string::npos);
  EXPECT_EQ(error_of(backward_tiles, p, o), "");
}

// The kernels' shared memory against the per-block limits (less 1 KB for the kernels' static
// shared memory): sm_90 (227 KB) holds every kernel; sm_80 (A100, 163 KB) the forward kernels
// and the backward with 128-key KV tiles except at head dims 128/128, where it runs the 64-key
// variant; sm_86 / sm_89 (RTX 30 / 40, L40S, 99 KB) the forward with 128-row Q tiles and one
// K/V stage where two do not fit, and the backward with 128-key KV tiles or, where those do not
// fit, 64-key ones, which the tile choices fall back to there.
TEST(PortableSharedMemory, KernelsFitTheDevicesTheyClaim) {
  constexpr int kStatic = 1024;
  constexpr int kSm90 = 232448 - kStatic, kSm80 = 166912 - kStatic, kSm86 = 101376 - kStatic;
  const int dims[][2] = {{32, 32}, {64, 64}, {128, 128}, {64, 128}, {128, 64}};
  for (const auto& d : dims) {
    const int narrow = forward_shared_bytes(d[0], d[1], 64);
    const int wide = forward_shared_bytes(d[0], d[1], 128);
    const int backward = backward_shared_bytes(d[0], d[1]);
    const int backward_small = backward_shared_bytes(d[0], d[1], kBackwardRowsKVSmall);
    const int smallest_backward = backward_small > 0 ? std::min(backward, backward_small) : backward;
    EXPECT_GT(narrow, 0) << d[0] << "/" << d[1];
    EXPECT_GT(wide, narrow) << d[0] << "/" << d[1];
    EXPECT_LE(wide, kSm80) << d[0] << "/" << d[1];
    EXPECT_LE(backward, kSm90) << d[0] << "/" << d[1];
    EXPECT_EQ(backward <= kSm80, !(d[0] == 128 && d[1] == 128)) << d[0] << "/" << d[1];
    EXPECT_LE(narrow, kSm86) << d[0] << "/" << d[1];
    // Where the 128-row kernel needs more than 99 KB, one with a single K/V stage fits.
    const int wide_single = forward_shared_bytes(d[0], d[1], 128, false, 1);
    EXPECT_EQ(wide_single > 0, wide > kSm86) << d[0] << "/" << d[1];
    if (wide_single > 0) EXPECT_LE(wide_single, kSm86) << d[0] << "/" << d[1];
    // The 64-key variant exists exactly where the 128-key backward does not fit 99 KB.
    EXPECT_EQ(backward_small_variant(d[0], d[1]), backward > kSm86) << d[0] << "/" << d[1];
    EXPECT_EQ(backward_small > 0, backward_small_variant(d[0], d[1])) << d[0] << "/" << d[1];
    EXPECT_LE(smallest_backward, kSm86) << d[0] << "/" << d[1];
  }
  // Sizes exist exactly for the head dims the backend claims.
  for (int dq : {16, 32, 64, 96, 128, 256})
    for (int dv : {16, 32, 64, 96, 128, 256}) {
      EXPECT_EQ(forward_shared_bytes(dq, dv, 64) > 0, head_dims_supported(dq, dv)) << dq << "/" << dv;
      EXPECT_EQ(backward_shared_bytes(dq, dv) > 0, head_dims_supported(dq, dv)) << dq << "/" << dv;
    }
}

TEST(PortableSharedMemory, BackwardTilesFallBackToWhatFits) {
  Problem p = make(3, {30, 48, 80}, {18, 24, 24}, {16, 8, 8});
  p.dim_qk = p.dim_v = 128;
  const KernelOptions none;
  const TilePlan roomy = backward_tiles(p, none, 232448);
  EXPECT_EQ(roomy.kv.volume(3), kBackwardRowsKV);
  EXPECT_FALSE(backward_runs_small(p, roomy.kv));
  const int small_limit = backward_shared_bytes(128, 128, kBackwardRowsKVSmall);
  ASSERT_LT(small_limit, backward_shared_bytes(128, 128));
  const TilePlan t = backward_tiles(p, none, small_limit);
  EXPECT_EQ(t.q.volume(3), kBackwardRowsQ);
  EXPECT_EQ(t.kv.volume(3), kBackwardRowsKVSmall);
  EXPECT_TRUE(backward_runs_small(p, t.kv));
  // Head dims whose 128-key kernel fits everywhere keep it.
  p.dim_qk = p.dim_v = 32;
  EXPECT_EQ(backward_tiles(p, none, 101376).kv.volume(3), kBackwardRowsKV);
  // At head dims 128/128 the A100 (163 KB) runs the 64-key variant, the 64/64 kernel keeps 128.
  p.dim_qk = p.dim_v = 128;
  EXPECT_EQ(backward_tiles(p, none, 166912).kv.volume(3), kBackwardRowsKVSmall);
  p.dim_qk = p.dim_v = 64;
  EXPECT_EQ(backward_tiles(p, none, 166912).kv.volume(3), kBackwardRowsKV);
}

// Where at least a tenth of the best 128-key tiles' pairs are partial (neighborhood attention),
// the 64-key variant runs even when the 128-key kernel fits; dense, perfectly block-sparse and
// nearly dense (causal) problems keep 128 keys.
TEST(PortableSharedMemory, BackwardSmallVariantForPartialPairs) {
  Problem na = make(3, {30, 48, 80}, {18, 24, 24}, {1, 1, 1});
  na.dim_qk = na.dim_v = 128;
  ASSERT_GT(choose_tiles(na, kBackwardRowsQ, kBackwardRowsKV).partial_pairs, 0);
  const TilePlan t = backward_tiles(na, KernelOptions{}, 232448);
  EXPECT_EQ(t.kv.volume(3), kBackwardRowsKVSmall);
  EXPECT_TRUE(backward_runs_small(na, t.kv));
  Problem dense = make(2, {128, 128}, {128, 128}, {1, 1});
  dense.dim_qk = dense.dim_v = 128;
  EXPECT_EQ(backward_tiles(dense, KernelOptions{}, 232448).kv.volume(2), kBackwardRowsKV);
  Problem causal = make(1, {16384}, {16384}, {1});
  causal.axes[0].causal = true;
  causal.dim_qk = causal.dim_v = 128;
  const TilePlan c = choose_tiles(causal, kBackwardRowsQ, kBackwardRowsKV);
  ASSERT_GT(c.partial_pairs, 0);
  ASSERT_LT(c.partial_pairs, 0.1 * c.visited_pairs);
  EXPECT_EQ(backward_tiles(causal, KernelOptions{}, 232448).kv.volume(1), kBackwardRowsKV);
}

TEST(PortableSharedMemory, ForwardTilesFallBackToWhatFits) {
  Problem p = make(2, {128, 128}, {128, 128}, {1, 1});
  p.dim_qk = p.dim_v = 128;
  const KernelOptions none;
  const TilePlan roomy = forward_tiles(p, none, 232448);  // dense: the wide kernel
  EXPECT_EQ(roomy.q.volume(2), 128);
  EXPECT_EQ(roomy.kv_stages, 2);
  // 99 KB: the wide kernel with one K/V stage (two need more).
  ASSERT_GT(forward_shared_bytes(128, 128, 128), 101376);
  const TilePlan rtx = forward_tiles(p, none, 101376);
  EXPECT_EQ(rtx.q.volume(2), 128);
  EXPECT_EQ(rtx.kv_stages, 1);
  // The single-stage 128-row kernel needs less than the double-buffered 64-row one (there is
  // no single-stage 64-row kernel): it runs wherever the backend takes the call.
  const int wide_single = forward_shared_bytes(128, 128, 128, false, 1);
  const int narrow = forward_shared_bytes(128, 128, 64);
  EXPECT_EQ(forward_shared_bytes(128, 128, 64, false, 1), 0);
  ASSERT_LT(wide_single, narrow);
  const TilePlan t = forward_tiles(p, none, narrow);
  EXPECT_EQ(t.q.volume(2), 128);
  EXPECT_EQ(t.kv.volume(2), 64);
  EXPECT_EQ(t.kv_stages, 1);
  // A neighborhood whose best tiles have 64 rows keeps them, double-buffered.
  Problem na = make(2, {56, 56}, {7, 7}, {1, 1});
  na.dim_qk = na.dim_v = 128;
  const TilePlan small = forward_tiles(na, none, 101376);
  if (small.q.volume(2) == 64) EXPECT_EQ(small.kv_stages, 2);
}

// Dispatch-side checks that need no GPU: what the kernels are compiled for, and the refusal of
// host tensors naming the reason.
TEST(PortableSupport, HeadDimsAndHostTensors) {
  EXPECT_TRUE(head_dims_supported(128, 128));
  EXPECT_TRUE(head_dims_supported(64, 128));
  EXPECT_FALSE(head_dims_supported(96, 96));
  EXPECT_NE(std::string(supported_head_dims()).find("128/128"), std::string::npos);
  ForwardCall call;
  call.problem.dtype = DType::bf16;
  call.in.q.device = -1;
  std::string why;
  EXPECT_FALSE(supports_forward(call, &why));
  EXPECT_EQ(why.rfind("portable: tensors are in host memory", 0), 0u) << why;
}

}  // namespace
}  // namespace gna::portable
