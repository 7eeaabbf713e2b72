#include "gna/sim/sweep.hpp"

#include <algorithm>
#include <cstdint>

#include "gna/sim/axis_stats.hpp"

namespace gna::sim {

namespace {

// Row-major index of stride tuples s (1-based) over the windows.
struct StrideGrid {
  int rank = 1;
  int64_t window[kMaxRank] = {1, 1, 1};
  int64_t step[kMaxRank] = {1, 1, 1};  // index distance of stride + 1 on each axis
  int64_t size = 1;

  explicit StrideGrid(const Config& c) : rank(c.rank) {
    for (int a = kMaxRank - 1; a >= 0; --a) {
      window[a] = a < rank ? c.axes[a].window : 1;
      step[a] = size;
      size *= window[a];
    }
  }
  void strides_of(int64_t index, int* s) const {
    for (int a = 0; a < kMaxRank; ++a) s[a] = static_cast<int>((index / step[a]) % window[a]) + 1;
  }
};

Config with_strides(Config c, const int* s) {
  for (int a = 0; a < c.rank; ++a) c.axes[a].stride = s[a];
  return c;
}

int64_t stride_product(const SweepEntry& e, int rank) {
  int64_t p = 1;
  for (int a = 0; a < rank; ++a) p *= e.stride[a];
  return p;
}

}  // namespace

std::vector<SweepEntry> sweep(const Config& c) {
  const int ones[kMaxRank] = {1, 1, 1};
  validate(with_strides(c, ones));
  check_sweep_size(with_strides(c, ones));
  const StrideGrid grid(c);
  std::vector<SweepEntry> entries(static_cast<size_t>(grid.size));

  if (c.tiling == Tiling::multi_dim) {
    // Per axis and stride, then products per tuple.
    std::vector<AxisStats> per_axis[kMaxRank];
    for (int a = 0; a < c.rank; ++a) {
      AxisRule rule = c.axes[a];
      // Every non-causal query attends exactly `window` keys whatever the stride: count them
      // once (the sweep tests compare every entry with a simulation from scratch).
      rule.stride = 1;
      const int64_t non_causal_attended = rule.causal ? 0 : axis_attended(rule);
      for (int s = 1; s <= rule.window; ++s) {
        rule.stride = s;
        AxisStats st = axis_tile_stats(rule, c.q_tile[a], c.kv_tile[a], c.kv_tiling);
        st.attended = rule.causal ? axis_attended(rule) : non_causal_attended;
        per_axis[a].push_back(st);
      }
    }
    const int64_t qv = q_tile_volume(c), kv = kv_tile_volume(c);
    for (int64_t i = 0; i < grid.size; ++i) {
      SweepEntry& e = entries[i];
      grid.strides_of(i, e.stride);
      AxisStats axes[kMaxRank];
      for (int a = 0; a < c.rank; ++a) axes[a] = per_axis[a][e.stride[a] - 1];
      e.result = combine_axes(axes, c.rank, qv, kv);
    }
  } else {
    for (int64_t i = 0; i < grid.size; ++i) {
      SweepEntry& e = entries[i];
      grid.strides_of(i, e.stride);
      e.result = simulate(with_strides(c, e.stride));
    }
  }

  // best[i]: fewest max KV tiles over all strides <= entry i on every axis (i included).
  // Row-major order visits every smaller tuple first.
  std::vector<int64_t> best(entries.size());
  for (int64_t i = 0; i < grid.size; ++i) {
    SweepEntry& e = entries[i];
    int64_t best_smaller = INT64_MAX;
    for (int a = 0; a < c.rank; ++a)
      if (e.stride[a] > 1) best_smaller = std::min(best_smaller, best[i - grid.step[a]]);
    e.kept = e.result.max_kv_tiles < best_smaller;
    best[i] = std::min(best_smaller, e.result.max_kv_tiles);
  }

  const int rank = c.rank;
  std::stable_sort(entries.begin(), entries.end(), [rank](const SweepEntry& x, const SweepEntry& y) {
    return stride_product(x, rank) < stride_product(y, rank);
  });
  return entries;
}

std::vector<SweepEntry> pruned(const std::vector<SweepEntry>& all) {
  std::vector<SweepEntry> out;
  for (const SweepEntry& e : all)
    if (e.kept) out.push_back(e);
  return out;
}

std::vector<SweepEntry> block_sparse_strides(const std::vector<SweepEntry>& all) {
  std::vector<SweepEntry> out;
  for (const SweepEntry& e : all)
    if (e.result.block_sparse) out.push_back(e);
  return out;
}

}  // namespace gna::sim
