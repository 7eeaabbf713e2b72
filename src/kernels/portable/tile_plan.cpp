#include "kernels/portable/tile_plan.hpp"

#include <map>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include "gna/core/tile_candidates.hpp"

namespace gna::portable {
namespace {

constexpr double kPartialWeight = 0.25;  // extra cost of a masked pair relative to a dense one
// Throughput of the forward with 128-row Q tiles (two m-blocks per warp) relative to 64-row
// tiles on dense pairs.
constexpr double kWideForwardSpeedup = 1.5;

// Pairs of one axis in dilation group 0 (the visited boxes hold no empty pair).
AxisPairStats score_axis(const AxisRule& a, int tq, int tkv) {
  return axis_pair_stats(a, group_length(a, 0), tq, tkv, PairWalk::per_q_tile);
}

}  // namespace

TilePlan score_tiles(const Problem& p, const TileShape& q, const TileShape& kv) {
  TilePlan plan;
  plan.q = q;
  plan.kv = kv;
  double visited = 1, full = 1;
  for (int a = 0; a < p.rank; ++a) {
    const AxisPairStats s = score_axis(p.axes[a], q.size[a], kv.size[a]);
    visited *= s.visited;
    full *= s.full;
  }
  plan.visited_pairs = visited;
  plan.partial_pairs = visited - full;
  plan.cost = visited + kPartialWeight * (visited - full);
  return plan;
}

namespace {

TilePlan best_tiles(const Problem& p, int rows_q, int rows_kv) {
  const std::vector<TileShape> qs = power_of_two_tile_shapes(p.rank, rows_q);
  const std::vector<TileShape> kvs = power_of_two_tile_shapes(p.rank, rows_kv);
  // Per-axis scores are shared by many candidates.
  std::map<std::pair<int, int>, AxisPairStats> memo[kMaxRank];
  auto axis_score = [&](int a, int tq, int tkv) {
    auto it = memo[a].find({tq, tkv});
    if (it != memo[a].end()) return it->second;
    const AxisPairStats s = score_axis(p.axes[a], tq, tkv);
    memo[a][{tq, tkv}] = s;
    return s;
  };
  TilePlan best;
  double best_cost = -1;
  for (const TileShape& q : qs) {
    for (const TileShape& kv : kvs) {
      double visited = 1, full = 1;
      for (int a = 0; a < p.rank; ++a) {
        const AxisPairStats s = axis_score(a, q.size[a], kv.size[a]);
        visited *= s.visited;
        full *= s.full;
      }
      const double cost = visited + kPartialWeight * (visited - full);
      if (best_cost < 0 || cost < best_cost) {
        best_cost = cost;
        best.q = q;
        best.kv = kv;
        best.visited_pairs = visited;
        best.partial_pairs = visited - full;
        best.cost = cost;
      }
    }
  }
  return best;
}

}  // namespace

// Dispatch asks for every call and scoring walks every axis (14 ms for a 1-D problem of 70000
// tokens), so the choice is kept per rule and row counts.
TilePlan choose_tiles(const Problem& p, int rows_q, int rows_kv) {
  std::vector<int> key = rule_signature(p);
  key.insert(key.end(), {rows_q, rows_kv});
  static std::mutex mu;
  static std::map<std::vector<int>, TilePlan> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  const TilePlan best = best_tiles(p, rows_q, rows_kv);
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(std::move(key), best);
  return best;
}

TilePlan choose_forward_tiles(const Problem& p) {
  const TilePlan narrow = choose_tiles(p, 64, 64);
  const TilePlan wide = choose_tiles(p, 128, 64);
  return wide.cost * 2 / kWideForwardSpeedup < narrow.cost ? wide : narrow;
}

bool valid_tile(const TileShape& t, int rank, int rows, bool exact, const char* what,
                std::string* why) {
  long volume = 1;
  for (int a = 0; a < rank; ++a) {
    if (t.size[a] < 1 || t.size[a] > 1023) {
      if (why) {
        std::ostringstream os;
        os << what << " tile axis " << a << ": size " << t.size[a] << " not supported (1..1023)";
        *why = os.str();
      }
      return false;
    }
    volume *= t.size[a];
  }
  if (volume > rows || (exact && volume != rows)) {
    if (why) {
      std::ostringstream os;
      os << what << " tile volume " << volume << " not supported (" << (exact ? "exactly " : "at most ")
         << rows << " tokens)";
      *why = os.str();
    }
    return false;
  }
  return true;
}

}  // namespace gna::portable
