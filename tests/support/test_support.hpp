// Test helpers: owning host tensors, fresh random seeds, random GNA configurations, and a
// literal transcription of the rule (docs/rule.md section 2.3) used as an independent oracle.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

#include "gna/attention_params.hpp"

namespace gna::test {

// Fresh seed per run (GNA_TEST_SEED pins it); tests print it in failure traces.
inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("GNA_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

inline int rand_int(std::mt19937_64& rng, int lo, int hi) {  // inclusive
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// A host tensor owning its storage (contiguous, or with padded strides when `gap` > 0 so that
// strided access paths are exercised).
template <typename T>
struct HostTensor {
  std::vector<T> storage;
  TensorRef ref;

  HostTensor() = default;
  explicit HostTensor(std::vector<int64_t> shape, int64_t gap = 0) {
    ref.dtype = std::is_same<T, double>::value ? DType::f64 : DType::f32;
    ref.rank = static_cast<int>(shape.size());
    int64_t stride = 1;
    for (int d = ref.rank - 1; d >= 0; --d) {
      ref.shape[d] = shape[d];
      ref.strides[d] = stride;
      stride *= shape[d] + (d == ref.rank - 1 ? 0 : gap);
    }
    storage.assign(static_cast<size_t>(std::max<int64_t>(stride, 1)), T(0));
    ref.data = storage.data();
  }
  // Element at a multi-index.
  T& at(std::initializer_list<int64_t> idx) {
    int64_t off = 0;
    int d = 0;
    for (int64_t i : idx) off += i * ref.strides[d++];
    return storage[off];
  }
  void fill_random(std::mt19937_64& rng, double scale = 1.0) {
    std::normal_distribution<double> dist(0.0, scale);
    for (auto& x : storage) x = static_cast<T>(dist(rng));
  }
  void poison() { std::fill(storage.begin(), storage.end(), std::numeric_limits<T>::quiet_NaN()); }
};

// docs/rule.md sections 2.2-2.3, transcribed literally (per axis, full coordinates).
inline bool literal_attends(int L, int K, int d, int s, bool causal, int i, int j) {
  const int g = i % d;
  if (j % d != g) return false;
  const int ip = i / d, jp = j / d;
  const int n = (L - g + d - 1) / d;
  const int left = K / 2;
  if (!causal) {
    const int leader = std::min((ip / s) * s + (s / 2), n - 1);
    const int start = std::clamp(leader - left, 0, n - K);
    return start <= jp && jp < start + K;
  }
  const int leader = std::min((ip / s) * s + s - 1, n - 1);
  const int start = std::max(leader - K + 1, 0);
  return start <= jp && jp <= ip;
}

inline bool literal_attends(const Problem& p, const int* x, const int* y) {
  for (int a = 0; a < p.rank; ++a) {
    const AxisRule& r = p.axes[a];
    if (!literal_attends(r.extent, r.window, r.dilation, r.stride, r.causal, x[a], y[a]))
      return false;
  }
  return true;
}

// A random valid axis: even and odd windows, strides with a partial last group, dilations that
// do not divide the extent, causal sometimes.
inline AxisRule random_axis(std::mt19937_64& rng, int max_extent = 24) {
  AxisRule a;
  a.dilation = rand_int(rng, 1, 3);
  a.window = rand_int(rng, 2, std::max(2, std::min(9, max_extent / a.dilation)));
  a.extent = rand_int(rng, a.window * a.dilation, std::max(a.window * a.dilation, max_extent));
  a.stride = rand_int(rng, 1, a.window);
  a.causal = rand_int(rng, 0, 3) == 0;
  return a;
}

inline Problem random_problem(std::mt19937_64& rng, int rank, int max_extent) {
  Problem p;
  p.rank = rank;
  for (int a = 0; a < rank; ++a) p.axes[a] = random_axis(rng, max_extent);
  return p;
}

inline void flat_to_coords(const Problem& p, int64_t t, int* x) {
  for (int a = p.rank - 1; a >= 0; --a) {
    x[a] = static_cast<int>(t % p.axes[a].extent);
    t /= p.axes[a].extent;
  }
}

inline std::string describe(const Problem& p) {
  std::string s = "rank " + std::to_string(p.rank);
  for (int a = 0; a < p.rank; ++a) {
    const AxisRule& r = p.axes[a];
    s += " | L=" + std::to_string(r.extent) + " K=" + std::to_string(r.window) +
         " d=" + std::to_string(r.dilation) + " s=" + std::to_string(r.stride) +
         " c=" + std::to_string(r.causal);
  }
  s += " | B=" + std::to_string(p.batch) + " Hq=" + std::to_string(p.heads_q) +
       " Hkv=" + std::to_string(p.heads_kv) + " D=" + std::to_string(p.dim_qk) +
       " Dv=" + std::to_string(p.dim_v) + " add=" + std::to_string(p.additional_kv);
  return s;
}

}  // namespace gna::test
