// Choices a caller may force on a kernel call; zeros mean "let the backend choose".
#pragma once

#include "gna/core/tiling.hpp"

namespace gna {

// How the Hopper forward maps its work items (Q tile, head, batch) to CTAs; other backends ignore
// it. automatic: the persistent kernel when the items fill the GPU more than once and are short
// (few KV tiles each), else one CTA per item (src/kernels/hopper/forward_launch.cu says why).
// Tests and benchmarks force the others.
struct ForwardSchedule {
  enum Kind { automatic, one_cta_per_item, persistent } kind = automatic;
  int ctas = 0;               // persistent: at most this many CTAs (0: one per SM)
  bool longest_first = true;  // persistent: items in longest-first order per image and head
  bool dynamic = true;        // persistent: a global counter hands items out (else round robin)
};

struct KernelOptions {
  TileShape q_tile = TileShape{{0, 0, 0}};   // all zero: default
  TileShape kv_tile = TileShape{{0, 0, 0}};
  bool autotune = false;       // benchmark candidate tiles once per problem signature
  bool deterministic = false;  // backward: same bits every run
  ForwardSchedule schedule;
  // Where the Hopper and portable forwards' KV tiles start on each axis (docs/rule.md section
  // 7.2): either (the tile chooser scores both and keeps the cheaper), on the grid of the KV
  // tile, or placed at the first key of each Q tile's key windows. Other backends ignore it;
  // tests and benchmarks force the other two.
  KvPlacements kv_placements = KvPlacements::either;
  // Where the Hopper and portable backwards' Q tiles start per KV tile on each axis: either (the
  // tile chooser scores both), on the grid of the Q tile, or placed at the first query of each KV
  // tile's query windows (docs/hopper_backward.md). Deterministic mode runs the grid whatever this
  // says; other backends ignore it.
  KvPlacements q_placements = KvPlacements::either;
};

}  // namespace gna
