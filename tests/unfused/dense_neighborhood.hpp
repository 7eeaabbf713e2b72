// Brute-force dense masked versions of the unfused operators for the tests: every (query, key)
// pair of a head is visited and kept when the core's per-axis predicate axis_attends holds on
// every axis. A key's slot is counted independently of the operators' slot arithmetic: the
// number of attended keys before it on each axis (the window's keys in increasing order),
// row-major over axes. Bias entries follow docs/rule.md section 6 literally: K-1 + key/d - query/d.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gna/core/axis_rule.hpp"
#include "gna/neighborhood_params.hpp"

namespace gna::test {

// Dense double-precision heads-first tensor [B, H, tokens, n] (n = D, or slots for weights).
struct Dense {
  int64_t batch = 0, heads = 0, tokens = 0, n = 0;
  std::vector<double> v;
  Dense(int64_t b, int64_t h, int64_t t, int64_t n_) : batch(b), heads(h), tokens(t), n(n_) {
    v.assign(b * h * t * n_, 0.0);
  }
  double& at(int64_t b, int64_t h, int64_t t, int64_t c) { return v[((b * heads + h) * tokens + t) * n + c]; }
  double at(int64_t b, int64_t h, int64_t t, int64_t c) const {
    return v[((b * heads + h) * tokens + t) * n + c];
  }
};

inline void coords_of(const Problem& p, int64_t t, int* x) {
  for (int a = p.rank - 1; a >= 0; --a) {
    x[a] = static_cast<int>(t % p.axes[a].extent);
    t /= p.axes[a].extent;
  }
}

inline int dense_slots(const Problem& p) {
  int s = 1;
  for (int a = 0; a < p.rank; ++a) s *= p.axes[a].window;
  return s;
}

// Slot of key y in query x's window, or -1 when x does not attend y.
inline int dense_slot(const Problem& p, const int* x, const int* y) {
  int flat = 0;
  for (int a = 0; a < p.rank; ++a) {
    const AxisRule& r = p.axes[a];
    if (!axis_attends(r, x[a], y[a])) return -1;
    int before = 0;
    for (int j = 0; j < y[a]; ++j) before += axis_attends(r, x[a], j) ? 1 : 0;
    flat = flat * r.window + before;
  }
  return flat;
}

// Row-major entry of the bias [2K0-1, ..] for (x, y).
inline int dense_rpb_entry(const Problem& p, const int* x, const int* y) {
  int e = 0;
  for (int a = 0; a < p.rank; ++a) {
    const AxisRule& r = p.axes[a];
    e = e * (2 * r.window - 1) + (r.window - 1 + y[a] / r.dilation - x[a] / r.dilation);
  }
  return e;
}

// Calls f(b, h, query token, key token, slot) for every attended pair.
template <typename F>
void for_each_attended(const Problem& p, F f) {
  const int64_t n = p.tokens();
  std::vector<int> slot(n * n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int x[kMaxRank], y[kMaxRank];
      coords_of(p, i, x);
      coords_of(p, j, y);
      slot[i * n + j] = dense_slot(p, x, y);
    }
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
          if (slot[i * n + j] >= 0) f(b, h, i, j, slot[i * n + j]);
}

// Whether slot s of query token i holds a key.
inline std::vector<char> dense_valid_slots(const Problem& p) {
  const int64_t n = p.tokens();
  std::vector<char> valid(n * dense_slots(p), 0);
  for_each_attended(p, [&](int64_t b, int64_t h, int64_t i, int64_t, int s) {
    if (b == 0 && h == 0) valid[i * dense_slots(p) + s] = 1;
  });
  return valid;
}

// PN: a . b (+ bias [H, entries]) in attended slots, `empty` elsewhere.
inline Dense dense_pn(const Problem& p, const Dense& a, const Dense& b, const std::vector<double>* rpb,
                      double empty) {
  Dense out(p.batch, p.heads_q, p.tokens(), dense_slots(p));
  std::fill(out.v.begin(), out.v.end(), empty);
  int64_t entries = 1;
  for (int r = 0; r < p.rank; ++r) entries *= 2 * p.axes[r].window - 1;
  for_each_attended(p, [&](int64_t bb, int64_t h, int64_t i, int64_t j, int s) {
    double dot = 0;
    for (int64_t c = 0; c < a.n; ++c) dot += a.at(bb, h, i, c) * b.at(bb, h, j, c);
    if (rpb) {
      int x[kMaxRank], y[kMaxRank];
      coords_of(p, i, x);
      coords_of(p, j, y);
      dot += (*rpb)[h * entries + dense_rpb_entry(p, x, y)];
    }
    out.at(bb, h, i, s) = dot;
  });
  return out;
}

// NN: out_i = sum_j w[i, slot(i, j)] x_j.
inline Dense dense_nn(const Problem& p, const Dense& w, const Dense& x) {
  Dense out(p.batch, p.heads_q, p.tokens(), x.n);
  for_each_attended(p, [&](int64_t b, int64_t h, int64_t i, int64_t j, int s) {
    for (int64_t c = 0; c < x.n; ++c) out.at(b, h, i, c) += w.at(b, h, i, s) * x.at(b, h, j, c);
  });
  return out;
}

// IN: out_j = sum_i w[i, slot(i, j)] x_i.
inline Dense dense_in(const Problem& p, const Dense& w, const Dense& x) {
  Dense out(p.batch, p.heads_q, p.tokens(), x.n);
  for_each_attended(p, [&](int64_t b, int64_t h, int64_t i, int64_t j, int s) {
    for (int64_t c = 0; c < x.n; ++c) out.at(b, h, j, c) += w.at(b, h, i, s) * x.at(b, h, i, c);
  });
  return out;
}

// Bias gradient [H, entries]: sum of g over the attended pairs of each entry.
inline std::vector<double> dense_rpb_grad(const Problem& p, const Dense& g) {
  int64_t entries = 1;
  for (int r = 0; r < p.rank; ++r) entries *= 2 * p.axes[r].window - 1;
  std::vector<double> out(p.heads_q * entries, 0.0);
  for_each_attended(p, [&](int64_t b, int64_t h, int64_t i, int64_t j, int s) {
    int x[kMaxRank], y[kMaxRank];
    coords_of(p, i, x);
    coords_of(p, j, y);
    out[h * entries + dense_rpb_entry(p, x, y)] += g.at(b, h, i, s);
  });
  return out;
}

inline std::string describe_neighborhood(const Problem& p, bool rpb) {
  std::string s = "rank " + std::to_string(p.rank);
  for (int a = 0; a < p.rank; ++a) {
    const AxisRule& r = p.axes[a];
    s += " | L=" + std::to_string(r.extent) + " K=" + std::to_string(r.window) +
         " d=" + std::to_string(r.dilation) + " c=" + std::to_string(r.causal);
  }
  s += " | B=" + std::to_string(p.batch) + " H=" + std::to_string(p.heads_q) +
       " D=" + std::to_string(p.dim_qk) + (rpb ? " rpb" : "");
  return s;
}

// A random stride-1 rule: rank axes, dilations that may not divide the extent, even and odd
// windows, causal sometimes; at most max_tokens tokens.
inline Problem random_neighborhood_problem(std::mt19937_64& rng, int rank, int max_tokens) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Problem p;
  p.rank = rank;
  const int max_extent = rank == 1 ? 40 : rank == 2 ? 14 : 7;
  int64_t tokens = 1;
  for (int a = 0; a < rank; ++a) {
    AxisRule& r = p.axes[a];
    r.dilation = pick(0, 2) == 0 ? pick(2, 3) : 1;
    r.window = pick(2, std::max(2, std::min(7, max_extent / r.dilation)));
    r.extent = pick(r.window * r.dilation, std::max(r.window * r.dilation, max_extent));
    r.stride = 1;
    r.causal = pick(0, 3) == 0;
    tokens *= r.extent;
  }
  if (tokens > max_tokens) return random_neighborhood_problem(rng, rank, max_tokens);
  p.batch = pick(1, 2);
  p.heads_q = p.heads_kv = pick(1, 3);
  p.dim_qk = p.dim_v = pick(1, 9);
  return p;
}

inline AttentionParams params_of(const Problem& p) {
  AttentionParams a;
  a.rank = p.rank;
  for (int r = 0; r < p.rank; ++r) {
    a.window[r] = p.axes[r].window;
    a.dilation[r] = p.axes[r].dilation;
    a.stride[r] = 1;
    a.causal[r] = p.axes[r].causal;
  }
  return a;
}

}  // namespace gna::test
