// e4m3 conversion (gna/core/fp8.hpp) against the format's definition: every code decoded from
// its fields, and every conversion the nearest code (ties to the even code) with saturation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "gna/core/fp8.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

// The value of a code from the OCP definition (bias 7, subnormals at exponent 0, S.1111.111 NaN).
double literal_e4m3(int code) {
  const int sign = code >> 7, exponent = (code >> 3) & 15, mantissa = code & 7;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = exponent == 0 ? std::ldexp(mantissa / 8.0, -6)
                                         : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

// The nearest finite code to x with saturation, ties to the code with an even mantissa.
int nearest_code(float x) {
  const double v = std::min(std::max(double(x), -448.0), 448.0);
  int best = -1;
  double best_error = 0;
  for (int code = 0; code < 256; ++code) {
    const double c = literal_e4m3(code);
    if (std::isnan(c) || (std::signbit(c) != std::signbit(x))) continue;
    const double error = std::fabs(c - v);
    if (best < 0 || error < best_error || (error == best_error && (code & 1) == 0)) {
      best = code;
      best_error = error;
    }
  }
  return best;
}

TEST(E4m3, DecodesEveryCode) {
  for (int code = 0; code < 256; ++code) {
    const double expected = literal_e4m3(code);
    const float got = e4m3_to_float(static_cast<uint8_t>(code));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << code;
    } else {
      EXPECT_EQ(double(got), expected) << code;
      EXPECT_EQ(std::signbit(got), code >= 128) << code;
    }
  }
  EXPECT_EQ(e4m3_to_float(0x7e), kE4m3Max);
}

TEST(E4m3, EncodesToTheNearestCodeWithTiesToEven) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<float> xs = {0.f, -0.f, 448.f, -448.f, 449.f, 463.99f, 464.f, 480.f, 1e30f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::denorm_min(), 1e-40f, 0.0009765625f,
                           0.00097656256f, 0.0029296875f, 0.015625f, 0.0146484375f};
  // Every code, and every midpoint between neighbours (the ties) and just beside it.
  for (int code = 0; code < 126; ++code) {
    const float c = static_cast<float>(literal_e4m3(code));
    const float next = static_cast<float>(literal_e4m3(code + 1));
    const float mid = 0.5f * (c + next);
    for (float x : {c, mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  std::uniform_real_distribution<float> log_magnitude(-14.f, 10.f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::exp2(log_magnitude(rng)) * (rand_int(rng, 0, 1) ? 1.f : -1.f);
    xs.push_back(x);
  }
  int ties = 0;
  for (float x : xs) {
    const int expected = nearest_code(x);
    ASSERT_EQ(int(e4m3_from_float(x)), expected) << "x = " << x;
    ASSERT_EQ(int(e4m3_from_float_portable(x)), expected) << "x = " << x;
    const double c = literal_e4m3(expected);
    ties += std::fabs(double(x)) < 448 && x != c &&
            std::fabs(x - c) == std::fabs(x - literal_e4m3(expected ^ 1));
  }
  EXPECT_GT(ties, 100);  // the tie-breaking path was reached (ties toward the upper neighbour)
  const uint8_t nan = e4m3_from_float(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7f, 0x7f);
}

TEST(E4m3, ScalesMapTheLargestMagnitudeTo448) {
  EXPECT_EQ(e4m3_scale(0.f), 1.f);
  EXPECT_EQ(e4m3_inverse_scale(0.f), 1.f);
  for (float amax : {1e-20f, 0.3f, 1.f, 7.f, 1e6f}) {
    const float scale = e4m3_scale(amax);
    EXPECT_EQ(scale, amax / 448.f);
    const float inverse = e4m3_inverse_scale(amax);
    EXPECT_EQ(inverse, 448.f / amax);
    EXPECT_EQ(int(e4m3_encode(amax, inverse)), 0x7e) << amax;
    EXPECT_EQ(int(e4m3_encode(-amax, inverse)), 0xfe) << amax;
  }
  EXPECT_EQ(int(e4m3_probability(1.f)), 0x7e);
  EXPECT_EQ(e4m3_to_float(e4m3_probability(0.5f)), 224.f);
}

}  // namespace
}  // namespace gna::test
