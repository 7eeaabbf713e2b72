// The CPU reference with per-head rules (AttentionParams::head_groups) against one reference call
// per group of heads, in float64, over random rules: ranks 1-3, windows, strides, dilations and
// causal flags per group, GQA with KV heads shared across groups, additional KV tokens.
// Forward (O, LSE) and dQ are per query head: bit for bit equal to the group's call. dK / dV
// (and the additional tokens' gradients) of a KV head sum over its query heads whatever their
// groups: equal, to rounding, to the sum of the groups' calls, each with the incoming gradient
// of the other groups' heads set to zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gna/gna.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

struct Shape {
  int rank = 1, batch = 1, heads_q = 1, heads_kv = 1, dim_qk = 1, dim_v = 1, additional = 0;
  int extent[kMaxRank] = {1, 1, 1};

  std::vector<int64_t> tokens(int heads, int dim) const {
    std::vector<int64_t> s{batch};
    for (int a = 0; a < rank; ++a) s.push_back(extent[a]);
    s.push_back(heads);
    s.push_back(dim);
    return s;
  }
};

// A random group rule for the layout: window * dilation <= extent on every axis.
HeadGroupRule random_rule(std::mt19937_64& rng, const Shape& s) {
  HeadGroupRule r;
  for (int a = 0; a < s.rank; ++a) {
    const int L = s.extent[a];
    r.dilation[a] = rand_int(rng, 1, std::max(1, std::min(3, L / 2)));
    r.window[a] = rand_int(rng, 2, std::max(2, std::min(7, L / r.dilation[a])));
    r.stride[a] = rand_int(rng, 1, r.window[a]);
    r.causal[a] = rand_int(rng, 0, 3) == 0;
  }
  return r;
}

struct Results {
  HostTensor<double> out, lse, dq, dk, dv, dak, dav;
};

struct HeadRulesCase {
  Shape s;
  AttentionParams params;  // with head groups
  HostTensor<double> q, k, v, ak, av, d_out;

  HeadRulesCase(std::mt19937_64& rng) {
    s.rank = rand_int(rng, 1, 3);
    const int max_extent = s.rank == 1 ? 20 : s.rank == 2 ? 9 : 6;
    for (int a = 0; a < s.rank; ++a) s.extent[a] = rand_int(rng, 2, max_extent);
    s.batch = rand_int(rng, 1, 2);
    s.heads_kv = rand_int(rng, 1, 3);
    s.heads_q = s.heads_kv * rand_int(rng, 1, 3);
    s.dim_qk = rand_int(rng, 1, 5);
    s.dim_v = rand_int(rng, 1, 5);
    s.additional = rand_int(rng, 0, 3) == 0 ? rand_int(rng, 1, 3) : 0;
    params.rank = s.rank;
    params.scale = rand_int(rng, 0, 1) ? 0.f : 0.37f;
    const int groups = rand_int(rng, 1, std::min(kMaxHeadGroups, s.heads_q + 1));
    for (int g = 0; g < groups; ++g) params.head_groups.push_back(random_rule(rng, s));
    for (int h = 0; h < s.heads_q; ++h) params.group_of_head.push_back(rand_int(rng, 0, groups - 1));
    q = HostTensor<double>(s.tokens(s.heads_q, s.dim_qk), rand_int(rng, 0, 1));
    k = HostTensor<double>(s.tokens(s.heads_kv, s.dim_qk));
    v = HostTensor<double>(s.tokens(s.heads_kv, s.dim_v), rand_int(rng, 0, 1));
    ak = HostTensor<double>({s.batch, s.additional, s.heads_kv, s.dim_qk});
    av = HostTensor<double>({s.batch, s.additional, s.heads_kv, s.dim_v});
    d_out = HostTensor<double>(s.tokens(s.heads_q, s.dim_v));
    for (auto* t : {&q, &k, &v, &ak, &av, &d_out}) t->fill_random(rng);
  }

  AttentionTensors inputs() const {
    AttentionTensors in{q.ref, k.ref, v.ref};
    if (s.additional > 0) {
      in.additional_k = &ak.ref;
      in.additional_v = &av.ref;
    }
    return in;
  }

  // Forward and backward with `params`, the incoming gradient d_out.
  Results run(const AttentionParams& a, const HostTensor<double>& grad) const {
    Results r{HostTensor<double>(s.tokens(s.heads_q, s.dim_v)),
          HostTensor<double>(lse_shape()),
          HostTensor<double>(s.tokens(s.heads_q, s.dim_qk)),
          HostTensor<double>(s.tokens(s.heads_kv, s.dim_qk)),
          HostTensor<double>(s.tokens(s.heads_kv, s.dim_v)),
          HostTensor<double>({s.batch, s.additional, s.heads_kv, s.dim_qk}),
          HostTensor<double>({s.batch, s.additional, s.heads_kv, s.dim_v})};
    for (auto* t : {&r.out, &r.lse, &r.dq, &r.dk, &r.dv, &r.dak, &r.dav}) t->poison();
    CallOptions o;
    o.backend = "reference";
    attention_forward(a, inputs(), r.out.ref, &r.lse.ref, o);
    AttentionGradients g{r.dq.ref, r.dk.ref, r.dv.ref};
    if (s.additional > 0) {
      g.d_additional_k = &r.dak.ref;
      g.d_additional_v = &r.dav.ref;
    }
    attention_backward(a, inputs(), r.out.ref, r.lse.ref, grad.ref, g, o);
    return r;
  }

  std::vector<int64_t> lse_shape() const {
    std::vector<int64_t> l = s.tokens(s.heads_q, 1);
    l.pop_back();
    return l;
  }

  AttentionParams group_params(int g) const {
    AttentionParams a;
    a.rank = s.rank;
    a.scale = params.scale;
    const HeadGroupRule& r = params.head_groups[g];
    for (int i = 0; i < s.rank; ++i) {
      a.window[i] = r.window[i];
      a.stride[i] = r.stride[i];
      a.dilation[i] = r.dilation[i];
      a.causal[i] = r.causal[i];
    }
    return a;
  }

  std::string describe() const {
    std::string d = "rank " + std::to_string(s.rank) + " extents";
    for (int a = 0; a < s.rank; ++a) d += " " + std::to_string(s.extent[a]);
    d += " B=" + std::to_string(s.batch) + " Hq=" + std::to_string(s.heads_q) +
         " Hkv=" + std::to_string(s.heads_kv) + " add=" + std::to_string(s.additional);
    for (size_t g = 0; g < params.head_groups.size(); ++g) {
      const HeadGroupRule& r = params.head_groups[g];
      d += " | group " + std::to_string(g) + ":";
      for (int a = 0; a < s.rank; ++a)
        d += " K" + std::to_string(r.window[a]) + "s" + std::to_string(r.stride[a]) + "d" +
             std::to_string(r.dilation[a]) + (r.causal[a] ? "c" : "");
    }
    d += " | heads:";
    for (int g : params.group_of_head) d += " " + std::to_string(g);
    return d;
  }
};

// Visits every element of a heads-last tensor [B, spatial.., H, (D)] as (offset, head).
template <typename F>
void for_each_element(const TensorRef& t, int head_dim, F f) {
  int64_t index[kMaxTensorRank] = {};
  const int64_t n = t.numel();
  for (int64_t e = 0; e < n; ++e) {
    int64_t rest = e, off = 0;
    for (int d = t.rank - 1; d >= 0; --d) {
      index[d] = rest % t.shape[d];
      rest /= t.shape[d];
      off += index[d] * t.strides[d];
    }
    f(off, static_cast<int>(index[head_dim]));
  }
}

// Elements of heads in group g of `got` equal those of `want` bit for bit.
void expect_heads_equal(const HostTensor<double>& got, const HostTensor<double>& want,
                        int head_dim, const std::vector<int>& group_of_head, int g,
                        const char* what, const std::string& trace) {
  int mismatches = 0;
  for_each_element(got.ref, head_dim, [&](int64_t off, int h) {
    if (group_of_head[h] != g) return;
    const double a = got.storage[off], b = want.storage[off];
    if (!(a == b || (std::isinf(a) && a == b)) && mismatches++ < 3)
      ADD_FAILURE() << what << " head " << h << " (group " << g << "): " << a << " vs " << b
                    << "\n" << trace;
  });
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

void expect_close(const HostTensor<double>& got, const std::vector<double>& want,
                  const char* what, const std::string& trace) {
  const double scale = std::max(1.0, max_abs(want));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got.storage[i])) << what << " element " << i << "\n" << trace;
    worst = std::max(worst, std::abs(got.storage[i] - want[i]));
  }
  EXPECT_LE(worst / scale, 1e-13) << what << "\n" << trace;
}

TEST(ReferenceHeadRules, EqualsOneCallPerGroup) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < 120; ++iter) {
    const HeadRulesCase c(rng);
    const std::string trace = "seed " + std::to_string(seed) + " case " + std::to_string(iter) +
                              ": " + c.describe();
    SCOPED_TRACE(trace);
    AttentionTensors in = c.inputs();
    ASSERT_EQ(select_forward_backend(c.params, in), "reference");
    ASSERT_EQ(select_backward_backend(c.params, in), "reference");
    const Results all = c.run(c.params, c.d_out);
    const int r = c.s.rank;
    const int groups = static_cast<int>(c.params.head_groups.size());
    std::vector<double> dk(all.dk.storage.size(), 0.0), dv(all.dv.storage.size(), 0.0);
    std::vector<double> dak(all.dak.storage.size(), 0.0), dav(all.dav.storage.size(), 0.0);
    for (int g = 0; g < groups; ++g) {
      // The other groups' heads get no incoming gradient: their dS and P dO are exactly zero,
      // so this call's dK / dV hold group g's share.
      HostTensor<double> grad = c.d_out;
      grad.ref.data = grad.storage.data();
      for_each_element(grad.ref, r + 1, [&](int64_t off, int h) {
        if (c.params.group_of_head[h] != g) grad.storage[off] = 0.0;
      });
      const Results one = c.run(c.group_params(g), grad);
      expect_heads_equal(all.out, one.out, r + 1, c.params.group_of_head, g, "out", trace);
      expect_heads_equal(all.lse, one.lse, r + 1, c.params.group_of_head, g, "lse", trace);
      expect_heads_equal(all.dq, one.dq, r + 1, c.params.group_of_head, g, "dq", trace);
      for (size_t i = 0; i < dk.size(); ++i) dk[i] += one.dk.storage[i];
      for (size_t i = 0; i < dv.size(); ++i) dv[i] += one.dv.storage[i];
      for (size_t i = 0; i < dak.size(); ++i) dak[i] += one.dak.storage[i];
      for (size_t i = 0; i < dav.size(); ++i) dav[i] += one.dav.storage[i];
    }
    expect_close(all.dk, dk, "dk", trace);
    expect_close(all.dv, dv, "dv", trace);
    if (c.s.additional > 0) {
      expect_close(all.dak, dak, "d_additional_k", trace);
      expect_close(all.dav, dav, "d_additional_v", trace);
    }
    if (::testing::Test::HasFailure()) break;
  }
}

// One group for every head is the plain call, bit for bit.
TEST(ReferenceHeadRules, OneGroupIsThePlainCall) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < 20; ++iter) {
    HeadRulesCase c(rng);
    c.params.head_groups.resize(1);
    c.params.group_of_head.assign(c.s.heads_q, 0);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + c.describe());
    const Results with = c.run(c.params, c.d_out);
    const Results plain = c.run(c.group_params(0), c.d_out);
    EXPECT_EQ(with.out.storage, plain.out.storage);
    EXPECT_EQ(with.lse.storage, plain.lse.storage);
    EXPECT_EQ(with.dq.storage, plain.dq.storage);
    EXPECT_EQ(with.dk.storage, plain.dk.storage);
    EXPECT_EQ(with.dv.storage, plain.dv.storage);
  }
}

}  // namespace
}  // namespace gna::test
