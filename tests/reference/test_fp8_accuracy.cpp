// The FP8 forward's accuracy contract (issue 33, docs/fp8.md) on the CPU: the reference's
// emulation of the scheme, reached through the public API with precision fp8, against float64
// attention over the same rule, on DiT-like inputs (outlier channels in Q and K, keys offset per
// channel) with fixed seeds. moderate: cosine >= 0.996 and relative L1 <= 0.08; extreme: cosine
// >= 0.99 and relative L1 <= 0.10. Met where Q's and K's outlier channels are distinct. Where
// they share channels the extreme inputs miss the cosine bound (docs/fp8.md: e4m3's 3-bit
// mantissa on the outlier products; what would meet it is measured there): that case is held to
// the figures measured, so that a change for the worse fails.
#include <gtest/gtest.h>

#include <cstdio>

#include "gna/gna.hpp"
#include "support/dit_inputs.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

struct AccuracyCase {
  const char* name;
  int rank;
  int extent[3], window[3], stride[3], dilation[3];
  bool causal[3];
  int additional;
};

// Windows of 121 to 129 keys (what the scheme's figures in issue 33 were taken with).
const AccuracyCase kCases[] = {
    {"1d na", 1, {640}, {129}, {1}, {1}, {false}, 0},
    {"1d strided", 1, {640}, {129}, {16}, {1}, {false}, 0},
    {"1d dilated", 1, {640}, {65}, {1}, {4}, {false}, 0},
    {"1d causal", 1, {640}, {129}, {1}, {1}, {true}, 0},
    {"2d na", 2, {24, 24}, {11, 11}, {1, 1}, {1, 1}, {false, false}, 0},
    {"2d strided+extra", 2, {24, 24}, {11, 11}, {4, 4}, {1, 1}, {false, false}, 32},
    {"3d na", 3, {6, 10, 10}, {5, 5, 5}, {1, 1, 1}, {1, 1, 1}, {false, false, false}, 0},
    {"3d dilated causal", 3, {6, 12, 12}, {3, 5, 5}, {1, 1, 1}, {1, 2, 2}, {true, false, false}, 0},
};

struct Measured {
  Agreement out;
  double lse_error;
};

Measured measure(const AccuracyCase& c, const DitRegime& regime, OutlierChannels where, int dim,
                 uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int heads_q = 2, heads_kv = 1;
  AttentionParams params;
  params.rank = c.rank;
  std::vector<int64_t> token_shape = {1};
  int64_t tokens = 1;
  for (int a = 0; a < c.rank; ++a) {
    params.window[a] = c.window[a];
    params.stride[a] = c.stride[a];
    params.dilation[a] = c.dilation[a];
    params.causal[a] = c.causal[a];
    token_shape.push_back(c.extent[a]);
    tokens *= c.extent[a];
  }
  std::vector<float> q, k, v;
  fill_dit_like(rng, regime, 1, tokens + c.additional, heads_q, heads_kv, dim, dim, q, k, v, where);
  auto shape = [&](int heads) {
    std::vector<int64_t> s = token_shape;
    s.push_back(heads);
    s.push_back(dim);
    return s;
  };
  // Single and double copies of the spatial tokens, then of the additional ones.
  std::vector<double> q64(q.begin(), q.end()), k64(k.begin(), k.end()), v64(v.begin(), v.end());
  const int64_t kv_split = tokens * heads_kv * dim;
  auto view = [&](auto* data, DType t, std::vector<int64_t> s) {
    return contiguous_tensor(data, t, s.data(), int(s.size()));
  };
  AttentionTensors in32, in64;
  in32.q = view(q.data(), DType::f32, shape(heads_q));
  in32.k = view(k.data(), DType::f32, shape(heads_kv));
  in32.v = view(v.data(), DType::f32, shape(heads_kv));
  in64.q = view(q64.data(), DType::f64, shape(heads_q));
  in64.k = view(k64.data(), DType::f64, shape(heads_kv));
  in64.v = view(v64.data(), DType::f64, shape(heads_kv));
  TensorRef ak32, av32, ak64, av64;
  if (c.additional > 0) {
    const std::vector<int64_t> s = {1, c.additional, heads_kv, dim};
    ak32 = view(k.data() + kv_split, DType::f32, s);
    av32 = view(v.data() + kv_split, DType::f32, s);
    ak64 = view(k64.data() + kv_split, DType::f64, s);
    av64 = view(v64.data() + kv_split, DType::f64, s);
    in32.additional_k = &ak32;
    in32.additional_v = &av32;
    in64.additional_k = &ak64;
    in64.additional_v = &av64;
  }
  const size_t out_n = size_t(tokens) * heads_q * dim;
  std::vector<float> out(out_n, NAN), lse(tokens * heads_q, NAN);
  std::vector<double> out64(out_n, NAN), lse64(tokens * heads_q, NAN);
  TensorRef o = view(out.data(), DType::f32, shape(heads_q));
  TensorRef o64 = view(out64.data(), DType::f64, shape(heads_q));
  std::vector<int64_t> lse_shape = token_shape;
  lse_shape.push_back(heads_q);
  TensorRef l = view(lse.data(), DType::f32, lse_shape);
  TensorRef l64 = view(lse64.data(), DType::f64, lse_shape);
  CallOptions fp8;
  fp8.precision = Precision::fp8;
  attention_forward(params, in32, o, &l, fp8);
  attention_forward(params, in64, o64, &l64);
  Measured m{agreement(out.data(), out64.data(), out_n), 0};
  for (size_t i = 0; i < lse.size(); ++i) m.lse_error += std::abs(lse[i] - lse64[i]) / lse.size();
  return m;
}

struct Bounds {
  double min_cosine, max_l1, max_lse_error;
};

void check_all_cases(OutlierChannels where, Bounds moderate, Bounds extreme) {
  std::printf("%-20s %-9s %4s %9s %8s %12s\n", "case", "inputs", "D", "cosine", "rel L1",
              "mean |dLSE|");
  uint64_t seed = 33;
  for (const DitRegime* regime : {&kModerate, &kExtreme}) {
    const Bounds& bounds = regime == &kModerate ? moderate : extreme;
    for (int dim : {64, 128})
      for (const AccuracyCase& c : kCases) {
        const Measured m = measure(c, *regime, where, dim, ++seed);
        std::printf("%-20s %-9s %4d %9.5f %8.4f %12.5f\n", c.name, regime->name, dim,
                    m.out.cosine, m.out.relative_l1, m.lse_error);
        SCOPED_TRACE(std::string(c.name) + " " + regime->name + " D=" + std::to_string(dim));
        EXPECT_GE(m.out.cosine, bounds.min_cosine);
        EXPECT_LE(m.out.relative_l1, bounds.max_l1);
        EXPECT_LE(m.lse_error, bounds.max_lse_error);
      }
  }
}

TEST(Fp8Accuracy, MeetsTheContractWithDistinctOutlierChannels) {
  check_all_cases(OutlierChannels::distinct, {0.996, 0.08, 0.08}, {0.99, 0.10, 0.8});
}

// The contract's extreme cosine (0.99) is missed here; the bounds are the measured figures.
TEST(Fp8Accuracy, SharedOutlierChannelsMissTheExtremeCosine) {
  check_all_cases(OutlierChannels::shared, {0.996, 0.08, 0.3}, {0.96, 0.10, 15.0});
}

}  // namespace
}  // namespace gna::test
