// 1-D tiling: tokens in row-major order, Q and KV tiles are runs of consecutive tokens (what a
// block-sparse 1-D kernel such as FlexAttention visits).
#pragma once

#include "gna/sim/config.hpp"
#include "gna/sim/simulator.hpp"

namespace gna::sim {

// Expects a validated config with Tiling::one_dim.
Result simulate_one_dim(const Config& c);

}  // namespace gna::sim
