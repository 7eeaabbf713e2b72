// Which of a matrix-multiply accumulator thread's columns lie in a window, as the bits of one
// word: the partial pairs' masks of the tiled kernels (host and device). Hopper forward and
// portable forward: a KV tile's keys per Q row; Hopper backward: a Q tile's queries per key row.
//
// A thread of a wgmma m64nN accumulator, or of mma.sync m16n8 accumulators (n-block j), holds
// columns j * 8 + quad * 2 + e (8-column group j, e = 0 or 1, quad = lane % 4); bit 2j + e of a column mask stands for that column. The columns are the
// tokens of a tile, row-major over axes 0, 1, 2 with power-of-two sizes, so a column's coordinate
// on an axis is a bit field of its index. Along the mask's bits the thread's coordinates on an
// axis rise and then repeat with a period of a power of two bits: the bits of a period whose
// coordinate lies below a bound are a prefix of it, whose length takes a few shifts and a min,
// and a window [lo, hi) is the prefix of hi less the prefix of lo, copied into every period by
// one multiply. The rule is the caller's: a mask only answers lo <= coordinate < hi per axis.
#pragma once

#include <cstdint>

#include "gna/core/hd.hpp"

namespace gna {

// The mask bits 0 .. n - 1 (n in [0, 32]).
GNA_HD uint32_t low_bits(int n) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_lc(0xffffffffu, 0u, static_cast<unsigned>(n));  // clamps n to 32
#else
  return n >= 32 ? 0xffffffffu : (1u << n) - 1u;
#endif
}

// One axis of a tile, seen from one thread's columns. Relative to `base`, the thread's
// coordinates on the axis come in runs of `run` consecutive values (1 or 2) every
// 1 << step_log2 values, each standing for 1 << bits_log2 mask bits; this repeats every period.
struct alignas(16) AxisColumns {
  int base;       // the thread's smallest coordinate on the axis
  int limit;      // axis size - base: bounds relative to base clamp to [0, limit]
  int step_log2;
  int step_mask;  // (1 << step_log2) - 1
  int run;
  int bits_log2;
  uint32_t every_period;  // bit 0 of every period

  // How many bits of a period have a coordinate below base + u, for u in [0, limit].
  GNA_HD int bits_below(int u) const {
    return ((u >> step_log2) * run + min_i(u & step_mask, run)) << bits_log2;
  }
  // The thread's columns with a coordinate in [base + lo, base + hi) (empty when hi <= lo).
  GNA_HD uint32_t within(int lo, int hi) const {
    // max(min(., limit), 0): two integer min / max instructions (limit >= 1).
    const uint32_t below_hi = low_bits(bits_below(max_i(min_i(hi, limit), 0)));
    const uint32_t below_lo = low_bits(bits_below(max_i(min_i(lo, limit), 0)));
    return (below_hi & ~below_lo) * every_period;
  }
};

// The axis whose coordinate is bits first_bit .. first_bit + log2(size) - 1 of the column index,
// for the thread of `quad`. Column index bits: 0 is e, 1 and 2 the quad, 3 and up j (mask bits 1
// and up).
GNA_HD AxisColumns axis_columns(int size, int first_bit, int quad) {
  AxisColumns c;
  if (first_bit == 0) {
    // e, then the quad's bits: runs of 2 coordinates (e) every 8 (a size-1 axis: one
    // coordinate, both bits of e).
    c.base = (2 * quad) & (size - 1);
    c.step_log2 = 3;
    c.run = size > 1 ? 2 : 1;
    c.bits_log2 = size > 1 ? 0 : 1;
  } else if (first_bit < 3) {
    // The quad's bits from first_bit, then j's: one coordinate every 1 << (3 - first_bit), both
    // bits of e each.
    c.base = (quad >> (first_bit - 1)) & (size - 1);
    c.step_log2 = 3 - first_bit;
    c.run = 1;
    c.bits_log2 = 1;
  } else {
    // j's bits only: every coordinate, for 1 << (first_bit - 3) groups j of 2 bits each.
    c.base = 0;
    c.step_log2 = 0;
    c.run = 1;
    c.bits_log2 = first_bit - 2;
  }
  c.step_mask = (1 << c.step_log2) - 1;
  c.limit = size - c.base;
  // A period holds each of the thread's coordinates once: every coordinate is below the size.
  const int period = c.bits_below(c.limit);
  c.every_period = 0;
  for (int b = 0; b < 32; b += period) c.every_period |= 1u << b;
  return c;
}

GNA_HD int log2_of_pow2(int v) {
#if defined(__CUDA_ARCH__)
  return __ffs(v) - 1;
#else
  return __builtin_ctz(static_cast<unsigned>(v));
#endif
}

// The axes of a tile of `size` tokens per axis (row-major over axes 0, 1, 2, powers of two).
template <int Axes>
GNA_HD void tile_columns(const int (&size)[Axes], int quad, AxisColumns (&axes)[Axes]) {
  int first_bit = 0;
  for (int a = Axes - 1; a >= 0; --a) {
    axes[a] = axis_columns(size[a], first_bit, quad);
    first_bit += log2_of_pow2(size[a]);
  }
}

}  // namespace gna
