// GPU token permutation against the CPU one (gna/ops/permute.hpp): random plans, ranks 1-3,
// fp16/fp32 tensors with and without a head dim, strided sources, exact round trips.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "gna/ops/permute.hpp"
#include "kernels/layout/permute.hpp"
#include "../gpu_reference/gpu_harness.hpp"

namespace gna::testing {
namespace {

struct Plan {
  PermutationPlan plan;
  int batch, heads, dim;  // dim 0: LSE-like [B, X.., H]
};

Plan random_plan(std::mt19937_64& rng, int rank) {
  Plan p;
  p.plan.rank = rank;
  const int max_extent[] = {0, 200, 30, 12};
  for (int a = 0; a < rank; ++a) {
    p.plan.extent[a] = uniform(rng, 1, max_extent[rank]);
    p.plan.tile[a] = uniform(rng, 1, 9);
    p.plan.dilation[a] = uniform(rng, 0, 2) == 0 ? uniform(rng, 1, std::max(1, p.plan.extent[a] / 2)) : 1;
  }
  p.batch = uniform(rng, 1, 2);
  p.heads = uniform(rng, 1, 3);
  const int dims[] = {0, 1, 8, 24, 64, 128};
  p.dim = dims[uniform(rng, 0, 5)];
  return p;
}

std::vector<int64_t> heads_last_shape(const Plan& p) {
  std::vector<int64_t> s{p.batch};
  for (int a = 0; a < p.plan.rank; ++a) s.push_back(p.plan.extent[a]);
  s.push_back(p.heads);
  if (p.dim > 0) s.push_back(p.dim);
  return s;
}

std::vector<int64_t> permuted_shape(const Plan& p) {
  std::vector<int64_t> s{int64_t(p.batch) * p.plan.groups(), p.plan.tokens_per_group(), p.heads};
  if (p.dim > 0) s.push_back(p.dim);
  return s;
}

// The CPU permutation wants a head dim: LSE-like tensors get a trailing dim of 1.
TensorRef with_dim(TensorRef t, bool add) {
  if (!add) return t;
  t.shape[t.rank] = 1;
  t.strides[t.rank] = 1;
  ++t.rank;
  return t;
}

void round_trip(int rank, DType dtype, int configs) {
  GNA_SKIP_WITHOUT_GPU();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed + rank);
  for (int i = 0; i < configs; ++i) {
    const Plan p = random_plan(rng, rank);
    Buffer src, dst, back, cpu_dst, cpu_back;
    src.allocate(heads_last_shape(p), dtype);
    dst.allocate(permuted_shape(p), dtype);
    back.allocate(heads_last_shape(p), dtype);
    src.host = random_values(rng, src.numel());
    src.upload();
    dst.poison();
    back.poison();
    TensorRef s = src.device_ref(), d = dst.device_ref(), b = back.device_ref();
    cuda::permute_tokens(p.plan, s, d);
    cuda::unpermute_tokens(p.plan, d, b);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    // CPU permutation of the same values (float32 host copies: values are exact in fp16).
    cpu_dst.shape = permuted_shape(p);
    cpu_dst.host.assign(cpu_dst.numel(), -7.f);
    TensorRef hs = with_dim(src.host_ref(), p.dim == 0), hd = with_dim(cpu_dst.host_ref(), p.dim == 0);
    permute_tokens(p.plan, hs, hd);
    const std::vector<float> got = dst.download();
    ASSERT_EQ(got, cpu_dst.host) << "permute, rank " << rank << " config " << i << " seed " << seed;
    ASSERT_EQ(back.download(), src.host) << "round trip, rank " << rank << " config " << i;
  }
}

TEST(Permute, Rank1F16) { round_trip(1, DType::f16, configs_per_rank(60)); }
TEST(Permute, Rank2F16) { round_trip(2, DType::f16, configs_per_rank(60)); }
TEST(Permute, Rank3F16) { round_trip(3, DType::f16, configs_per_rank(60)); }
TEST(Permute, Rank2F32) { round_trip(2, DType::f32, configs_per_rank(30)); }
TEST(Permute, Rank3Bf16) { round_trip(3, DType::bf16, configs_per_rank(30)); }

// A strided (sliced) source: every other head of a wider tensor, so heads are not packed.
TEST(Permute, StridedHeads) {
  GNA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(test_seed());
  PermutationPlan plan;
  plan.rank = 2;
  plan.extent[0] = 13;
  plan.extent[1] = 10;
  plan.tile[0] = 4;
  plan.tile[1] = 3;
  plan.dilation[1] = 2;
  const int B = 2, H = 3, D = 16;
  Buffer wide, dst;
  wide.allocate({B, 13, 10, 2 * H, D}, DType::f16);
  wide.host = random_values(rng, wide.numel());
  wide.upload();
  TensorRef src = wide.device_ref();
  src.shape[3] = H;
  src.strides[3] = 2 * D;
  dst.allocate({B * plan.groups(), plan.tokens_per_group(), H, D}, DType::f16);
  dst.poison();
  TensorRef d = dst.device_ref();
  cuda::permute_tokens(plan, src, d);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  TensorRef hs = wide.host_ref();
  hs.shape[3] = H;
  hs.strides[3] = 2 * D;
  std::vector<float> want(dst.numel(), -7.f);
  TensorRef hd = dst.view(want.data(), DType::f32, -1);
  permute_tokens(plan, hs, hd);
  EXPECT_EQ(dst.download(), want);
}

TEST(Permute, RejectsWrongShape) {
  GNA_SKIP_WITHOUT_GPU();
  PermutationPlan plan;
  plan.rank = 1;
  plan.extent[0] = 10;
  plan.tile[0] = 4;
  Buffer src, dst;
  src.allocate({1, 10, 2, 8}, DType::f16);
  dst.allocate({1, 11, 2, 8}, DType::f16);
  TensorRef s = src.device_ref(), d = dst.device_ref();
  try {
    cuda::permute_tokens(plan, s, d);
    FAIL() << "expected gna::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dim 1 is 11, expected 12"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gna::testing
