// The exact LSE merge (gna/ops/merge.hpp, docs/rule.md section 5.5): attention split over
// disjoint key sets merges to the unsplit attention; mismatched inputs are refused.
#include <gtest/gtest.h>

#include "gna/gna.hpp"
#include "gna/reference/reference.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

// Attention over (neighbourhood + additional keys) equals the merge of attention over the
// neighbourhood alone and attention over the additional keys alone.
TEST(Merge, SplitKeysMergeToUnsplitAttention) {
  std::mt19937_64 rng(fresh_seed());
  for (int t = 0; t < 30; ++t) {
    Problem p = random_problem(rng, rand_int(rng, 1, 2), 12);
    p.heads_q = p.heads_kv = rand_int(rng, 1, 2);
    p.dim_qk = p.dim_v = rand_int(rng, 1, 5);
    p.additional_kv = rand_int(rng, 1, 6);
    p.dtype = DType::f64;
    SCOPED_TRACE(describe(p));
    std::vector<int64_t> tok{1}, lse_shape{1};
    for (int a = 0; a < p.rank; ++a) {
      tok.push_back(p.axes[a].extent);
      lse_shape.push_back(p.axes[a].extent);
    }
    tok.push_back(p.heads_q);
    lse_shape.push_back(p.heads_q);
    tok.push_back(p.dim_qk);
    HostTensor<double> q(tok), k(tok), v(tok), out_all(tok), out_nbr(tok), out_extra(tok), merged(tok);
    HostTensor<double> lse_all(lse_shape), lse_nbr(lse_shape), lse_extra(lse_shape), lse_merged(lse_shape);
    HostTensor<double> ak({1, p.additional_kv, p.heads_kv, p.dim_qk}), av({1, p.additional_kv, p.heads_kv, p.dim_v});
    for (auto* x : {&q, &k, &v, &ak, &av}) x->fill_random(rng);
    AttentionTensors with_extra{q.ref, k.ref, v.ref, &ak.ref, &av.ref};
    reference::forward(p, with_extra, out_all.ref, &lse_all.ref);
    Problem nbr = p;
    nbr.additional_kv = 0;
    reference::forward(nbr, AttentionTensors{q.ref, k.ref, v.ref}, out_nbr.ref, &lse_nbr.ref);
    // Attention over the additional keys only, by hand.
    const double scale = 1 / std::sqrt(double(p.dim_qk));
    for (size_t row = 0; row < lse_extra.storage.size(); ++row) {
      const int h = static_cast<int>(row % p.heads_q);
      std::vector<double> w(p.additional_kv);
      double mx = -1e300, sum = 0;
      for (int j = 0; j < p.additional_kv; ++j) {
        double s = 0;
        for (int e = 0; e < p.dim_qk; ++e) s += q.storage[row * p.dim_qk + e] * ak.at({0, j, h, e});
        mx = std::max(mx, w[j] = scale * s);
      }
      for (auto& x : w) sum += (x = std::exp(x - mx));
      lse_extra.storage[row] = mx + std::log(sum);
      for (int e = 0; e < p.dim_v; ++e) {
        double o = 0;
        for (int j = 0; j < p.additional_kv; ++j) o += w[j] / sum * av.at({0, j, h, e});
        out_extra.storage[row * p.dim_v + e] = o;
      }
    }
    merged.poison();
    merge_attentions({out_nbr.ref, out_extra.ref}, {lse_nbr.ref, lse_extra.ref}, merged.ref, &lse_merged.ref);
    for (size_t i = 0; i < merged.storage.size(); ++i) ASSERT_NEAR(merged.storage[i], out_all.storage[i], 1e-12);
    for (size_t i = 0; i < lse_merged.storage.size(); ++i) ASSERT_NEAR(lse_merged.storage[i], lse_all.storage[i], 1e-12);
  }
}

TEST(Merge, ThreeWaySplitOfFullAttention) {
  // Full attention (window = extent) split into three key ranges, each computed by hand.
  std::mt19937_64 rng(fresh_seed());
  const int N = 9, D = 3;
  HostTensor<double> q({1, N, 1, D}), k({1, N, 1, D}), v({1, N, 1, D});
  for (auto* x : {&q, &k, &v}) x->fill_random(rng);
  auto partial = [&](int j0, int j1, HostTensor<double>& out, HostTensor<double>& lse) {
    for (int i = 0; i < N; ++i) {
      std::vector<double> w;
      double mx = -1e300, sum = 0;
      for (int j = j0; j < j1; ++j) {
        double s = 0;
        for (int e = 0; e < D; ++e) s += q.at({0, i, 0, e}) * k.at({0, j, 0, e});
        w.push_back(s / std::sqrt(double(D)));
        mx = std::max(mx, w.back());
      }
      for (auto& x : w) sum += (x = std::exp(x - mx));
      lse.at({0, i, 0}) = mx + std::log(sum);
      for (int e = 0; e < D; ++e) {
        double o = 0;
        for (int j = j0; j < j1; ++j) o += w[j - j0] / sum * v.at({0, j, 0, e});
        out.at({0, i, 0, e}) = o;
      }
    }
  };
  HostTensor<double> o[4] = {HostTensor<double>({1, N, 1, D}), HostTensor<double>({1, N, 1, D}),
                             HostTensor<double>({1, N, 1, D}), HostTensor<double>({1, N, 1, D})};
  HostTensor<double> l[4] = {HostTensor<double>({1, N, 1}), HostTensor<double>({1, N, 1}),
                             HostTensor<double>({1, N, 1}), HostTensor<double>({1, N, 1})};
  partial(0, 2, o[0], l[0]);
  partial(2, 7, o[1], l[1]);
  partial(7, 9, o[2], l[2]);
  merge_attentions({o[0].ref, o[1].ref, o[2].ref}, {l[0].ref, l[1].ref, l[2].ref}, o[0].ref, nullptr);  // in place
  Problem p;
  p.rank = 1;
  p.axes[0] = AxisRule{N, N, 1, 1, false};
  p.dim_qk = p.dim_v = D;
  p.dtype = DType::f64;
  reference::forward(p, AttentionTensors{q.ref, k.ref, v.ref}, o[3].ref, &l[3].ref);
  for (size_t i = 0; i < o[3].storage.size(); ++i) ASSERT_NEAR(o[0].storage[i], o[3].storage[i], 1e-13);
}

TEST(Merge, MismatchedInputsAreRejected) {
  HostTensor<float> a({2, 3, 4}), b({2, 3, 5}), la({2, 3}), lb({2, 3});
  EXPECT_THROW(merge_attentions({a.ref, b.ref}, {la.ref, lb.ref}, a.ref, nullptr), Error);
  EXPECT_THROW(merge_attentions({a.ref}, {la.ref, lb.ref}, a.ref, nullptr), Error);
  EXPECT_THROW(merge_attentions({}, {}, a.ref, nullptr), Error);
  // In place is fine; an out shifted by one row onto an input is not (rows merge in parallel).
  TensorRef shifted = a.ref;
  shifted.data = static_cast<float*>(a.ref.data) + a.ref.strides[a.ref.rank - 2];
  shifted.shape[0] = 1;
  TensorRef input = a.ref, input_lse = la.ref;
  input.shape[0] = input_lse.shape[0] = 1;
  EXPECT_NO_THROW(merge_attentions({input}, {input_lse}, input, nullptr));
  try {
    merge_attentions({input}, {input_lse}, shifted, nullptr);
    ADD_FAILURE() << "expected an overlap error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("merge: out: shares memory with outputs[0]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gna::test
