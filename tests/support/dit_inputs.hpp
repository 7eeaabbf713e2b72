// Inputs shaped like the activations of video / image DiTs (issue 33's accuracy contract): a few
// query and key channels much larger than the rest (outlier channels) and keys offset per
// channel (a shared bias that the FP8 scheme's key smoothing removes). Values stay N(0, 1).
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace gna::test {

struct DitRegime {
  const char* name;
  double outlier_low, outlier_high;  // factor of the outlier channels, uniform in [low, high]
  double key_offset_sigma;           // per-channel key offset ~ N(0, sigma^2)
};
inline constexpr DitRegime kModerate{"moderate", 3.0, 8.0, 3.0};
inline constexpr DitRegime kExtreme{"extreme", 20.0, 50.0, 5.0};
inline constexpr int kOutlierChannels = 3;

// Where the outlier channels of Q and of K lie: in 3 channels of each, distinct, or in the same
// 3 channels (their products then dominate the scores).
enum class OutlierChannels { distinct, shared };

// Fills heads-last q [.., Hq, D], k [.., Hk, D], v [.., Hk, Dv] (contiguous, `tokens` tokens per
// batch item, additional keys counted in) with the regime's statistics: per KV head, 3 channels
// of its query heads and 3 of its keys scaled, and one key offset per channel.
inline void fill_dit_like(std::mt19937_64& rng, const DitRegime& regime, int64_t batch,
                          int64_t tokens, int heads_q, int heads_kv, int dim, int dim_v,
                          std::vector<float>& q, std::vector<float>& k, std::vector<float>& v,
                          OutlierChannels where = OutlierChannels::distinct) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> factor(regime.outlier_low, regime.outlier_high);
  std::vector<double> q_gain(size_t(heads_kv) * dim, 1.0), k_gain(q_gain), k_offset(q_gain.size());
  for (int h = 0; h < heads_kv; ++h) {
    std::vector<int> channels(dim);
    for (int d = 0; d < dim; ++d) channels[d] = d;
    std::shuffle(channels.begin(), channels.end(), rng);
    const int k_first = where == OutlierChannels::shared ? 0 : kOutlierChannels;
    for (int c = 0; c < kOutlierChannels; ++c) {
      q_gain[h * dim + channels[c]] = factor(rng);
      k_gain[h * dim + channels[k_first + c]] = factor(rng);
    }
    for (int d = 0; d < dim; ++d) k_offset[h * dim + d] = regime.key_offset_sigma * normal(rng);
  }
  const int group = heads_q / heads_kv;
  q.resize(size_t(batch * tokens) * heads_q * dim);
  k.resize(size_t(batch * tokens) * heads_kv * dim);
  v.resize(size_t(batch * tokens) * heads_kv * dim_v);
  for (int64_t t = 0; t < batch * tokens; ++t) {
    for (int h = 0; h < heads_q; ++h)
      for (int d = 0; d < dim; ++d)
        q[(t * heads_q + h) * dim + d] = float(normal(rng) * q_gain[(h / group) * dim + d]);
    for (int h = 0; h < heads_kv; ++h) {
      for (int d = 0; d < dim; ++d)
        k[(t * heads_kv + h) * dim + d] =
            float(normal(rng) * k_gain[h * dim + d] + k_offset[h * dim + d]);
      for (int d = 0; d < dim_v; ++d) v[(t * heads_kv + h) * dim_v + d] = float(normal(rng));
    }
  }
}

// Cosine similarity and relative L1 error (sum |a - b| / sum |b|) of a against b.
struct Agreement {
  double cosine = 0, relative_l1 = 0;
};
template <typename A, typename B>
Agreement agreement(const A* a, const B* b, size_t n) {
  double dot = 0, aa = 0, bb = 0, l1 = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = double(a[i]), y = double(b[i]);
    dot += x * y;
    aa += x * x;
    bb += y * y;
    l1 += std::abs(x - y);
    ref += std::abs(y);
  }
  return {dot / std::sqrt(aa * bb), l1 / ref};
}

}  // namespace gna::test
