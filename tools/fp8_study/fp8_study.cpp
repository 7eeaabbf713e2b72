// gna-fp8-study: cosine similarity and relative L1 error against float64 attention of ways to
// quantize attention to 8 bits, on 1-D neighborhood attention (640 tokens, a 129-key window)
// over the DiT-like inputs of the accuracy contract (tests/support/dit_inputs.hpp), 12 seeds per
// row. P and V are e4m3 in every variant (P per row at 448, V per channel), so the rows differ
// in how Q and K reach the QK product:
//   e4m3 per token     the scheme: Q and K per token and head, K smoothed by its mean
//   e4m3 per 64 tokens one scale per block of 64 tokens (what a per-tile scale gives)
//   e4m3 unsmoothed    per token, K not smoothed
//   int8 per token     Q and K in int8 per token (SageAttention's QK), K smoothed
//   bf16 QK            Q and K in bf16 (FP8 for PV only)
//   e4m3 + residual    per token, and the rounding error quantized again: three e4m3 GEMMs
// gna-fp8-study --running-max: how far a fused kernel's running maximum (P rounded against the
// maximum so far, then rescaled) takes the output from the reference's global maximum, on 3,000
// random rows of 2 to 401 keys of random e4m3 operands: the largest normalized difference.
// Deterministic.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gna/core/fp8.hpp"
#include "support/dit_inputs.hpp"

namespace {

using gna::e4m3_encode;
using gna::e4m3_inverse_scale;
using gna::e4m3_scale;
using gna::e4m3_to_float;

enum class Variant { per_token, per_block, unsmoothed, int8, bf16, residual };
const char* name_of(Variant v) {
  switch (v) {
    case Variant::per_token: return "e4m3 per token";
    case Variant::per_block: return "e4m3 per 64 tokens";
    case Variant::unsmoothed: return "e4m3 unsmoothed";
    case Variant::int8: return "int8 per token";
    case Variant::bf16: return "bf16 QK";
    case Variant::residual: return "e4m3 + residual";
  }
  return "";
}

float bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// Dequantized copies of rows [tokens, dim] (x - shift) as the variant represents them.
std::vector<float> represent(const std::vector<float>& x, const std::vector<float>& shift,
                             int tokens, int dim, Variant v) {
  std::vector<float> out(x.size());
  const int block = v == Variant::per_block ? 64 : 1;
  for (int t0 = 0; t0 < tokens; t0 += block) {
    const int t1 = std::min(tokens, t0 + block);
    float amax = 0;
    for (int t = t0; t < t1; ++t)
      for (int d = 0; d < dim; ++d) amax = std::max(amax, std::fabs(x[t * dim + d] - shift[d]));
    for (int t = t0; t < t1; ++t)
      for (int d = 0; d < dim; ++d) {
        const float y = x[t * dim + d] - shift[d];
        float& o = out[t * dim + d];
        if (v == Variant::int8) {
          const float s = amax > 0 ? amax / 127.f : 1.f;
          o = std::nearbyint(y / s) * s;
        } else if (v == Variant::bf16) {
          o = bf16_round(y);
        } else {
          const float s = e4m3_scale(amax);
          o = e4m3_to_float(e4m3_encode(y, e4m3_inverse_scale(amax))) * s;
        }
      }
    if (v == Variant::residual)  // the rounding error, per token, in e4m3 again
      for (int t = t0; t < t1; ++t) {
        float ramax = 0;
        for (int d = 0; d < dim; ++d)
          ramax = std::max(ramax, std::fabs(x[t * dim + d] - shift[d] - out[t * dim + d]));
        const float s = e4m3_scale(ramax), inverse = e4m3_inverse_scale(ramax);
        for (int d = 0; d < dim; ++d) {
          const float r = x[t * dim + d] - shift[d] - out[t * dim + d];
          out[t * dim + d] += e4m3_to_float(e4m3_encode(r, inverse)) * s;
        }
      }
  }
  return out;
}

struct Result {
  double mean_cos = 0, worst_cos = 1, worst_l1 = 0;
};

Result study(const gna::test::DitRegime& regime, gna::test::OutlierChannels where, int dim,
             Variant variant) {
  const int tokens = 640, window = 129, seeds = 12;
  Result r;
  for (int seed = 0; seed < seeds; ++seed) {
    std::mt19937_64 rng(1000 + seed);
    std::vector<float> q, k, v;
    gna::test::fill_dit_like(rng, regime, 1, tokens, 1, 1, dim, dim, q, k, v, where);
    std::vector<float> mean(dim, 0.f), zero(dim, 0.f);
    if (variant != Variant::unsmoothed)
      for (int t = 0; t < tokens; ++t)
        for (int d = 0; d < dim; ++d) mean[d] += k[t * dim + d] / tokens;
    const std::vector<float> qd = represent(q, zero, tokens, dim, variant);
    const std::vector<float> kd = represent(k, mean, tokens, dim, variant);
    std::vector<float> v_amax(dim, 0.f), vd(v.size());
    for (int d = 0; d < dim; ++d)
      for (int t = 0; t < tokens; ++t) v_amax[d] = std::max(v_amax[d], std::fabs(v[t * dim + d]));
    for (int t = 0; t < tokens; ++t)
      for (int d = 0; d < dim; ++d)
        vd[t * dim + d] = e4m3_to_float(e4m3_encode(v[t * dim + d], e4m3_inverse_scale(v_amax[d]))) *
                          e4m3_scale(v_amax[d]);
    const double scale = 1.0 / std::sqrt(double(dim));
    double dot = 0, aa = 0, bb = 0, l1 = 0, ref = 0;
    std::vector<double> s64(window), s8(window), o64(dim), o8(dim);
    for (int i = 0; i < tokens; ++i) {
      const int start = std::clamp(i - window / 2, 0, tokens - window);
      double m64 = -1e300, m8 = -1e300;
      for (int j = 0; j < window; ++j) {
        double a = 0, b = 0;
        for (int d = 0; d < dim; ++d) {
          a += double(q[i * dim + d]) * k[(start + j) * dim + d];
          b += double(qd[i * dim + d]) * kd[(start + j) * dim + d];
        }
        s64[j] = a * scale;
        s8[j] = b * scale;
        m64 = std::max(m64, s64[j]);
        m8 = std::max(m8, s8[j]);
      }
      std::fill(o64.begin(), o64.end(), 0.0);
      std::fill(o8.begin(), o8.end(), 0.0);
      double l64 = 0, l8 = 0;
      for (int j = 0; j < window; ++j) {
        const double p = std::exp(s64[j] - m64);
        const float w = std::exp(float(s8[j] - m8));
        const double p8 = e4m3_to_float(gna::e4m3_probability(w)) / 448.0;
        l64 += p;
        l8 += w;
        for (int d = 0; d < dim; ++d) {
          o64[d] += p * v[(start + j) * dim + d];
          o8[d] += p8 * vd[(start + j) * dim + d];
        }
      }
      for (int d = 0; d < dim; ++d) {
        const double x = o8[d] / l8, y = o64[d] / l64;
        dot += x * y;
        aa += x * x;
        bb += y * y;
        l1 += std::fabs(x - y);
        ref += std::fabs(y);
      }
    }
    const double cosine = dot / std::sqrt(aa * bb);
    r.mean_cos += cosine / seeds;
    r.worst_cos = std::min(r.worst_cos, cosine);
    r.worst_l1 = std::max(r.worst_l1, l1 / ref);
  }
  return r;
}

// Largest max|running - global| / max|global| over random rows, and the largest LSE difference.
void running_max_study() {
  std::mt19937_64 rng(5);
  double worst = 0, worst_lse = 0;
  auto value = [&] { return e4m3_to_float(gna::e4m3_from_float(float(int(rng() % 129) - 64) * 7.f)); };
  for (int trial = 0; trial < 3000; ++trial) {
    const int keys = 2 + int(rng() % 400), dim = rng() % 2 ? 64 : 128;
    std::vector<float> q(dim), k(size_t(keys) * dim), v(k.size()), k_scale(keys);
    for (float& x : q) x = value();
    for (float& x : k) x = value();
    for (float& x : v) x = value();
    for (float& x : k_scale) x = (1 + float(rng() % 100) / 100.f) / 448.f;
    const float row_scale = 1.f / std::sqrt(float(dim)) / 448.f;
    std::vector<float> s(keys);
    float m = -INFINITY;
    for (int j = 0; j < keys; ++j) {
      double dot = 0;
      for (int c = 0; c < dim; ++c) dot += double(q[c]) * k[size_t(j) * dim + c];
      s[j] = row_scale * k_scale[j] * float(dot);
      m = std::max(m, s[j]);
    }
    std::vector<double> global(dim, 0.0), running(dim, 0.0);
    double l = 0;
    float lr = 0, mr = -INFINITY;
    for (int j = 0; j < keys; ++j) {
      const float w = std::exp(s[j] - m);
      l += w;
      const double p8 = e4m3_to_float(gna::e4m3_probability(w));
      for (int c = 0; c < dim; ++c) global[c] += p8 * v[size_t(j) * dim + c];
    }
    for (int j = 0; j < keys; ++j) {
      const float m_new = std::max(mr, s[j]), correction = std::exp(mr - m_new);
      const float w = std::exp(s[j] - m_new);
      const float p8 = e4m3_to_float(gna::e4m3_probability(w));
      lr = lr * correction + w;
      for (int c = 0; c < dim; ++c) running[c] = running[c] * correction + p8 * v[size_t(j) * dim + c];
      mr = m_new;
    }
    double err = 0, largest = 1e-30;
    for (int c = 0; c < dim; ++c) {
      err = std::max(err, std::fabs(global[c] / l - running[c] / lr));
      largest = std::max(largest, std::fabs(global[c] / l));
    }
    worst = std::max(worst, err / largest);
    worst_lse = std::max(worst_lse, std::fabs(double(m) + std::log(l) - double(mr) - std::log(double(lr))));
  }
  std::printf("running vs global maximum: largest normalized output difference %.4f, largest "
              "LSE difference %.2e\n", worst, worst_lse);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--running-max") == 0) {
    running_max_study();
    return 0;
  }
  if (argc > 1) {
    std::fprintf(stderr, "usage: gna-fp8-study [--running-max]\n");
    return 2;
  }
  using gna::test::OutlierChannels;
  std::printf("%-9s %-8s %4s %-19s %9s %9s %8s\n", "channels", "inputs", "D", "variant",
              "mean cos", "worst cos", "worst L1");
  for (OutlierChannels where : {OutlierChannels::distinct, OutlierChannels::shared})
    for (const gna::test::DitRegime* regime : {&gna::test::kModerate, &gna::test::kExtreme})
      for (int dim : {64, 128})
        for (Variant v : {Variant::per_token, Variant::per_block, Variant::unsmoothed,
                          Variant::int8, Variant::bf16, Variant::residual}) {
          const Result r = study(*regime, where, dim, v);
          std::printf("%-9s %-8s %4d %-19s %9.5f %9.5f %8.4f\n",
                      where == OutlierChannels::shared ? "shared" : "distinct", regime->name, dim,
                      name_of(v), r.mean_cos, r.worst_cos, r.worst_l1);
          std::fflush(stdout);
        }
  return 0;
}
