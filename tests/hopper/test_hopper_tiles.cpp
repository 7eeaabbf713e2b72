// The Hopper forward's tile choice, on the host (no GPU needed, label cpu).
#include <gtest/gtest.h>

#include "kernels/hopper/forward_launch.hpp"

namespace gna {
namespace {

// FLUX 4K, window 80x80, stride 16x16 is perfectly block-sparse with the chosen tiles and
// reaches the FLOP-wise bound 65536 / 6400 = 10.24 (docs/rule.md section 8.3).
TEST(HopperTiles, Flux4kStride16IsBlockSparse) {
  Problem p;
  p.rank = 2;
  for (int a = 0; a < 2; ++a) p.axes[a] = AxisRule{256, 80, 1, 16, false};
  const hopper::TileChoice c = hopper::choose_tiles(p, KernelOptions{});
  EXPECT_EQ(c.visited_pairs, c.full_pairs);
  EXPECT_NEAR(c.dense_kv_tiles / c.max_kv_per_q, 10.24, 1e-9);
}

}  // namespace
}  // namespace gna
