// The unfused operators' CUDA kernels (float32/float16/bfloat16) against the CPU reference
// (float64) over random configurations: ranks 1-3, dilation, causal axes, relative positional
// bias, strided tensors, head dims with and without 16-byte chunks. Outputs are poisoned (NaN)
// before each run; weights in slots without a key are NaN on input, so reading them fails.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>

#include "gna/gna.hpp"
#include "support/test_support.hpp"
#include "unfused/dense_neighborhood.hpp"

namespace gna::test {
namespace {

bool gpu_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

int configs(int fallback) {
  const char* env = std::getenv("GNA_TEST_CONFIGS");
  return env ? std::max(1, std::atoi(env)) : fallback;
}

// Host value -> element bits of dtype, and back.
void store(DType t, void* base, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::f16: static_cast<__half*>(base)[i] = __float2half(static_cast<float>(v)); break;
    default: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16(static_cast<float>(v)); break;
  }
}
double load(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f16: return __half2float(static_cast<const __half*>(base)[i]);
    default: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  }
}

// A float64 host tensor (the reference's) and a device copy of it in `dtype` with the same
// strides; outputs start as NaN bytes on the device.
struct Pair {
  HostTensor<double> host;
  DType dtype;
  void* device = nullptr;
  TensorRef dref;

  Pair(std::vector<int64_t> shape, int64_t gap, DType t) : host(shape, gap), dtype(t) {
    const size_t bytes = host.storage.size() * dtype_size(t);
    EXPECT_EQ(cudaMalloc(&device, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(device, 0xFF, bytes), cudaSuccess);  // NaN in every dtype
    dref = host.ref;
    dref.data = device;
    dref.dtype = t;
    dref.device = 0;
  }
  ~Pair() { cudaFree(device); }
  Pair(const Pair&) = delete;
  // Fills host and device with values exact in every dtype (multiples of 1/8 in [-2, 2]).
  void fill(std::mt19937_64& rng) {
    for (auto& x : host.storage) x = rand_int(rng, -16, 16) / 8.0;
    upload();
  }
  void upload() {
    std::vector<char> bits(host.storage.size() * dtype_size(dtype));
    for (size_t i = 0; i < host.storage.size(); ++i) store(dtype, bits.data(), i, host.storage[i]);
    EXPECT_EQ(cudaMemcpy(device, bits.data(), bits.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  // Largest error of the device result against the host one (relative to the largest
  // reference magnitude), over logical elements; infinities must match exactly.
  double error() const {
    std::vector<char> bits(host.storage.size() * dtype_size(dtype));
    EXPECT_EQ(cudaMemcpy(bits.data(), device, bits.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    const TensorRef& r = host.ref;
    double scale = 1.0, worst = 0.0;
    std::vector<int64_t> idx(r.rank, 0);
    for (int pass = 0; pass < 2; ++pass) {
      std::fill(idx.begin(), idx.end(), 0);
      for (int64_t n = 0; n < r.numel(); ++n) {
        int64_t off = 0;
        for (int d = 0; d < r.rank; ++d) off += idx[d] * r.strides[d];
        const double want = host.storage[off], got = load(dtype, bits.data(), off);
        if (pass == 0) {
          if (std::isfinite(want)) scale = std::max(scale, std::abs(want));
        } else if (std::isinf(want)) {
          if (got != want) return INFINITY;
        } else {
          if (!std::isfinite(got)) return INFINITY;
          worst = std::max(worst, std::abs(got - want) / scale);
        }
        for (int d = r.rank - 1; d >= 0 && ++idx[d] == r.shape[d]; --d) idx[d] = 0;
      }
    }
    return worst;
  }
};

std::vector<int64_t> tokens_shape(const Problem& p, int64_t n) {
  std::vector<int64_t> s{p.batch, p.heads_q};
  for (int a = 0; a < p.rank; ++a) s.push_back(p.axes[a].extent);
  s.push_back(n);
  return s;
}
std::vector<int64_t> rpb_shape(const Problem& p) {
  std::vector<int64_t> s{p.heads_q};
  for (int a = 0; a < p.rank; ++a) s.push_back(2 * p.axes[a].window - 1);
  return s;
}

double tolerance(DType t) { return t == DType::f32 ? 1e-5 : t == DType::f16 ? 2e-3 : 1.6e-2; }

struct Coverage {
  bool rank[4] = {}, causal = false, dilated = false, rpb = false, strided = false, chunked = false,
       unchunked = false;
  bool all() const {
    return rank[1] && rank[2] && rank[3] && causal && dilated && rpb && strided && chunked && unchunked;
  }
};

void run_config(const Problem& shape, DType dtype, bool with_rpb, int64_t gap, std::mt19937_64& rng) {
  Problem p = shape;
  const AttentionParams params = params_of(p);
  const int D = p.dim_qk, S = dense_slots(p);
  Pair q(tokens_shape(p, D), gap, dtype), k(tokens_shape(p, D), gap, dtype),
      v(tokens_shape(p, D), gap, dtype), d_out(tokens_shape(p, D), gap, dtype);
  Pair attn_in(tokens_shape(p, S), gap, dtype), d_attn_in(tokens_shape(p, S), gap, dtype);
  Pair rpb(rpb_shape(p), 0, dtype);
  for (Pair* t : {&q, &k, &v, &d_out, &attn_in, &d_attn_in, &rpb}) t->fill(rng);
  // Weights of slots without a key: NaN (must be ignored).
  const std::vector<char> valid = dense_valid_slots(p);
  for (Pair* t : {&attn_in, &d_attn_in}) {
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < p.tokens(); ++i) {
          int x[kMaxRank];
          coords_of(p, i, x);
          for (int s = 0; s < S; ++s)
            if (!valid[i * S + s])
              t->host.storage[heads_first_offset(t->host.ref, p.rank, b, h, x) + s] = NAN;
        }
    t->upload();
  }
  Pair attn(tokens_shape(p, S), gap, dtype), out(tokens_shape(p, D), gap, dtype),
      dq(tokens_shape(p, D), gap, dtype), dk(tokens_shape(p, D), gap, dtype),
      d_rpb(rpb_shape(p), 0, dtype), d_attn(tokens_shape(p, S), gap, dtype),
      dv(tokens_shape(p, D), gap, dtype);

  // Reference on the host tensors (float64).
  {
    const TensorRef dq_r = dq.host.ref, dk_r = dk.host.ref, drpb_r = d_rpb.host.ref,
                    dattn_r = d_attn.host.ref, dv_r = dv.host.ref;
    na_qk(params, q.host.ref, k.host.ref, with_rpb ? &rpb.host.ref : nullptr, attn.host.ref);
    na_av(params, attn_in.host.ref, v.host.ref, out.host.ref);
    na_qk_backward(params, q.host.ref, k.host.ref, d_attn_in.host.ref, &dq_r, &dk_r,
                   with_rpb ? &drpb_r : nullptr);
    na_av_backward(params, attn_in.host.ref, v.host.ref, d_out.host.ref, &dattn_r, &dv_r);
  }
  // Kernels.
  na_qk(params, q.dref, k.dref, with_rpb ? &rpb.dref : nullptr, attn.dref);
  na_av(params, attn_in.dref, v.dref, out.dref);
  na_qk_backward(params, q.dref, k.dref, d_attn_in.dref, &dq.dref, &dk.dref,
                 with_rpb ? &d_rpb.dref : nullptr);
  na_av_backward(params, attn_in.dref, v.dref, d_out.dref, &d_attn.dref, &dv.dref);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::string what = describe_neighborhood(p, with_rpb) + " gap " + std::to_string(gap) +
                           " " + dtype_name(dtype);
  const double tol = tolerance(dtype);
  EXPECT_LE(attn.error(), tol) << "attn: " << what;
  EXPECT_LE(out.error(), tol) << "out: " << what;
  EXPECT_LE(dq.error(), tol) << "dq: " << what;
  EXPECT_LE(dk.error(), tol) << "dk: " << what;
  EXPECT_LE(d_attn.error(), tol) << "d_attn: " << what;
  EXPECT_LE(dv.error(), tol) << "dv: " << what;
  if (with_rpb) EXPECT_LE(d_rpb.error(), tol) << "d_rpb: " << what;
}

void sweep(DType dtype) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int chunk = 16 / dtype_size(dtype);
  const int dims[] = {chunk, 2 * chunk, 32, 64, 3, 5, 12};
  Coverage seen;
  const int n = configs(12);
  for (int rank = 1; rank <= 3; ++rank)
    for (int c = 0; c < n; ++c) {
      Problem p = random_neighborhood_problem(rng, rank, rank == 1 ? 300 : 400);
      p.dim_qk = p.dim_v = dims[rng() % 7];
      const bool with_rpb = rng() % 2 == 0;
      const int64_t gap = rng() % 3 == 0 ? 8 : 0;
      run_config(p, dtype, with_rpb, gap, rng);
      if (::testing::Test::HasFailure()) return;
      seen.rank[rank] = true;
      seen.rpb |= with_rpb;
      seen.strided |= gap > 0;
      (p.dim_qk % chunk == 0 ? seen.chunked : seen.unchunked) = true;
      for (int a = 0; a < rank; ++a) {
        seen.causal |= p.axes[a].causal;
        seen.dilated |= p.axes[a].dilation > 1;
      }
    }
  EXPECT_TRUE(seen.all()) << "a path was not reached: raise GNA_TEST_CONFIGS";
}

TEST(UnfusedGpu, Float32MatchesReference) { sweep(DType::f32); }
TEST(UnfusedGpu, Float16MatchesReference) { sweep(DType::f16); }
TEST(UnfusedGpu, BFloat16MatchesReference) { sweep(DType::bf16); }

// The same call twice gives the same bits (no atomics anywhere, the bias gradient included).
TEST(UnfusedGpu, BackwardIsDeterministic) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(fresh_seed());
  Problem p;
  p.rank = 2;
  p.batch = 4;
  p.heads_q = p.heads_kv = 3;
  p.dim_qk = p.dim_v = 32;
  for (int a = 0; a < 2; ++a) p.axes[a] = AxisRule{40, 7, a + 1, 1, false};
  const AttentionParams params = params_of(p);
  const DType t = DType::f16;
  Pair q(tokens_shape(p, 32), 0, t), k(tokens_shape(p, 32), 0, t),
      g(tokens_shape(p, dense_slots(p)), 0, t);
  for (Pair* x : {&q, &k, &g}) x->fill(rng);
  std::vector<std::vector<char>> runs;
  for (int r = 0; r < 2; ++r) {
    Pair dk(tokens_shape(p, 32), 0, t), d_rpb(rpb_shape(p), 0, t);
    na_qk_backward(params, q.dref, k.dref, g.dref, nullptr, &dk.dref, &d_rpb.dref);
    for (Pair* x : {&dk, &d_rpb}) {
      std::vector<char> bits(x->host.storage.size() * 2);
      ASSERT_EQ(cudaMemcpy(bits.data(), x->device, bits.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      runs.push_back(bits);
    }
  }
  EXPECT_EQ(runs[0], runs[2]);
  EXPECT_EQ(runs[1], runs[3]);
}

}  // namespace
}  // namespace gna::test
