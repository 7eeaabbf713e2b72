#include "gna/core/tile_choice.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <utility>

#include "gna/core/error.hpp"

namespace gna {
namespace {

// Per-axis statistics of one (Q side, KV side, placement): many candidates share them.
using AxisMemo = std::map<std::tuple<int, int, KvPlacement>, AxisPairStats>;

ScoredTiles score_placed(const Problem& p, const TileKernel& k, const TileShape& q,
                         const TileShape& kv, KvPlacement placement, AxisMemo* memo) {
  ScoredTiles c;
  c.q = q;
  c.kv = kv;
  c.placement = placement;
  double visited = 1, full = 1, max_box = 1, q_tiles = 1, kv_tiles = 1;
  for (int a = 0; a < p.rank; ++a) {
    const AxisRule& rule = p.axes[a];
    const int n = group_length(rule, 0);
    // Where placed tiles equal the grid ones the axis shares the grid's statistics.
    const KvPlacement axis_placement =
        placement_can_differ(rule, n) ? placement : KvPlacement::grid;
    const std::tuple<int, int, KvPlacement> key{q.size[a], kv.size[a], axis_placement};
    auto it = memo[a].find(key);
    if (it == memo[a].end())
      it = memo[a]
               .emplace(key, axis_pair_stats(rule, n, q.size[a], kv.size[a], k.walk,
                                             axis_placement))
               .first;
    const AxisPairStats& st = it->second;
    visited *= st.visited;
    full *= st.full;
    max_box *= st.max_box;
    q_tiles *= st.q_tiles;
    kv_tiles *= st.kv_tiles;
  }
  c.visited_pairs = visited;
  c.full_pairs = full;
  c.max_box = max_box;
  c.q_tiles = q_tiles;
  c.kv_tiles = kv_tiles;
  c.cost = tile_cost(visited, full, k.weights);
  return c;
}

// The candidate with the kernel's placements, scored by score_as(placement): the cheaper of both
// for `either`, the grid on ties.
template <typename ScoreAs>
ScoredTiles with_placements(const TileKernel& k, ScoreAs score_as) {
  if (k.kv_placements == KvPlacements::grid) return score_as(KvPlacement::grid);
  const ScoredTiles placed = score_as(KvPlacement::placed);
  if (k.kv_placements == KvPlacements::placed) return placed;
  const ScoredTiles grid = score_as(KvPlacement::grid);
  return placed.cost < grid.cost ? placed : grid;
}

ScoredTiles score(const Problem& p, const TileKernel& k, const TileShape& q, const TileShape& kv,
                  AxisMemo* memo) {
  return with_placements(
      k, [&](KvPlacement placement) { return score_placed(p, k, q, kv, placement, memo); });
}

// The candidate scored over weighted problems with one placement: weighted means of the pair
// counts and the cost, the largest box. memo holds kMaxRank entries per problem.
ScoredTiles score_groups_placed(const std::vector<WeightedProblem>& ps, const TileKernel& k,
                                const TileShape& q, const TileShape& kv, KvPlacement placement,
                                AxisMemo* memo) {
  // Tile counts: the first problem's (the problems share the extents).
  ScoredTiles mean = score_placed(ps[0].problem, k, q, kv, placement, memo);
  if (ps.size() == 1 && ps[0].weight == 1) return mean;
  double weights = ps[0].weight;
  mean.visited_pairs *= weights;
  mean.full_pairs *= weights;
  mean.cost *= weights;
  for (size_t i = 1; i < ps.size(); ++i) {
    const ScoredTiles s = score_placed(ps[i].problem, k, q, kv, placement, memo + i * kMaxRank);
    const double w = ps[i].weight;
    mean.visited_pairs += w * s.visited_pairs;
    mean.full_pairs += w * s.full_pairs;
    mean.cost += w * s.cost;
    mean.max_box = std::max(mean.max_box, s.max_box);
    weights += w;
  }
  mean.visited_pairs /= weights;
  mean.full_pairs /= weights;
  mean.cost /= weights;
  return mean;
}

ScoredTiles score_groups(const std::vector<WeightedProblem>& ps, const TileKernel& k,
                         const TileShape& q, const TileShape& kv, AxisMemo* memo) {
  return with_placements(k, [&](KvPlacement placement) {
    return score_groups_placed(ps, k, q, kv, placement, memo);
  });
}

// The forced shape with the axes past the rank at 1, like every candidate's.
TileShape on_rank(const TileShape& t, int rank) {
  TileShape s;
  for (int a = 0; a < rank; ++a) s.size[a] = t.size[a];
  return s;
}

void check_forced(const TileShape& t, int rank, const TileLimit& limit, const char* option,
                  const char* kernel) {
  if (!tile_forced(t, rank)) return;
  bool ok = true;
  int64_t volume = 1;
  for (int a = 0; a < rank; ++a) {
    ok = ok && t.size[a] >= 1;
    volume *= t.size[a];
  }
  ok = ok && (limit.exact ? volume == limit.tokens : volume <= limit.tokens);
  if (ok) return;
  std::ostringstream value;
  for (int a = 0; a < rank; ++a) value << (a ? "x" : "") << t.size[a];
  fail_invalid("options: ", option, " ", value.str(), " (", volume,
               volume == 1 ? " token" : " tokens", ") is not a tile of the ", kernel,
               " (every side >= 1, ", limit.exact ? "exactly " : "at most ", limit.tokens,
               " tokens; all zeros: the kernel chooses)");
}

int64_t bits_of(double x) {
  int64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

}  // namespace

double tile_cost(double visited_pairs, double full_pairs, const TileCostWeights& w) {
  return (visited_pairs + w.partial * (visited_pairs - full_pairs)) * w.rows / w.speedup;
}

bool tile_forced(const TileShape& t, int rank) {
  for (int a = 0; a < rank; ++a)
    if (t.size[a] != 0) return true;
  return false;
}

void check_forced_tiles(const TileKernel& k, int rank, const TileShape& q, const TileShape& kv) {
  check_forced(q, rank, k.forced_q, "q_tile", k.name);
  check_forced(kv, rank, k.forced_kv, "kv_tile", k.name);
}

ScoredTiles score_tile_choice(const Problem& p, const TileKernel& k, const TileShape& q,
                              const TileShape& kv) {
  AxisMemo memo[kMaxRank];
  return score(p, k, on_rank(q, p.rank), on_rank(kv, p.rank), memo);
}

namespace {

// One side's candidates: the forced shape, or every power-of-two shape of `rows` tokens.
std::vector<TileShape> candidate_shapes(const TileShape& forced, int rank, int rows) {
  return tile_forced(forced, rank) ? std::vector<TileShape>{on_rank(forced, rank)}
                                   : power_of_two_tile_shapes(rank, rows);
}

// What a choice depends on besides the rules: the kernel's description and the forced tiles.
void append_kernel_key(std::vector<int64_t>& key, const TileKernel& k, int rank,
                       const TileShape& forced_q, const TileShape& forced_kv) {
  key.insert(key.end(),
             {k.q_rows, k.kv_rows, static_cast<int64_t>(k.walk), bits_of(k.weights.partial),
              bits_of(k.weights.rows), bits_of(k.weights.speedup),
              static_cast<int64_t>(k.kv_placements)});
  const bool fq = tile_forced(forced_q, rank), fkv = tile_forced(forced_kv, rank);
  for (int a = 0; a < rank; ++a)
    key.insert(key.end(), {fq ? forced_q.size[a] : 0, fkv ? forced_kv.size[a] : 0});
}

// Choices computed once per key (dispatch asks for every call).
struct ChoiceCache {
  std::mutex mu;
  std::map<std::vector<int64_t>, ScoredTiles> best;

  template <typename Rank>
  ScoredTiles get(std::vector<int64_t> key, Rank rank_all) {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = best.find(key);
      if (it != best.end()) return it->second;
    }
    const ScoredTiles chosen = rank_all().front();
    std::lock_guard<std::mutex> lock(mu);
    best.emplace(std::move(key), chosen);
    return chosen;
  }
};

void sort_by_cost(std::vector<ScoredTiles>& ranked) {
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const ScoredTiles& a, const ScoredTiles& b) { return a.cost < b.cost; });
}

}  // namespace

std::vector<ScoredTiles> ranked_tile_choices(const Problem& p, const TileKernel& k,
                                             const TileShape& forced_q,
                                             const TileShape& forced_kv) {
  check_forced_tiles(k, p.rank, forced_q, forced_kv);
  const std::vector<TileShape> qs = candidate_shapes(forced_q, p.rank, k.q_rows);
  const std::vector<TileShape> kvs = candidate_shapes(forced_kv, p.rank, k.kv_rows);
  AxisMemo memo[kMaxRank];
  std::vector<ScoredTiles> ranked;
  ranked.reserve(qs.size() * kvs.size());
  for (const TileShape& q : qs)
    for (const TileShape& kv : kvs) ranked.push_back(score(p, k, q, kv, memo));
  sort_by_cost(ranked);
  return ranked;
}

ScoredTiles tile_choice(const Problem& p, const TileKernel& k, const TileShape& forced_q,
                        const TileShape& forced_kv) {
  check_forced_tiles(k, p.rank, forced_q, forced_kv);
  std::vector<int64_t> key;
  for (int v : rule_signature(p)) key.push_back(v);
  append_kernel_key(key, k, p.rank, forced_q, forced_kv);
  static ChoiceCache cache;
  return cache.get(std::move(key), [&] { return ranked_tile_choices(p, k, forced_q, forced_kv); });
}

std::vector<WeightedProblem> head_rule_groups(const Problem& p) {
  if (p.head_rules.groups == 0) return {WeightedProblem{p, 1}};
  std::vector<int> heads(p.head_rules.groups, 0);
  for (int h = 0; h < p.heads_q; ++h) ++heads[p.head_rules.group_of_head[h]];
  std::vector<WeightedProblem> out;
  for (int g = 0; g < p.head_rules.groups; ++g)
    if (heads[g] > 0) out.push_back(WeightedProblem{problem_of_group(p, g), double(heads[g])});
  return out;
}

std::vector<ScoredTiles> ranked_tile_choices_for_groups(const std::vector<WeightedProblem>& ps,
                                                        const TileKernel& k,
                                                        const TileShape& forced_q,
                                                        const TileShape& forced_kv) {
  if (ps.empty()) fail_invalid("tile choice: no problems to score");
  const int rank = ps[0].problem.rank;
  for (const WeightedProblem& w : ps) {
    if (w.problem.rank != rank)
      fail_invalid("tile choice: problems must share the rank (", rank, "), got ", w.problem.rank);
    if (!(w.weight > 0)) fail_invalid("tile choice: problem weights must be > 0, got ", w.weight);
  }
  check_forced_tiles(k, rank, forced_q, forced_kv);
  const std::vector<TileShape> qs = candidate_shapes(forced_q, rank, k.q_rows);
  const std::vector<TileShape> kvs = candidate_shapes(forced_kv, rank, k.kv_rows);
  std::vector<AxisMemo> memo(ps.size() * kMaxRank);
  std::vector<ScoredTiles> ranked;
  ranked.reserve(qs.size() * kvs.size());
  for (const TileShape& q : qs)
    for (const TileShape& kv : kvs) ranked.push_back(score_groups(ps, k, q, kv, memo.data()));
  sort_by_cost(ranked);
  return ranked;
}

ScoredTiles tile_choice_for_groups(const std::vector<WeightedProblem>& ps, const TileKernel& k,
                                   const TileShape& forced_q, const TileShape& forced_kv) {
  if (ps.size() == 1 && ps[0].weight == 1) return tile_choice(ps[0].problem, k, forced_q, forced_kv);
  if (ps.empty()) fail_invalid("tile choice: no problems to score");
  const int rank = ps[0].problem.rank;
  check_forced_tiles(k, rank, forced_q, forced_kv);
  std::vector<int64_t> key{static_cast<int64_t>(ps.size())};
  for (const WeightedProblem& w : ps) {
    const std::vector<int> sig = rule_signature(w.problem);
    key.push_back(static_cast<int64_t>(sig.size()));
    key.insert(key.end(), sig.begin(), sig.end());
    key.push_back(bits_of(w.weight));
  }
  append_kernel_key(key, k, rank, forced_q, forced_kv);
  static ChoiceCache cache;
  return cache.get(std::move(key),
                   [&] { return ranked_tile_choices_for_groups(ps, k, forced_q, forced_kv); });
}

}  // namespace gna
