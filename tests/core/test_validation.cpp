// Every invalid input is rejected with a message naming the parameter and the value.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <type_traits>

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

// Two head-rule groups over good_problem()'s layout: group 1 a 3x3 window, heads 1 and 3.
Problem problem_with_head_rules() {
  Problem p = good_problem();
  p.head_rules.groups = 2;
  for (int a = 0; a < p.rank; ++a) {
    p.head_rules.axes[0][a] = p.axes[a];
    p.head_rules.axes[1][a] = AxisRule{p.axes[a].extent, 3, 1, 1, false};
  }
  p.head_rules.group_of_head[1] = p.head_rules.group_of_head[3] = 1;
  return p;
}

TEST(Validation, HeadRules) {
  EXPECT_NO_THROW(validate(problem_with_head_rules()));
  const auto expect_rules_error = [](auto mutate, const std::string& needle) {
    Problem p = problem_with_head_rules();
    mutate(p);
    expect_error([&] { validate(p); }, needle);
  };
  expect_rules_error([](Problem& p) { p.head_rules.groups = 9; },
                     "head rules: groups must be in [0, 8], got 9");
  expect_rules_error([](Problem& p) { p.head_rules.groups = -1; },
                     "head rules: groups must be in [0, 8], got -1");
  expect_rules_error([](Problem& p) { p.head_rules.group_of_head[2] = 2; },
                     "head rules: group of head 2 must be < groups=2, got 2");
  expect_rules_error([](Problem& p) { p.head_rules.axes[1][1].window = 13; },
                     "head rules: group 1 axis 1: window*dilation must be <= extent=12");
  expect_rules_error([](Problem& p) { p.head_rules.axes[1][0].extent = 15; },
                     "head rules: group 1 axis 0: extent must equal the layout's (16), got 15");
  expect_rules_error([](Problem& p) { p.heads_q = 258; p.heads_kv = 2; },
                     "head rules: query heads must be <= 256 with head rules, got 258");
}

TEST(HeadRules, HeadsFollowTheirGroup) {
  const Problem p = problem_with_head_rules();
  EXPECT_EQ(axes_of_head(p, 0), p.head_rules.axes[0]);
  EXPECT_EQ(axes_of_head(p, 1), p.head_rules.axes[1]);
  EXPECT_EQ(axes_of_head(p, 3)[1].window, 3);
  const Problem plain = good_problem();
  EXPECT_EQ(axes_of_head(plain, 3), plain.axes);
  const Problem g1 = problem_of_group(p, 1);
  EXPECT_EQ(g1.head_rules.groups, 0);
  EXPECT_EQ(g1.axes[0].window, 3);
  EXPECT_EQ(g1.axes[0].extent, 16);
  expect_error([&] { problem_of_group(p, 2); }, "head rules: group must be in [0, 2), got 2");
  // Mean keys per query: the heads' mean (2 heads at 5x4 windows' exact means, 2 at 3x3 = 9).
  const double mean = mean_keys_per_query(p);
  EXPECT_NEAR(mean, (mean_keys_per_query(problem_of_group(p, 0)) + 9.0) / 2, 1e-9);
  // The cache key tells problems apart by their head rules.
  Problem other = p;
  other.head_rules.group_of_head[2] = 1;
  EXPECT_NE(rule_signature(p), rule_signature(other));
  EXPECT_NE(rule_signature(p), rule_signature(good_problem()));
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

// Per-head rules through make_problem: Problem::head_rules filled with the query's extents,
// Problem::axes with group 0's rule, and what HeadRules cannot hold refused by name and value.
TEST(Validation, HeadRulesOfAttentionParams) {
  const auto with_rules = [] {
    Tensors t;
    HeadGroupRule wide, narrow;
    wide.window[0] = 5;
    wide.window[1] = 4;
    wide.stride[1] = 2;
    wide.causal[0] = true;
    narrow.window[0] = narrow.window[1] = 2;
    narrow.dilation[0] = 3;
    t.params.head_groups = {wide, narrow};
    t.params.group_of_head = {1, 0};
    return t;
  };
  {
    const Tensors t = with_rules();
    const Problem p = make_problem(t.params, t.in());
    ASSERT_EQ(p.head_rules.groups, 2);
    EXPECT_EQ(p.head_rules.group_of_head[0], 1);
    EXPECT_EQ(p.head_rules.group_of_head[1], 0);
    EXPECT_EQ(p.head_rules.axes[0][0].extent, 6);
    EXPECT_EQ(p.head_rules.axes[0][0].window, 5);
    EXPECT_TRUE(p.head_rules.axes[0][0].causal);
    EXPECT_EQ(p.head_rules.axes[0][1].stride, 2);
    EXPECT_EQ(p.head_rules.axes[1][1].extent, 5);
    EXPECT_EQ(p.head_rules.axes[1][0].dilation, 3);
    EXPECT_EQ(p.axes[0].window, 5);  // group 0's rule, not params.window (3)
    EXPECT_EQ(p.axes[1].window, 4);
    EXPECT_EQ(axes_of_head(p, 0)[0].dilation, 3);
  }
  const auto rules_error = [&](auto mutate, const std::string& needle) {
    Tensors t = with_rules();
    mutate(t.params);
    expect_error([&] { make_problem(t.params, t.in()); }, needle);
  };
  rules_error([](AttentionParams& a) { a.head_groups.resize(9); a.group_of_head = {0, 0}; },
              "head rules: groups must be in [1, 8], got 9");
  rules_error([](AttentionParams& a) { a.group_of_head = {0}; },
              "head rules: group_of_head must hold one group per query head (2), got 1 entries");
  rules_error([](AttentionParams& a) { a.group_of_head = {0, 1, 1}; },
              "head rules: group_of_head must hold one group per query head (2), got 3 entries");
  rules_error([](AttentionParams& a) { a.group_of_head[1] = -1; },
              "head rules: group of head 1 must be in [0, 2), got -1");
  rules_error([](AttentionParams& a) { a.group_of_head[0] = 2; },
              "head rules: group of head 0 must be in [0, 2), got 2");
  rules_error([](AttentionParams& a) { a.group_of_head[0] = 256 + 1; },
              "head rules: group of head 0 must be in [0, 2), got 257");
  rules_error([](AttentionParams& a) { a.head_groups[1].window[1] = 6; },
              "head rules: group 1 axis 1: window*dilation must be <= extent=5, got window=6");
  rules_error([](AttentionParams& a) { a.head_groups[0].stride[0] = 7; },
              "head rules: group 0 axis 0: stride must be in [1, window=5], got 7");
  rules_error([](AttentionParams& a) { a.head_groups[1].dilation[0] = 0; },
              "head rules: group 1 axis 0: dilation must be >= 1, got 0");
  rules_error([](AttentionParams& a) { a.head_groups.clear(); },
              "head rules: group_of_head must be empty without head groups, got 2 entries");
  {
    HostTensor<float> q({1, 6, 257, 2}), k({1, 6, 1, 2});
    AttentionParams a;
    a.window[0] = 3;
    a.head_groups.resize(1);
    a.group_of_head.assign(257, 0);
    expect_error([&] { make_problem(a, AttentionTensors{q.ref, k.ref, k.ref}); },
                 "head rules: query heads must be <= 256 with head rules, got 257");
  }
  {  // the unfused operators take one rule
    Tensors t = with_rules();
    HostTensor<float> q({1, 2, 6, 5, 4}), attn({1, 2, 6, 5, 9});
    expect_error([&] { na_qk(t.params, q.ref, q.ref, nullptr, attn.ref); },
                 "head rules: the unfused operators take one rule for every head, got 2 head groups");
  }
}

// Hostile tensor views: every one is refused with its name and value before anything is read.
TEST(Validation, HostileTensorViews) {
  const auto problem_error = [](auto mutate, const std::string& needle) {
    Tensors t;
    mutate(t);
    expect_error([&] { make_problem(t.params, t.in()); }, needle);
  };
  problem_error([](Tensors& t) { t.q.ref.data = nullptr; },
                "query: data pointer is null, got 240 elements of shape [1, 6, 5, 2, 4]");
  problem_error([](Tensors& t) { t.k.ref.shape[1] = -6; }, "key: size of dim 1 must be >= 0, got -6");
  problem_error([](Tensors& t) { t.v.ref.strides[0] = -1; }, "value: stride of dim 0 must be >= 0, got -1");
  problem_error([](Tensors& t) { t.q.ref.shape[0] = int64_t{1} << 40; t.q.ref.shape[1] = int64_t{1} << 30; },
                "query: the number of elements of shape [1099511627776, 1073741824, 5, 2, 4] overflows 64 bits");
  problem_error([](Tensors& t) { t.k.ref.strides[1] = int64_t{1} << 62; },
                "key: shape [1, 6, 5, 2, 4] with strides [240, 4611686018427387904, 8, 4, 1] reaches past 2^63 bytes");
  problem_error([](Tensors& t) { t.k.ref.strides[1] = int64_t{1} << 60; },  // 2^63 bytes of float32
                "reaches past 2^63 bytes");
  problem_error([](Tensors& t) { t.v.ref.strides[1] = int64_t{1} << 61; t.v.ref.shape[0] = 2; },
                "reaches past 2^63 bytes");
  problem_error([](Tensors& t) { t.q.ref.data = reinterpret_cast<char*>(t.q.ref.data) + 2; },
                "is not aligned to its 4-byte float32 elements");
  problem_error([](Tensors& t) { t.k.ref.dtype = static_cast<DType>(9); }, "key: unknown dtype code 9");
  problem_error([](Tensors& t) { t.q.ref.rank = 9; }, "query: expected 5 dims");
  problem_error([](Tensors& t) { t.q.ref.rank = 0; }, "query: expected 5 dims [batch, 2 spatial dims, heads, dim], got 0 dims");
  problem_error([](Tensors& t) { t.params.rank = 4; }, "rank must be 1, 2 or 3, got 4");
  problem_error([](Tensors& t) { t.params.rank = 0; }, "rank must be 1, 2 or 3, got 0");
  // Sizes past 32 bits are refused, not truncated (2^32 + 6 would wrap to 6).
  problem_error([](Tensors& t) { t.q.ref.shape[1] = (int64_t{1} << 32) + 6; t.q.ref.strides[1] = 0; },
                "query: size of dim 1 (extent) must be < 2^31, got 4294967302");
  problem_error([](Tensors& t) { t.k.ref.shape[3] = (int64_t{1} << 32) + 2; t.k.ref.strides[3] = 0; },
                "key: size of dim 3 (heads) must be < 2^31, got 4294967298");
  problem_error([](Tensors& t) { t.q.ref.shape[0] = 0; }, "batch must be >= 1, got 0");
  problem_error([](Tensors& t) { t.q.ref.shape[2] = 0; }, "axis 1: extent must be >= 1, got 0");
  problem_error([](Tensors& t) { t.q.ref.shape[4] = 0; }, "query/key head dim must be >= 1, got 0");
  // Broadcast views may describe more tokens than exist; the problem itself is bounded.
  problem_error([](Tensors& t) {
    for (auto* x : {&t.q.ref, &t.k.ref, &t.v.ref}) {
      x->shape[1] = x->shape[2] = 1 << 16;
      x->strides[1] = x->strides[2] = 0;
    }
  }, "tokens (the product of the extents) must be < 2^31, got extents 65536x65536");
  {  // additional keys with another head dim than the queries
    Tensors t;
    HostTensor<float> ak({1, 3, 2, 5}), av({1, 3, 2, 4});
    AttentionTensors in = t.in();
    in.additional_k = &ak.ref;
    in.additional_v = &av.ref;
    expect_error([&] { make_problem(t.params, in); },
                 "additional keys: expected shape [1, 3, 2, 4], got [1, 3, 2, 5]");
  }
}

TEST(Validation, ScaleMustBeFiniteAndNotNegative) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                    -0.5f}) {
    Tensors t;
    t.params.scale = bad;
    expect_error([&] { make_problem(t.params, t.in()); }, "scale must be");
  }
  Tensors t;
  t.params.scale = 0.f;  // the documented default: 1/sqrt(head dim)
  EXPECT_NO_THROW(make_problem(t.params, t.in()));
}

TEST(Validation, OutputsMustNotAliasInputsOrEachOther) {
  {
    Tensors t;
    expect_error([&] { attention_forward(t.params, t.in(), t.q.ref, nullptr); },
                 "out: shares memory with query (outputs must not overlap inputs or other outputs)");
  }
  {  // out overlapping lse
    Tensors t;
    TensorRef lse = t.lse.ref;
    lse.data = t.out.ref.data;
    expect_error([&] { attention_forward(t.params, t.in(), t.out.ref, &lse); }, "out: shares memory with lse");
  }
  {  // a broadcast (stride-0) output would write many results to one address
    Tensors t;
    t.out.ref.strides[1] = 0;
    expect_error([&] { attention_forward(t.params, t.in(), t.out.ref, nullptr); },
                 "out: elements overlap in memory (shape [1, 6, 5, 2, 4], strides [240, 0, 8, 4, 1])");
  }
  {  // backward: gradients alias each other or the incoming gradient
    Tensors t;
    HostTensor<float> d_out({1, 6, 5, 2, 4}), dq({1, 6, 5, 2, 4}), dk({1, 6, 5, 2, 4});
    AttentionGradients g{dq.ref, dk.ref, dq.ref};
    expect_error([&] { attention_backward(t.params, t.in(), t.out.ref, t.lse.ref, d_out.ref, g); },
                 "dq: shares memory with dv");
    AttentionGradients g2{d_out.ref, dk.ref, dq.ref};
    expect_error([&] { attention_backward(t.params, t.in(), t.out.ref, t.lse.ref, d_out.ref, g2); },
                 "dq: shares memory with d_out");
  }
  {  // disjoint views of one buffer are fine
    Tensors t;
    HostTensor<float> both({2, 6, 5, 2, 4});
    TensorRef out = both.ref;
    out.shape[0] = 1;
    HostTensor<float> lse({1, 6, 5, 2});
    EXPECT_NO_THROW(attention_forward(t.params, t.in(), out, &lse.ref));
  }
}

TEST(Validation, OptionsMustNotBeNegative) {
  Tensors t;
  CallOptions o;
  o.kernel.kv_tile.size[1] = -4;
  expect_error([&] { attention_forward(t.params, t.in(), t.out.ref, nullptr, o); },
               "options: kv_tile[1] must be >= 0 (0: the backend's choice), got -4");
  o.kernel.kv_tile.size[1] = 0;
  o.kernel.schedule.ctas = -1;
  expect_error([&] { attention_forward(t.params, t.in(), t.out.ref, nullptr, o); },
               "options: schedule.ctas must be >= 0 (0: one per SM), got -1");
  o.kernel.schedule.ctas = 0;
  o.kernel.kv_placements = static_cast<KvPlacements>(3);
  expect_error([&] { attention_forward(t.params, t.in(), t.out.ref, nullptr, o); },
               "options: kv_placements must be grid (0), placed (1) or either (2), got 3");
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

// One exception type for every kind, a std::runtime_error (not a logic error): what a caller
// catches does not depend on the kind, which kind() reports.
TEST(Validation, ErrorIsARuntimeErrorThatCarriesItsKind) {
  static_assert(std::is_base_of_v<std::runtime_error, Error>);
  static_assert(!std::is_base_of_v<std::logic_error, Error>);
  Problem p;
  p.axes[0].extent = 4;
  p.axes[0].window = 5;
  try {
    validate(p);
    ADD_FAILURE() << "expected invalid_argument";
  } catch (const std::runtime_error& e) {
    const Error* error = dynamic_cast<const Error*>(&e);
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(error->kind(), ErrorKind::invalid_argument);
  }
}

}  // namespace
}  // namespace gna::test
