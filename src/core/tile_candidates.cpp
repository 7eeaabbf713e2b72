#include "gna/core/tile_candidates.hpp"

#include <algorithm>

namespace gna {

std::vector<TileShape> power_of_two_tile_shapes(int rank, int tokens) {
  int total = 0;
  while ((1 << total) < tokens) ++total;
  std::vector<TileShape> out;
  for (int e0 = 0; e0 <= total; ++e0)
    for (int e1 = 0; e1 <= total - e0; ++e1) {
      const int e2 = total - e0 - e1;
      if ((rank < 3 && e2 != 0) || (rank < 2 && e1 != 0)) continue;
      TileShape t;
      t.size[0] = 1 << e0;
      if (rank > 1) t.size[1] = 1 << e1;
      if (rank > 2) t.size[2] = 1 << e2;
      out.push_back(t);
    }
  return out;
}

AxisPairStats axis_pair_stats(const AxisRule& rule, int n, int tile_q, int tile_kv, PairWalk walk,
                              KvPlacement placement) {
  AxisPairStats st;
  st.q_tiles = tiles_along(n, tile_q);
  st.kv_tiles = tiles_along(n, tile_kv);
  if (walk == PairWalk::per_q_tile) {
    for (int qt = 0; qt < st.q_tiles; ++qt) {
      const KvTileRun run = kv_tile_run(rule, n, qt, tile_q, tile_kv, placement);
      st.visited += run.count;
      st.max_box = std::max<double>(st.max_box, run.count);
      for (int m = 0; m < run.count; ++m)
        st.full += classify_q_tile_keys(rule, n, qt, tile_q, run.first + m * tile_kv, tile_kv) ==
                   PairClass::full;
    }
    return st;
  }
  for (int kt = 0; kt < st.kv_tiles; ++kt) {
    const QTileRun run = q_tile_run(rule, n, kt, tile_q, tile_kv, placement);
    st.visited += run.count;
    st.max_box = std::max<double>(st.max_box, run.count);
    st.full += full_q_tiles_of_run(rule, n, kt, tile_q, tile_kv, run).size();
  }
  return st;
}

bool placement_can_differ(const AxisRule& rule, int n) { return rule.causal || rule.window < n; }

}  // namespace gna
