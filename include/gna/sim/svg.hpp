// The simulator's pictures, as plain SVG text.
#pragma once

#include <string>
#include <vector>

#include "gna/sim/config.hpp"
#include "gna/sim/sweep.hpp"

namespace gna::sim {

// The keys attended by one query (q_tile_union false) or by any query of its Q tile (true),
// shaded over the layout, with the KV tiles that the query's Q tile visits outlined (full pairs
// and partial pairs in different colours). 2-D layouts are drawn whole; 3-D layouts as the three
// slices through the query; 1-D layouts wrapped into rows. `query` holds rank coordinates.
std::string query_svg(const Config& c, const int* query, bool q_tile_union);

// FLOP-wise and tile-wise speedup bounds for each sweep entry given (e.g. the pruned ones).
std::string sweep_svg(const Config& c, const std::vector<SweepEntry>& entries);

}  // namespace gna::sim
