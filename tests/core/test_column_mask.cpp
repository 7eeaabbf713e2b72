// The column masks of the tiled kernels' partial pairs (gna/core/column_mask.hpp) against
// the per-column test they replace, on the host (label cpu): every tile shape of 128 and of 64
// tokens, every quad, every axis and every window [lo, hi) from before the tile to past its end.
#include <gtest/gtest.h>

#include "gna/core/column_mask.hpp"

namespace gna {
namespace {

// The coordinate on axis a of column c of a tile of 1 << log2[a] tokens per axis (row-major).
int coordinate(const int (&log2)[3], int c, int a) {
  int shift = 0;
  for (int b = a + 1; b < 3; ++b) shift += log2[b];
  return (c >> shift) & ((1 << log2[a]) - 1);
}

// Every shape of 1 << tokens_log2 tokens over 3 axes.
template <typename F>
void for_each_shape(int tokens_log2, F&& f) {
  for (int l0 = 0; l0 <= tokens_log2; ++l0)
    for (int l1 = 0; l0 + l1 <= tokens_log2; ++l1) {
      const int log2[3] = {l0, l1, tokens_log2 - l0 - l1};
      f(log2);
    }
}

TEST(ColumnMask, EveryShapeQuadAxisAndWindow) {
  int checked = 0;
  for (int tokens_log2 : {7, 6}) {
    const int columns = 1 << tokens_log2;
    const uint32_t all = low_bits(columns / 4);
    for_each_shape(tokens_log2, [&](const int(&log2)[3]) {
      const int size[3] = {1 << log2[0], 1 << log2[1], 1 << log2[2]};
      for (int quad = 0; quad < 4; ++quad) {
        AxisColumns axes[3];
        tile_columns(size, quad, axes);
        for (int a = 0; a < 3; ++a)
          for (int lo = -3; lo <= size[a] + 3; ++lo)
            for (int hi = lo - 2; hi <= size[a] + 3; ++hi) {
              uint32_t want = 0;
              for (int j = 0; j < columns / 8; ++j)
                for (int e = 0; e < 2; ++e) {
                  const int x = coordinate(log2, j * 8 + quad * 2 + e, a);
                  // The kernels' former test: one unsigned compare against the width.
                  const bool in = hi > lo && static_cast<unsigned>(x - lo) <
                                                 static_cast<unsigned>(hi - lo);
                  if (in) want |= 1u << (2 * j + e);
                }
              const uint32_t got = axes[a].within(lo - axes[a].base, hi - axes[a].base) & all;
              ASSERT_EQ(got, want) << "tile " << size[0] << "x" << size[1] << "x" << size[2]
                                   << " quad " << quad << " axis " << a << " window [" << lo
                                   << ", " << hi << ")";
              ++checked;
            }
      }
    });
  }
  EXPECT_GT(checked, 100000);
}

// A whole tile's mask (the AND over axes) keeps exactly the columns inside the box of windows.
TEST(ColumnMask, BoxOfWindows) {
  for_each_shape(7, [&](const int(&log2)[3]) {
    const int size[3] = {1 << log2[0], 1 << log2[1], 1 << log2[2]};
    for (int quad = 0; quad < 4; ++quad) {
      AxisColumns axes[3];
      tile_columns(size, quad, axes);
      for (int k = 0; k < 64; ++k) {
        int lo[3], hi[3];
        for (int a = 0; a < 3; ++a) {  // deterministic spread of windows around the tile
          lo[a] = (k * (a + 3) + 5 * a) % (size[a] + 4) - 2;
          hi[a] = lo[a] + (k * (a + 7)) % (size[a] + 3);
        }
        uint32_t got = ~0u, want = 0;
        for (int a = 0; a < 3; ++a) got &= axes[a].within(lo[a] - axes[a].base, hi[a] - axes[a].base);
        for (int j = 0; j < 16; ++j)
          for (int e = 0; e < 2; ++e) {
            bool in = true;
            for (int a = 0; a < 3; ++a) {
              const int x = coordinate(log2, j * 8 + quad * 2 + e, a);
              in = in && x >= lo[a] && x < hi[a];
            }
            if (in) want |= 1u << (2 * j + e);
          }
        ASSERT_EQ(got, want) << "tile " << size[0] << "x" << size[1] << "x" << size[2] << " quad "
                             << quad << " k " << k;
      }
    }
  });
}

}  // namespace
}  // namespace gna
