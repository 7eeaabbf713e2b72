#include "gna/sim/config.hpp"

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

}  // namespace gna::sim
