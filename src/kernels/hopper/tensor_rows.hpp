// Where the tensors of a Hopper launch sit on its axes. The kernels run the rule at group
// coordinates of the whole layout; the query-side tensors (Q, dO, O, LSE, dQ) hold the rows
// [q_begin, q_end) of each kernel axis and the key-side ones (K, V, dK, dV) [k_begin, k_end):
// row c is tensor row c - q_begin (c - k_begin), TMA zero-fills (clips) what lies outside, and
// rows outside are never stored. Without a slab (gna/core/slab.hpp) both are [0, extent). A
// launch runs only the Q tiles meeting the query rows, from q_first_tile on, and (backward) the
// KV tiles meeting the key rows, from k_first_tile on.
#pragma once

#include "gna/core/slab.hpp"
#include "kernels/hopper/tile_sizes.hpp"

namespace gna::hopper {

struct TensorRows {
  int q_begin[kAxes], q_end[kAxes];
  int k_begin[kAxes], k_end[kAxes];
  int q_first_tile[kAxes];  // on the grid of the Q tile
  int k_first_tile[kAxes];  // on the grid of the KV tile
};

}  // namespace gna::hopper
