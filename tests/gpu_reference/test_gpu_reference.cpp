// The GPU reference against the CPU reference: random configurations of every rank, forward
// and backward, fp32 / fp16 / bf16 (the GPU oracle must itself be right).
#include "backend/backend.hpp"
#include "gpu_harness.hpp"

namespace gna::testing {
namespace {

void sweep(int rank, DType dtype, int configs) {
  GNA_SKIP_WITHOUT_GPU();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed + rank * 1000 + static_cast<int>(dtype));
  ConfigLimits lim;
  lim.dims = {{32, 32}, {64, 64}, {128, 128}, {48, 80}, {16, 256}};
  int failures = 0;
  for (int i = 0; i < configs && failures < 5; ++i) {
    const Config c = random_config(rng, rank, lim);
    Case cs;
    cs.build(c, dtype, rng, true);
    std::string err = cs.check_forward("gpu_reference");
    err += cs.check_backward("gpu_reference");
    if (!err.empty()) {
      ++failures;
      ADD_FAILURE() << dtype_name(dtype) << " " << c.describe() << ": " << err << " (seed " << seed << ")";
    }
  }
}

TEST(GpuReference, Rank1F32) { sweep(1, DType::f32, configs_per_rank(40)); }
TEST(GpuReference, Rank2F32) { sweep(2, DType::f32, configs_per_rank(40)); }
TEST(GpuReference, Rank3F32) { sweep(3, DType::f32, configs_per_rank(40)); }
TEST(GpuReference, Rank2F16) { sweep(2, DType::f16, configs_per_rank(20)); }
TEST(GpuReference, Rank3Bf16) { sweep(3, DType::bf16, configs_per_rank(20)); }

// The comparison itself can fail: a wrong reference value or an unwritten output is reported.
TEST(GpuReference, CheckDetectsWrongResults) {
  GNA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(test_seed());
  const Config c = random_config(rng, 2, ConfigLimits{});
  Case cs;
  cs.build(c, DType::f32, rng, true);
  EXPECT_EQ(cs.check_forward("gpu_reference"), "");
  cs.ref_o[cs.ref_o.size() / 2] += 0.5f;
  EXPECT_NE(cs.check_forward("gpu_reference"), "");
  cs.ref_dk[0] += 0.5f;
  EXPECT_NE(cs.check_backward("gpu_reference").find("dk error"), std::string::npos);
  EXPECT_EQ(normalized_error({NAN, 1.f}, {0.f, 1.f}), INFINITY);
}

TEST(GpuReference, RefusesHostTensors) {
  const Backend* backend = nullptr;
  for (const auto& b : registered_backends())
    if (b.name == "gpu_reference") backend = &b;
  ASSERT_NE(backend, nullptr);
  ForwardCall call;
  call.in.q.device = -1;
  std::string why;
  EXPECT_FALSE(backend->supports_forward(call, &why));
  EXPECT_NE(why.find("host memory"), std::string::npos) << why;
}

}  // namespace
}  // namespace gna::testing
