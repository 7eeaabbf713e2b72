#include "gna/sim/config.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "gna/core/error.hpp"

namespace gna::sim {

const char* tiling_name(Tiling t) { return t == Tiling::one_dim ? "1d" : "multi"; }

const char* kv_tiling_name(KvTiling t) {
  return t == KvTiling::dynamic_tiles ? "dynamic" : "static";
}

Problem to_problem(const Config& c) {
  Problem p;
  p.rank = c.rank;
  for (int a = 0; a < kMaxRank; ++a) p.axes[a] = c.axes[a];
  return p;
}

namespace {

int64_t volume(const int* shape, int rank) {
  int64_t v = 1;
  for (int a = 0; a < rank; ++a) v *= shape[a];
  return v;
}

}  // namespace

int64_t q_tile_volume(const Config& c) { return volume(c.q_tile, c.rank); }
int64_t kv_tile_volume(const Config& c) { return volume(c.kv_tile, c.rank); }

void validate(const Config& c) {
  gna::validate(to_problem(c));
  for (int a = 0; a < c.rank; ++a) {
    if (c.q_tile[a] < 1) fail_invalid("axis ", a, ": Q tile must be >= 1, got ", c.q_tile[a]);
    if (c.kv_tile[a] < 1) fail_invalid("axis ", a, ": KV tile must be >= 1, got ", c.kv_tile[a]);
  }
  if (c.tiling != Tiling::multi_dim && c.tiling != Tiling::one_dim)
    fail_invalid("tiling must be multi or 1d, got ", static_cast<int>(c.tiling));
  if (c.kv_tiling != KvTiling::static_tiles && c.kv_tiling != KvTiling::dynamic_tiles)
    fail_invalid("KV tiling must be static or dynamic, got ", static_cast<int>(c.kv_tiling));
  if (c.tiling == Tiling::one_dim && c.kv_tiling == KvTiling::dynamic_tiles)
    fail(ErrorKind::unsupported, "dynamic KV tiles need multi-dimensional tiling, got tiling=1d");
  // Pair counts are int64 products of token and tile counts: keep them far from overflow.
  if (to_problem(c).tokens() > (int64_t{1} << 31))
    fail_invalid("tokens must be <= 2^31, got ", to_problem(c).tokens());
  if (q_tile_volume(c) > (int64_t{1} << 31) || kv_tile_volume(c) > (int64_t{1} << 31))
    fail_invalid("tile volumes must be <= 2^31 tokens, got Q ", q_tile_volume(c), " KV ",
                 kv_tile_volume(c));
}

namespace {

double ceil_div_d(double a, double b) { return std::ceil(a / b); }

// Multi-dimensional tiling, one axis: every Q tile of every dilation group visits at most the
// KV tiles under its union window (Q tile + window keys), and the attended keys are counted
// once per query.
double axis_steps(const AxisRule& a, int q_tile, int kv_tile) {
  const double extent = a.extent, d = a.dilation, group = ceil_div_d(extent, d);
  const double q_tiles = ceil_div_d(extent, q_tile) + d;
  const double visits = std::min(ceil_div_d(group, kv_tile) + 1,
                                 ceil_div_d(double(q_tile) + a.window, kv_tile) + 2);
  return extent + q_tiles * visits;
}

// 1-D tiling (see one_dim.cpp): per Q tile, the rows it touches, the last axis' dilation
// groups in each, the key rows of the outer windows, and the KV tiles of each key row.
double one_dim_steps(const Config& c) {
  const int last = c.rank - 1;
  const AxisRule& la = c.axes[last];
  double tokens = 1, outer = 1, attended = 0;
  for (int a = 0; a < c.rank; ++a) {
    tokens *= c.axes[a].extent;
    attended += c.axes[a].extent;
    if (a < last) outer *= c.axes[a].window;
  }
  const double tq = double(q_tile_volume(c)), tk = double(kv_tile_volume(c));
  const double length = la.extent, d = la.dilation;
  const double rows = std::min(tq, ceil_div_d(tq, length) + 1);
  const double groups = std::min(std::min(tq, length), d);
  const double keys = std::min(ceil_div_d(length, d) + 1, ceil_div_d(std::min(tq, length), d) + la.window);
  const double tiles = std::min(keys, keys * d / tk + 2);
  return attended + ceil_div_d(tokens, tk) + ceil_div_d(tokens, tq) * rows * groups * outer * tiles *
                                                 (1 + c.rank);
}

[[noreturn]] void too_large(const char* what, double steps, double limit) {
  fail_invalid(what, " would take about ", std::llround(steps), " steps, more than the ",
               std::llround(limit), " the simulator takes on (larger tiles or smaller windows "
               "shrink it)");
}

}  // namespace

double simulation_steps(const Config& c) {
  if (c.tiling == Tiling::one_dim) return one_dim_steps(c);
  double steps = 0;
  for (int a = 0; a < c.rank; ++a) steps += axis_steps(c.axes[a], c.q_tile[a], c.kv_tile[a]);
  return steps;
}

double sweep_steps(const Config& c) {
  double strides = 1;
  for (int a = 0; a < c.rank; ++a) strides *= c.axes[a].window;
  if (c.tiling == Tiling::one_dim) return strides * one_dim_steps(c);
  double steps = strides * c.rank;
  for (int a = 0; a < c.rank; ++a)
    steps += double(c.axes[a].window) * 2 * axis_steps(c.axes[a], c.q_tile[a], c.kv_tile[a]);
  return steps;
}

void check_simulation_size(const Config& c) {
  const double steps = simulation_steps(c);
  if (steps > kMaxSimulationSteps) too_large("this simulation", steps, kMaxSimulationSteps);
  // 1-D tiling keeps a mark per KV tile of the layout.
  constexpr double kMaxOneDimKvTiles = double(int64_t{1} << 25);
  const double kv_tiles =
      ceil_div_d(double(to_problem(c).tokens()), double(kv_tile_volume(c)));
  if (c.tiling == Tiling::one_dim && kv_tiles > kMaxOneDimKvTiles)
    fail_invalid("1-D tiling: ", std::llround(kv_tiles), " KV tiles of ", kv_tile_volume(c),
                 " tokens, more than ", std::llround(kMaxOneDimKvTiles),
                 " (a larger KV tile shrinks it)");
}

void check_sweep_size(const Config& c) {
  double strides = 1;
  for (int a = 0; a < c.rank; ++a) strides *= c.axes[a].window;
  if (strides > double(kMaxSweepStrides)) {
    std::ostringstream windows;
    for (int a = 0; a < c.rank; ++a) windows << (a ? "x" : "") << c.axes[a].window;
    fail_invalid("sweep: window ", windows.str(), " has ", std::llround(strides),
                 " strides, more than ", kMaxSweepStrides, " (sweep a smaller window)");
  }
  check_simulation_size(c);
  const double steps = sweep_steps(c);
  if (steps > kMaxSimulationSteps) too_large("this sweep", steps, kMaxSimulationSteps);
}

}  // namespace gna::sim
