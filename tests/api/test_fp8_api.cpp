// The FP8 forward through the C++ API and the C ABI on host tensors: precision fp8, float8_e4m3fn
// inputs with their scales, and the errors of each (naming the parameter), the backward refused.
// The scheme's quantization checked against its definition.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "gna/core/fp8.hpp"
#include "gna/gna.h"
#include "gna/gna.hpp"
#include "reference/fp8.hpp"
#include "support/c_tensor.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

// A 2-D problem with GQA and additional keys; inputs with padded strides.
struct Fp8Setup {
  AttentionParams params;
  HostTensor<float> q{{2, 5, 6, 4, 64}, 3}, k{{2, 5, 6, 2, 64}, 2}, v{{2, 5, 6, 2, 32}};
  HostTensor<float> ak{{2, 7, 2, 64}}, av{{2, 7, 2, 32}};
  HostTensor<float> out{{2, 5, 6, 4, 32}}, lse{{2, 5, 6, 4}};
  AttentionTensors in;

  explicit Fp8Setup(uint64_t seed) {
    std::mt19937_64 rng(seed);
    params.rank = 2;
    params.window[0] = 3;
    params.window[1] = 4;
    params.stride[1] = 2;
    params.causal[0] = true;
    for (auto* t : {&q, &k, &v, &ak, &av}) t->fill_random(rng);
    for (float& x : k.storage) x += 2.5f;  // an offset for the key mean to remove
    out.poison();
    lse.poison();
    in = AttentionTensors{q.ref, k.ref, v.ref, &ak.ref, &av.ref};
  }
  Problem problem() const { return make_problem(params, in); }
};

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << e.what();
    return e.what();
  }
  return "no error";
}

TEST(Fp8Quantization, FollowsTheScheme) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Fp8Setup s(seed);
  const Problem p = s.problem();
  std::vector<float> k_mean;
  const Fp8Quantized quantized = reference::quantize_fp8(p, s.in, &k_mean);
  const Fp8Operands& o = quantized.operands;
  const auto* q8 = static_cast<const uint8_t*>(o.q8.data);
  const auto* k8 = static_cast<const uint8_t*>(o.k8.data);
  const auto* v8 = static_cast<const uint8_t*>(o.v8.data);
  const auto* q_scale = static_cast<const float*>(o.q_scale.data);
  const auto* k_scale = static_cast<const float*>(o.k_scale.data);
  const auto* v_scale = static_cast<const float*>(o.v_scale.data);
  const auto* lse_bias = static_cast<const float*>(o.lse_bias.data);
  const int tokens = 30, D = 64, Dv = 32;
  // Each value within half an e4m3 step of its code times its scale; each row's largest at 448.
  auto check_row = [&](const uint8_t* codes, float scale, const float* x, const float* shift,
                       int dim) {
    bool top = false;
    for (int d = 0; d < dim; ++d) {
      const float want = (x[d] - (shift ? shift[d] : 0.f)) / scale;
      const float got = e4m3_to_float(codes[d]);
      ASSERT_LE(std::fabs(got - want), std::fabs(want) / 16 + 0.001f) << d;
      top |= (codes[d] & 0x7f) == 0x7e;
    }
    EXPECT_TRUE(top);
  };
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < tokens; ++t) {
      for (int h = 0; h < 4; ++h) {
        const int64_t r = (b * tokens + t) * 4 + h;
        const float* x = &s.q.at({b, t / 6, t % 6, h, 0});
        check_row(q8 + r * D, q_scale[r], x, nullptr, D);
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += double(x[d]) * k_mean[(b * 2 + h / 2) * D + d];
        EXPECT_NEAR(lse_bias[r], dot / 8.0, 1e-4 * (1 + std::fabs(dot)));
      }
      for (int h = 0; h < 2; ++h) {
        const int64_t r = (b * tokens + t) * 2 + h;
        check_row(k8 + r * D, k_scale[r], &s.k.at({b, t / 6, t % 6, h, 0}),
                  &k_mean[(b * 2 + h) * D], D);
      }
    }
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h)
      for (int d = 0; d < D; ++d) {
        double sum = 0;
        for (int t = 0; t < tokens; ++t) sum += s.k.at({b, t / 6, t % 6, h, d});
        EXPECT_NEAR(k_mean[(b * 2 + h) * D + d], sum / tokens, 1e-5);
      }
  // V: per channel over the spatial and the additional keys.
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < Dv; ++c) {
        float amax = 0;
        for (int t = 0; t < tokens; ++t) amax = std::max(amax, std::fabs(s.v.at({b, t / 6, t % 6, h, c})));
        for (int j = 0; j < 7; ++j) amax = std::max(amax, std::fabs(s.av.at({b, j, h, c})));
        EXPECT_EQ(v_scale[(b * 2 + h) * Dv + c], amax / 448.f);
        for (int t = 0; t < tokens; ++t) {
          const float want = s.v.at({b, t / 6, t % 6, h, c}) / v_scale[(b * 2 + h) * Dv + c];
          EXPECT_EQ(v8[((b * tokens + t) * 2 + h) * Dv + c], e4m3_from_float(want));
        }
      }
}

// e4m3 inputs with their scales run the same emulation as precision fp8, without the LSE bias.
TEST(Fp8Api, E4m3InputsWithScales) {
  Fp8Setup s(fresh_seed());
  const Problem p = s.problem();
  const Fp8Quantized quantized = reference::quantize_fp8(p, s.in);
  Fp8Operands o = quantized.operands;
  AttentionTensors e4m3{o.q8, o.k8, o.v8, &o.add_k8, &o.add_v8};
  e4m3.q_scale = &o.q_scale;
  e4m3.k_scale = &o.k_scale;
  e4m3.v_scale = &o.v_scale;
  e4m3.additional_k_scale = &o.add_k_scale;
  attention_forward(s.params, e4m3, s.out.ref, &s.lse.ref);
  HostTensor<float> want({2, 5, 6, 4, 32}), want_lse({2, 5, 6, 4});
  Fp8Operands no_bias = o;
  no_bias.lse_bias.data = nullptr;
  reference::forward_fp8(p, no_bias, want.ref, &want_lse.ref);
  EXPECT_EQ(s.out.storage, want.storage);
  EXPECT_EQ(s.lse.storage, want_lse.storage);
  EXPECT_EQ(select_forward_backend(s.params, e4m3), "reference");

  // precision fp8 on the float32 inputs: the same outputs, the LSE with the bias.
  HostTensor<float> out2({2, 5, 6, 4, 32}), lse2({2, 5, 6, 4});
  CallOptions fp8;
  fp8.precision = Precision::fp8;
  attention_forward(s.params, s.in, out2.ref, &lse2.ref, fp8);
  EXPECT_EQ(out2.storage, want.storage);
  const float* bias = static_cast<const float*>(o.lse_bias.data);
  for (size_t i = 0; i < lse2.storage.size(); ++i)
    EXPECT_FLOAT_EQ(lse2.storage[i], want_lse.storage[i] + bias[i]);

  // Errors, each naming its parameter.
  AttentionTensors missing = e4m3;
  missing.k_scale = nullptr;
  EXPECT_NE(error_of([&] { attention_forward(s.params, missing, s.out.ref, &s.lse.ref); })
                .find("k_scale: float8_e4m3fn inputs need their scales"),
            std::string::npos);
  missing = e4m3;
  missing.additional_k_scale = nullptr;
  EXPECT_NE(error_of([&] { attention_forward(s.params, missing, s.out.ref, &s.lse.ref); })
                .find("additional_k_scale"),
            std::string::npos);
  TensorRef wrong = o.v_scale;
  wrong.shape[2] = 16;
  AttentionTensors bad_shape = e4m3;
  bad_shape.v_scale = &wrong;
  EXPECT_NE(error_of([&] { attention_forward(s.params, bad_shape, s.out.ref, &s.lse.ref); })
                .find("v_scale: expected shape [2, 2, 32], got [2, 2, 16]"),
            std::string::npos);
  for (float poison : {NAN, INFINITY, 0.f, -1.f}) {
    std::vector<float> scales(static_cast<const float*>(o.q_scale.data),
                              static_cast<const float*>(o.q_scale.data) + o.q_scale.numel());
    scales[17] = poison;
    TensorRef poisoned = o.q_scale;
    poisoned.data = scales.data();
    AttentionTensors bad = e4m3;
    bad.q_scale = &poisoned;
    EXPECT_NE(error_of([&] { attention_forward(s.params, bad, s.out.ref, &s.lse.ref); })
                  .find("q_scale: scales must be finite and > 0"),
              std::string::npos)
        << poison;
  }
  AttentionTensors float_with_scales = s.in;
  float_with_scales.q_scale = &o.q_scale;
  EXPECT_NE(error_of([&] { attention_forward(s.params, float_with_scales, s.out.ref, &s.lse.ref); })
                .find("q_scale: scales come with float8_e4m3fn inputs only"),
            std::string::npos);
  HostTensor<float> grad_q({2, 5, 6, 4, 64}), grad_k({2, 5, 6, 2, 64}), grad_v({2, 5, 6, 2, 32});
  HostTensor<float> grad_ak({2, 7, 2, 64}), grad_av({2, 7, 2, 32});
  AttentionGradients grads{grad_q.ref, grad_k.ref, grad_v.ref, &grad_ak.ref, &grad_av.ref};
  EXPECT_NE(error_of([&] {
              attention_backward(s.params, s.in, s.out.ref, s.lse.ref, s.out.ref, grads, fp8);
            }).find("precision: the backward does not run in fp8"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              attention_backward(s.params, e4m3, s.out.ref, s.lse.ref, s.out.ref, grads);
            }).find("query: float8_e4m3fn inputs have no backward"),
            std::string::npos);
  CallOptions odd;
  odd.precision = static_cast<Precision>(5);
  EXPECT_NE(error_of([&] { attention_forward(s.params, s.in, s.out.ref, &s.lse.ref, odd); })
                .find("precision: must be automatic (0) or fp8 (1), got 5"),
            std::string::npos);
}

TEST(Fp8Api, CAbi) {
  Fp8Setup s(fresh_seed());
  const Problem p = s.problem();
  const Fp8Quantized quantized = reference::quantize_fp8(p, s.in);
  const Fp8Operands& o = quantized.operands;
  gna_params params{};
  params.rank = 2;
  params.window[0] = 3;
  params.window[1] = 4;
  params.stride[0] = 1;
  params.stride[1] = 2;
  params.dilation[0] = params.dilation[1] = 1;
  params.causal[0] = 1;
  gna_tensor tq = to_c(s.q.ref), tk = to_c(s.k.ref), tv = to_c(s.v.ref), tak = to_c(s.ak.ref),
             tav = to_c(s.av.ref), to = to_c(s.out.ref), tl = to_c(s.lse.ref);
  gna_options opt{};
  opt.precision = GNA_PRECISION_FP8;
  ASSERT_EQ(gna_forward(&params, &tq, &tk, &tv, &tak, &tav, &to, &tl, &opt), GNA_STATUS_OK)
      << gna_last_error();
  HostTensor<float> want({2, 5, 6, 4, 32}), want_lse({2, 5, 6, 4});
  CallOptions fp8;
  fp8.precision = Precision::fp8;
  attention_forward(s.params, s.in, want.ref, &want_lse.ref, fp8);
  EXPECT_EQ(s.out.storage, want.storage);

  gna_tensor q8 = to_c(o.q8), k8 = to_c(o.k8), v8 = to_c(o.v8), ak8 = to_c(o.add_k8),
             av8 = to_c(o.add_v8), qs = to_c(o.q_scale), ks = to_c(o.k_scale),
             vs = to_c(o.v_scale), aks = to_c(o.add_k_scale);
  EXPECT_EQ(q8.dtype, GNA_DTYPE_E4M3);
  ASSERT_EQ(gna_forward_e4m3(&params, nullptr, &q8, &k8, &v8, &ak8, &av8, &qs, &ks, &vs, &aks,
                             &to, &tl, nullptr),
            GNA_STATUS_OK)
      << gna_last_error();
  EXPECT_EQ(s.out.storage, want.storage);
  EXPECT_EQ(gna_forward_e4m3(&params, nullptr, &q8, &k8, &v8, &ak8, &av8, &qs, &ks, &vs, nullptr,
                             &to, &tl, nullptr),
            GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(gna_last_error(), "additional_k_scale"), nullptr) << gna_last_error();
  EXPECT_EQ(gna_forward_e4m3(&params, nullptr, &tq, &tk, &tv, &tak, &tav, &qs, &ks, &vs, &aks,
                             &to, &tl, nullptr),
            GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(gna_last_error(), "query: gna_forward_e4m3 takes float8_e4m3fn inputs"),
            nullptr)
      << gna_last_error();
  opt.precision = 9;
  EXPECT_EQ(gna_forward(&params, &tq, &tk, &tv, &tak, &tav, &to, &tl, &opt),
            GNA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(gna_last_error(), "options: precision must be"), nullptr);
  EXPECT_GE(gna_abi_version(), 5);
}

}  // namespace
}  // namespace gna::test
