// Every invalid input is rejected with a message naming the parameter and the value.
#include <gtest/gtest.h>

#include <functional>

#include "gna/core/error.hpp"
#include "gna/gna.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
  }
}

Problem good_problem() {
  Problem p;
  p.rank = 2;
  p.axes[0] = AxisRule{16, 5, 2, 2, false};
  p.axes[1] = AxisRule{12, 4, 1, 4, true};
  p.heads_q = 4;
  p.heads_kv = 2;
  p.dim_qk = 8;
  p.dim_v = 6;
  return p;
}

template <typename Mutate>
void expect_problem_error(Mutate m, const std::string& needle) {
  Problem p = good_problem();
  m(p);
  expect_error([&] { validate(p); }, needle);
}

TEST(Validation, GoodProblemPasses) { EXPECT_NO_THROW(validate(good_problem())); }

TEST(Validation, ProblemErrorsNameAxisParameterAndValue) {
  expect_problem_error([](Problem& p) { p.rank = 0; }, "rank must be 1, 2 or 3, got 0");
  expect_problem_error([](Problem& p) { p.rank = 4; }, "rank must be 1, 2 or 3, got 4");
  expect_problem_error([](Problem& p) { p.axes[1].window = 1; }, "axis 1: window (kernel_size) must be >= 2, got 1");
  expect_problem_error([](Problem& p) { p.axes[0].window = 0; }, "axis 0: window (kernel_size) must be >= 2, got 0");
  expect_problem_error([](Problem& p) { p.axes[0].dilation = 0; }, "axis 0: dilation must be >= 1, got 0");
  expect_problem_error([](Problem& p) { p.axes[1].stride = 0; }, "axis 1: stride must be in [1, window=4], got 0");
  expect_problem_error([](Problem& p) { p.axes[1].stride = 5; }, "axis 1: stride must be in [1, window=4], got 5");
  expect_problem_error([](Problem& p) { p.axes[0].window = 9; }, "axis 0: window*dilation must be <= extent=16, got window=9 dilation=2");
  expect_problem_error([](Problem& p) { p.axes[1].extent = 3; }, "axis 1: window*dilation must be <= extent=3");
  expect_problem_error([](Problem& p) { p.axes[0].extent = 0; }, "axis 0: extent must be >= 1, got 0");
  expect_problem_error([](Problem& p) { p.batch = 0; }, "batch must be >= 1, got 0");
  expect_problem_error([](Problem& p) { p.heads_q = 0; }, "query heads must be >= 1, got 0");
  expect_problem_error([](Problem& p) { p.heads_kv = 0; }, "key/value heads must be >= 1, got 0");
  expect_problem_error([](Problem& p) { p.heads_kv = 3; }, "query heads (4) must be a multiple of key/value heads, got 3");
  expect_problem_error([](Problem& p) { p.dim_qk = 0; }, "query/key head dim must be >= 1, got 0");
  expect_problem_error([](Problem& p) { p.dim_v = -1; }, "value head dim must be >= 1, got -1");
  expect_problem_error([](Problem& p) { p.additional_kv = -2; }, "additional key/value count must be >= 0, got -2");
  expect_problem_error([](Problem& p) { p.scale = -1.f; }, "scale must be > 0");
  expect_problem_error([](Problem& p) { p.scale = std::numeric_limits<float>::infinity(); }, "scale must be finite, got inf");
}

TEST(Validation, StaErrors) {
  expect_error([] { sta_axis_rule(StaAxis{30, 4, 12}, 2); }, "axis 2: STA extent must be a multiple of tile=4, got 30");
  expect_error([] { sta_axis_rule(StaAxis{32, 4, 10}, 0); }, "axis 0: STA window must be a multiple of tile=4, got 10");
  expect_error([] { sta_axis_rule(StaAxis{32, 4, 8}, 1); }, "axis 1: STA window/tile must be odd, got window=8 tile=4");
  expect_error([] { sta_axis_rule(StaAxis{32, 4, 36}, 0); }, "axis 0: STA window must be <= extent=32, got 36");
  expect_error([] { sta_axis_rule(StaAxis{32, 0, 4}, 0); }, "axis 0: STA tile must be >= 1, got 0");
}

// Tensor-level checks through make_problem and the public API.
struct Tensors {
  HostTensor<float> q{{1, 6, 5, 2, 4}}, k{{1, 6, 5, 2, 4}}, v{{1, 6, 5, 2, 4}};
  HostTensor<float> out{{1, 6, 5, 2, 4}}, lse{{1, 6, 5, 2}};
  AttentionParams params;
  Tensors() {
    params.rank = 2;
    params.window[0] = 3;
    params.window[1] = 3;
  }
  AttentionTensors in() const { return AttentionTensors{q.ref, k.ref, v.ref}; }
};

TEST(Validation, TensorErrorsNameTensorAndShape) {
  {
    Tensors t;
    t.k.ref.shape[2] = 4;
    expect_error([&] { make_problem(t.params, t.in()); }, "key: expected shape [1, 6, 5, 2, 4], got [1, 6, 4, 2, 4]");
  }
  {
    Tensors t;
    t.v.ref.dtype = DType::f64;
    expect_error([&] { make_problem(t.params, t.in()); }, "value: expected dtype float32, got float64");
  }
  {
    Tensors t;
    t.q.ref.strides[4] = 2;
    expect_error([&] { make_problem(t.params, t.in()); }, "query: last dimension must be contiguous (stride 1), got stride 2");
  }
  {
    Tensors t;
    t.k.ref.device = 0;
    expect_error([&] { make_problem(t.params, t.in()); }, "key: expected device -1 (-1 = host), got 0");
  }
  {
    Tensors t;
    t.params.rank = 3;
    expect_error([&] { make_problem(t.params, t.in()); }, "query: expected 6 dims");
  }
  {
    Tensors t;
    t.params.window[1] = 6;
    expect_error([&] { make_problem(t.params, t.in()); }, "axis 1: window*dilation must be <= extent=5, got window=6");
  }
  {
    Tensors t;
    HostTensor<float> ak({1, 3, 2, 4});
    AttentionTensors in = t.in();
    in.additional_k = &ak.ref;
    expect_error([&] { make_problem(t.params, in); }, "additional keys and additional values must be given together");
  }
  {
    Tensors t;
    HostTensor<float> bad_out({1, 6, 5, 2, 3});
    expect_error([&] { attention_forward(t.params, t.in(), bad_out.ref, nullptr); }, "out: expected shape [1, 6, 5, 2, 4], got [1, 6, 5, 2, 3]");
  }
  {
    Tensors t;
    CallOptions o;
    o.backend = "nonexistent";
    expect_error([&] { attention_forward(t.params, t.in(), t.out.ref, nullptr, o); }, "backend: unknown backend 'nonexistent'");
  }
}

TEST(Validation, ErrorKindsDistinguishUnsupported) {
  // Valid half-precision host tensors: no host backend runs them; dispatch says why.
  Tensors t;
  for (TensorRef* r : {&t.q.ref, &t.k.ref, &t.v.ref, &t.out.ref}) r->dtype = DType::f16;
  try {
    attention_forward(t.params, t.in(), t.out.ref, nullptr);
    ADD_FAILURE() << "expected unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("reference: host tensors must be float32 or float64, got float16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gna::test
