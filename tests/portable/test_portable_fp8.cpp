// The portable forward's e4m3 path (the FP8 forward, docs/fp8.md; sm_89+) against the GPU
// reference's FP8 forward (itself tested against the CPU emulation, test_fp8_gpu) on the same
// operands: bf16 inputs quantized by the device pass, half the calls without the LSE bias (as a
// caller's own e4m3 tensors come). Random configurations per rank (GNA_TEST_CONFIGS, default
// 300): shapes, windows, strides, dilations, causal axes, GQA, additional tokens, head dims 64
// and 128, bf16 / fp16 output, KV tiles placed or on the grid, tiles chosen or forced. Outputs
// poisoned (NaN) before each launch. The forward's paths are counted on the device and asserted.
//
// Tolerances. The reference takes each row's global maximum where the kernel keeps a running one,
// so a weight is rounded to e4m3 against another scale (within 2^-4 relative, each): the outputs
// differ by up to 0.0646 of the output's largest value in an emulation of both (docs/fp8.md, "A
// fused kernel against this reference"). Per row, max_c |O - ref| / max_c |ref| (rows' largest value floored at 1e-3 of
// the output's) <= 0.08; at most one row in 500 up to 0.15 (S accumulated by the tensor cores in
// less than fp32 moves a weight across a rounding midpoint). Over the output, mean |O - ref| <=
// 0.05 mean |ref| (a systematic error is >= 0.5). The LSE within 5e-3 of max(1, |ref|).
#include <cstdio>

#include "backend/backend.hpp"
#include "backend/device_code.hpp"
#include "gpu_harness.hpp"
#include "kernels/common/device_limits.hpp"
#include "kernels/common/fp8_quantize.hpp"
#include "kernels/portable/path_counts.hpp"
#include "kernels/portable/portable.hpp"

namespace gna::testing {
namespace {

const Backend& backend_named(const std::string& name) {
  for (const Backend& b : registered_backends())
    if (b.name == name) return b;
  throw std::runtime_error("no backend " + name);
}

// Whether device 0 runs the e4m3 kernels (compute capability 8.9+ and their code built in).
bool e4m3_device(std::string* why) {
  return e4m3_mma_runs_on(cuda::compute_capability(0), embedded_code(KernelFamily::sm80), why);
}
#define GNA_SKIP_WITHOUT_E4M3()                         \
  GNA_SKIP_WITHOUT_GPU();                               \
  if (std::string why_; !e4m3_device(&why_)) GTEST_SKIP() << why_

// bf16 device inputs of a configuration: queries of a few units (scores of a few units), keys
// offset per channel (the scheme subtracts their mean).
struct Inputs {
  Config cfg;
  Buffer q, k, v, ak, av;

  void build(const Config& c, std::mt19937_64& rng) {
    cfg = c;
    Case shapes;
    shapes.cfg = c;
    q.allocate(shapes.token_shape(c.heads_q, c.dim_qk), DType::bf16);
    k.allocate(shapes.token_shape(c.heads_kv, c.dim_qk), DType::bf16);
    v.allocate(shapes.token_shape(c.heads_kv, c.dim_v), DType::bf16);
    if (c.additional > 0) {
      ak.allocate({c.batch, c.additional, c.heads_kv, c.dim_qk}, DType::bf16);
      av.allocate({c.batch, c.additional, c.heads_kv, c.dim_v}, DType::bf16);
    }
    for (Buffer* b : {&q, &k, &v, &ak, &av}) {
      if (b->shape.empty()) continue;
      b->host = random_values(rng, b->numel());
      if (b == &q)
        for (float& x : b->host) x *= 4.f;
      if (b == &k || b == &ak)
        for (int64_t i = 0; i < b->numel(); ++i) b->host[i] += float((i % c.dim_qk) % 7) - 3.f;
      b->upload();
    }
  }
  AttentionTensors device(TensorRef* storage) const {
    return device_attention_tensors(q, k, v, ak, av, cfg.additional > 0, storage);
  }
};

// "" or what failed (the tolerances above).
std::string compare(const std::vector<float>& got, const std::vector<float>& want, int dim,
                    const std::vector<float>& got_lse, const std::vector<float>& want_lse) {
  double largest = 0, sum_ref = 0, sum_err = 0;
  for (float w : want) {
    largest = std::max(largest, double(std::fabs(w)));
    sum_ref += std::fabs(w);
  }
  const size_t rows = want.size() / dim;
  size_t loose = 0;
  std::ostringstream os;
  for (size_t r = 0; r < rows; ++r) {
    double row_max = 1e-3 * largest, e = 0;
    for (int c = 0; c < dim; ++c) row_max = std::max(row_max, double(std::fabs(want[r * dim + c])));
    for (int c = 0; c < dim; ++c) {
      const double g = got[r * dim + c], d = std::fabs(g - want[r * dim + c]);
      e = std::isfinite(g) ? std::max(e, d) : INFINITY;
      sum_err += d;
    }
    e /= row_max;
    if (!(e <= 0.15)) {
      os << "row " << r << " error " << e << " of its largest value (> 0.15); ";
      break;
    }
    loose += e > 0.08;
  }
  if (loose > std::max<size_t>(1, rows / 500)) os << loose << " of " << rows << " rows beyond 0.08; ";
  if (!(sum_err <= 0.05 * sum_ref)) os << "mean error " << sum_err / std::max(sum_ref, 1e-30) << " of mean |ref|; ";
  const double el = lse_error(got_lse, want_lse);
  if (!(el <= 5e-3)) os << "lse error " << el << "; ";
  return os.str();
}

struct Reached {
  int d64 = 0, d128 = 0, f16 = 0, bf16 = 0, additional = 0, gqa = 0, causal = 0, dilated = 0,
      strided = 0, no_bias = 0, forced = 0;
};

void sweep(int rank, int configs) {
  GNA_SKIP_WITHOUT_E4M3();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed + 131 * rank);
  ConfigLimits lim;
  lim.dims = {{64, 64}, {128, 128}};
  lim.max_pairs = 400000;  // the GPU reference walks each row's keys
  lim.max_additional = 200;
  const Backend& portable = backend_named("portable");
  const Backend& reference = backend_named("gpu_reference");
  ASSERT_TRUE(portable.fp8);
  Reached reached;
  int failures = 0;
  portable::count_forward_paths(true);
  for (int i = 0; i < configs && failures < 5; ++i) {
    const Config c = random_config(rng, rank, lim);
    Inputs in;
    in.build(c, rng);
    TensorRef storage[5];
    const AttentionTensors dev_in = in.device(storage);
    const Problem p = make_problem(c.params, dev_in);
    Fp8Quantized quantized = cuda::quantize_fp8(p, dev_in, nullptr);
    Fp8Operands ops = quantized.operands;
    const bool no_bias = i % 2 == 1;
    if (no_bias) ops.lse_bias.data = nullptr;

    Case shapes;
    shapes.cfg = c;
    const std::vector<int64_t> out_shape = shapes.token_shape(c.heads_q, c.dim_v);
    const std::vector<int64_t> lse_shape = shapes.token_shape(c.heads_q, 0);
    Buffer ref_out, ref_lse, out, lse;
    ref_out.allocate(out_shape, DType::f32);
    ref_lse.allocate(lse_shape, DType::f32);
    const DType out_dtype = (i / 2) % 2 ? DType::f16 : DType::bf16;
    out.allocate(out_shape, out_dtype);
    lse.allocate(lse_shape, DType::f32);
    for (Buffer* b : {&ref_out, &ref_lse, &out, &lse}) b->poison();

    ForwardCall call;
    call.problem = p;
    call.in = dev_in;
    call.fp8 = &ops;
    // The reference in float32.
    TensorRef ro = ref_out.device_ref(), rl = ref_lse.device_ref();
    call.problem.dtype = DType::f32;
    call.out = ro;
    call.lse = &rl;
    std::string why;
    ASSERT_TRUE(reference.supports_forward(call, &why)) << why;
    reference.forward(call);
    // The portable kernel: KV tiles placed in every third configuration, on the grid in every
    // third; every fourth with the best tiles forced (64-row Q tiles, 64-token KV tiles).
    TensorRef o = out.device_ref(), l = lse.device_ref();
    call.problem.dtype = out_dtype;
    call.out = o;
    call.lse = &l;
    if (i % 3 == 1) call.options.kv_placements = KvPlacements::placed;
    if (i % 3 == 2) call.options.kv_placements = KvPlacements::grid;
    const bool forced = i % 4 == 3;
    if (forced) {
      const portable::TilePlan t = portable::choose_tiles(p, 64, 64);
      call.options.q_tile = t.q;
      call.options.kv_tile = t.kv;
    }
    ASSERT_TRUE(portable.supports_forward(call, &why)) << why << ": " << c.describe();
    portable.forward(call);
    GNA_CUDA_OK(cudaDeviceSynchronize());
    const std::string err =
        compare(out.download(), ref_out.download(), c.dim_v, lse.download(), ref_lse.download());
    if (!err.empty()) {
      ++failures;
      ADD_FAILURE() << dtype_name(out_dtype) << (no_bias ? " no lse_bias " : " ")
                    << (forced ? "forced tiles " : "") << c.describe() << ": " << err
                    << " (seed " << seed << ", configuration " << i << ")";
    }
    reached.d64 += c.dim_qk == 64;
    reached.d128 += c.dim_qk == 128;
    reached.f16 += out_dtype == DType::f16;
    reached.bf16 += out_dtype == DType::bf16;
    reached.additional += c.additional > 0;
    reached.gqa += c.heads_q > c.heads_kv;
    reached.no_bias += no_bias;
    reached.forced += forced;
    for (int a = 0; a < rank; ++a) {
      reached.causal += c.params.causal[a];
      reached.dilated += c.params.dilation[a] > 1;
      reached.strided += c.params.stride[a] > 1;
    }
  }
  const portable::ForwardPathCounts n = portable::forward_path_counts();
  portable::count_forward_paths(false);
  std::printf(
      "portable fp8 rank %d: %d configurations (seed %llu): d64 %d, d128 %d, fp16 out %d, bf16 "
      "out %d, additional %d, GQA %d, no lse_bias %d, forced tiles %d, causal axes %d, dilated "
      "axes %d, strided axes %d; tiles %llu (e4m3 %llu, placed %llu), warp tiles masked %llu, "
      "run as full %llu; partial K/V tiles loaded as full %llu, zero-filled %llu; axes "
      "unmasked %llu\n",
      rank, configs, static_cast<unsigned long long>(seed), reached.d64, reached.d128, reached.f16,
      reached.bf16, reached.additional, reached.gqa, reached.no_bias, reached.forced,
      reached.causal, reached.dilated, reached.strided, n.tiles, n.e4m3_tiles, n.placed_tiles,
      n.masked_warps, n.full_row_warps, n.partial_full_loads, n.partial_fill_loads,
      n.skipped_mask_axes);
  EXPECT_EQ(n.e4m3_tiles, n.tiles);  // only e4m3 calls ran on the portable kernels
  if (configs >= 100) {
    for (int r : {reached.d64, reached.d128, reached.f16, reached.bf16, reached.additional,
                  reached.gqa, reached.no_bias, reached.forced, reached.causal, reached.dilated,
                  reached.strided})
      EXPECT_GT(r, 0) << "the sweep missed a configuration kind";
    for (unsigned long long path : {n.e4m3_tiles, n.placed_tiles, n.masked_warps, n.full_row_warps,
                                    n.partial_full_loads, n.partial_fill_loads})
      EXPECT_GT(path, 0ull) << "the sweep missed a path of the forward";
    if (rank > 1) {
      EXPECT_GT(n.skipped_mask_axes, 0ull);
    }
  }
}

TEST(PortableFp8, Rank1) { sweep(1, configs_per_rank(300)); }
TEST(PortableFp8, Rank2) { sweep(2, configs_per_rank(300)); }
TEST(PortableFp8, Rank3) { sweep(3, configs_per_rank(300)); }

// The comparison fails on a wrong row, a systematic error, an unwritten output and a wrong LSE.
TEST(PortableFp8, CompareDetectsWrongResults) {
  std::vector<float> want(64 * 600, 1.f), got = want, lse(600, 2.f);
  EXPECT_EQ(compare(got, want, 64, lse, lse), "");
  got[5] = 1.1f;  // one row beyond 0.08: allowed
  EXPECT_EQ(compare(got, want, 64, lse, lse), "");
  got[64 * 7] = 1.1f;  // two rows of 600
  EXPECT_NE(compare(got, want, 64, lse, lse), "");
  got = want;
  got[64 * 9] = 1.2f;  // one row beyond 0.15
  EXPECT_NE(compare(got, want, 64, lse, lse), "");
  got = want;
  for (size_t i = 0; i < got.size(); i += 2) got[i] = 0.9f;  // every other value 10% low
  EXPECT_NE(compare(got, want, 64, lse, lse), "");
  got = want;
  got[3] = NAN;
  EXPECT_NE(compare(got, want, 64, lse, lse), "");
  got = want;
  std::vector<float> lse2 = lse;
  lse2[9] += 0.02f;
  EXPECT_NE(compare(got, want, 64, lse2, lse), "");
}

// Head dims other than 64/64 and 128/128, and float32 output, are refused with the reason; the
// e4m3 kernels' arch requirement is device_code's (test_device_code).
TEST(PortableFp8, RefusesWithReasons) {
  GNA_SKIP_WITHOUT_E4M3();
  const Backend& portable = backend_named("portable");
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 1 << 20), cudaSuccess);
  auto call_for = [&](int dim, DType out, ForwardCall& call, Fp8Operands& f, AttentionTensors& ts) {
    AttentionParams params;
    params.rank = 1;
    params.window[0] = 7;
    ts.q = contiguous_tensor(buf, DType::bf16, {1, 64, 1, dim}, 0);
    ts.k = ts.q;
    ts.v = ts.q;
    f.q8 = contiguous_tensor(buf, DType::e4m3, {1, 64, 1, dim}, 0);
    f.k8 = f.q8;
    f.v8 = f.q8;
    f.q_scale = contiguous_tensor(buf, DType::f32, {1, 64, 1}, 0);
    f.k_scale = f.q_scale;
    f.v_scale = contiguous_tensor(buf, DType::f32, {1, 1, dim}, 0);
    call.problem = make_problem(params, ts);
    call.problem.dtype = out;
    call.in = ts;
    call.out = contiguous_tensor(buf, out, {1, 64, 1, dim}, 0);
    call.fp8 = &f;
  };
  std::string why;
  {
    ForwardCall call;
    Fp8Operands f;
    AttentionTensors ts;
    call_for(64, DType::bf16, call, f, ts);
    EXPECT_TRUE(portable.supports_forward(call, &why)) << why;
  }
  {
    ForwardCall call;
    Fp8Operands f;
    AttentionTensors ts;
    call_for(32, DType::bf16, call, f, ts);
    EXPECT_FALSE(portable.supports_forward(call, &why));
    EXPECT_EQ(why, "portable: e4m3: head dims 32/32 (qk/v) not supported (64/64, 128/128)");
  }
  {
    ForwardCall call;
    Fp8Operands f;
    AttentionTensors ts;
    call_for(128, DType::f32, call, f, ts);
    EXPECT_FALSE(portable.supports_forward(call, &why));
    EXPECT_EQ(why, "portable: e4m3: output dtype float32 not supported (bfloat16, float16)");
  }
  {
    ForwardCall call;
    Fp8Operands f;
    AttentionTensors ts;
    call_for(64, DType::f16, call, f, ts);
    call.options.q_tile.size[0] = 128;
    EXPECT_FALSE(portable.supports_forward(call, &why));
    EXPECT_EQ(why, "portable: e4m3: query tile volume 128 not supported (at most 64 tokens)");
  }
  cudaFree(buf);
}

// precision fp8 through the public API: named, the portable backend runs it (quantization on the
// device) as the GPU reference does; unnamed, dispatch picks the Hopper kernels on sm_90 and the
// portable ones elsewhere.
TEST(PortableFp8, PublicApiAndDispatch) {
  GNA_SKIP_WITHOUT_E4M3();
  std::mt19937_64 rng(test_seed());
  Config c;
  c.params.rank = 2;
  c.extent[0] = 24;
  c.extent[1] = 40;
  c.params.window[0] = 7;
  c.params.window[1] = 13;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.dim_qk = c.dim_v = 128;
  c.additional = 20;
  Inputs in;
  in.build(c, rng);
  TensorRef storage[5];
  const AttentionTensors dev = in.device(storage);
  Case shapes;
  shapes.cfg = c;
  Buffer out, lse, ref_out, ref_lse;
  out.allocate(shapes.token_shape(c.heads_q, c.dim_v), DType::bf16);
  ref_out.allocate(shapes.token_shape(c.heads_q, c.dim_v), DType::bf16);
  lse.allocate(shapes.token_shape(c.heads_q, 0), DType::f32);
  ref_lse.allocate(shapes.token_shape(c.heads_q, 0), DType::f32);
  for (Buffer* b : {&out, &lse, &ref_out, &ref_lse}) b->poison();
  CallOptions opt;
  opt.precision = Precision::fp8;
  opt.backend = "portable";
  TensorRef o = out.device_ref(), l = lse.device_ref();
  portable::count_forward_paths(true);
  attention_forward(c.params, dev, o, &l, opt);
  const portable::ForwardPathCounts n = portable::forward_path_counts();
  portable::count_forward_paths(false);
  EXPECT_GT(n.e4m3_tiles, 0ull);
  opt.backend = "gpu_reference";
  TensorRef ro = ref_out.device_ref(), rl = ref_lse.device_ref();
  attention_forward(c.params, dev, ro, &rl, opt);
  GNA_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(compare(out.download(), ref_out.download(), c.dim_v, lse.download(), ref_lse.download()), "");

  opt.backend = "auto";
  bool hopper_built = false;
  for (const Backend& b : registered_backends()) hopper_built = hopper_built || b.name == "hopper";
  const bool sm90 = cuda::compute_capability(0) == 90;
  EXPECT_EQ(select_forward_backend(c.params, dev, opt), sm90 && hopper_built ? "hopper" : "portable");
}

}  // namespace
}  // namespace gna::testing
