#include "gna/sim/simulator.hpp"

#include <cmath>

#include "gna/core/error.hpp"
#include "gna/sim/axis_stats.hpp"
#include "one_dim.hpp"

namespace gna::sim {

Result simulate(const Config& c) {
  validate(c);
  check_simulation_size(c);
  if (c.tiling == Tiling::one_dim) return simulate_one_dim(c);
  AxisStats axes[kMaxRank];
  for (int a = 0; a < c.rank; ++a)
    axes[a] = axis_stats(c.axes[a], c.q_tile[a], c.kv_tile[a], c.kv_tiling);
  return combine_axes(axes, c.rank, q_tile_volume(c), kv_tile_volume(c));
}

void validate(const EndToEnd& e) {
  if (!std::isfinite(e.attention_share) || e.attention_share < 0.0 || e.attention_share > 1.0)
    fail_invalid("attention share must be in [0, 1], got ", e.attention_share);
  if (e.total_steps < 1) fail_invalid("total steps must be >= 1, got ", e.total_steps);
  if (e.dense_steps < 0 || e.dense_steps > e.total_steps)
    fail_invalid("dense steps must be in [0, total steps=", e.total_steps, "], got ",
                 e.dense_steps);
}

double end_to_end_speedup(const EndToEnd& e, double op_speedup) {
  validate(e);
  const double p = e.attention_share;
  const double dense_fraction = static_cast<double>(e.dense_steps) / e.total_steps;
  return 1.0 / ((1.0 - p) + p * (dense_fraction + (1.0 - dense_fraction) / op_speedup));
}

}  // namespace gna::sim
