#include "kernels/hopper/slab_tiles.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "gna/core/slab.hpp"

namespace gna::hopper {
namespace {

// The largest power of two (at most 128) dividing v (128 for 0).
int power_of_two_dividing(int v) {
  int a = 1;
  while (a < 128 && v % (2 * a) == 0) a *= 2;
  return a;
}

}  // namespace

SlabAlignment slab_alignment(const Problem& p) {
  SlabAlignment al;
  if (!p.slab.active) return al;
  for (int a = 0; a < p.rank; ++a) {
    const AxisRule whole = slab_axis(p, a);
    for (int g = 0; g < whole.dilation; ++g) {
      const SlabGroupRows q = slab_group_rows(whole, g, p.slab.query_offset[a], p.axes[a].extent);
      const SlabGroupRows k = slab_group_rows(whole, g, p.slab.key_offset[a], p.slab.key_extent[a]);
      if (q.count > 0) al.q[a] = std::min(al.q[a], power_of_two_dividing(q.begin));
      if (k.count > 0) al.k[a] = std::min(al.k[a], power_of_two_dividing(k.begin));
    }
  }
  return al;
}

bool slab_tiles_fit(const ScoredTiles& t, const SlabAlignment& align, int rank, SlabWalk walk) {
  const bool placed = t.placement == KvPlacement::placed;
  for (int a = 0; a < rank; ++a) {
    // Tile sizes are powers of two: a size divides the alignment iff it is at most it.
    const bool q_fits = t.q.size[a] <= align.q[a], k_fits = t.kv.size[a] <= align.k[a];
    if (walk == SlabWalk::forward && (!q_fits || (!placed && !k_fits))) return false;
    if (walk == SlabWalk::backward && (!k_fits || (!placed && !q_fits))) return false;
  }
  return true;
}

bool slab_tiles(const Problem& p, SlabWalk walk, const ScoredTiles& chosen,
                const std::function<std::vector<ScoredTiles>(KvPlacements)>& ranked,
                KvPlacements placements, const std::vector<int>& key, ScoredTiles* out,
                std::string* why) {
  const SlabAlignment align = slab_alignment(p);
  if (slab_tiles_fit(chosen, align, p.rank, walk)) {
    *out = chosen;
    return true;
  }
  struct Choice {
    bool found = false;
    ScoredTiles tiles;
    std::string why;
  };
  static std::mutex mu;
  static std::map<std::vector<int>, Choice> cache;
  std::vector<int> k = rule_signature(whole_layout(p));
  k.insert(k.end(), key.begin(), key.end());
  k.push_back(static_cast<int>(walk));
  k.push_back(static_cast<int>(placements));
  for (int a = 0; a < p.rank; ++a) k.insert(k.end(), {align.q[a], align.k[a]});
  Choice c;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(k);
    if (it != cache.end()) {
      c = it->second;
      cached = true;
    }
  }
  if (!cached) {
    std::vector<KvPlacements> tries{placements};
    if (placements == KvPlacements::either) tries.push_back(KvPlacements::placed);
    for (KvPlacements pl : tries) {
      for (const ScoredTiles& t : ranked(pl))
        if (slab_tiles_fit(t, align, p.rank, walk)) {
          c.tiles = t;
          c.found = true;
          break;
        }
      if (c.found) break;
    }
    if (!c.found) {
      std::ostringstream os;
      os << "slab: no " << (walk == SlabWalk::forward ? "forward" : "backward")
         << " tile starts on the slab's first rows (per axis, the largest power of two dividing "
            "the first query row / first key row in every dilation group:";
      for (int a = 0; a < p.rank; ++a)
        os << " axis " << a << " " << align.q[a] << "/" << align.k[a];
      os << "; a TMA box may not start before a tensor)";
      c.why = os.str();
    }
    std::lock_guard<std::mutex> lock(mu);
    cache.emplace(k, c);
  }
  *out = c.tiles;
  if (!c.found && why) *why = c.why;
  return c.found;
}

}  // namespace gna::hopper
