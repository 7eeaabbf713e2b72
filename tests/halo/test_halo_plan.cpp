// The halo kernels' geometry against brute force over the rule (halos and warp sub-boxes hold
// exactly the windows of their tokens), and the dispatch rule on the image-model shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "gna/core/tiling.hpp"
#include "kernels/halo/plan.hpp"

namespace gna::halo {
namespace {

Problem image_problem(std::vector<int> extent, std::vector<int> window, int dim,
                      std::vector<int> dilation = {}) {
  Problem p;
  p.rank = static_cast<int>(extent.size());
  for (int a = 0; a < p.rank; ++a) {
    p.axes[a].extent = extent[a];
    p.axes[a].window = window[a];
    p.axes[a].dilation = dilation.empty() ? 1 : dilation[a];
  }
  p.dim_qk = p.dim_v = dim;
  p.dtype = DType::bf16;
  return p;
}

// Brute force: smallest interval holding every window (or inverse window) of tokens [b, e).
Range brute_union(const AxisRule& a, int n, int b, int e, Side side) {
  Range u{n, 0};
  for (int i = b; i < e; ++i)
    for (int j = 0; j < n; ++j) {
      const bool in = side == Side::keys_of_queries ? key_window(a, n, i).contains(j)
                                                    : key_window(a, n, j).contains(i);
      if (!in) continue;
      u.begin = std::min(u.begin, j);
      u.end = std::max(u.end, j + 1);
    }
  return u;
}

TEST(HaloPlan, BoxShapesTileTheWarps) {
  for (const Problem& p : {image_problem({100}, {7}, 32), image_problem({56, 56}, {7, 7}, 32),
                           image_problem({28, 28}, {7, 7}, 32), image_problem({20, 28}, {7, 7}, 32),
                           image_problem({16, 32, 32}, {7, 7, 7}, 64)}) {
    const int rank = p.rank;
    const BoxShape s = box_shape(p);
    int cta = 1, warp = 1;
    for (int a = 0; a < kMaxRank; ++a) {
      cta *= s.cta[a];
      warp *= s.warp[a];
      EXPECT_EQ(s.cta[a] % s.warp[a], 0) << "rank " << rank << " axis " << a;
    }
    EXPECT_EQ(cta, kBoxTokens) << "rank " << rank;
    EXPECT_EQ(warp, kWarpTokens) << "rank " << rank;
  }
}

TEST(HaloPlan, UnionsMatchBruteForce) {
  std::mt19937_64 rng(7);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int checked = 0;
  for (int it = 0; it < 3000; ++it) {
    AxisRule a;
    a.extent = uni(2, 80);
    a.window = uni(2, std::min(a.extent, 15));
    a.dilation = uni(1, std::max(1, a.extent / a.window));
    a.stride = uni(0, 1) ? 1 : uni(1, a.window);
    a.causal = uni(0, 3) == 0;
    const int g = uni(0, a.dilation - 1), n = group_length(a, g);
    const int size = 1 << uni(0, 6);
    for (Side side : {Side::keys_of_queries, Side::queries_of_keys})
      for (int b = 0; b < n; b += size) {
        const int e = std::min(b + size, n);
        const Range want = brute_union(a, n, b, e, side);
        const Range got = window_union(a, n, Range{b, e}, side);
        ASSERT_EQ(got.begin, want.begin) << "extent " << a.extent << " window " << a.window
                                         << " stride " << a.stride << " causal " << a.causal;
        ASSERT_EQ(got.end, want.end);
        ++checked;
      }
  }
  EXPECT_GT(checked, 10000);
}

// 2-D boxes: 8x8 unless 4x16 or 16x4 tiles the extents in fewer boxes (28 = 7 x 4 rows).
TEST(HaloPlan, BoxShapeOfTheExtents) {
  const auto cta = [](std::vector<int> extent, std::vector<int> dilation = {}) {
    const BoxShape s = box_shape(image_problem(extent, {7, 7}, 32, dilation));
    return std::vector<int>{s.cta[0], s.cta[1]};
  };
  EXPECT_EQ(cta({56, 56}), (std::vector<int>{8, 8}));
  EXPECT_EQ(cta({14, 14}), (std::vector<int>{8, 8}));
  EXPECT_EQ(cta({128, 128}), (std::vector<int>{8, 8}));
  EXPECT_EQ(cta({28, 28}), (std::vector<int>{4, 16}));
  EXPECT_EQ(cta({28, 16}), (std::vector<int>{4, 16}));
  EXPECT_EQ(cta({16, 28}), (std::vector<int>{16, 4}));
  EXPECT_EQ(cta({28, 56}), (std::vector<int>{8, 8}));  // 28 boxes either way: the smaller halo
  EXPECT_EQ(cta({28, 28}, {4, 4}), (std::vector<int>{8, 8}));  // groups of 7: one 8x8 box each
  const Plan nat28 = make_plan(image_problem({28, 28}, {7, 7}, 32), Side::keys_of_queries);
  EXPECT_EQ(nat28.boxes[0] * nat28.boxes[1], 14);
  EXPECT_EQ(nat28.halo_rows, 10 * 19);  // 4 + 6 rows; 16 + 3 columns (two boxes, each at an edge)
  EXPECT_EQ(nat28.walk_rows, 112);  // the same 4x4 patches: the same walks
}

TEST(HaloPlan, ImageShapes) {
  const Plan nat = make_plan(image_problem({56, 56}, {7, 7}, 32), Side::keys_of_queries);
  EXPECT_EQ(nat.halo[0], 14);
  EXPECT_EQ(nat.halo[1], 14);
  EXPECT_EQ(nat.walk[0], 10);
  EXPECT_EQ(nat.walk_rows, 112);
  EXPECT_EQ(nat.boxes[0], 7);
  // Dilation keeps the box in group coordinates: the same halo.
  const Plan dinat = make_plan(image_problem({56, 56}, {7, 7}, 32, {8, 8}), Side::keys_of_queries);
  EXPECT_EQ(dinat.halo[0], 7);
  EXPECT_EQ(dinat.boxes[0], 1);
  const Plan three = make_plan(image_problem({16, 32, 32}, {7, 7, 7}, 64), Side::keys_of_queries);
  EXPECT_EQ(three.halo_rows, 1000);
  EXPECT_GT(forward_shared_bytes(three, 64), 227 * 1024);  // streamed in slabs at head dim 64 (below)
  EXPECT_LT(forward_shared_bytes(three, 32), 227 * 1024);
  EXPECT_EQ(three.slabs, 1);
  EXPECT_EQ(three.tile_rows, three.halo_rows);
}

// Every box and warp patch of a problem's dilation groups, as the kernels split them (cta.cuh):
// on_box(halo) with the box's halo (window unions on `side`), then on_warp(halo, walk) for each
// warp patch holding tokens, with the union of its windows.
template <typename OnBox, typename OnWarp>
void for_each_warp_walk(const Problem& p, const BoxShape& shape, Side side, OnBox on_box,
                        OnWarp on_warp) {
  int groups = 1;
  for (int a = 0; a < p.rank; ++a) groups *= p.axes[a].dilation;
  const int per[kMaxRank] = {shape.cta[0] / shape.warp[0], shape.cta[1] / shape.warp[1],
                             shape.cta[2] / shape.warp[2]};
  for (int g = 0; g < groups; ++g) {
    int n[kMaxRank] = {1, 1, 1};
    for (int a = 0, rest = g; a < p.rank; rest /= p.axes[a].dilation, ++a)
      n[a] = group_length(p.axes[a], rest % p.axes[a].dilation);
    int boxes[kMaxRank] = {1, 1, 1};
    for (int a = 0; a < p.rank; ++a) boxes[a] = tiles_along(n[a], shape.cta[a]);
    for (int b0 = 0; b0 < boxes[0]; ++b0)
      for (int b1 = 0; b1 < boxes[1]; ++b1)
        for (int b2 = 0; b2 < boxes[2]; ++b2) {
          const int box[kMaxRank] = {b0, b1, b2};
          Range halo[kMaxRank] = {{0, 1}, {0, 1}, {0, 1}};
          for (int a = 0; a < p.rank; ++a) {
            const Range cta{box[a] * shape.cta[a], std::min((box[a] + 1) * shape.cta[a], n[a])};
            halo[a] = window_union(p.axes[a], n[a], cta, side);
          }
          on_box(halo);
          for (int w = 0; w < per[0] * per[1] * per[2]; ++w) {
            const int wc[kMaxRank] = {w / (per[1] * per[2]), w / per[2] % per[1], w % per[2]};
            Range walk[kMaxRank] = {{0, 1}, {0, 1}, {0, 1}};
            bool empty = false;
            for (int a = 0; a < p.rank; ++a) {
              const int first = box[a] * shape.cta[a] + wc[a] * shape.warp[a];
              const Range tokens{first, std::min(first + shape.warp[a], n[a])};
              empty = empty || tokens.empty();
              if (!tokens.empty()) walk[a] = window_union(p.axes[a], n[a], tokens, side);
            }
            if (!empty) on_warp(halo, walk);
          }
        }
  }
}

// Brute force over a problem's boxes and warp patches: per warp, the chunks of its walks over
// the slabs of its box's halo and their mask words. They must fit the plan's walk table and
// masks.
void check_walk_tables(const Problem& p, Side side, const Plan& plan) {
  for_each_warp_walk(
      p, plan.shape, side,
      [&](const Range* halo) {
        int rows = 1;
        for (int a = 0; a < p.rank; ++a) rows *= halo[a].size();
        ASSERT_LE(rows, plan.halo_rows);
        ASSERT_LE(rows / halo[0].size() * std::min(plan.slab_planes, halo[0].size()),
                  plan.tile_rows);
        ASSERT_LE((halo[0].size() + plan.slab_planes - 1) / plan.slab_planes, plan.slabs);
      },
      [&](const Range* halo, const Range* walk) {
        const int slabs = (halo[0].size() + plan.slab_planes - 1) / plan.slab_planes;
        const int plane = walk[1].size() * walk[2].size();
        int chunks = 0, words = 0, segments = 0;
        for (int k = 0; k < slabs; ++k) {
          const int lo = std::max(k * plan.slab_planes, walk[0].begin - halo[0].begin);
          const int hi = std::min((k + 1) * plan.slab_planes, walk[0].end - halo[0].begin);
          const int c = (std::max(hi - lo, 0) * plane + kChunk - 1) / kChunk;
          chunks += c;
          words += (c + 3) / 4;
          segments += c > 0;
        }
        ASSERT_LE(segments, plan.segments);
        ASSERT_LE(chunks * kChunk, plan.walk_rows) << "slab planes " << plan.slab_planes;
        ASSERT_LE(words * 32 * 4, walk_mask_bytes(plan.walk_rows, plan.segments));
      });
}

// The streamed dK / dV kernel's walks (cta.cuh, build_slab_table and slab_walk), by brute force
// over a problem's boxes, warp patches and slabs: one table of slab_planes planes of the warp's
// sub-box serves every slab; a walk over slab k reads entries [first, first + 16 chunks) of it
// (first even, one masked entry before its planes where their first entry is odd), holds exactly
// the sub-box's planes in the slab, and its masks fit walk_mask_bytes(walk_rows + kChunk, segments).
void check_slab_tables(const Problem& p, const Plan& plan) {
  if (plan.slabs == 1) return;
  const int S = plan.slab_planes;
  for_each_warp_walk(
      p, plan.shape, Side::queries_of_keys, [](const Range*) {},
      [&](const Range* halo, const Range* walk) {
        const int slabs = (halo[0].size() + S - 1) / S;
        const int plane = walk[1].size() * walk[2].size();
        ASSERT_LE((S * plane + kChunk - 1) / kChunk * kChunk + kChunk, plan.slab_table_rows);
        int words = 0, planes_walked = 0;
        for (int k = 0; k < slabs; ++k) {
          // Halo planes the walk meets in slab k, then the walk's entries in the slab's table.
          const int lo = std::max(k * S, walk[0].begin - halo[0].begin);
          const int hi = std::min((k + 1) * S, walk[0].end - halo[0].begin);
          if (hi <= lo) continue;
          planes_walked += hi - lo;
          const int begin = (lo - k * S) * plane, count = (hi - lo) * plane;
          const int lead = begin & 1, first = begin - lead;
          const int chunks = (count + lead + kChunk - 1) / kChunk;
          ASSERT_EQ(first % 2, 0);
          ASSERT_LE(begin + count, S * plane) << "the walk's planes lie in the slab";
          ASSERT_LE(first + chunks * kChunk, plan.slab_table_rows) << "slab planes " << S;
          words += (chunks + 3) / 4;
        }
        ASSERT_EQ(planes_walked, walk[0].size()) << "every plane of the sub-box in one slab";
        ASSERT_LE(words * 32 * 4, walk_mask_bytes(plan.walk_rows + kChunk, plan.segments)) << "slab planes " << S;
      });
}

// Resident CTAs per SM that shared memory allows on sm_90 (228 KB per SM, 1 KB reserved per CTA).
int ctas_by_shared_memory(int bytes) { return 233472 / (bytes + 1024); }

// Halos that do not fit shared memory stream in slabs of axis-0 planes: the 3-D 7x7x7 case at
// head dim 64 (key halo 10^3; query halo 11^3: edge keys are attended by more queries); the
// candidates fit, most planes first; the walk tables hold every warp's walks.
TEST(HaloPlan, Slabs) {
  constexpr int kLimit = 227 * 1024;  // sm_90
  const Problem three = image_problem({16, 32, 32}, {7, 7, 7}, 64);
  for (const Side side : {Side::keys_of_queries, Side::queries_of_keys}) {
    const Plan whole = make_plan(three, side);
    for (const Pass pass : {Pass::forward, Pass::dq, Pass::dkdv}) {
      const Plan plan = pass_plan(whole, pass, 64, kLimit);
      EXPECT_GT(plan.slabs, 1);
      EXPECT_LE(shared_bytes(plan, pass, 64), kLimit);
      EXPECT_GT(shared_bytes(with_slabs(whole, plan.slab_planes + 1), pass, 64), kLimit) << "the most planes";
      EXPECT_EQ(plan.tile_rows, whole.halo_rows / whole.halo[0] * plan.slab_planes);
      const std::vector<Plan> candidates = slab_candidates(whole, pass, 64, kLimit);
      // Every slab size from the first down to 1 plane; dK / dV: each with K / V tiles where they
      // fit, then with K / V in registers (16 KB fewer).
      ASSERT_FALSE(candidates.empty());
      EXPECT_EQ(candidates.front().slab_planes, plan.slab_planes);
      EXPECT_EQ(candidates.front().kv_registers, plan.kv_registers);
      std::vector<int> per_size(plan.slab_planes + 1, 0), registers(plan.slab_planes + 1, 0);
      for (size_t i = 0; i < candidates.size(); ++i) {
        const Plan& c = candidates[i];
        ASSERT_LE(c.slab_planes, plan.slab_planes);
        if (i > 0) EXPECT_LE(c.slab_planes, candidates[i - 1].slab_planes);
        ++per_size[c.slab_planes];
        registers[c.slab_planes] += c.kv_registers;
        EXPECT_LE(shared_bytes(c, pass, 64), kLimit);
        if (pass != Pass::dkdv) EXPECT_FALSE(c.kv_registers);
        if (c.kv_registers && i > 0 && candidates[i - 1].slab_planes == c.slab_planes)
          EXPECT_EQ(shared_bytes(c, pass, 64) + 2 * kBoxTokens * 64 * 2, shared_bytes(candidates[i - 1], pass, 64));
      }
      for (int planes = 1; planes <= plan.slab_planes; ++planes) {
        EXPECT_GE(per_size[planes], 1) << planes << " planes";
        if (pass == Pass::dkdv) EXPECT_EQ(registers[planes], 1) << planes << " planes";
      }
      check_walk_tables(three, side, plan);
    }
    for (int planes = 1; planes <= whole.halo[0]; ++planes) {
      const Plan plan = with_slabs(whole, planes);
      EXPECT_EQ(plan.slabs, (whole.halo[0] + planes - 1) / planes);
      check_walk_tables(three, side, plan);
      if (side == Side::queries_of_keys) check_slab_tables(three, plan);
    }
  }
  // Halos that fit are whole, with the plan's walk table.
  for (const Problem& p : {image_problem({56, 56}, {7, 7}, 32), image_problem({128, 128}, {13, 13}, 64),
                           image_problem({16, 32, 32}, {7, 7, 7}, 32)}) {
    const Plan whole = make_plan(p, Side::keys_of_queries);
    const Plan plan = pass_plan(whole, Pass::dq, p.dim_qk, kLimit);
    EXPECT_EQ(plan.slabs, 1);
    EXPECT_EQ(slab_candidates(whole, Pass::dq, p.dim_qk, kLimit).front().slabs, 1);
    EXPECT_EQ(plan.walk_rows, whole.walk_rows);
    EXPECT_EQ(shared_bytes(plan, Pass::dq, p.dim_qk), dq_shared_bytes(whole, p.dim_qk));
  }
  // Random rules, dilation and strides included, in every slab size.
  std::mt19937_64 rng(11);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int it = 0; it < 200; ++it) {
    const int rank = uni(1, 3);
    std::vector<int> extent, window, dilation;
    for (int a = 0; a < rank; ++a) {
      extent.push_back(uni(5, rank == 3 ? 20 : 40));
      window.push_back(uni(2, std::min(extent.back(), 9)));
      dilation.push_back(uni(0, 2) == 0 ? uni(1, std::max(1, extent.back() / window.back())) : 1);
    }
    Problem p = image_problem(extent, window, 64, dilation);
    for (int a = 0; a < rank; ++a) {
      p.axes[a].stride = uni(0, 3) == 0 ? uni(1, window[a]) : 1;
      p.axes[a].causal = uni(0, 4) == 0;
    }
    for (const Side side : {Side::keys_of_queries, Side::queries_of_keys}) {
      const Plan whole = make_plan(p, side);
      const int planes = uni(1, whole.halo[0]);
      check_walk_tables(p, side, with_slabs(whole, planes));
      if (side == Side::queries_of_keys) check_slab_tables(p, with_slabs(whole, planes));
    }
  }
}

// The streamed dK / dV pass keeps one walk table per warp for every slab and may keep K / V in
// registers instead of tiles, so that the 3-D 7x7x7 query halo (11^3, walks of up to 1,331
// entries per warp) streams at two CTAs per SM by shared memory in slabs of 2 planes and three in
// slabs of 1 (168 registers at head dim 64 allow three); hdit 13x13 takes 9 planes at three, hdit
// 7x7 13 planes at three with K / V tiles. The whole-halo layout is unchanged.
TEST(HaloPlan, DkdvSlabsForOccupancy) {
  const Problem three = image_problem({16, 32, 32}, {7, 7, 7}, 64);
  const Plan whole = make_plan(three, Side::queries_of_keys);
  EXPECT_EQ(whole.halo_rows, 11 * 11 * 11);
  EXPECT_EQ(whole.walk_rows, 1344);
  const Plan two = with_slabs(whole, 2, true), one = with_slabs(whole, 1, true);
  EXPECT_EQ(two.slab_table_rows, 272);  // 2 planes of 11 x 11, whole chunks, one chunk more
  EXPECT_EQ(ctas_by_shared_memory(dkdv_shared_bytes(two, 64)), 2);
  EXPECT_EQ(ctas_by_shared_memory(dkdv_shared_bytes(with_slabs(whole, 3, true), 64)), 1);
  EXPECT_EQ(ctas_by_shared_memory(dkdv_shared_bytes(one, 64)), 3);
  EXPECT_EQ(ctas_by_shared_memory(dkdv_shared_bytes(with_slabs(whole, 1), 64)), 2);  // with K / V tiles
  EXPECT_GE(ctas_by_shared_memory(dkdv_shared_bytes(two, 32)), 2);
  EXPECT_GE(ctas_by_shared_memory(dkdv_shared_bytes(one, 32)), 3);
  // Streamed: tiles, statistics, row tables, walk tables and masks, nothing else.
  EXPECT_EQ(dkdv_shared_bytes(two, 64), 2 * two.tile_rows * 64 * 2 + two.tile_rows * 8 + 2 * kBoxTokens * 4 +
                                            4 * whole.halo_rows * 4 +
                                            kWarps * (two.slab_table_rows * 8 +
                                                      walk_mask_bytes(two.walk_rows + kChunk, two.segments)));
  const Problem hdit = image_problem({128, 128}, {13, 13}, 64);
  const Plan hdit_whole = make_plan(hdit, Side::queries_of_keys);
  int most_planes = 0;
  for (const Plan& c : slab_candidates(hdit_whole, Pass::dkdv, 64, 227 * 1024))
    if (c.slabs > 1 && ctas_by_shared_memory(dkdv_shared_bytes(c, 64)) >= 3) most_planes = std::max(most_planes, c.slab_planes);
  EXPECT_EQ(most_planes, 9);
  const Plan hdit7 = make_plan(image_problem({128, 128}, {7, 7}, 64), Side::queries_of_keys);
  EXPECT_EQ(ctas_by_shared_memory(dkdv_shared_bytes(with_slabs(hdit7, 13), 64)), 3);
  EXPECT_EQ(ctas_by_shared_memory(dkdv_shared_bytes(hdit7, 64)), 2);
  // The whole halo keeps its layout (K / V tiles and a walk table of the whole walk).
  const Plan nat = make_plan(image_problem({56, 56}, {7, 7}, 32), Side::queries_of_keys);
  EXPECT_EQ(dkdv_shared_bytes(nat, 32), 43616);
}

// The dispatch rule prefers the halo kernels on the image-model shapes and leaves large windows
// and dense attention to the tile kernels.
TEST(HaloPlan, DispatchRule) {
  struct Shape {
    std::vector<int> extent, window;
    int dim;
    bool halo;
  };
  const Shape shapes[] = {
      {{56, 56}, {7, 7}, 32, true},
      {{28, 28}, {7, 7}, 32, true},
      {{14, 14}, {7, 7}, 32, true},
      {{128, 128}, {7, 7}, 64, true},
      {{128, 128}, {13, 13}, 64, true},
      {{16, 32, 32}, {7, 7, 7}, 64, true},
      {{4096}, {9}, 64, true},
      {{128, 128}, {128, 128}, 64, false},  // dense
      {{256, 256}, {80, 80}, 64, false},    // flux-like large window
      {{4096}, {1024}, 64, false},
  };
  for (const Shape& s : shapes) {
    const Problem p = image_problem(s.extent, s.window, s.dim);
    std::string why;
    EXPECT_EQ(preferred(p, &why), s.halo)
        << "extent " << s.extent[0] << " window " << s.window[0] << ": " << why
        << " (walked " << make_plan(p, Side::keys_of_queries).walked_per_token << ", tiles "
        << tile_keys_per_query(p) << ")";
    if (!s.halo) EXPECT_NE(why.find("keys per query"), std::string::npos) << why;
  }
}

// The launch grid: every slice covered, grid.y within its limit, runs of at most
// kMaxSlicesPerCta slices (longer only where grid.y demands), and the image shapes in whole waves.
TEST(HaloPlan, SliceGrid) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const int64_t x = std::uniform_int_distribution<int64_t>(1, 5000)(rng);
    const int64_t slices = i % 10 == 0 ? std::uniform_int_distribution<int64_t>(1, int64_t(1) << 32)(rng)
                                        : std::uniform_int_distribution<int64_t>(1, 4096)(rng);
    const int64_t resident = std::uniform_int_distribution<int64_t>(1, 1200)(rng);
    const SliceGrid g = slice_grid(x, slices, resident);
    ASSERT_GE(g.slices_per_cta, 1);
    ASSERT_GE(g.rows, 1);
    ASSERT_LE(g.rows, kMaxGridY) << x << " " << slices << " " << resident;
    ASSERT_GE(int64_t(g.rows) * g.slices_per_cta, slices);
    ASSERT_LT(int64_t(g.rows - 1) * g.slices_per_cta, slices) << "no empty row";
    ASSERT_TRUE(g.slices_per_cta <= kMaxSlicesPerCta || g.slices_per_cta == (slices + kMaxGridY - 1) / kMaxGridY)
        << x << " " << slices << " " << resident;
    ASSERT_EQ(g.waves, (x * g.rows + resident - 1) / resident);
  }
  // nat 56x56 b128 h2 forward (49 boxes, 256 slices, 5 CTAs x 132 SMs): one wave of 13 x 49 CTAs.
  const SliceGrid nat56 = slice_grid(49, 256, 660);
  EXPECT_EQ(nat56.slices_per_cta, 20);
  EXPECT_EQ(nat56.rows, 13);
  EXPECT_EQ(nat56.waves, 1);
  // nat 14x14 b128 h8 (4 boxes, 1024 slices): one wave.
  EXPECT_EQ(slice_grid(4, 1024, 660).waves, 1);
  // More boxes than resident CTAs (hdit 128x128 b16 h4, 256 boxes, 1 CTA per SM): whole waves.
  const SliceGrid hdit = slice_grid(256, 64, 132);
  EXPECT_LT(hdit.waves * 132 - 256 * hdit.rows, 132 / 4) << "the last wave is nearly full";
}

// The forward's slice cursor visits the slices of each run with the (batch item, head, KV head)
// that division gives, across batch items and KV-head groups, runs of any length.
TEST(HaloPlan, SliceCursorMatchesDivision) {
  std::mt19937_64 rng(7);
  int wraps_batch = 0, wraps_group = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const int heads_kv = 1 + static_cast<int>(rng() % 6), group = 1 + static_cast<int>(rng() % 4);
    const int heads = heads_kv * group, batch = 1 + static_cast<int>(rng() % 9);
    const int total = batch * heads, per_cta = 1 + static_cast<int>(rng() % 40);
    for (int first = 0; first < total; first += per_cta) {
      int visited = 0;
      for (SliceCursor c(first, per_cta, total, heads, group); c.more(); c.next(heads, group)) {
        const int slice = first + visited++;
        ASSERT_EQ(c.slice, slice);
        ASSERT_EQ(c.batch, slice / heads) << "slice " << slice;
        ASSERT_EQ(c.head, slice % heads) << "slice " << slice;
        ASSERT_EQ(c.kv_head, (slice % heads) / group) << "slice " << slice;
        wraps_batch += visited > 1 && c.head == 0;
        wraps_group += visited > 1 && group > 1 && c.head % group == 0 && c.head > 0;
      }
      ASSERT_EQ(visited, std::min(per_cta, total - first));
    }
  }
  EXPECT_GT(wraps_batch, 0);
  EXPECT_GT(wraps_group, 0);
}

}  // namespace
}  // namespace gna::halo
