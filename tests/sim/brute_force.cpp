#include "brute_force.hpp"

#include <algorithm>
#include <sstream>

namespace gna::sim::testing {

namespace {

// One tile of one axis: its dilation group, its real coordinates (full coordinates, ascending)
// and whether it is clipped by the end of the group.
struct AxisTile {
  int group = 0;
  std::vector<int> coords;
  bool clipped = false;
};

std::vector<int> group_members(const AxisRule& a, int g) {
  std::vector<int> m;
  for (int i = g; i < a.extent; i += a.dilation) m.push_back(i);
  return m;
}

std::vector<AxisTile> axis_tiles(const AxisRule& a, int tile) {
  std::vector<AxisTile> tiles;
  for (int g = 0; g < a.dilation; ++g) {
    const std::vector<int> m = group_members(a, g);
    for (size_t b = 0; b < m.size(); b += tile) {
      AxisTile t;
      t.group = g;
      for (size_t i = b; i < std::min(m.size(), b + tile); ++i) t.coords.push_back(m[i]);
      t.clipped = static_cast<int>(t.coords.size()) < tile;
      tiles.push_back(t);
    }
  }
  return tiles;
}

// Cartesian product of per-axis lists, as index tuples.
std::vector<std::vector<int>> product(const std::vector<int>& sizes) {
  std::vector<std::vector<int>> out(1);
  for (int s : sizes) {
    std::vector<std::vector<int>> next;
    for (const auto& prefix : out)
      for (int i = 0; i < s; ++i) {
        auto t = prefix;
        t.push_back(i);
        next.push_back(t);
      }
    out = next;
  }
  return out;
}

bool attends(const Config& c, const std::vector<int>& q, const std::vector<int>& k) {
  for (int a = 0; a < c.rank; ++a)
    if (!axis_attends(c.axes[a], q[a], k[a])) return false;
  return true;
}

// Coordinate tuples of a product of per-axis coordinate lists.
std::vector<std::vector<int>> points(const std::vector<std::vector<int>>& per_axis) {
  std::vector<int> sizes;
  for (const auto& v : per_axis) sizes.push_back(static_cast<int>(v.size()));
  std::vector<std::vector<int>> out;
  for (const auto& idx : product(sizes)) {
    std::vector<int> p;
    for (size_t a = 0; a < idx.size(); ++a) p.push_back(per_axis[a][idx[a]]);
    out.push_back(p);
  }
  return out;
}

int64_t count_attended(const Config& c, const std::vector<std::vector<int>>& qs,
                       const std::vector<std::vector<int>>& ks) {
  int64_t n = 0;
  for (const auto& q : qs)
    for (const auto& k : ks) n += attends(c, q, k);
  return n;
}

void add_visit(BruteCounts& b, int64_t visited) {
  b.visited += visited;
  b.max_kv_tiles = std::max(b.max_kv_tiles, visited);
}

BruteCounts brute_multi_dim(const Config& c) {
  BruteCounts b;
  std::vector<std::vector<AxisTile>> qa, ka;
  std::vector<int> qn, kn;
  b.dense_kv_tiles = 1;
  for (int a = 0; a < c.rank; ++a) {
    qa.push_back(axis_tiles(c.axes[a], c.q_tile[a]));
    ka.push_back(axis_tiles(c.axes[a], c.kv_tile[a]));
    qn.push_back(static_cast<int>(qa.back().size()));
    kn.push_back(static_cast<int>(ka.back().size()));
    b.dense_kv_tiles *= (c.axes[a].extent + c.kv_tile[a] - 1) / c.kv_tile[a];
  }
  const auto q_tiles = product(qn);
  const auto kv_tiles = product(kn);
  b.q_tiles = static_cast<int64_t>(q_tiles.size());
  b.kv_tiles = static_cast<int64_t>(kv_tiles.size());
  int64_t universe = 0;
  for (const auto& qi : q_tiles) {
    std::vector<std::vector<int>> q_coords;
    for (int a = 0; a < c.rank; ++a) q_coords.push_back(qa[a][qi[a]].coords);
    const auto qs = points(q_coords);
    int64_t q_visited = 0;
    if (c.kv_tiling == KvTiling::static_tiles) {
      for (const auto& ki : kv_tiles) {
        bool same_group = true, clipped = false;
        std::vector<std::vector<int>> k_coords;
        for (int a = 0; a < c.rank; ++a) {
          same_group = same_group && qa[a][qi[a]].group == ka[a][ki[a]].group;
          clipped = clipped || ka[a][ki[a]].clipped;
          k_coords.push_back(ka[a][ki[a]].coords);
        }
        if (!same_group) continue;
        ++universe;
        const auto ks = points(k_coords);
        const int64_t n = count_attended(c, qs, ks);
        if (n == 0) continue;
        ++q_visited;
        const bool full = !clipped && n == static_cast<int64_t>(qs.size() * ks.size());
        (full ? b.full : b.partial) += 1;
      }
    } else {
      // Dynamic tiles start at the first key attended on each axis (group coordinates).
      for (const auto& ki : kv_tiles) {
        bool same_group = true;
        for (int a = 0; a < c.rank; ++a)
          same_group = same_group && qa[a][qi[a]].group == ka[a][ki[a]].group;
        universe += same_group;
      }
      std::vector<int> lo(c.rank, 1 << 30), hi(c.rank, -1);
      std::vector<std::vector<int>> all_keys;
      for (int a = 0; a < c.rank; ++a) {
        std::vector<int> all(c.axes[a].extent);
        for (int i = 0; i < c.axes[a].extent; ++i) all[i] = i;
        all_keys.push_back(all);
      }
      for (const auto& q : qs)
        for (const auto& k : points(all_keys))
          if (attends(c, q, k))
            for (int a = 0; a < c.rank; ++a) {
              lo[a] = std::min(lo[a], k[a] / c.axes[a].dilation);
              hi[a] = std::max(hi[a], k[a] / c.axes[a].dilation);
            }
      std::vector<int> per_axis_tiles;
      for (int a = 0; a < c.rank; ++a)
        per_axis_tiles.push_back((hi[a] - lo[a] + 1 + c.kv_tile[a] - 1) / c.kv_tile[a]);
      for (const auto& mi : product(per_axis_tiles)) {
        ++q_visited;
        bool clipped = false;
        std::vector<std::vector<int>> k_coords;
        for (int a = 0; a < c.rank; ++a) {
          const AxisRule& ax = c.axes[a];
          const int g = qa[a][qi[a]].group;
          std::vector<int> coords;
          for (int s = 0; s < c.kv_tile[a]; ++s) {
            const int coord = g + ax.dilation * (lo[a] + mi[a] * c.kv_tile[a] + s);
            if (coord < ax.extent) coords.push_back(coord); else clipped = true;
          }
          k_coords.push_back(coords);
        }
        const auto ks = points(k_coords);
        const int64_t n = count_attended(c, qs, ks);
        const bool full = !clipped && n == static_cast<int64_t>(qs.size() * ks.size());
        (full ? b.full : b.partial) += 1;
      }
    }
    add_visit(b, q_visited);
  }
  b.empty = universe - b.visited;
  return b;
}

BruteCounts brute_one_dim(const Config& c) {
  BruteCounts b;
  std::vector<std::vector<int>> tokens;  // row-major order
  {
    std::vector<int> sizes;
    for (int a = 0; a < c.rank; ++a) sizes.push_back(c.axes[a].extent);
    tokens = product(sizes);
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t tq = q_tile_volume(c), tk = kv_tile_volume(c);
  b.q_tiles = (n + tq - 1) / tq;
  b.kv_tiles = (n + tk - 1) / tk;
  b.dense_kv_tiles = b.kv_tiles;
  for (int64_t qt = 0; qt < b.q_tiles; ++qt) {
    int64_t q_visited = 0;
    for (int64_t kt = 0; kt < b.kv_tiles; ++kt) {
      int64_t attended = 0, pairs = 0;
      for (int64_t i = qt * tq; i < std::min(n, (qt + 1) * tq); ++i)
        for (int64_t j = kt * tk; j < std::min(n, (kt + 1) * tk); ++j) {
          attended += attends(c, tokens[i], tokens[j]);
          ++pairs;
        }
      if (attended == 0) {
        ++b.empty;
        continue;
      }
      ++q_visited;
      const bool full = (kt + 1) * tk <= n && attended == pairs;
      (full ? b.full : b.partial) += 1;
    }
    add_visit(b, q_visited);
  }
  return b;
}

}  // namespace

BruteCounts brute_force(const Config& c) {
  BruteCounts b = c.tiling == Tiling::one_dim ? brute_one_dim(c) : brute_multi_dim(c);
  std::vector<int> sizes;
  for (int a = 0; a < c.rank; ++a) sizes.push_back(c.axes[a].extent);
  const auto all = product(sizes);
  for (const auto& q : all)
    for (const auto& k : all) b.attended += attends(c, q, k);
  return b;
}

Config random_config(std::mt19937& rng, int max_tokens, Tiling tiling, KvTiling kv_tiling) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Config c;
  c.rank = uniform(1, 3);
  c.tiling = tiling;
  c.kv_tiling = kv_tiling;
  int budget = max_tokens;
  for (int a = 0; a < c.rank; ++a) {
    // Leave at least 2 tokens for each remaining axis.
    int limit = budget;
    for (int r = a + 1; r < c.rank; ++r) limit /= 2;
    AxisRule& ax = c.axes[a];
    ax.extent = uniform(2, std::max(2, std::min(limit, 64)));
    budget = std::max(2, budget / ax.extent);
    ax.dilation = uniform(0, 2) == 0 ? uniform(1, ax.extent / 2) : 1;
    ax.window = uniform(2, ax.extent / ax.dilation);
    ax.stride = uniform(0, 2) == 0 ? ax.window : uniform(1, ax.window);
    ax.causal = uniform(0, 3) == 0;
    c.q_tile[a] = uniform(1, 6);
    c.kv_tile[a] = uniform(1, 6);
  }
  // Long axes first is only the generator's habit: shuffle the axes.
  for (int a = c.rank - 1; a > 0; --a) {
    const int b = uniform(0, a);
    std::swap(c.axes[a], c.axes[b]);
    std::swap(c.q_tile[a], c.q_tile[b]);
    std::swap(c.kv_tile[a], c.kv_tile[b]);
  }
  if (tiling == Tiling::one_dim) {
    for (int a = 0; a < kMaxRank; ++a) c.q_tile[a] = c.kv_tile[a] = 1;
    c.q_tile[0] = uniform(1, 40);
    c.kv_tile[0] = uniform(1, 40);
  }
  return c;
}

std::string describe(const Config& c) {
  std::ostringstream os;
  os << "rank " << c.rank << " tiling " << tiling_name(c.tiling) << " kv "
     << kv_tiling_name(c.kv_tiling);
  for (int a = 0; a < c.rank; ++a) {
    const AxisRule& x = c.axes[a];
    os << " | axis " << a << ": L " << x.extent << " K " << x.window << " d " << x.dilation
       << " s " << x.stride << " c " << x.causal << " Tq " << c.q_tile[a] << " Tkv "
       << c.kv_tile[a];
  }
  return os.str();
}

}  // namespace gna::sim::testing
