// Per-batch counts of additional keys through the C ABI (gna_*_counts; ABI version 7): a call
// with counts equals, per batch item, the call on that item alone with its first count[b]
// additional keys (outputs bitwise: the reference visits the same keys in the same order), the
// gradients of the additional keys past a count are zero, counts outside [0, Nadd] are clamped,
// messages name the parameter and the value, and dispatch passes over a backend that does not
// run counts (this binary registers one).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "gna/gna.h"
#include "support/c_tensor.hpp"
#include "support/counting_backend.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

// A host backend above the reference that runs anything but counts (it says nothing about them:
// dispatch must pass over it for calls with counts).
int plain_calls = 0;
Backend make_backend_without_counts() {
  return counting_host_backend("no_counts", 100, &plain_calls);
}
GNA_REGISTER_BACKEND(make_backend_without_counts);

// Batch item b of a view: one item, and (tokens >= 0) the first `tokens` rows of dim 1.
gna_tensor item(const gna_tensor& t, int64_t b, int64_t tokens = -1) {
  gna_tensor r = t;
  r.data = static_cast<double*>(t.data) + b * t.strides[0];
  r.shape[0] = 1;
  if (tokens >= 0) r.shape[1] = tokens;
  return r;
}

struct Counts {
  std::vector<int32_t> values;
  gna_tensor c{};
  explicit Counts(std::vector<int32_t> v) : values(std::move(v)) {
    c.data = values.data();
    c.dtype = GNA_DTYPE_I32;
    c.rank = 1;
    c.shape[0] = static_cast<int64_t>(values.size());
    c.strides[0] = 1;
    c.device = -1;
  }
};

TEST(Counts, CallsEqualEachItemsCallOnItsFirstAdditionalKeys) {
  std::mt19937_64 rng(fresh_seed());
  bool saw[4] = {};  // count 0, Nadd, in between, outside [0, Nadd] (clamped)
  for (int trial = 0; trial < 60; ++trial) {
    const int rank = rand_int(rng, 1, 2);
    AxisRule axes[kMaxRank];
    std::vector<int64_t> layout;
    for (int a = 0; a < rank; ++a) {
      axes[a] = random_axis(rng, 12);
      layout.push_back(axes[a].extent);
    }
    const gna_params params = params_of(axes, rank);
    const int batch = rand_int(rng, 1, 4), nadd = rand_int(rng, 1, 9);
    auto shape = [&](int heads, int dim) {
      std::vector<int64_t> s{batch};
      s.insert(s.end(), layout.begin(), layout.end());
      s.push_back(heads), s.push_back(dim);
      return s;
    };
    std::vector<int32_t> counts(batch);
    for (int32_t& n : counts) {
      const int kind = rand_int(rng, 0, 3);
      n = kind == 0 ? 0 : kind == 1 ? nadd : kind == 2 ? rand_int(rng, 0, nadd)
                                    : (rand_int(rng, 0, 1) ? -rand_int(rng, 1, 5)
                                                            : nadd + rand_int(rng, 1, 5));
      const int clamped = std::clamp<int>(n, 0, nadd);
      saw[n != clamped ? 3 : clamped == 0 ? 0 : clamped == nadd ? 1 : 2] = true;
    }
    Counts c_counts(counts);
    HostTensor<double> q(shape(4, 3)), k(shape(2, 3)), v(shape(2, 5)), out(shape(4, 5)),
        lse(shape(4, 1)), d_out(shape(4, 5)), dq(shape(4, 3)), dk(shape(2, 3)), dv(shape(2, 5));
    HostTensor<double> ak({batch, nadd, 2, 3}), av({batch, nadd, 2, 5}), dak({batch, nadd, 2, 3}),
        dav({batch, nadd, 2, 5});
    for (auto* t : {&q, &k, &v, &ak, &av, &d_out}) t->fill_random(rng);
    for (auto* t : {&out, &lse, &dq, &dk, &dv, &dak, &dav}) t->poison();
    lse.ref.rank -= 1;  // [B, layout.., H]
    gna_tensor c[] = {to_c(q.ref),  to_c(k.ref),  to_c(v.ref),     to_c(ak.ref),
                      to_c(av.ref), to_c(out.ref), to_c(lse.ref),  to_c(d_out.ref),
                      to_c(dq.ref), to_c(dk.ref), to_c(dv.ref),    to_c(dak.ref),
                      to_c(dav.ref)};
    // Automatic dispatch passes over the backend without counts.
    plain_calls = 0;
    ASSERT_EQ(gna_forward_counts(&params, nullptr, &c[0], &c[1], &c[2], &c[3], &c[4], &c_counts.c,
                                 &c[5], &c[6], nullptr),
              GNA_STATUS_OK) << gna_last_error();
    ASSERT_EQ(gna_backward_counts(&params, nullptr, &c[0], &c[1], &c[2], &c[3], &c[4],
                                  &c_counts.c, &c[5], &c[6], &c[7], &c[8], &c[9], &c[10], &c[11],
                                  &c[12], nullptr),
              GNA_STATUS_OK) << gna_last_error();
    EXPECT_EQ(plain_calls, 0);

    // Each item alone, its first count additional keys (none for a count of 0).
    HostTensor<double> o1(shape(4, 5)), l1(shape(4, 1)), dq1(shape(4, 3)), dk1(shape(2, 3)),
        dv1(shape(2, 5)), dak1({batch, nadd, 2, 3}), dav1({batch, nadd, 2, 5});
    l1.ref.rank -= 1;
    gna_tensor w[] = {to_c(o1.ref),  to_c(l1.ref),  to_c(dq1.ref), to_c(dk1.ref),
                      to_c(dv1.ref), to_c(dak1.ref), to_c(dav1.ref)};
    gna_options reference{};
    reference.backend = "reference";
    for (int b = 0; b < batch; ++b) {
      const int n = std::clamp<int>(counts[b], 0, nadd);
      gna_tensor x[] = {item(c[0], b), item(c[1], b), item(c[2], b), item(c[3], b, n),
                        item(c[4], b, n), item(w[0], b), item(w[1], b), item(c[7], b),
                        item(w[2], b), item(w[3], b), item(w[4], b), item(w[5], b, n),
                        item(w[6], b, n)};
      const bool extra = n > 0;
      ASSERT_EQ(gna_forward(&params, &x[0], &x[1], &x[2], extra ? &x[3] : nullptr,
                            extra ? &x[4] : nullptr, &x[5], &x[6], &reference),
                GNA_STATUS_OK) << gna_last_error();
      ASSERT_EQ(gna_backward(&params, &x[0], &x[1], &x[2], extra ? &x[3] : nullptr,
                             extra ? &x[4] : nullptr, &x[5], &x[6], &x[7], &x[8], &x[9], &x[10],
                             extra ? &x[11] : nullptr, extra ? &x[12] : nullptr, &reference),
                GNA_STATUS_OK) << gna_last_error();
    }
    EXPECT_EQ(out.storage, o1.storage) << "trial " << trial;
    EXPECT_EQ(lse.storage, l1.storage) << "trial " << trial;
    for (auto [got, want] : {std::pair{&dq, &dq1}, std::pair{&dk, &dk1}, std::pair{&dv, &dv1}})
      for (size_t i = 0; i < want->storage.size(); ++i)
        ASSERT_NEAR(got->storage[i], want->storage[i], 1e-12)
            << "trial " << trial << " index " << i;
    // Additional keys: the item's gradients below its count, zero past it.
    for (auto [got, want] : {std::pair{&dak, &dak1}, std::pair{&dav, &dav1}}) {
      const int64_t row = got->ref.strides[1];
      for (int b = 0; b < batch; ++b)
        for (int j = 0; j < nadd; ++j)
          for (int64_t e = 0; e < row; ++e) {
            const int64_t i = b * got->ref.strides[0] + j * row + e;
            if (j < std::clamp<int>(counts[b], 0, nadd))
              ASSERT_NEAR(got->storage[i], want->storage[i], 1e-12) << "trial " << trial;
            else
              ASSERT_EQ(got->storage[i], 0.0) << "trial " << trial << " item " << b << " key " << j;
          }
    }
  }
  for (int kind = 0; kind < 4; ++kind) EXPECT_TRUE(saw[kind]) << "count kind " << kind;
}

TEST(Counts, RefusalsNameTheParameterAndTheValue) {
  AxisRule axis;
  axis.extent = 6, axis.window = 3;
  const gna_params params = params_of(&axis, 1);
  HostTensor<double> q({2, 6, 1, 2}), out({2, 6, 1, 2}), ak({2, 4, 1, 2}), wrong({2});
  gna_tensor c[] = {to_c(q.ref), to_c(out.ref), to_c(ak.ref), to_c(wrong.ref)};
  auto forward = [&](const gna_tensor* counts, const gna_tensor* extra,
                     const gna_options* options = nullptr) {
    return gna_forward_counts(&params, nullptr, &c[0], &c[0], &c[0], extra, extra, counts, &c[1],
                              nullptr, options);
  };
  auto message = [] { return std::string(gna_last_error()); };
  Counts good({1, 4});
  EXPECT_EQ(forward(&good.c, &c[2]), GNA_STATUS_OK) << message();
  EXPECT_EQ(forward(&c[3], &c[2]), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(message(), "additional_kv_counts: expected dtype int32, got float64");
  Counts three({1, 2, 3});
  EXPECT_EQ(forward(&three.c, &c[2]), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(message(), "additional_kv_counts: expected shape [2], got [3]");
  Counts on_device({1, 2});
  on_device.c.device = 0;
  EXPECT_EQ(forward(&on_device.c, &c[2]), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(message(), "additional_kv_counts: expected device -1 (-1 = host), got 0");
  EXPECT_EQ(forward(&good.c, nullptr), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(message(), "additional_kv_counts: given without additional keys and values");
  Counts bad_code({1, 2});
  bad_code.c.dtype = 9;
  EXPECT_EQ(forward(&bad_code.c, &c[2]), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(message(), "additional_kv_counts: unknown dtype code 9");
  // int32 is the counts' dtype only.
  gna_tensor q32 = c[0];
  q32.dtype = GNA_DTYPE_I32;
  EXPECT_EQ(gna_forward(&params, &q32, &q32, &q32, nullptr, nullptr, &c[1], nullptr, nullptr),
            GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(message().find("query: int32 is the dtype of additional_kv_counts only"),
            std::string::npos) << message();
  // A backend named that does not run counts refuses; the FP8 forward takes none.
  gna_options named{};
  named.backend = "no_counts";
  EXPECT_EQ(forward(&good.c, &c[2], &named), GNA_STATUS_UNSUPPORTED);
  EXPECT_NE(message().find("no_counts: does not run per-batch counts of additional keys"),
            std::string::npos) << message();
  gna_options fp8{};
  fp8.precision = GNA_PRECISION_FP8;
  EXPECT_EQ(forward(&good.c, &c[2], &fp8), GNA_STATUS_UNSUPPORTED);
  EXPECT_NE(message().find("reference: does not run additional_kv_counts in the FP8 forward"),
            std::string::npos) << message();
  char name[32];
  EXPECT_EQ(gna_select_backend_counts(&params, nullptr, &c[0], &c[0], &c[0], &c[2], &c[2], &good.c,
                                      1, nullptr, name, sizeof name),
            GNA_STATUS_OK) << message();
  EXPECT_STREQ(name, "reference");
}

}  // namespace
}  // namespace gna::test
