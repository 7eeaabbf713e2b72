// The unfused operators on host tensors (gna::na_qk / na_av and their backward passes, the CPU
// reference) against brute-force dense masked float64 computations, the core's slot arithmetic
// against an independent count, and the backward passes by their adjoint identities.
#include <gtest/gtest.h>

#include <cmath>

#include "gna/core/neighborhood.hpp"
#include "gna/gna.hpp"
#include "support/test_support.hpp"
#include "unfused/dense_neighborhood.hpp"

namespace gna::test {
namespace {

// Host heads-first tensor of a problem, strided when gap > 0.
template <typename T>
HostTensor<T> heads_first(const Problem& p, int64_t n, int64_t gap) {
  std::vector<int64_t> shape{p.batch, p.heads_q};
  for (int a = 0; a < p.rank; ++a) shape.push_back(p.axes[a].extent);
  shape.push_back(n);
  return HostTensor<T>(shape, gap);
}

template <typename T>
T& element(HostTensor<T>& t, const Problem& p, int64_t b, int64_t h, int64_t token, int64_t c) {
  int x[kMaxRank];
  coords_of(p, token, x);
  return t.storage[heads_first_offset(t.ref, p.rank, b, h, x) + c];
}

template <typename T>
Dense to_dense(HostTensor<T>& t, const Problem& p) {
  Dense d(p.batch, p.heads_q, p.tokens(), t.ref.shape[t.ref.rank - 1]);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h)
      for (int64_t i = 0; i < d.tokens; ++i)
        for (int64_t c = 0; c < d.n; ++c) d.at(b, h, i, c) = element(t, p, b, h, i, c);
  return d;
}

// Largest |got - want| relative to max(1, |want|); -inf must match -inf exactly; NaN fails.
template <typename T>
double max_error(HostTensor<T>& got, const Problem& p, const Dense& want) {
  double worst = 0;
  for (int64_t b = 0; b < want.batch; ++b)
    for (int64_t h = 0; h < want.heads; ++h)
      for (int64_t i = 0; i < want.tokens; ++i)
        for (int64_t c = 0; c < want.n; ++c) {
          const double g = element(got, p, b, h, i, c), w = want.at(b, h, i, c);
          if (std::isinf(w)) {
            if (g != w) return INFINITY;
            continue;
          }
          if (!std::isfinite(g)) return INFINITY;
          worst = std::max(worst, std::abs(g - w) / std::max(1.0, std::abs(w)));
        }
  return worst;
}

// Bias tensor [H, 2K-1 per axis] (contiguous) and its values as [H, entries].
template <typename T>
HostTensor<T> rpb_tensor(const Problem& p) {
  std::vector<int64_t> shape{p.heads_q};
  for (int a = 0; a < p.rank; ++a) shape.push_back(2 * p.axes[a].window - 1);
  return HostTensor<T>(shape);
}
template <typename T>
std::vector<double> rpb_values(const HostTensor<T>& t) {
  return std::vector<double>(t.storage.begin(), t.storage.end());
}

TEST(UnfusedCore, SlotsAndBiasEntriesMatchIndependentCount) {
  int axes = 0;
  for (int L = 2; L <= 16; ++L)
    for (int d = 1; d <= 3; ++d)
      for (int K = 2; K * d <= L; ++K)
        for (int c = 0; c < 2; ++c) {
          const AxisRule a{L, K, d, 1, c == 1};
          Problem p;
          p.rank = 1;
          p.axes[0] = a;
          ++axes;
          for (int i = 0; i < L; ++i) {
            const AxisWindow w = axis_window(a, i);
            ASSERT_EQ(w.valid, c ? std::min(K, i / d + 1) : K);
            for (int s = 0; s < K; ++s) {
              if (s >= w.valid) continue;
              const int j = key_of_slot(a, w, s);
              ASSERT_EQ(dense_slot(p, &i, &j), s) << "L=" << L << " K=" << K << " d=" << d << " c=" << c;
              ASSERT_EQ(rpb_index(a, i, j), dense_rpb_entry(p, &i, &j));
              ASSERT_GE(rpb_index(a, i, j), 0);
              ASSERT_LT(rpb_index(a, i, j), rpb_extent(a));
            }
            // The inverse rule names exactly the queries whose window holds key i, in its slot.
            const AxisQueries q = axis_queries(a, i);
            int attending = 0;
            for (int x = 0; x < L; ++x) attending += dense_slot(p, &x, &i) >= 0 ? 1 : 0;
            ASSERT_EQ(q.queries.size(), attending);
            for (int ig = q.queries.begin; ig < q.queries.end; ++ig) {
              const int x = coordinate_of(a, q.group, ig);
              ASSERT_EQ(slot_in_window(a, q.n, ig, index_in_group(a, i)), dense_slot(p, &x, &i));
            }
          }
        }
  EXPECT_GT(axes, 300);
}

// One random configuration through the four entry points, compared with the dense operators.
template <typename T>
struct Case {
  Problem p;
  bool with_rpb;
  int64_t gap;
  AttentionParams params = params_of(p);
  HostTensor<T> q, k, v, attn_in, d_attn_in, d_out, rpb;
  HostTensor<T> attn, out, dq, dk, d_rpb, d_attn, dv;

  Case(const Problem& p_, bool rpb_, int64_t gap_, std::mt19937_64& rng)
      : p(p_), with_rpb(rpb_), gap(gap_) {
    const int D = p.dim_qk, S = dense_slots(p);
    for (auto* t : {&q, &k, &v, &d_out, &out, &dq, &dk, &dv}) *t = heads_first<T>(p, D, gap);
    for (auto* t : {&attn_in, &d_attn_in, &attn, &d_attn}) *t = heads_first<T>(p, S, gap);
    rpb = rpb_tensor<T>(p);
    d_rpb = rpb_tensor<T>(p);
    for (auto* t : {&q, &k, &v, &d_out, &attn_in, &d_attn_in, &rpb}) t->fill_random(rng);
    // Slots without a key must be ignored where weights are read: NaN there would leak.
    const std::vector<char> valid = dense_valid_slots(p);
    for (auto* t : {&attn_in, &d_attn_in})
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t h = 0; h < p.heads_q; ++h)
          for (int64_t i = 0; i < p.tokens(); ++i)
            for (int s = 0; s < S; ++s)
              if (!valid[i * S + s]) element(*t, p, b, h, i, s) = std::numeric_limits<T>::quiet_NaN();
    for (auto* t : {&attn, &out, &dq, &dk, &d_rpb, &d_attn, &dv}) t->poison();
  }

  void run() {
    TensorRef dq_r = dq.ref, dk_r = dk.ref, drpb_r = d_rpb.ref, dattn_r = d_attn.ref, dv_r = dv.ref;
    na_qk(params, q.ref, k.ref, with_rpb ? &rpb.ref : nullptr, attn.ref);
    na_av(params, attn_in.ref, v.ref, out.ref);
    na_qk_backward(params, q.ref, k.ref, d_attn_in.ref, &dq_r, &dk_r, with_rpb ? &drpb_r : nullptr);
    na_av_backward(params, attn_in.ref, v.ref, d_out.ref, &dattn_r, &dv_r);
  }

  // Largest error of every output against the dense operators.
  double check(std::string* worst_name) {
    const Dense Q = to_dense(q, p), K = to_dense(k, p), V = to_dense(v, p), A = to_dense(attn_in, p),
                G = to_dense(d_attn_in, p), DO = to_dense(d_out, p);
    const std::vector<double> bias = rpb_values(rpb);
    struct Item {
      const char* name;
      double err;
    };
    std::vector<Item> items = {
        {"attn", max_error(attn, p, dense_pn(p, Q, K, with_rpb ? &bias : nullptr, -INFINITY))},
        {"out", max_error(out, p, dense_nn(p, A, V))},
        {"dq", max_error(dq, p, dense_nn(p, G, K))},
        {"dk", max_error(dk, p, dense_in(p, G, Q))},
        {"d_attn", max_error(d_attn, p, dense_pn(p, DO, V, nullptr, 0.0))},
        {"dv", max_error(dv, p, dense_in(p, A, DO))},
    };
    if (with_rpb) {
      const std::vector<double> want = dense_rpb_grad(p, G);
      double err = 0;
      for (size_t e = 0; e < want.size(); ++e) {
        const double g = d_rpb.storage[e];
        err = std::isfinite(g) ? std::max(err, std::abs(g - want[e]) / std::max(1.0, std::abs(want[e])))
                               : INFINITY;
      }
      items.push_back({"d_rpb", err});
    }
    double worst = 0;
    for (const Item& it : items)
      if (!(it.err <= worst)) {
        worst = it.err;
        *worst_name = it.name;
      }
    return worst;
  }
};

template <typename T>
void sweep(double tolerance, int configs) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  bool ranks[4] = {}, causal = false, dilated = false, even = false, rpb = false, strided = false;
  for (int n = 0; n < configs; ++n) {
    const int rank = 1 + n % 3;
    const Problem p = random_neighborhood_problem(rng, rank, 300);
    const bool with_rpb = rng() % 2 == 0;
    const int64_t gap = rng() % 3 == 0 ? 2 : 0;
    Case<T> c(p, with_rpb, gap, rng);
    c.run();
    std::string name;
    const double err = c.check(&name);
    ASSERT_LE(err, tolerance) << name << ": " << describe_neighborhood(p, with_rpb) << " gap " << gap;
    ranks[rank] = true;
    rpb |= with_rpb;
    strided |= gap > 0;
    for (int a = 0; a < rank; ++a) {
      causal |= p.axes[a].causal;
      dilated |= p.axes[a].dilation > 1;
      even |= p.axes[a].window % 2 == 0;
    }
  }
  EXPECT_TRUE(ranks[1] && ranks[2] && ranks[3] && causal && dilated && even && rpb && strided);
}

TEST(Unfused, Float64MatchesDenseMasked) { sweep<double>(1e-12, 90); }
TEST(Unfused, Float32MatchesDenseMasked) { sweep<float>(2e-5, 45); }

// Each backward pass is the adjoint of a forward operator (all are bilinear): for random G and
// perturbations E, <G, PN(E, k)> = <NN(G, k), E>, <G, PN(q, E)> = <IN(G, q), E>,
// <G, NN(E, v)> = <PN(G, v), E> and <G, NN(a, E)> = <IN(a, G), E>, over the slots with a key.
TEST(Unfused, BackwardIsTheAdjointOfForward) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int n = 0; n < 30; ++n) {
    const Problem p = random_neighborhood_problem(rng, 1 + n % 3, 200);
    SCOPED_TRACE(describe_neighborhood(p, false));
    Case<double> c(p, false, 0, rng);
    const AttentionParams& params = c.params;
    const std::vector<char> valid = dense_valid_slots(p);
    const int S = dense_slots(p);
    auto zero_invalid = [&](HostTensor<double>& w) {
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t h = 0; h < p.heads_q; ++h)
          for (int64_t i = 0; i < p.tokens(); ++i)
            for (int s = 0; s < S; ++s)
              if (!valid[i * S + s]) element(w, p, b, h, i, s) = 0.0;
    };
    auto inner = [&](HostTensor<double>& a, HostTensor<double>& b) {
      const Dense x = to_dense(a, p), y = to_dense(b, p);
      double s = 0;
      for (size_t i = 0; i < x.v.size(); ++i) s += x.v[i] * y.v[i];
      return s;
    };
    HostTensor<double> G = heads_first<double>(p, S, 0), Wtmp = heads_first<double>(p, S, 0);
    HostTensor<double> E = heads_first<double>(p, p.dim_qk, 0), Tmp = heads_first<double>(p, p.dim_qk, 0);
    HostTensor<double> Ew = heads_first<double>(p, S, 0);
    G.fill_random(rng);
    E.fill_random(rng);
    Ew.fill_random(rng);
    zero_invalid(G);
    zero_invalid(Ew);
    HostTensor<double> Go = heads_first<double>(p, p.dim_qk, 0);
    Go.fill_random(rng);
    TensorRef tmp = Tmp.ref, wtmp = Wtmp.ref;

    na_qk(params, E.ref, c.k.ref, nullptr, Wtmp.ref);  // PN(E, k)
    zero_invalid(Wtmp);
    const double lhs1 = inner(G, Wtmp);
    na_qk_backward(params, E.ref, c.k.ref, G.ref, &tmp, nullptr, nullptr);  // NN(G, k)
    EXPECT_NEAR(lhs1, inner(Tmp, E), 1e-9 * (1 + std::abs(lhs1)));

    na_qk(params, c.q.ref, E.ref, nullptr, Wtmp.ref);  // PN(q, E)
    zero_invalid(Wtmp);
    const double lhs2 = inner(G, Wtmp);
    na_qk_backward(params, c.q.ref, E.ref, G.ref, nullptr, &tmp, nullptr);  // IN(G, q)
    EXPECT_NEAR(lhs2, inner(Tmp, E), 1e-9 * (1 + std::abs(lhs2)));

    na_av(params, Ew.ref, c.v.ref, Tmp.ref);  // NN(Ew, v)
    const double lhs3 = inner(Go, Tmp);
    na_av_backward(params, Ew.ref, c.v.ref, Go.ref, &wtmp, nullptr);  // PN(Go, v)
    EXPECT_NEAR(lhs3, inner(Wtmp, Ew), 1e-9 * (1 + std::abs(lhs3)));

    na_av(params, Ew.ref, E.ref, Tmp.ref);  // NN(a, E)
    const double lhs4 = inner(Go, Tmp);
    na_av_backward(params, Ew.ref, E.ref, Go.ref, nullptr, &tmp);  // IN(a, Go)
    EXPECT_NEAR(lhs4, inner(Tmp, E), 1e-9 * (1 + std::abs(lhs4)));
  }
}

// Outputs passed as null are not computed; the others are.
TEST(Unfused, OptionalOutputsAreLeftAlone) {
  std::mt19937_64 rng(fresh_seed());
  const Problem p = random_neighborhood_problem(rng, 2, 100);
  Case<double> c(p, true, 0, rng);
  TensorRef dk = c.dk.ref;
  na_qk_backward(c.params, c.q.ref, c.k.ref, c.d_attn_in.ref, nullptr, &dk, nullptr);
  for (double x : c.dq.storage) ASSERT_TRUE(std::isnan(x));
  for (double x : c.d_rpb.storage) ASSERT_TRUE(std::isnan(x));
  EXPECT_LE(max_error(c.dk, p, dense_in(p, to_dense(c.d_attn_in, p), to_dense(c.q, p))), 1e-12);
}

}  // namespace
}  // namespace gna::test
