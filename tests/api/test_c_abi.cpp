// The C ABI: statuses, messages, backend selection, STA conversion, merge.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "gna/gna.h"
#include "support/c_tensor.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

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

// Malformed calls through the C ABI: each returns GNA_STATUS_INVALID_ARGUMENT with a message
// naming the parameter and the value (never a crash).
TEST(CAbi, MalformedCallsNameParameterAndValue) {
  HostTensor<float> q({1, 5, 6, 2, 4}), k({1, 5, 6, 1, 4}), v({1, 5, 6, 1, 3});
  HostTensor<float> out({1, 5, 6, 2, 3}), lse({1, 5, 6, 2});
  gna_tensor tq = to_c(q.ref), tk = to_c(k.ref), tv = to_c(v.ref), to = to_c(out.ref),
             tl = to_c(lse.ref);
  const gna_params p = params_2d(3, 4);
  struct Case {
    const char* what;
    std::function<void(gna_params&, gna_tensor&, gna_tensor&, gna_tensor&, gna_tensor&,
                       gna_tensor&)> mutate;
    const char* message;
  };
  using P = gna_params&;
  using T = gna_tensor&;
  const std::vector<Case> cases = {
      {"null data", [](P, T q, T, T, T, T) { q.data = nullptr; }, "query: data pointer is null, got 240 elements"},
      {"negative size", [](P, T, T k, T, T, T) { k.shape[2] = -1; }, "key: size of dim 2 must be >= 0, got -1"},
      {"negative stride", [](P, T, T, T v, T, T) { v.strides[3] = -3; }, "value: stride of dim 3 must be >= 0, got -3"},
      {"rank 9", [](P, T q, T, T, T, T) { q.rank = 9; }, "query: rank must be in [0, 8], got 9"},
      {"rank -1", [](P, T, T, T, T o, T) { o.rank = -1; }, "out: rank must be in [0, 8], got -1"},
      {"params rank 0", [](P p, T, T, T, T, T) { p.rank = 0; }, "rank must be 1, 2 or 3, got 0"},
      {"params rank 4", [](P p, T, T, T, T, T) { p.rank = 4; }, "rank must be 1, 2 or 3, got 4"},
      {"dtype code", [](P, T, T, T v, T, T) { v.dtype = -2; }, "value: unknown dtype code -2"},
      {"dtype mismatch", [](P, T, T k, T, T, T) { k.dtype = GNA_DTYPE_F64; }, "key: expected dtype float32, got float64"},
      {"device mismatch", [](P, T, T, T v, T, T) { v.device = 3; }, "value: expected device -1 (-1 = host), got 3"},
      {"out device", [](P, T, T, T, T o, T) { o.device = 0; }, "out: expected device -1 (-1 = host), got 0"},
      {"out dtype", [](P, T, T, T, T o, T) { o.dtype = GNA_DTYPE_F16; }, "out: expected dtype float32, got float16"},
      {"lse dtype", [](P, T, T, T, T, T l) { l.dtype = GNA_DTYPE_F64; }, "lse: expected dtype float32, got float64"},
      {"strided last dim", [](P, T q, T, T, T, T) { q.strides[4] = 2; }, "query: last dimension must be contiguous (stride 1), got stride 2"},
      {"heads", [](P, T q, T k, T, T, T) { q.shape[3] = 3; k.shape[3] = 2; }, "must be a multiple of key/value heads"},
      {"extent past 2^31", [](P, T q, T, T, T, T) { q.shape[2] = int64_t{1} << 33; q.strides[2] = 0; }, "query: size of dim 2 (extent) must be < 2^31, got 8589934592"},
      {"elements past 2^63", [](P, T q, T, T, T, T) { q.shape[0] = int64_t{1} << 62; }, "overflows 64 bits"},
      {"reach past 2^63", [](P, T, T k, T, T, T) { k.strides[1] = int64_t{1} << 62; }, "reaches past 2^63 bytes"},
      {"misaligned", [](P, T, T k, T, T, T) { k.data = static_cast<char*>(k.data) + 1; }, "key: data pointer"},
      {"out aliases query", [](P, T q, T, T, T o, T) { o.data = q.data; }, "out: shares memory with query"},
      {"lse aliases out", [](P, T, T, T, T o, T l) { l.data = o.data; }, "out: shares memory with lse"},
      {"nan scale", [](P p, T, T, T, T, T) { p.scale = std::nanf(""); }, "scale must be finite, got nan"},
      {"inf scale", [](P p, T, T, T, T, T) { p.scale = INFINITY; }, "scale must be finite, got inf"},
      {"negative scale", [](P p, T, T, T, T, T) { p.scale = -2.f; }, "scale must be > 0 (or 0 for 1/sqrt(dim)), got -2"},
      {"window 1", [](P p, T, T, T, T, T) { p.window[0] = 1; }, "axis 0: window (kernel_size) must be >= 2, got 1"},
      {"window past extent", [](P p, T, T, T, T, T) { p.window[1] = 7; }, "axis 1: window*dilation must be <= extent=6, got window=7"},
      {"window overflow", [](P p, T, T, T, T, T) { p.window[1] = INT32_MAX; p.dilation[1] = INT32_MAX; }, "axis 1: window*dilation must be <= extent=6"},
      {"stride 0", [](P p, T, T, T, T, T) { p.stride[0] = 0; }, "axis 0: stride must be in [1, window=3], got 0"},
      {"stride past window", [](P p, T, T, T, T, T) { p.stride[1] = 5; }, "axis 1: stride must be in [1, window=4], got 5"},
      {"dilation 0", [](P p, T, T, T, T, T) { p.dilation[0] = 0; }, "axis 0: dilation must be >= 1, got 0"},
      {"dilation negative", [](P p, T, T, T, T, T) { p.dilation[1] = -2; }, "axis 1: dilation must be >= 1, got -2"},
  };
  for (const Case& c : cases) {
    gna_params pc = p;
    gna_tensor cq = tq, ck = tk, cv = tv, co = to, cl = tl;
    c.mutate(pc, cq, ck, cv, co, cl);
    EXPECT_EQ(gna_forward(&pc, &cq, &ck, &cv, nullptr, nullptr, &co, &cl, nullptr),
              GNA_STATUS_INVALID_ARGUMENT) << c.what;
    EXPECT_NE(std::strstr(gna_last_error(), c.message), nullptr)
        << c.what << ": " << gna_last_error() << "\nexpected to contain: " << c.message;
  }
  // NULL pointers where a tensor, params or a buffer is required.
  EXPECT_EQ(gna_forward(nullptr, &tq, &tk, &tv, nullptr, nullptr, &to, &tl, nullptr), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(gna_last_error(), "params: required, got NULL");
  EXPECT_EQ(gna_forward(&p, &tq, &tk, &tv, nullptr, nullptr, nullptr, &tl, nullptr), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(gna_last_error(), "out: tensor is required, got NULL");
  EXPECT_EQ(gna_validate(&p, &tq, &tk, &tv, &tk, nullptr), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(gna_last_error(), "additional keys and additional values must be given together");
  char name[8];
  EXPECT_EQ(gna_select_backend(&p, &tq, &tk, &tv, nullptr, nullptr, 0, nullptr, name, 0), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(gna_select_backend(&p, &tq, &tk, &tv, nullptr, nullptr, 0, nullptr, nullptr, 8), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(gna_merge_attentions(0, nullptr, nullptr, nullptr, nullptr), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(gna_merge_attentions(1, nullptr, nullptr, nullptr, nullptr), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(gna_sta_params(2, nullptr, nullptr, nullptr, nullptr), GNA_STATUS_INVALID_ARGUMENT);
  gna_options opt{};
  opt.q_tile[0] = -8;
  EXPECT_EQ(gna_forward(&p, &tq, &tk, &tv, nullptr, nullptr, &to, &tl, &opt), GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(gna_last_error(), "options: q_tile[0] must be >= 0 (0: the backend's choice), got -8");
  // A forced backend that runs on the other kind of tensors says why.
  for (const char* b : {"portable", "hopper", "gpu_reference"}) {
    opt = gna_options{};
    opt.backend = b;
    const gna_status st = gna_forward(&p, &tq, &tk, &tv, nullptr, nullptr, &to, &tl, &opt);
    EXPECT_NE(st, GNA_STATUS_OK) << b;
    EXPECT_NE(std::strstr(gna_last_error(), b), nullptr) << gna_last_error();
  }
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
