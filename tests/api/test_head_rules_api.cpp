// Per-head rules through the C ABI (gna_*_heads, ABI version 4): the same results as the C++ API,
// NULL rules as the plain entry points, messages naming the parameter and the value, and
// dispatch's refusal of a backend that does not run them (this binary registers one).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "gna/gna.h"
#include "gna/gna.hpp"
#include "support/c_tensor.hpp"
#include "support/counting_backend.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

int plain_calls = 0;  // calls the backend below ran

// A host backend below the reference that runs only problems without head rules (it says
// nothing about them: dispatch must refuse them for it).
Backend make_backend_without_head_rules() {
  return counting_host_backend("no_head_rules", -100, &plain_calls);
}
GNA_REGISTER_BACKEND(make_backend_without_head_rules);

// A 2-D layout 7x6 with 4 query heads over 2 KV heads and two additional tokens; group 0 a
// causal dilated window, group 1 a strided one; heads 0 and 3 in group 1 (KV heads shared
// across groups).
struct Call {
  HostTensor<double> q{{2, 7, 6, 4, 3}}, k{{2, 7, 6, 2, 3}}, v{{2, 7, 6, 2, 5}};
  HostTensor<double> ak{{2, 2, 2, 3}}, av{{2, 2, 2, 5}};
  HostTensor<double> out{{2, 7, 6, 4, 5}}, lse{{2, 7, 6, 4}}, d_out{{2, 7, 6, 4, 5}};
  HostTensor<double> dq{{2, 7, 6, 4, 3}}, dk{{2, 7, 6, 2, 3}}, dv{{2, 7, 6, 2, 5}};
  HostTensor<double> dak{{2, 2, 2, 3}}, dav{{2, 2, 2, 5}};
  std::vector<int32_t> group_of_head{1, 0, 0, 1};
  gna_params params{};
  gna_head_rules rules{};
  gna_tensor c[15];
  enum { Q, K, V, AK, AV, OUT, LSE, DOUT, DQ, DK, DV, DAK, DAV };

  explicit Call(std::mt19937_64& rng) {
    for (auto* t : {&q, &k, &v, &ak, &av, &d_out}) t->fill_random(rng);
    params.rank = 2;
    for (int i = 0; i < 2; ++i) {  // the plain call's rule (not read with head rules)
      params.window[i] = 3;
      params.stride[i] = params.dilation[i] = 1;
    }
    rules.groups = 2;
    rules.heads = 4;
    rules.window[0][0] = 3, rules.window[0][1] = 2;
    rules.dilation[0][0] = 2, rules.dilation[0][1] = 1;
    rules.stride[0][0] = 1, rules.stride[0][1] = 1;
    rules.causal[0][0] = 1, rules.causal[0][1] = 0;
    rules.window[1][0] = 4, rules.window[1][1] = 5;
    rules.dilation[1][0] = 1, rules.dilation[1][1] = 1;
    rules.stride[1][0] = 2, rules.stride[1][1] = 3;
    rules.group_of_head = group_of_head.data();
    const HostTensor<double>* all[] = {&q, &k, &v, &ak, &av, &out, &lse, &d_out,
                                       &dq, &dk, &dv, &dak, &dav};
    for (int i = 0; i <= DAV; ++i) c[i] = to_c(all[i]->ref);
  }
  AttentionParams cpp_params() const {
    AttentionParams a;
    a.rank = 2;
    for (int g = 0; g < rules.groups; ++g) {
      HeadGroupRule r;
      for (int i = 0; i < 2; ++i) {
        r.window[i] = rules.window[g][i];
        r.stride[i] = rules.stride[g][i];
        r.dilation[i] = rules.dilation[g][i];
        r.causal[i] = rules.causal[g][i] != 0;
      }
      a.head_groups.push_back(r);
    }
    a.group_of_head.assign(group_of_head.begin(), group_of_head.end());
    return a;
  }
  gna_status forward(const gna_head_rules* r, const gna_options* o = nullptr) {
    return gna_forward_heads(&params, r, &c[Q], &c[K], &c[V], &c[AK], &c[AV], &c[OUT], &c[LSE], o);
  }
  gna_status backward(const gna_head_rules* r, const gna_options* o = nullptr) {
    return gna_backward_heads(&params, r, &c[Q], &c[K], &c[V], &c[AK], &c[AV], &c[OUT], &c[LSE],
                              &c[DOUT], &c[DQ], &c[DK], &c[DV], &c[DAK], &c[DAV], o);
  }
  gna_status validate(const gna_head_rules* r) {
    return gna_validate_heads(&params, r, &c[Q], &c[K], &c[V], &c[AK], &c[AV]);
  }
};

TEST(CAbiHeadRules, Version) { EXPECT_GE(gna_abi_version(), 4); }  // head rules came in version 4

TEST(CAbiHeadRules, EqualTheCppApi) {
  std::mt19937_64 rng(fresh_seed());
  Call call(rng);
  ASSERT_EQ(call.forward(&call.rules), GNA_STATUS_OK) << gna_last_error();
  ASSERT_EQ(call.backward(&call.rules), GNA_STATUS_OK) << gna_last_error();
  HostTensor<double> out({2, 7, 6, 4, 5}), lse({2, 7, 6, 4});
  HostTensor<double> dq({2, 7, 6, 4, 3}), dk({2, 7, 6, 2, 3}), dv({2, 7, 6, 2, 5});
  HostTensor<double> dak({2, 2, 2, 3}), dav({2, 2, 2, 5});
  const AttentionTensors in{call.q.ref, call.k.ref, call.v.ref, &call.ak.ref, &call.av.ref};
  attention_forward(call.cpp_params(), in, out.ref, &lse.ref);
  AttentionGradients g{dq.ref, dk.ref, dv.ref, &dak.ref, &dav.ref};
  attention_backward(call.cpp_params(), in, out.ref, lse.ref, call.d_out.ref, g);
  EXPECT_EQ(call.out.storage, out.storage);
  EXPECT_EQ(call.lse.storage, lse.storage);
  EXPECT_EQ(call.dq.storage, dq.storage);
  EXPECT_EQ(call.dk.storage, dk.storage);
  EXPECT_EQ(call.dv.storage, dv.storage);
  EXPECT_EQ(call.dak.storage, dak.storage);
  EXPECT_EQ(call.dav.storage, dav.storage);
  // The rules matter: the plain call (params' own 3x3 window) differs.
  ASSERT_EQ(call.forward(nullptr), GNA_STATUS_OK) << gna_last_error();
  EXPECT_NE(call.out.storage, out.storage);
  char name[32];
  ASSERT_EQ(gna_select_backend_heads(&call.params, &call.rules, &call.c[Call::Q], &call.c[Call::K],
                                     &call.c[Call::V], &call.c[Call::AK], &call.c[Call::AV], 1,
                                     nullptr, name, sizeof name),
            GNA_STATUS_OK)
      << gna_last_error();
  EXPECT_STREQ(name, "reference");
}

TEST(CAbiHeadRules, NullRulesAreThePlainCalls) {
  std::mt19937_64 rng(fresh_seed());
  Call a(rng), b(rng);
  b.q.storage = a.q.storage, b.k.storage = a.k.storage, b.v.storage = a.v.storage;
  b.ak.storage = a.ak.storage, b.av.storage = a.av.storage, b.d_out.storage = a.d_out.storage;
  ASSERT_EQ(a.forward(nullptr), GNA_STATUS_OK) << gna_last_error();
  ASSERT_EQ(a.backward(nullptr), GNA_STATUS_OK) << gna_last_error();
  using C = Call;
  ASSERT_EQ(gna_forward(&b.params, &b.c[C::Q], &b.c[C::K], &b.c[C::V], &b.c[C::AK], &b.c[C::AV],
                        &b.c[C::OUT], &b.c[C::LSE], nullptr),
            GNA_STATUS_OK);
  ASSERT_EQ(gna_backward(&b.params, &b.c[C::Q], &b.c[C::K], &b.c[C::V], &b.c[C::AK], &b.c[C::AV],
                         &b.c[C::OUT], &b.c[C::LSE], &b.c[C::DOUT], &b.c[C::DQ], &b.c[C::DK],
                         &b.c[C::DV], &b.c[C::DAK], &b.c[C::DAV], nullptr),
            GNA_STATUS_OK);
  EXPECT_EQ(a.out.storage, b.out.storage);
  EXPECT_EQ(a.dq.storage, b.dq.storage);
  EXPECT_EQ(a.dk.storage, b.dk.storage);
  EXPECT_EQ(a.dav.storage, b.dav.storage);
}

TEST(CAbiHeadRules, ErrorsNameTheParameterAndValue) {
  std::mt19937_64 rng(fresh_seed());
  struct Case {
    const char* what;
    void (*mutate)(Call&);
    const char* message;
  };
  const Case cases[] = {
      {"no groups", [](Call& c) { c.rules.groups = 0; }, "head rules: groups must be in [1, 8], got 0"},
      {"too many groups", [](Call& c) { c.rules.groups = 9; }, "head rules: groups must be in [1, 8], got 9"},
      {"no heads", [](Call& c) { c.rules.heads = 0; }, "head rules: heads (entries of group_of_head) must be in [1, 256], got 0"},
      {"too many heads", [](Call& c) { c.rules.heads = 300; }, "head rules: heads (entries of group_of_head) must be in [1, 256], got 300"},
      {"heads not the query's", [](Call& c) { c.rules.heads = 3; }, "head rules: group_of_head must hold one group per query head (4), got 3 entries"},
      {"map NULL", [](Call& c) { c.rules.group_of_head = nullptr; }, "head rules: group_of_head is required, got NULL"},
      {"group past groups", [](Call& c) { c.group_of_head[2] = 2; }, "head rules: group of head 2 must be in [0, 2), got 2"},
      {"negative group", [](Call& c) { c.group_of_head[3] = -4; }, "head rules: group of head 3 must be in [0, 2), got -4"},
      {"window past extent", [](Call& c) { c.rules.window[1][0] = 8; }, "head rules: group 1 axis 0: window*dilation must be <= extent=7, got window=8 dilation=1"},
      {"window 1", [](Call& c) { c.rules.window[0][1] = 1; }, "head rules: group 0 axis 1: window (kernel_size) must be >= 2, got 1"},
      {"stride past window", [](Call& c) { c.rules.stride[1][1] = 6; }, "head rules: group 1 axis 1: stride must be in [1, window=5], got 6"},
      {"dilation 0", [](Call& c) { c.rules.dilation[0][0] = 0; }, "head rules: group 0 axis 0: dilation must be >= 1, got 0"},
  };
  for (const Case& k : cases) {
    Call call(rng);
    k.mutate(call);
    for (int entry = 0; entry < 4; ++entry) {
      char name[32];
      const gna_status st =
          entry == 0 ? call.validate(&call.rules)
          : entry == 1 ? call.forward(&call.rules)
          : entry == 2 ? call.backward(&call.rules)
                       : gna_select_backend_heads(&call.params, &call.rules, &call.c[Call::Q],
                                                  &call.c[Call::K], &call.c[Call::V],
                                                  &call.c[Call::AK], &call.c[Call::AV], 0,
                                                  nullptr, name, sizeof name);
      EXPECT_EQ(st, GNA_STATUS_INVALID_ARGUMENT) << k.what << " entry " << entry;
      EXPECT_NE(std::strstr(gna_last_error(), k.message), nullptr)
          << k.what << " entry " << entry << ": " << gna_last_error()
          << "\nexpected to contain: " << k.message;
    }
  }
}

TEST(DispatchHeadRules, BackendWithoutHeadRulesIsRefusedByName) {
  std::mt19937_64 rng(fresh_seed());
  Call call(rng);
  gna_options o{};
  o.backend = "no_head_rules";
  plain_calls = 0;
  ASSERT_EQ(call.forward(nullptr, &o), GNA_STATUS_OK) << gna_last_error();  // it runs plain calls
  EXPECT_EQ(plain_calls, 1);
  EXPECT_EQ(call.forward(&call.rules, &o), GNA_STATUS_UNSUPPORTED);
  EXPECT_NE(std::strstr(gna_last_error(),
                        "no_head_rules: does not run per-head rules (head_rules.groups=2)"),
            nullptr)
      << gna_last_error();
  EXPECT_EQ(call.backward(&call.rules, &o), GNA_STATUS_UNSUPPORTED);
  EXPECT_NE(std::strstr(gna_last_error(), "no_head_rules: does not run per-head rules"), nullptr)
      << gna_last_error();
  char name[32];
  EXPECT_EQ(gna_select_backend_heads(&call.params, &call.rules, &call.c[Call::Q], &call.c[Call::K],
                                     &call.c[Call::V], &call.c[Call::AK], &call.c[Call::AV], 0, &o,
                                     name, sizeof name),
            GNA_STATUS_UNSUPPORTED);
  EXPECT_EQ(plain_calls, 1);
  // Automatic dispatch takes the reference, which runs them.
  EXPECT_EQ(call.forward(&call.rules), GNA_STATUS_OK) << gna_last_error();
}

}  // namespace
}  // namespace gna::test
