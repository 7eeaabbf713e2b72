// The unfused operators through the C ABI: a valid call, and bad inputs rejected with a status
// and a message that names the parameter and the value.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "gna/gna.h"
#include "support/c_tensor.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

// 2-D, 3x5 window over 6x7 tokens, 2 heads, head dim 4: q, k, v [1, 2, 6, 7, 4],
// weights [1, 2, 6, 7, 15], bias [2, 5, 9].
struct Fixture {
  HostTensor<float> q{{1, 2, 6, 7, 4}}, k{{1, 2, 6, 7, 4}}, v{{1, 2, 6, 7, 4}};
  HostTensor<float> attn{{1, 2, 6, 7, 15}}, out{{1, 2, 6, 7, 4}}, rpb{{2, 5, 9}};
  HostTensor<float> dq{{1, 2, 6, 7, 4}}, dk{{1, 2, 6, 7, 4}}, d_rpb{{2, 5, 9}};
  gna_tensor tq = to_c(q.ref), tk = to_c(k.ref), tv = to_c(v.ref), ta = to_c(attn.ref),
             to = to_c(out.ref), tr = to_c(rpb.ref), tdq = to_c(dq.ref), tdk = to_c(dk.ref),
             tdr = to_c(d_rpb.ref);
  gna_params p{};
  Fixture() {
    std::mt19937_64 rng(fresh_seed());
    for (auto* t : {&q, &k, &v, &rpb}) t->fill_random(rng);
    p.rank = 2;
    p.window[0] = 3;
    p.window[1] = 5;
    p.stride[0] = p.stride[1] = 1;
    p.dilation[0] = p.dilation[1] = 1;
  }
};

void expect_error(gna_status status, gna_status want, const char* message) {
  EXPECT_EQ(status, want);
  EXPECT_NE(std::strstr(gna_last_error(), message), nullptr)
      << "message: '" << gna_last_error() << "', expected to contain '" << message << "'";
}

TEST(UnfusedCAbi, ValidCallsSucceed) {
  Fixture f;
  ASSERT_EQ(gna_na_qk(&f.p, &f.tq, &f.tk, &f.tr, &f.ta, nullptr), GNA_STATUS_OK) << gna_last_error();
  ASSERT_EQ(gna_na_qk(&f.p, &f.tq, &f.tk, nullptr, &f.ta, nullptr), GNA_STATUS_OK) << gna_last_error();
  ASSERT_EQ(gna_na_av(&f.p, &f.ta, &f.tv, &f.to, nullptr), GNA_STATUS_OK) << gna_last_error();
  ASSERT_EQ(gna_na_qk_backward(&f.p, &f.tq, &f.tk, &f.ta, &f.tdq, nullptr, &f.tdr, nullptr),
            GNA_STATUS_OK) << gna_last_error();
  ASSERT_EQ(gna_na_av_backward(&f.p, &f.ta, &f.tv, &f.to, nullptr, &f.tdk, nullptr), GNA_STATUS_OK)
      << gna_last_error();
  EXPECT_GE(gna_abi_version(), 3);  // the unfused operators came in version 3
}

TEST(UnfusedCAbi, BadInputsNameTheParameterAndValue) {
  Fixture f;
  const auto I = GNA_STATUS_INVALID_ARGUMENT;

  gna_params strided = f.p;
  strided.stride[1] = 2;
  expect_error(gna_na_qk(&strided, &f.tq, &f.tk, nullptr, &f.ta, nullptr), I,
               "axis 1: stride must be 1 for the unfused operators, got 2");

  gna_params wide = f.p;
  wide.window[0] = 7;
  expect_error(gna_na_av(&wide, &f.ta, &f.tv, &f.to, nullptr), I,
               "axis 0: window*dilation must be <= extent=6, got window=7");
  gna_params dilated = f.p;
  dilated.dilation[1] = 2;
  expect_error(gna_na_qk(&dilated, &f.tq, &f.tk, nullptr, &f.ta, nullptr), I,
               "axis 1: window*dilation must be <= extent=7, got window=5 dilation=2");

  gna_tensor short_attn = f.ta;
  short_attn.shape[4] = 14;
  expect_error(gna_na_qk(&f.p, &f.tq, &f.tk, nullptr, &short_attn, nullptr), I,
               "attn: last dim must be prod(kernel_size)=15, got 14");
  expect_error(gna_na_av(&f.p, &short_attn, &f.tv, &f.to, nullptr), I,
               "attn: last dim must be prod(kernel_size)=15, got 14");

  gna_tensor bad_rpb = f.tr;
  bad_rpb.shape[2] = 7;
  expect_error(gna_na_qk(&f.p, &f.tq, &f.tk, &bad_rpb, &f.ta, nullptr), I,
               "rpb: expected shape [2, 5, 9], got [2, 5, 7]");
  expect_error(gna_na_qk_backward(&f.p, &f.tq, &f.tk, &f.ta, nullptr, nullptr, &bad_rpb, nullptr), I,
               "d_rpb: expected shape [2, 5, 9], got [2, 5, 7]");

  gna_tensor other_key = f.tk;
  other_key.shape[3] = 6;
  expect_error(gna_na_qk(&f.p, &f.tq, &other_key, nullptr, &f.ta, nullptr), I,
               "key: expected shape [1, 2, 6, 7, 4], got [1, 2, 6, 6, 4]");

  HostTensor<double> v64({1, 2, 6, 7, 4});
  gna_tensor tv64 = to_c(v64.ref);
  expect_error(gna_na_av(&f.p, &f.ta, &tv64, &f.to, nullptr), I,
               "attn: expected dtype float64, got float32");

  gna_tensor flat_q = f.tq;
  flat_q.rank = 4;
  expect_error(gna_na_qk(&f.p, &flat_q, &f.tk, nullptr, &f.ta, nullptr), I,
               "query: expected 5 dims [batch, heads, 2 spatial dims, dim], got 4 dims");

  expect_error(gna_na_av_backward(&f.p, &f.ta, &f.tv, nullptr, nullptr, nullptr, nullptr), I,
               "d_out: tensor is required, got NULL");

  gna_tensor strided_last = f.tq;
  strided_last.strides[4] = 2;
  expect_error(gna_na_qk(&f.p, &strided_last, &f.tk, nullptr, &f.ta, nullptr), I,
               "query: last dimension must be contiguous (stride 1), got stride 2");

  gna_tensor half_q = f.tq, half_k = f.tk, half_a = f.ta;
  half_q.dtype = half_k.dtype = half_a.dtype = GNA_DTYPE_F16;
  expect_error(gna_na_qk(&f.p, &half_q, &half_k, nullptr, &half_a, nullptr), GNA_STATUS_UNSUPPORTED,
               "dtype must be float32 or float64, got float16");

  gna_tensor device_k = f.tk;
  device_k.device = 0;
  expect_error(gna_na_qk(&f.p, &f.tq, &device_k, nullptr, &f.ta, nullptr), I,
               "key: expected device -1 (-1 = host), got 0");
}

}  // namespace
}  // namespace gna::test
