// The backward's pre-pass (delta = rowsum(dO*O), LSE * log2(e)) and post-pass (dq = scale *
// accumulator) against the CPU (kernels/common/backward_prepass, backward_postpass), over random
// ranks, extents, heads, head dims and dtypes, on packed tensors and on padded views whose rows are
// 16-byte aligned (vector path) or not (element path). Outputs are poisoned; padding must stay
// untouched.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <vector>

#include "kernels/common/backward_postpass.hpp"
#include "kernels/common/backward_prepass.hpp"
#include "../gpu_reference/gpu_harness.hpp"

namespace gna::testing {
namespace {

struct RowCase {
  Problem p;
  int pad = 0;  // elements after each row's head dim (0: packed)

  std::vector<int64_t> shape(int dim) const {
    std::vector<int64_t> s{p.batch};
    for (int a = 0; a < p.rank; ++a) s.push_back(p.axes[a].extent);
    s.push_back(p.heads_q);
    if (dim > 0) s.push_back(dim);
    return s;
  }
  int64_t rows() const { return int64_t(p.batch) * p.tokens() * p.heads_q; }
};

RowCase random_case(std::mt19937_64& rng, int rank, DType dtype) {
  RowCase c;
  c.p.rank = rank;
  const int max_extent[] = {0, 300, 40, 12};
  for (int a = 0; a < rank; ++a) c.p.axes[a].extent = uniform(rng, 1, max_extent[rank]);
  c.p.batch = uniform(rng, 1, 2);
  c.p.heads_q = c.p.heads_kv = uniform(rng, 1, 3);
  const int dims[] = {8, 24, 32, 40, 64, 128};
  c.p.dim_qk = dims[uniform(rng, 0, 5)];
  c.p.dim_v = dims[uniform(rng, 0, 5)];
  c.p.dtype = dtype;
  const int pads[] = {0, 0, 1, 4, 8};
  c.pad = pads[uniform(rng, 0, 4)];
  return c;
}

// A [.., dim] view of a buffer allocated as [.., dim + pad].
TensorRef padded_view(const Buffer& b, int dim) {
  TensorRef t = b.device_ref();
  t.shape[t.rank - 1] = dim;
  return t;
}

// Host values of a padded buffer, row by row, without the padding.
std::vector<float> unpadded(const std::vector<float>& all, int dim, int pad) {
  std::vector<float> v;
  for (size_t i = 0; i < all.size(); i += dim + pad) v.insert(v.end(), all.begin() + i, all.begin() + i + dim);
  return v;
}

void check_rows(int rank, DType dtype, int configs) {
  GNA_SKIP_WITHOUT_GPU();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed + rank * 7 + static_cast<int>(dtype));
  for (int i = 0; i < configs; ++i) {
    const RowCase c = random_case(rng, rank, dtype);
    const Problem& p = c.p;
    const int64_t rows = c.rows();
    const int dv = p.dim_v, dq = p.dim_qk;
    std::ostringstream what;
    what << "rank " << rank << " config " << i << " seed " << seed << " rows " << rows << " dim_v "
         << dv << " dim_qk " << dq << " pad " << c.pad << " dtype " << dtype_name(dtype);

    Buffer o, d_o, lse, delta, lse2, accum, dqb;
    o.allocate(c.shape(dv + c.pad), dtype);
    d_o.allocate(c.shape(dv + c.pad), dtype);
    lse.allocate(c.shape(0), DType::f32);
    delta.allocate({rows}, DType::f32);
    lse2.allocate({rows}, DType::f32);
    accum.allocate({rows, dq}, DType::f32);
    dqb.allocate(c.shape(dq + c.pad), dtype);
    for (Buffer* b : {&o, &d_o, &lse, &accum}) {
      b->host = random_values(rng, b->numel());
      b->upload();
    }
    for (float& x : accum.host) x *= 3.7f;  // values that round in fp16 / bf16
    accum.upload();
    delta.poison();
    lse2.poison();
    dqb.poison();

    const float scale = 0.3f;
    cuda::launch_backward_prepass(p, padded_view(o, dv), padded_view(d_o, dv), lse.device_ref(),
                                  static_cast<float*>(delta.device),
                                  static_cast<float*>(lse2.device), nullptr);
    cuda::launch_backward_postpass(p, static_cast<const float*>(accum.device), padded_view(dqb, dq),
                                   scale, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what.str();

    const std::vector<float> ov = unpadded(o.download(), dv, c.pad);
    const std::vector<float> dov = unpadded(d_o.download(), dv, c.pad);
    const std::vector<float> got_delta = delta.download(), got_lse2 = lse2.download();
    for (int64_t r = 0; r < rows; ++r) {
      double want = 0, mag = 0;
      for (int d = 0; d < dv; ++d) {
        want += double(ov[r * dv + d]) * dov[r * dv + d];
        mag += std::fabs(double(ov[r * dv + d]) * dov[r * dv + d]);
      }
      ASSERT_NEAR(got_delta[r], want, 1e-6 * mag + 1e-7) << "delta row " << r << ", " << what.str();
      const double want_lse2 = double(lse.host[r]) * 1.4426950408889634;
      ASSERT_NEAR(got_lse2[r], want_lse2, 1e-6 * std::fabs(want_lse2) + 1e-7)
          << "lse2 row " << r << ", " << what.str();
    }

    // dq: exactly the dtype's rounding of the fp32 product; padding stays poisoned (NaN).
    std::vector<float> products(rows * dq);
    for (int64_t k = 0; k < rows * dq; ++k) products[k] = accum.host[k] * scale;
    std::vector<uint8_t> bits;
    to_bits(products, dtype, &bits);
    const std::vector<float> want_dq = from_bits(bits, dtype);
    const std::vector<float> got_dq = dqb.download();
    for (int64_t r = 0; r < rows; ++r) {
      for (int d = 0; d < dq + c.pad; ++d) {
        const float g = got_dq[r * (dq + c.pad) + d];
        if (d < dq)
          ASSERT_EQ(g, want_dq[r * dq + d]) << "dq row " << r << " col " << d << ", " << what.str();
        else
          ASSERT_TRUE(std::isnan(g)) << "padding written, row " << r << ", " << what.str();
      }
    }
  }
}

TEST(BackwardPasses, Rank1Bf16) { check_rows(1, DType::bf16, configs_per_rank(40)); }
TEST(BackwardPasses, Rank2F16) { check_rows(2, DType::f16, configs_per_rank(40)); }
TEST(BackwardPasses, Rank3Bf16) { check_rows(3, DType::bf16, configs_per_rank(40)); }
TEST(BackwardPasses, Rank2F32) { check_rows(2, DType::f32, configs_per_rank(20)); }

// Several blocks and a last warp with rows to spare: 2 x 4099 tokens x 3 heads.
TEST(BackwardPasses, RowCountNotAMultipleOfTheWarp) {
  GNA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(test_seed());
  for (int i = 0; i < 3; ++i) {
    RowCase c = random_case(rng, 1, DType::bf16);
    c.p.axes[0].extent = 4099;
    c.p.batch = 2;
    c.p.heads_q = c.p.heads_kv = 3;
    Buffer accum, dqb;
    const int64_t rows = c.rows();
    accum.allocate({rows, c.p.dim_qk}, DType::f32);
    accum.host = random_values(rng, accum.numel());
    accum.upload();
    dqb.allocate(c.shape(c.p.dim_qk), DType::bf16);
    dqb.poison();
    cuda::launch_backward_postpass(c.p, static_cast<const float*>(accum.device), dqb.device_ref(),
                                   1.f, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(dqb.download(), accum.host);  // k/64 values: exact in bf16
  }
}

}  // namespace
}  // namespace gna::testing
