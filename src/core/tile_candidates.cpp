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

AxisPairStats axis_pair_stats(const AxisRule& rule, int n, int tile_q, int tile_kv, PairWalk walk) {
  AxisPairStats st;
  st.q_tiles = tiles_along(n, tile_q);
  st.kv_tiles = tiles_along(n, tile_kv);
  const bool per_q = walk == PairWalk::per_q_tile;
  for (int t = 0; t < (per_q ? st.q_tiles : st.kv_tiles); ++t) {
    const Range box = per_q ? kv_tiles_for_q_tile(rule, n, t, tile_q, tile_kv)
                            : q_tiles_for_kv_tile(rule, n, t, tile_q, tile_kv);
    st.visited += box.size();
    st.max_box = std::max<double>(st.max_box, box.size());
    for (int u = box.begin; u < box.end; ++u) {
      const int qt = per_q ? t : u, kt = per_q ? u : t;
      st.full += classify_axis_tiles(rule, n, qt, kt, tile_q, tile_kv) == PairClass::full;
    }
  }
  return st;
}

}  // namespace gna
