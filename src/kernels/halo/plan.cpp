#include "kernels/halo/plan.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "gna/core/tile_candidates.hpp"

namespace gna::halo {

namespace {
// Boxes of dilation group 0 (the grid's first dimension, per group).
int64_t boxes_of(const Problem& p, const BoxShape& s) {
  int64_t boxes = 1;
  for (int a = 0; a < p.rank; ++a) boxes *= tiles_along(group_length(p.axes[a], 0), s.cta[a]);
  return boxes;
}
}  // namespace

BoxShape box_shape(const Problem& p) {
  BoxShape s;
  if (p.rank == 1) {
    s.cta[0] = 64;
    s.warp[0] = 16;
  } else if (p.rank == 2) {
    // 8x8 (the smallest halo) unless a 4x16 or 16x4 box of the same 4x4 patches needs fewer boxes.
    s.cta[0] = s.cta[1] = 8;
    s.warp[0] = s.warp[1] = 4;
    for (const int long_axis : {1, 0}) {
      BoxShape t = s;
      t.cta[long_axis] = 16;
      t.cta[1 - long_axis] = 4;
      if (boxes_of(p, t) < boxes_of(p, s)) s = t;
    }
  } else {
    s.cta[0] = s.cta[1] = s.cta[2] = 4;
    s.warp[0] = s.warp[1] = 2;
    s.warp[2] = 4;
  }
  return s;
}

Range window_union(const AxisRule& a, int n, Range tokens, Side side) {
  return side == Side::keys_of_queries ? union_key_window(a, n, tokens)
                                       : union_query_window(a, n, tokens);
}

namespace {

// Largest union over the patches of `patch` tokens that tile each dilation group (boxes and
// warp patches start at multiples of their size); and the union's size summed over the tokens (for the mean).
struct AxisUnion {
  int largest = 0;
  double token_sum = 0;
};
AxisUnion axis_union(const AxisRule& a, int patch, Side side) {
  AxisUnion u;
  for (int g = 0; g < a.dilation; ++g) {
    const int n = group_length(a, g);
    for (int first = 0; first < n; first += patch) {
      const Range tokens{first, std::min(first + patch, n)};
      const int size = window_union(a, n, tokens, side).size();
      u.largest = std::max(u.largest, size);
      u.token_sum += double(size) * tokens.size();
    }
  }
  return u;
}

}  // namespace

Plan make_plan(const Problem& p, Side side) {
  Plan plan;
  plan.shape = box_shape(p);
  plan.halo_rows = 1;
  int walk = 1;
  double walked = 1;
  for (int a = 0; a < p.rank; ++a) {
    const AxisRule& r = p.axes[a];
    plan.boxes[a] = tiles_along(group_length(r, 0), plan.shape.cta[a]);
    plan.halo[a] = axis_union(r, plan.shape.cta[a], side).largest;
    const AxisUnion w = axis_union(r, plan.shape.warp[a], side);
    plan.walk[a] = w.largest;
    plan.halo_rows *= plan.halo[a];
    walk *= plan.walk[a];
    walked *= w.token_sum / r.extent;
  }
  plan.walk_rows = ceil_div(walk, kChunk) * kChunk;
  plan.walked_per_token = std::ceil(walked / kChunk) * kChunk;
  plan.slab_planes = plan.halo[0];
  plan.tile_rows = plan.halo_rows;
  return plan;
}

Plan with_slabs(const Plan& whole, int planes, bool kv_registers) {
  Plan plan = whole;
  plan.slab_planes = std::clamp(planes, 1, whole.halo[0]);
  plan.slabs = ceil_div(whole.halo[0], plan.slab_planes);
  plan.tile_rows = whole.halo_rows / whole.halo[0] * plan.slab_planes;
  // A warp's walk spans walk[0] planes, so it meets at most (walk[0] - 1) / planes + 2 slabs; each
  // walk but the last adds at most one partial chunk.
  plan.segments = std::min(plan.slabs, (whole.walk[0] - 1) / plan.slab_planes + 2);
  int walk = 1;
  for (int a = 0; a < kMaxRank; ++a) walk *= whole.walk[a];
  plan.walk_rows = (ceil_div(walk, kChunk) + plan.segments - 1) * kChunk;
  plan.slab_table_rows = (ceil_div(plan.slab_planes * whole.walk[1] * whole.walk[2], kChunk) + 1) * kChunk;
  plan.kv_registers = kv_registers;
  if (plan.slabs == 1) plan = whole;
  return plan;
}

// Layouts (kernels/halo/*_kernel.cuh; the launchers check that they agree): 16-bit tiles of d
// columns, fp32 row statistics, per-warp walk tables (a 32-bit coordinate word and a 32-bit tile
// offset per entry, a mask byte per lane and chunk in words of four chunks) and int32 row tables.
namespace {
// Per entry: coordinates (4 bytes), tile offset (4); the masks.
int walk_tables(const Plan& plan) {
  return kWarps * (plan.walk_rows * 8 + walk_mask_bytes(plan.walk_rows, plan.segments));
}
}  // namespace

// Halo tiles hold tile_rows rows (a slab); the row tables cover the whole halo.
int forward_shared_bytes(const Plan& plan, int d) {
  return kBoxTokens * d * 2 + 2 * plan.tile_rows * d * 2 + walk_tables(plan) + kBoxTokens * 4 +
         2 * plan.halo_rows * 4;
}

int dq_shared_bytes(const Plan& plan, int d) {
  return 3 * kBoxTokens * d * 2 + 2 * plan.tile_rows * d * 2 + 2 * kBoxTokens * 4 + walk_tables(plan) +
         5 * kBoxTokens * 4 + 2 * plan.halo_rows * 4;
}

// Streamed (slabs > 1): K / V tiles unless kv_registers, one walk table per warp for every slab
// (slab_table_rows entries) and masks of walk_rows + kChunk rows.
int dkdv_shared_bytes(const Plan& plan, int d) {
  const int kv_tiles = 2 * kBoxTokens * d * 2;
  const int tiles_and_stats = 2 * plan.tile_rows * d * 2 + 2 * plan.tile_rows * 4;
  const int row_tables = 2 * kBoxTokens * 4 + 4 * plan.halo_rows * 4;
  if (plan.slabs == 1) return kv_tiles + tiles_and_stats + walk_tables(plan) + row_tables;
  return (plan.kv_registers ? 0 : kv_tiles) + tiles_and_stats + row_tables +
         kWarps * (plan.slab_table_rows * 8 + walk_mask_bytes(plan.walk_rows + kChunk, plan.segments));
}

int shared_bytes(const Plan& plan, Pass pass, int d) {
  switch (pass) {
    case Pass::forward: return forward_shared_bytes(plan, d);
    case Pass::dq: return dq_shared_bytes(plan, d);
    default: return dkdv_shared_bytes(plan, d);
  }
}

std::vector<Plan> slab_candidates(const Plan& whole, Pass pass, int d, int limit) {
  std::vector<Plan> plans;
  for (int planes = whole.halo[0]; planes >= 1; --planes)
    for (const bool kv_registers : {false, true}) {
      const Plan plan = with_slabs(whole, planes, kv_registers);
      if (kv_registers && (pass != Pass::dkdv || plan.slabs == 1)) continue;
      if (limit <= 0 || shared_bytes(plan, pass, d) <= limit) plans.push_back(plan);
    }
  return plans;
}

Plan pass_plan(const Plan& whole, Pass pass, int d, int limit) {
  const std::vector<Plan> plans = slab_candidates(whole, pass, d, limit);
  return plans.empty() ? whole : plans.front();
}

namespace {
int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

SliceGrid slice_grid(int64_t x_blocks, int64_t slices, int64_t resident) {
  x_blocks = std::max<int64_t>(x_blocks, 1);
  slices = std::max<int64_t>(slices, 1);
  resident = std::max<int64_t>(resident, 1);
  // The longest run allowed (longer where grid.y would exceed its limit) and the fewest waves
  // that runs of that length need.
  const int64_t longest = std::max<int64_t>(kMaxSlicesPerCta, ceil_div64(slices, kMaxGridY));
  const int64_t first_wave = ceil_div64(x_blocks * ceil_div64(slices, longest), resident);
  SliceGrid best;
  int64_t best_cost = -1;
  // Past a few dozen waves more waves only add setups.
  for (int64_t w = first_wave; w < first_wave + 64; ++w) {
    // The most rows that fill w waves, and the runs that cover the slices in them.
    const int64_t rows = std::clamp<int64_t>(w * resident / x_blocks, 1, slices);
    const int64_t per = std::max(ceil_div64(slices, rows), ceil_div64(slices, kMaxGridY));
    if (per <= longest) {
      SliceGrid g;
      g.slices_per_cta = static_cast<int>(per);
      g.rows = static_cast<int>(ceil_div64(slices, per));
      g.waves = ceil_div64(x_blocks * g.rows, resident);
      const int64_t cost = g.waves * (per + kSetupSlices);
      if (best_cost < 0 || cost < best_cost) {
        best = g;
        best_cost = cost;
      }
    }
    if (rows >= slices) break;
  }
  return best;
}

double tile_keys_per_query(const Problem& p) {
  constexpr int kTile = 128;
  const std::vector<TileShape> shapes = power_of_two_tile_shapes(p.rank, kTile);
  double best = -1;
  for (const TileShape& q : shapes)
    for (const TileShape& kv : shapes) {
      double visited = 1, q_tiles = 1;
      for (int a = 0; a < p.rank; ++a) {
        const AxisRule& r = p.axes[a];
        const int n = group_length(r, 0);
        const AxisPairStats s = axis_pair_stats(r, n, q.size[a], kv.size[a], PairWalk::per_q_tile);
        visited *= s.visited;
        q_tiles *= s.q_tiles;
      }
      const double keys = visited * kTile / q_tiles;
      if (best < 0 || keys < best) best = keys;
    }
  return best;
}

bool preferred(const Problem& p, std::string* why) {
  const double walked = make_plan(p, Side::keys_of_queries).walked_per_token;
  const double tiles = tile_keys_per_query(p);
  if (walked * kPreferRatio <= tiles) return true;
  if (why) {
    std::ostringstream os;
    os << "halo: a warp walks " << walked << " keys per query against " << tiles
       << " for the 128-token tile kernels (runs below 1/" << kPreferRatio << " of it)";
    *why = os.str();
  }
  return false;
}

}  // namespace gna::halo
