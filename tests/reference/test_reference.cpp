// The CPU reference against dense attention with a materialized mask of the
// rule (docs/rule.md section 2, float64), against
// finite differences, and against plain softmax attention for window = extent.
#include <gtest/gtest.h>

#include "gna/gna.hpp"
#include "gna/reference/reference.hpp"
#include "support/test_support.hpp"

namespace gna::test {
namespace {

template <typename T>
struct Case {
  Problem p;
  HostTensor<T> q, k, v, ak, av, out, d_out, dq, dk, dv, dak, dav;
  HostTensor<T> lse;

  std::vector<int64_t> tok(int heads, int dim) const {
    std::vector<int64_t> s{p.batch};
    for (int a = 0; a < p.rank; ++a) s.push_back(p.axes[a].extent);
    s.push_back(heads);
    s.push_back(dim);
    return s;
  }
  Case(const Problem& prob, std::mt19937_64& rng, int64_t gap) : p(prob) {
    q = HostTensor<T>(tok(p.heads_q, p.dim_qk), gap);
    k = HostTensor<T>(tok(p.heads_kv, p.dim_qk), gap);
    v = HostTensor<T>(tok(p.heads_kv, p.dim_v), gap);
    out = HostTensor<T>(tok(p.heads_q, p.dim_v), gap);
    d_out = HostTensor<T>(tok(p.heads_q, p.dim_v));
    dq = HostTensor<T>(tok(p.heads_q, p.dim_qk));
    dk = HostTensor<T>(tok(p.heads_kv, p.dim_qk));
    dv = HostTensor<T>(tok(p.heads_kv, p.dim_v));
    std::vector<int64_t> ls = tok(p.heads_q, 1);
    ls.pop_back();
    lse = HostTensor<T>(ls);
    ak = HostTensor<T>({p.batch, std::max(p.additional_kv, 0), p.heads_kv, p.dim_qk});
    av = HostTensor<T>({p.batch, std::max(p.additional_kv, 0), p.heads_kv, p.dim_v});
    dak = HostTensor<T>({p.batch, p.additional_kv, p.heads_kv, p.dim_qk});
    dav = HostTensor<T>({p.batch, p.additional_kv, p.heads_kv, p.dim_v});
    for (auto* t : {&q, &k, &v, &ak, &av, &d_out}) t->fill_random(rng);
    for (auto* t : {&out, &dq, &dk, &dv, &dak, &dav, &lse}) t->poison();
  }
  AttentionTensors inputs() const {
    AttentionTensors in{q.ref, k.ref, v.ref};
    if (p.additional_kv > 0) {
      in.additional_k = &ak.ref;
      in.additional_v = &av.ref;
    }
    return in;
  }
  void forward() { reference::forward(p, inputs(), out.ref, &lse.ref); }
  void backward() {
    reference::Gradients g{dq.ref, dk.ref, dv.ref, &dak.ref, &dav.ref};
    reference::backward(p, inputs(), out.ref, lse.ref, d_out.ref, g);
  }
};

// Offsets of token row (b, t, h) in a heads-last tensor.
int64_t row(const TensorRef& t, const Problem& p, int64_t b, int64_t token, int64_t h) {
  int x[kMaxRank];
  flat_to_coords(p, token, x);
  int64_t off = b * t.strides[0] + h * t.strides[p.rank + 1];
  for (int a = 0; a < p.rank; ++a) off += x[a] * t.strides[1 + a];
  return off;
}

// Dense attention over all tokens with the rule's mask (and the additional keys unmasked):
// forward outputs and all gradients, by explicit matrices, in float64.
struct Dense {
  std::vector<double> out, lse, dq, dk, dv, dak, dav;
};

template <typename T>
Dense dense_attention(const Case<T>& c) {
  const Problem& p = c.p;
  const int64_t N = p.tokens(), A = p.additional_kv, M = N + A;
  const int G = p.heads_q / p.heads_kv;
  const double scale = effective_scale(p);
  Dense d;
  d.out.assign(p.batch * N * p.heads_q * p.dim_v, 0);
  d.lse.assign(p.batch * N * p.heads_q, 0);
  d.dq.assign(p.batch * N * p.heads_q * p.dim_qk, 0);
  d.dk.assign(p.batch * N * p.heads_kv * p.dim_qk, 0);
  d.dv.assign(p.batch * N * p.heads_kv * p.dim_v, 0);
  d.dak.assign(p.batch * A * p.heads_kv * p.dim_qk, 0);
  d.dav.assign(p.batch * A * p.heads_kv * p.dim_v, 0);
  auto key_ptr = [&](int64_t b, int64_t j, int hk, bool value) -> const T* {
    if (j < N) return (value ? c.v : c.k).storage.data() + row((value ? c.v : c.k).ref, p, b, j, hk);
    const auto& t = value ? c.av : c.ak;
    return t.storage.data() + b * t.ref.strides[0] + (j - N) * t.ref.strides[1] + hk * t.ref.strides[2];
  };
  auto dk_ptr = [&](int64_t b, int64_t j, int hk, bool value) -> double* {
    if (j < N) return (value ? d.dv : d.dk).data() + ((b * N + j) * p.heads_kv + hk) * (value ? p.dim_v : p.dim_qk);
    return (value ? d.dav : d.dak).data() + ((b * A + (j - N)) * p.heads_kv + hk) * (value ? p.dim_v : p.dim_qk);
  };
  std::vector<double> P(M), dP(M);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < N; ++i) {
        const int hk = h / G;
        int x[kMaxRank], y[kMaxRank];
        flat_to_coords(p, i, x);
        const T* qi = c.q.storage.data() + row(c.q.ref, p, b, i, h);
        const T* doi = c.d_out.storage.data() + row(c.d_out.ref, p, b, i, h);
        double mx = -1e300;
        std::vector<bool> mask(M, true);
        for (int64_t j = 0; j < M; ++j) {
          if (j < N) {
            flat_to_coords(p, j, y);
            mask[j] = literal_attends(p, x, y);
          }
          double s = 0;
          const T* kj = key_ptr(b, j, hk, false);
          for (int e = 0; e < p.dim_qk; ++e) s += double(qi[e]) * double(kj[e]);
          P[j] = mask[j] ? scale * s : -INFINITY;
          mx = std::max(mx, P[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < M; ++j) sum += (P[j] = mask[j] ? std::exp(P[j] - mx) : 0.0);
        const int64_t qrow = (b * N + i) * p.heads_q + h;
        d.lse[qrow] = mx + std::log(sum);
        double delta = 0;
        for (int64_t j = 0; j < M; ++j) {
          P[j] /= sum;
          const T* vj = key_ptr(b, j, hk, true);
          double dp = 0;
          for (int e = 0; e < p.dim_v; ++e) {
            d.out[qrow * p.dim_v + e] += P[j] * double(vj[e]);
            dp += double(doi[e]) * double(vj[e]);
          }
          dP[j] = dp;
          delta += P[j] * dp;
        }
        for (int64_t j = 0; j < M; ++j) {
          if (!mask[j]) continue;
          const double ds = P[j] * (dP[j] - delta);
          const T* kj = key_ptr(b, j, hk, false);
          double* dkj = dk_ptr(b, j, hk, false);
          double* dvj = dk_ptr(b, j, hk, true);
          for (int e = 0; e < p.dim_qk; ++e) {
            d.dq[qrow * p.dim_qk + e] += scale * ds * double(kj[e]);
            dkj[e] += scale * ds * double(qi[e]);
          }
          for (int e = 0; e < p.dim_v; ++e) dvj[e] += P[j] * double(doi[e]);
        }
      }
  return d;
}

// Max |a - b| / max |b| over a heads-last tensor compared with a dense [B, N, H, D] array.
template <typename T>
double rel_error_tokens(const HostTensor<T>& t, const std::vector<double>& ref, const Problem& p,
                        int heads, int dim) {
  double max_diff = 0, max_ref = 1e-300;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.tokens(); ++i)
      for (int h = 0; h < heads; ++h)
        for (int e = 0; e < dim; ++e) {
          const double got = t.storage[row(t.ref, p, b, i, h) + e];
          const double want = ref[((b * p.tokens() + i) * heads + h) * dim + e];
          if (!std::isfinite(got)) return INFINITY;
          max_diff = std::max(max_diff, std::abs(got - want));
          max_ref = std::max(max_ref, std::abs(want));
        }
  return max_diff / max_ref;
}

template <typename T>
double rel_error_extra(const HostTensor<T>& t, const std::vector<double>& ref) {
  double max_diff = 0, max_ref = 1e-300;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(double(t.storage[i]))) return INFINITY;
    max_diff = std::max(max_diff, std::abs(double(t.storage[i]) - ref[i]));
    max_ref = std::max(max_ref, std::abs(ref[i]));
  }
  return max_diff / max_ref;
}

Problem random_attention_problem(std::mt19937_64& rng) {
  Problem p = random_problem(rng, rand_int(rng, 1, 3), 1);
  // Keep total tokens small: re-draw extents per rank.
  const int max_extent[4] = {0, 40, 9, 6};
  p = random_problem(rng, p.rank, max_extent[p.rank]);
  p.batch = rand_int(rng, 1, 2);
  p.heads_kv = rand_int(rng, 1, 2);
  p.heads_q = p.heads_kv * rand_int(rng, 1, 2);
  p.dim_qk = rand_int(rng, 1, 8);
  p.dim_v = rand_int(rng, 0, 1) ? p.dim_qk : rand_int(rng, 1, 8);
  p.additional_kv = rand_int(rng, 0, 2) == 0 ? rand_int(rng, 1, 3) : 0;
  p.scale = rand_int(rng, 0, 1) ? 0.f : 0.3f;
  p.dtype = DType::f64;
  return p;
}

TEST(Reference, ForwardAndBackwardMatchDenseMaskedAttentionFp64) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int t = 0; t < 150; ++t) {
    const Problem p = random_attention_problem(rng);
    SCOPED_TRACE(describe(p));
    Case<double> c(p, rng, /*gap=*/rand_int(rng, 0, 1) * 3);
    c.forward();
    c.backward();
    const Dense d = dense_attention(c);
    EXPECT_LE(rel_error_tokens(c.out, d.out, p, p.heads_q, p.dim_v), 1e-12);
    EXPECT_LE(rel_error_tokens(c.lse, d.lse, p, p.heads_q, 1), 1e-12);
    EXPECT_LE(rel_error_tokens(c.dq, d.dq, p, p.heads_q, p.dim_qk), 1e-12);
    EXPECT_LE(rel_error_tokens(c.dk, d.dk, p, p.heads_kv, p.dim_qk), 1e-12);
    EXPECT_LE(rel_error_tokens(c.dv, d.dv, p, p.heads_kv, p.dim_v), 1e-12);
    if (p.additional_kv > 0) {
      EXPECT_LE(rel_error_extra(c.dak, d.dak), 1e-12);
      EXPECT_LE(rel_error_extra(c.dav, d.dav), 1e-12);
    }
    if (HasFailure()) return;
  }
}

TEST(Reference, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(fresh_seed());
  for (int t = 0; t < 8; ++t) {
    Problem p = random_attention_problem(rng);
    SCOPED_TRACE(describe(p));
    Case<double> c(p, rng, 0);
    c.forward();
    c.backward();
    // loss = sum(out * d_out); perturb a few random elements of each input.
    auto loss = [&] {
      Case<double> tmp = c;  // copies storage; re-point views
      for (auto* h : {&tmp.q, &tmp.k, &tmp.v, &tmp.ak, &tmp.av, &tmp.out, &tmp.d_out, &tmp.lse})
        h->ref.data = h->storage.data();
      tmp.forward();
      double s = 0;
      for (size_t i = 0; i < tmp.out.storage.size(); ++i) s += tmp.out.storage[i] * c.d_out.storage[i];
      return s;
    };
    const double eps = 1e-6;
    std::vector<std::pair<HostTensor<double>*, HostTensor<double>*>> pairs = {{&c.q, &c.dq}, {&c.k, &c.dk}, {&c.v, &c.dv}};
    if (p.additional_kv > 0) {
      pairs.push_back({&c.ak, &c.dak});
      pairs.push_back({&c.av, &c.dav});
    }
    for (auto [x, dx] : pairs)
      for (int r = 0; r < 5; ++r) {
        const size_t i = rand_int(rng, 0, static_cast<int>(x->storage.size()) - 1);
        const double orig = x->storage[i];
        x->storage[i] = orig + eps;
        const double up = loss();
        x->storage[i] = orig - eps;
        const double down = loss();
        x->storage[i] = orig;
        const double fd = (up - down) / (2 * eps);
        EXPECT_NEAR(dx->storage[i], fd, 1e-6 * std::max(1.0, std::abs(fd)));
      }
  }
}

TEST(Reference, WindowEqualExtentIsPlainSoftmaxAttention) {
  std::mt19937_64 rng(fresh_seed());
  Problem p;
  p.rank = 2;
  p.axes[0] = AxisRule{5, 5, 1, 2, false};
  p.axes[1] = AxisRule{7, 7, 1, 3, false};
  p.heads_q = p.heads_kv = 2;
  p.dim_qk = p.dim_v = 6;
  p.dtype = DType::f64;
  Case<double> c(p, rng, 0);
  c.forward();
  const double scale = 1 / std::sqrt(6.0);
  const int64_t N = p.tokens();
  double max_err = 0;
  for (int h = 0; h < 2; ++h)
    for (int64_t i = 0; i < N; ++i) {
      std::vector<double> w(N);
      double sum = 0;
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int e = 0; e < 6; ++e) s += c.q.storage[(i * 2 + h) * 6 + e] * c.k.storage[(j * 2 + h) * 6 + e];
        sum += (w[j] = std::exp(scale * s));
      }
      for (int e = 0; e < 6; ++e) {
        double o = 0;
        for (int64_t j = 0; j < N; ++j) o += w[j] / sum * c.v.storage[(j * 2 + h) * 6 + e];
        max_err = std::max(max_err, std::abs(o - c.out.storage[(i * 2 + h) * 6 + e]));
      }
    }
  EXPECT_LE(max_err, 1e-13);
}

TEST(Reference, Float32StorageWithFloat32AccumulationIsClose) {
  std::mt19937_64 rng(fresh_seed());
  for (int t = 0; t < 20; ++t) {
    Problem p = random_attention_problem(rng);
    p.dtype = DType::f32;
    Case<float> c(p, rng, 0);
    reference::Options fp32;
    fp32.fp64_accumulate = false;
    reference::forward(p, c.inputs(), c.out.ref, &c.lse.ref, fp32);
    Case<float> c64 = c;
    for (auto* h : {&c64.q, &c64.k, &c64.v, &c64.ak, &c64.av, &c64.out, &c64.lse}) h->ref.data = h->storage.data();
    c64.forward();
    for (size_t i = 0; i < c.out.storage.size(); ++i)
      ASSERT_NEAR(c.out.storage[i], c64.out.storage[i], 2e-5 * (1 + std::abs(c64.out.storage[i])));
  }
}

TEST(Reference, PublicApiOnHostTensorsRunsTheReference) {
  std::mt19937_64 rng(fresh_seed());
  Problem p;
  p.rank = 1;
  p.axes[0] = AxisRule{20, 5, 2, 2, true};
  p.heads_q = 2;
  p.heads_kv = 1;
  p.dim_qk = 4;
  p.dim_v = 3;
  p.dtype = DType::f32;
  Case<float> c(p, rng, 0);
  AttentionParams params;
  params.rank = 1;
  params.window[0] = 5;
  params.dilation[0] = 2;
  params.stride[0] = 2;
  params.causal[0] = true;
  EXPECT_EQ(select_forward_backend(params, c.inputs()), "reference");
  attention_forward(params, c.inputs(), c.out.ref, &c.lse.ref);
  Case<float> direct = c;
  for (auto* h : {&direct.q, &direct.k, &direct.v, &direct.out, &direct.lse}) h->ref.data = h->storage.data();
  direct.out.poison();
  direct.forward();
  for (size_t i = 0; i < c.out.storage.size(); ++i) ASSERT_EQ(c.out.storage[i], direct.out.storage[i]);
}

}  // namespace
}  // namespace gna::test
