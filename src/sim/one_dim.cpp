// Cost: for every Q tile, every row it touches (a run of queries sharing the outer coordinates)
// walks the key rows attended by that row (prod of the outer axes' windows) and marks the KV
// tiles each key row overlaps: O(Q tiles * rows per Q tile * prod(outer windows) * KV tiles per
// key row). Full pairs come from the keys that every query of the Q tile attends, which is a
// product set (the intersection of product sets is the product of the intersections).
#include "one_dim.hpp"

#include <algorithm>
#include <vector>

#include "gna/core/tiling.hpp"
#include "gna/sim/axis_stats.hpp"

namespace gna::sim {

namespace {

struct Layout {
  int rank = 1;
  int extent[kMaxRank] = {1, 1, 1};
  int64_t inner[kMaxRank] = {1, 1, 1};  // row-major stride of each axis
  int64_t tokens = 1;

  explicit Layout(const Config& c) : rank(c.rank) {
    for (int a = rank - 1; a >= 0; --a) {
      extent[a] = c.axes[a].extent;
      inner[a] = tokens;
      tokens *= extent[a];
    }
  }
  int coordinate(int64_t token, int a) const {
    return static_cast<int>((token / inner[a]) % extent[a]);
  }
};

// Keys of one axis: full coordinates group + dilation * j for j in window (group coordinates).
struct AxisKeys {
  int group = 0;
  Range window;
};

AxisKeys keys_of_query(const AxisRule& a, int c) {
  const int g = dilation_group(a, c);
  return AxisKeys{g, key_window(a, group_length(a, g), index_in_group(a, c))};
}

// Keys that every query coordinate in [lo, hi] attends on this axis. Window starts and ends are
// monotone in the query, so inside one group it is [start(hi), end(lo)).
AxisKeys common_keys(const AxisRule& a, int lo, int hi) {
  if (lo != hi && a.dilation > 1) return AxisKeys{0, Range{0, 0}};  // spans several groups
  const int g = dilation_group(a, lo);
  const int n = group_length(a, g);
  return AxisKeys{g, Range{window_start(a, n, index_in_group(a, hi)),
                           key_window(a, n, index_in_group(a, lo)).end}};
}

AxisKeys intersect(const AxisKeys& x, const AxisKeys& y) {
  if (x.window.empty() || y.window.empty() || x.group != y.group)
    return AxisKeys{0, Range{0, 0}};
  return AxisKeys{x.group, Range{max_i(x.window.begin, y.window.begin),
                                 min_i(x.window.end, y.window.end)}};
}

// Coordinates of axis a taken by the tokens [t0, t1): one or two (wrapping) closed intervals.
struct Intervals {
  int count = 0;
  int lo[2] = {0, 0};
  int hi[2] = {0, 0};
};

Intervals axis_values(const Layout& l, int a, int64_t t0, int64_t t1) {
  const int64_t v0 = t0 / l.inner[a], v1 = (t1 - 1) / l.inner[a];
  const int L = l.extent[a];
  Intervals iv;
  if (v1 - v0 + 1 >= L) {
    iv.count = 1;
    iv.lo[0] = 0;
    iv.hi[0] = L - 1;
    return iv;
  }
  const int lo = static_cast<int>(v0 % L), hi = static_cast<int>(v1 % L);
  if (lo <= hi) {
    iv.count = 1;
    iv.lo[0] = lo;
    iv.hi[0] = hi;
  } else {
    iv.count = 2;
    iv.lo[0] = lo;
    iv.hi[0] = L - 1;
    iv.lo[1] = 0;
    iv.hi[1] = hi;
  }
  return iv;
}

bool interval_within(const AxisRule& a, const AxisKeys& k, int lo, int hi) {
  if (k.window.empty()) return false;
  if (lo == hi)
    return dilation_group(a, lo) == k.group && k.window.contains(index_in_group(a, lo));
  return a.dilation == 1 && k.window.begin <= lo && hi < k.window.end;
}

// Marks the KV tiles of a Q tile, each once, remembering which were marked.
class TileMarks {
 public:
  TileMarks(int64_t tiles, int64_t tile) : stamp_(tiles, -1), tile_(tile) {}
  void start(int64_t q_tile) {
    current_ = q_tile;
    touched_.clear();
  }
  // Tokens first, first + step, ..., first + step * (count - 1).
  void mark_progression(int64_t first, int step, int count) {
    if (count <= 0) return;
    if (step <= tile_) {  // consecutive elements are at most one tile apart: no tile skipped
      const int64_t last = first + int64_t{step} * (count - 1);
      for (int64_t t = first / tile_; t <= last / tile_; ++t) mark(t);
    } else {
      for (int i = 0; i < count; ++i) mark((first + int64_t{step} * i) / tile_);
    }
  }
  const std::vector<int64_t>& touched() const { return touched_; }

 private:
  void mark(int64_t t) {
    if (stamp_[t] == current_) return;
    stamp_[t] = current_;
    touched_.push_back(t);
  }
  std::vector<int64_t> stamp_;
  std::vector<int64_t> touched_;
  int64_t tile_;
  int64_t current_ = -1;
};

// Marks every KV tile holding a key attended by a query of the row segment: the queries whose
// outer coordinates are those of token `row_first` and whose last coordinate is in [c0, c1).
void mark_row(const Config& c, const Layout& l, int64_t row_first, int c0, int c1,
              TileMarks& marks) {
  const int last = l.rank - 1;
  const AxisRule& la = c.axes[last];
  AxisKeys outer[kMaxRank];
  for (int a = 0; a < last; ++a) outer[a] = keys_of_query(c.axes[a], l.coordinate(row_first, a));
  const int groups = min_i(c1 - c0, la.dilation);
  for (int i = 0; i < groups; ++i) {
    const int first = c0 + i;  // first query coordinate of its last-axis dilation group
    const int g = dilation_group(la, first);
    const int last_coord = first + ((c1 - 1 - first) / la.dilation) * la.dilation;
    const int n = group_length(la, g);
    const Range u = union_key_window(
        la, n, Range{index_in_group(la, first), index_in_group(la, last_coord) + 1});
    const int64_t row_offset = g + int64_t{la.dilation} * u.begin;
    // Walk the key rows: every combination of attended outer coordinates.
    int j[kMaxRank] = {0, 0, 0};
    for (int a = 0; a < last; ++a) j[a] = outer[a].window.begin;
    while (true) {
      int64_t base = 0;
      for (int a = 0; a < last; ++a)
        base += int64_t{coordinate_of(c.axes[a], outer[a].group, j[a])} * l.inner[a];
      marks.mark_progression(base + row_offset, la.dilation, u.size());
      int a = last - 1;
      for (; a >= 0; --a) {
        if (++j[a] < outer[a].window.end) break;
        j[a] = outer[a].window.begin;
      }
      if (a < 0) break;
    }
  }
}

}  // namespace

Result simulate_one_dim(const Config& c) {
  const Layout l(c);
  const int64_t n = l.tokens;
  const int64_t tq = q_tile_volume(c), tk = kv_tile_volume(c);
  Result r;
  r.tokens = n;
  r.q_tiles = (n + tq - 1) / tq;
  r.kv_tiles = (n + tk - 1) / tk;
  r.dense_kv_tiles = r.kv_tiles;
  r.attended_pairs = 1;
  for (int a = 0; a < c.rank; ++a) r.attended_pairs *= axis_attended(c.axes[a]);

  TileMarks marks(r.kv_tiles, tk);
  const int last = c.rank - 1;
  for (int64_t qt = 0; qt < r.q_tiles; ++qt) {
    const int64_t t0 = qt * tq, t1 = std::min(t0 + tq, n);
    marks.start(qt);
    for (int64_t t = t0; t < t1;) {
      const int c0 = l.coordinate(t, last);
      const int64_t row_end = std::min<int64_t>(t1, t + (l.extent[last] - c0));
      mark_row(c, l, t, c0, c0 + static_cast<int>(row_end - t), marks);
      t = row_end;
    }
    // Keys every query of the tile attends, per axis.
    AxisKeys common[kMaxRank];
    for (int a = 0; a < c.rank; ++a) {
      const Intervals iv = axis_values(l, a, t0, t1);
      common[a] = common_keys(c.axes[a], iv.lo[0], iv.hi[0]);
      if (iv.count == 2) common[a] = intersect(common[a], common_keys(c.axes[a], iv.lo[1], iv.hi[1]));
    }
    int64_t full = 0;
    for (const int64_t kt : marks.touched()) {
      const int64_t k0 = kt * tk, k1 = k0 + tk;
      if (k1 > n) continue;  // padding slots need the mask
      bool inside = true;
      for (int a = 0; a < c.rank && inside; ++a) {
        const Intervals iv = axis_values(l, a, k0, k1);
        for (int i = 0; i < iv.count && inside; ++i)
          inside = interval_within(c.axes[a], common[a], iv.lo[i], iv.hi[i]);
      }
      if (inside) ++full;
    }
    const int64_t visited = static_cast<int64_t>(marks.touched().size());
    r.max_kv_tiles = std::max(r.max_kv_tiles, visited);
    r.visited_pairs += visited;
    r.pairs.full += full;
  }
  r.mean_kv_tiles = static_cast<double>(r.visited_pairs) / static_cast<double>(r.q_tiles);
  r.pairs.empty = r.q_tiles * r.kv_tiles - r.visited_pairs;
  finish_result(r, tq, tk);
  return r;
}

}  // namespace gna::sim
