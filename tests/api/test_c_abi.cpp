// The C ABI: statuses, messages, backend selection, STA conversion, merge.
#include <gtest/gtest.h>

#include <cstring>

#include "gna/gna.h"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

gna_tensor to_c(const TensorRef& r) {
  gna_tensor t{};
  t.data = r.data;
  t.dtype = static_cast<int32_t>(r.dtype);
  t.rank = r.rank;
  t.device = r.device;
  for (int i = 0; i < r.rank; ++i) {
    t.shape[i] = r.shape[i];
    t.strides[i] = r.strides[i];
  }
  return t;
}

gna_params params_2d(int k0, int k1) {
  gna_params p{};
  p.rank = 2;
  p.window[0] = k0;
  p.window[1] = k1;
  p.stride[0] = p.stride[1] = 1;
  p.dilation[0] = p.dilation[1] = 1;
  return p;
}

TEST(CAbi, ForwardBackwardAndSelection) {
  std::mt19937_64 rng(fresh_seed());
  HostTensor<float> q({1, 5, 6, 2, 4}), k({1, 5, 6, 1, 4}), v({1, 5, 6, 1, 3});
  HostTensor<float> out({1, 5, 6, 2, 3}), lse({1, 5, 6, 2}), dout({1, 5, 6, 2, 3});
  HostTensor<float> dq({1, 5, 6, 2, 4}), dk({1, 5, 6, 1, 4}), dv({1, 5, 6, 1, 3});
  for (auto* t : {&q, &k, &v, &dout}) t->fill_random(rng);
  for (auto* t : {&out, &lse, &dq, &dk, &dv}) t->poison();
  gna_tensor tq = to_c(q.ref), tk = to_c(k.ref), tv = to_c(v.ref), to = to_c(out.ref), tl = to_c(lse.ref);
  gna_tensor tdo = to_c(dout.ref), tdq = to_c(dq.ref), tdk = to_c(dk.ref), tdv = to_c(dv.ref);
  gna_params p = params_2d(3, 4);
  ASSERT_EQ(gna_validate(&p, &tq, &tk, &tv, nullptr, nullptr), GNA_STATUS_OK) << gna_last_error();
  ASSERT_EQ(gna_forward(&p, &tq, &tk, &tv, nullptr, nullptr, &to, &tl, nullptr), GNA_STATUS_OK) << gna_last_error();
  ASSERT_EQ(gna_backward(&p, &tq, &tk, &tv, nullptr, nullptr, &to, &tl, &tdo, &tdq, &tdk, &tdv, nullptr, nullptr, nullptr),
            GNA_STATUS_OK) << gna_last_error();
  for (auto* t : {&out, &lse, &dq, &dk, &dv})
    for (float x : t->storage) ASSERT_TRUE(std::isfinite(x));
  char name[32];
  ASSERT_EQ(gna_select_backend(&p, &tq, &tk, &tv, nullptr, nullptr, 0, nullptr, name, sizeof name), GNA_STATUS_OK);
  EXPECT_STREQ(name, "reference");
  EXPECT_NE(std::strstr(gna_backend_names(), "reference"), nullptr);

  // Errors: statuses and messages.
  gna_params bad = params_2d(3, 7);
  EXPECT_EQ(gna_forward(&bad, &tq, &tk, &tv, nullptr, nullptr, &to, &tl, nullptr), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(gna_last_error(), "axis 1: window*dilation must be <= extent=6, got window=7"), nullptr)
      << gna_last_error();
  EXPECT_EQ(gna_forward(&p, nullptr, &tk, &tv, nullptr, nullptr, &to, &tl, nullptr), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(gna_last_error(), "query: tensor is required, got NULL");
  gna_options opt{};
  opt.backend = "hopper-that-does-not-exist";
  EXPECT_EQ(gna_forward(&p, &tq, &tk, &tv, nullptr, nullptr, &to, &tl, &opt), GNA_STATUS_INVALID_ARGUMENT);
  gna_tensor half = tq;
  half.dtype = 7;
  EXPECT_EQ(gna_validate(&p, &half, &tk, &tv, nullptr, nullptr), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(gna_last_error(), "query: unknown dtype code 7");
}

TEST(CAbi, StaParams) {
  const int32_t extent[3] = {30, 48, 80}, tile[3] = {6, 8, 8}, window[3] = {18, 24, 24};
  gna_params p{};
  ASSERT_EQ(gna_sta_params(3, extent, tile, window, &p), GNA_STATUS_OK) << gna_last_error();
  EXPECT_EQ(p.window[0], 18);
  EXPECT_EQ(p.stride[0], 6);
  EXPECT_EQ(p.stride[2], 8);
  const int32_t bad_window[3] = {18, 16, 24};
  EXPECT_EQ(gna_sta_params(3, extent, tile, bad_window, &p), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(gna_last_error(), "axis 1: STA window/tile must be odd, got window=16 tile=8");
}

}  // namespace
}  // namespace gna::test
