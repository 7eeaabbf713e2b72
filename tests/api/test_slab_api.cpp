// Slabs through the C ABI (gna_*_slab, gna_key_range; ABI version 6): key_range against the
// literal rule, slab calls equal to the same rows of the whole layout's call (outputs bitwise:
// the reference visits the same keys in the same order; key gradients: the whole call's with
// d_out zero outside the query slab), messages naming the parameter and the value, and
// dispatch's refusal of a backend that does not run slabs (this binary registers one).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "gna/core/slab.hpp"
#include "gna/gna.h"
#include "support/c_tensor.hpp"
#include "support/counting_backend.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

// A host backend above the reference that runs anything but slabs (it says nothing about them:
// dispatch must pass over it for slab calls).
int plain_calls = 0;
Backend make_backend_without_slabs() {
  return counting_host_backend("no_slabs", 100, &plain_calls);
}
GNA_REGISTER_BACKEND(make_backend_without_slabs);

TEST(Slab, KeyRangeIsTheLiteralRulesReach) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 2000; ++trial) {
    const AxisRule a = random_axis(rng, 30);
    const int b = rand_int(rng, 0, a.extent - 1), e = rand_int(rng, b + 1, a.extent);
    int lo = a.extent, hi = 0;
    for (int i = b; i < e; ++i)
      for (int j = 0; j < a.extent; ++j)
        if (literal_attends(a.extent, a.window, a.dilation, a.stride, a.causal, i, j))
          lo = std::min(lo, j), hi = std::max(hi, j + 1);
    const Range got = key_range(a, Range{b, e});
    ASSERT_EQ(got.begin, lo) << "L=" << a.extent << " K=" << a.window << " d=" << a.dilation
                             << " s=" << a.stride << " causal=" << a.causal << " [" << b << ", "
                             << e << ")";
    ASSERT_EQ(got.end, hi);
  }
}

// Copies rows [begin, end) per axis of a [B, X, (Y), H, D] tensor (rank 1 or 2 layouts).
HostTensor<double> cut(const HostTensor<double>& t, int rank, const Range* r) {
  std::vector<int64_t> shape(t.ref.shape, t.ref.shape + t.ref.rank);
  for (int a = 0; a < rank; ++a) shape[1 + a] = r[a].size();
  HostTensor<double> out(shape);
  const int64_t rows1 = rank > 1 ? shape[2] : 1, inner = shape[rank + 1] * shape[rank + 2];
  for (int64_t b = 0; b < shape[0]; ++b)
    for (int64_t x = 0; x < shape[1]; ++x)
      for (int64_t y = 0; y < rows1; ++y)
        for (int64_t c = 0; c < inner; ++c) {
          int64_t from = b * t.ref.strides[0] + (x + r[0].begin) * t.ref.strides[1] + c;
          int64_t to = b * out.ref.strides[0] + x * out.ref.strides[1] + c;
          if (rank > 1) from += (y + r[1].begin) * t.ref.strides[2], to += y * out.ref.strides[2];
          out.storage[to] = t.storage[from];
        }
  return out;
}

TEST(Slab, CallsEqualTheWholeLayoutsRows) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 60; ++trial) {
    const int rank = rand_int(rng, 1, 2);
    AxisRule axes[kMaxRank];
    Range queries[kMaxRank], keys[kMaxRank];
    gna_slab slab{};
    std::vector<int64_t> layout;
    for (int a = 0; a < rank; ++a) {
      axes[a] = random_axis(rng, 16);
      const int b = rand_int(rng, 0, axes[a].extent - 1);
      queries[a] = Range{b, rand_int(rng, b + 1, axes[a].extent)};
      keys[a] = key_range(axes[a], queries[a]);
      slab.extent[a] = axes[a].extent;
      slab.query_offset[a] = queries[a].begin;
      slab.key_offset[a] = keys[a].begin;
      layout.push_back(axes[a].extent);
    }
    const gna_params params = params_of(axes, rank);
    auto shape = [&](int heads, int dim) {
      std::vector<int64_t> s{2};
      s.insert(s.end(), layout.begin(), layout.end());
      s.push_back(heads), s.push_back(dim);
      return s;
    };
    HostTensor<double> q(shape(4, 3)), k(shape(2, 3)), v(shape(2, 5)), out(shape(4, 5));
    HostTensor<double> lse(shape(4, 1)), d_out(shape(4, 5)), dq(shape(4, 3)), dk(shape(2, 3)),
        dv(shape(2, 5));
    for (auto* t : {&q, &k, &v}) t->fill_random(rng);
    // d_out zero outside the query slab: the whole call's key gradients are then the slab's.
    HostTensor<double> d_slab = cut(d_out, rank, queries);
    d_slab.fill_random(rng);
    {
      std::vector<int64_t> s(d_slab.ref.shape, d_slab.ref.shape + d_slab.ref.rank);
      const int64_t rows1 = rank > 1 ? s[2] : 1, inner = s[rank + 1] * s[rank + 2];
      for (int64_t b = 0; b < s[0]; ++b)
        for (int64_t x = 0; x < s[1]; ++x)
          for (int64_t y = 0; y < rows1; ++y)
            for (int64_t c = 0; c < inner; ++c) {
              int64_t to = b * d_out.ref.strides[0] + (x + queries[0].begin) * d_out.ref.strides[1] + c;
              int64_t from = b * d_slab.ref.strides[0] + x * d_slab.ref.strides[1] + c;
              if (rank > 1)
                to += (y + queries[1].begin) * d_out.ref.strides[2], from += y * d_slab.ref.strides[2];
              d_out.storage[to] = d_slab.storage[from];
            }
    }
    lse.ref.rank -= 1;  // [B, layout.., H]
    gna_options reference{};
    reference.backend = "reference";
    gna_tensor c[] = {to_c(q.ref), to_c(k.ref), to_c(v.ref), to_c(out.ref), to_c(lse.ref),
                      to_c(d_out.ref), to_c(dq.ref), to_c(dk.ref), to_c(dv.ref)};
    ASSERT_EQ(gna_forward(&params, &c[0], &c[1], &c[2], nullptr, nullptr, &c[3], &c[4], &reference),
              GNA_STATUS_OK) << gna_last_error();
    ASSERT_EQ(gna_backward(&params, &c[0], &c[1], &c[2], nullptr, nullptr, &c[3], &c[4], &c[5],
                           &c[6], &c[7], &c[8], nullptr, nullptr, &reference),
              GNA_STATUS_OK) << gna_last_error();

    HostTensor<double> sq = cut(q, rank, queries), sk = cut(k, rank, keys), sv = cut(v, rank, keys);
    HostTensor<double> so = cut(out, rank, queries), sl = cut(HostTensor<double>(shape(4, 1)), rank, queries);
    HostTensor<double> sdq = cut(dq, rank, queries), sdk = cut(dk, rank, keys), sdv = cut(dv, rank, keys);
    for (auto* t : {&so, &sl, &sdq, &sdk, &sdv}) t->poison();
    sl.ref.rank -= 1;
    gna_tensor s[] = {to_c(sq.ref), to_c(sk.ref), to_c(sv.ref), to_c(so.ref), to_c(sl.ref),
                      to_c(d_slab.ref), to_c(sdq.ref), to_c(sdk.ref), to_c(sdv.ref)};
    // Automatic dispatch passes over the backend without slabs.
    plain_calls = 0;
    ASSERT_EQ(gna_forward_slab(&params, &slab, &s[0], &s[1], &s[2], nullptr, nullptr, &s[3], &s[4],
                               nullptr), GNA_STATUS_OK) << gna_last_error();
    ASSERT_EQ(gna_backward_slab(&params, &slab, &s[0], &s[1], &s[2], nullptr, nullptr, &s[3], &s[4],
                                &s[5], &s[6], &s[7], &s[8], nullptr, nullptr, nullptr),
              GNA_STATUS_OK) << gna_last_error();
    EXPECT_EQ(plain_calls, 0);
    EXPECT_EQ(so.storage, cut(out, rank, queries).storage);
    for (auto [got, want, tol] : {std::tuple{&sdq, cut(dq, rank, queries), 1e-12},
                                  std::tuple{&sdk, cut(dk, rank, keys), 1e-12},
                                  std::tuple{&sdv, cut(dv, rank, keys), 1e-12}})
      for (size_t i = 0; i < want.storage.size(); ++i)
        ASSERT_NEAR(got->storage[i], want.storage[i], tol) << "trial " << trial << " index " << i;
  }
}

TEST(Slab, RefusalsNameTheParameterAndTheValue) {
  AxisRule axis;
  axis.extent = 10, axis.window = 3;
  const gna_params params = params_of(&axis, 1);
  HostTensor<double> q({1, 4, 1, 2}), out({1, 4, 1, 2}), lse({1, 4, 1}), k({1, 10, 1, 2});
  gna_tensor c[] = {to_c(q.ref), to_c(out.ref), to_c(lse.ref), to_c(k.ref)};
  gna_slab slab{};
  slab.extent[0] = 10, slab.query_offset[0] = 2, slab.key_offset[0] = 2;  // needs keys [1, 7)
  EXPECT_EQ(gna_forward_slab(&params, &slab, &c[0], &c[0], &c[0], nullptr, nullptr, &c[1], &c[2],
                             nullptr), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(gna_last_error(),
               "slab: axis 0: queries [2, 6) attend keys [1, 7), the key slab holds [2, 6)");
  slab.query_offset[0] = 7;
  EXPECT_EQ(gna_forward_slab(&params, &slab, &c[0], &c[0], &c[0], nullptr, nullptr, &c[1], &c[2],
                             nullptr), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gna_last_error()).find("query_offset must be in [0, 6]"),
            std::string::npos) << gna_last_error();
  gna_options named{};
  named.backend = "no_slabs";
  slab.query_offset[0] = 2, slab.key_offset[0] = 0;  // every key of the layout
  EXPECT_EQ(gna_forward_slab(&params, &slab, &c[0], &c[3], &c[3], nullptr, nullptr, &c[1], &c[2],
                             &named), GNA_STATUS_UNSUPPORTED);
  EXPECT_NE(std::string(gna_last_error()).find("no_slabs: does not run slabs"), std::string::npos)
      << gna_last_error();
  int32_t b = -1, e = -1;
  EXPECT_EQ(gna_key_range(&params, 0, 10, 2, 6, &b, &e), GNA_STATUS_OK);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(e, 7);
  EXPECT_EQ(gna_key_range(&params, 1, 10, 2, 6, &b, &e), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(gna_last_error(), "axis must be in [0, 1), got 1");
  EXPECT_EQ(gna_key_range(&params, 0, 2, 0, 1, &b, &e), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(gna_key_range(&params, 0, 10, 6, 6, &b, &e), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(gna_last_error(), "queries [6, 6) must be a non-empty range inside [0, 10)");
}

}  // namespace
}  // namespace gna::test
