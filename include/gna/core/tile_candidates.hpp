// Candidate tile shapes and per-axis pair statistics, the inputs of every tile choice (host only).
// Kernels score candidates with these; the counts come from the tiling math in tiling.hpp.
#pragma once

#include <vector>

#include "gna/core/tiling.hpp"

namespace gna {

// Every shape over `rank` axes whose sides are powers of two with product `tokens` (a power of
// two), ordered by axis 0's side, then axis 1's (smallest first).
std::vector<TileShape> power_of_two_tile_shapes(int rank, int tokens);

// How a kernel walks the pairs: per Q tile over the box of KV tiles its queries need (forward),
// or per KV tile over the box of Q tiles whose queries attend to it (KV-stationary backward).
enum class PairWalk { per_q_tile, per_kv_tile };

// Pair counts of one axis inside one dilation group of length n (rule with dilation folded
// out): pairs in the visited boxes, fully dense ones among them, the largest box, tile counts.
// A per_q_tile walk visits the KV tiles of kv_tile_run with the given placement, a per_kv_tile
// walk the Q tiles of q_tile_run with it.
struct AxisPairStats {
  double visited = 0;
  double full = 0;
  double max_box = 0;
  int q_tiles = 0;
  int kv_tiles = 0;
};
AxisPairStats axis_pair_stats(const AxisRule& rule, int n, int tile_q, int tile_kv, PairWalk walk,
                              KvPlacement placement = KvPlacement::grid);

// Whether placed tiles can differ from grid tiles on this axis (dilation group of length n).
// They cannot where every query attends every key of the group (non-causal, window n): every
// union window, of keys or of queries, is the whole group, so both placements run from 0 and
// their pair statistics are the same. The chooser scores such an axis once.
bool placement_can_differ(const AxisRule& rule, int n);

}  // namespace gna
