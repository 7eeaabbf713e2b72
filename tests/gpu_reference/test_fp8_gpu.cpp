// The FP8 forward on the GPU (docs/fp8.md): the device quantization pass against the CPU's, the
// GPU reference's FP8 forward against the CPU reference's emulation of the scheme on the same
// operands (random configurations of every rank, outputs poisoned), and the public API end to
// end. Tolerances, against outputs normalized by the largest reference value: float32 1e-4,
// float16 2e-3, bfloat16 1e-2 (the GPU's fp32 sums against the CPU's double ones, then the
// output's rounding); the LSE within 1e-4 relative. A row may be off by up to 0.1 where the two
// round one weight's e4m3 differently (exp within an ulp of a rounding midpoint: a few keys in
// a million); at most one row in 500 of a configuration may be.
#include <map>
#include <memory>

#include "backend/backend.hpp"
#include "gna/core/fp8.hpp"
#include "gpu_harness.hpp"
#include "kernels/common/fp8_quantize.hpp"
#include "reference/fp8.hpp"

namespace gna::testing {
namespace {

struct DeviceBlock {
  void* data = nullptr;
  explicit DeviceBlock(size_t bytes) { cudaMalloc(&data, std::max<size_t>(bytes, 16)); }
  ~DeviceBlock() { cudaFree(data); }
};

// Host bytes of a device block.
std::vector<uint8_t> download_bytes(const void* device, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost);
  return host;
}

const Backend& backend_named(const std::string& name) {
  for (const Backend& b : registered_backends())
    if (b.name == name) return b;
  throw std::runtime_error("no backend " + name);
}

// One configuration's inputs on the host (float32, values exact in bf16) and the problem.
struct Inputs {
  Config cfg;
  Buffer q, k, v, ak, av;
  Problem problem;
  TensorRef hq, hk, hv, hak, hav;
  AttentionTensors host;

  void build(const Config& c, std::mt19937_64& rng, DType device_dtype) {
    cfg = c;
    Case shapes;
    shapes.cfg = c;
    q.allocate(shapes.token_shape(c.heads_q, c.dim_qk), device_dtype);
    k.allocate(shapes.token_shape(c.heads_kv, c.dim_qk), device_dtype);
    v.allocate(shapes.token_shape(c.heads_kv, c.dim_v), device_dtype);
    if (c.additional > 0) {
      ak.allocate({c.batch, c.additional, c.heads_kv, c.dim_qk}, device_dtype);
      av.allocate({c.batch, c.additional, c.heads_kv, c.dim_v}, device_dtype);
    }
    for (Buffer* b : {&q, &k, &v, &ak, &av}) {
      if (b->shape.empty()) continue;
      b->host = random_values(rng, b->numel());
      // Keys offset per channel, as activations are (the scheme subtracts their mean).
      if (b == &k || b == &ak)
        for (int64_t i = 0; i < b->numel(); ++i) b->host[i] += float((i % c.dim_qk) % 7) - 3.f;
      b->upload();
    }
    hq = q.host_ref();
    hk = k.host_ref();
    hv = v.host_ref();
    host = AttentionTensors{hq, hk, hv};
    if (c.additional > 0) {
      hak = ak.host_ref();
      hav = av.host_ref();
      host.additional_k = &hak;
      host.additional_v = &hav;
    }
    problem = make_problem(c.params, host);
  }
  AttentionTensors device(TensorRef* storage) const {
    return device_attention_tensors(q, k, v, ak, av, cfg.additional > 0, storage);
  }
};

double output_tolerance(DType t) {
  return t == DType::f32 ? 1e-4 : t == DType::f16 ? 2e-3 : 1e-2;
}

// "" or what failed: per row normalized error within `tight`, or within 0.1 for at most one row
// in 500 (at least one); the LSE within `lse_tolerance` relative.
std::string compare(const std::vector<float>& got, const std::vector<float>& want, int dim,
                    const std::vector<float>& got_lse, const std::vector<float>& want_lse,
                    double tight, double lse_tolerance = 1e-4) {
  double scale = 1e-6;
  for (float w : want) scale = std::max(scale, double(std::fabs(w)));
  const size_t rows = want.size() / dim;
  size_t loose_rows = 0;
  std::ostringstream os;
  for (size_t r = 0; r < rows; ++r) {
    double e = 0;
    for (int c = 0; c < dim; ++c) {
      const double g = got[r * dim + c];
      e = std::isfinite(g) ? std::max(e, std::fabs(g - want[r * dim + c]) / scale) : INFINITY;
    }
    if (e > 0.1) {
      os << "row " << r << " error " << e << " > 0.1; ";
      break;
    }
    loose_rows += e > tight;
  }
  if (loose_rows > std::max<size_t>(1, rows / 500))
    os << loose_rows << " of " << rows << " rows beyond " << tight << "; ";
  const double el = lse_error(got_lse, want_lse);
  if (!(el <= lse_tolerance)) os << "lse error " << el << "; ";
  return os.str();
}

// Small problems (the CPU emulation runs each), heads dims of every kind. random_config shrinks
// windows until tokens * keys <= max_pairs, which with windows of 2 needs tokens <= max_pairs / 8
// on three axes: 12^3 tokens.
ConfigLimits fp8_limits() {
  ConfigLimits lim;
  lim.max_pairs = 20000;
  lim.max_extent[3] = 12;
  lim.dims = {{64, 64}, {128, 128}, {64, 128}, {128, 64}, {32, 32}, {48, 80}};
  return lim;
}

struct Reached {
  int additional = 0, gqa = 0, causal = 0, dilated = 0, strided = 0, dim128 = 0, api = 0;
};

// GPU reference FP8 forward vs the CPU emulation, on the CPU's quantization of each config.
void forward_sweep(int rank, int configs) {
  GNA_SKIP_WITHOUT_GPU();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed + 77 * rank);
  const ConfigLimits lim = fp8_limits();
  const DType outs[] = {DType::f32, DType::f16, DType::bf16};
  const Backend& gpu = backend_named("gpu_reference");
  Reached reached;
  int failures = 0;
  for (int i = 0; i < configs && failures < 5; ++i) {
    const Config c = random_config(rng, rank, lim);
    Inputs in;
    in.build(c, rng, DType::f32);
    const Problem& p = in.problem;
    const Fp8Quantized host = reference::quantize_fp8(p, in.host);
    // Half the calls as a caller with its own e4m3 tensors makes them: no LSE bias.
    const bool through_api = i % 2 == 1;
    Fp8Operands host_ops = host.operands;
    if (through_api) host_ops.lse_bias.data = nullptr;

    Case shapes;
    shapes.cfg = c;
    const std::vector<int64_t> out_shape = shapes.token_shape(c.heads_q, c.dim_v);
    const std::vector<int64_t> lse_shape = shapes.token_shape(c.heads_q, 0);
    Buffer ref_out, ref_lse;
    ref_out.allocate(out_shape, DType::f32);
    ref_lse.allocate(lse_shape, DType::f32);
    TensorRef ho = ref_out.host_ref(), hl = ref_lse.host_ref();
    reference::forward_fp8(p, host_ops, ho, &hl);

    const size_t bytes = fp8_operands_bytes(p);
    DeviceBlock block(bytes);
    cudaMemcpy(block.data, host.storage.get(), bytes, cudaMemcpyHostToDevice);
    Fp8Operands dev = fp8_operand_views(p, block.data, 0);
    if (through_api) dev.lse_bias.data = nullptr;

    const DType out_dtype = outs[i % 3];
    Buffer out, lse;
    out.allocate(out_shape, out_dtype);
    lse.allocate(lse_shape, DType::f32);
    out.poison();
    lse.poison();
    TensorRef o = out.device_ref(), l = lse.device_ref();
    if (through_api) {
      AttentionTensors e4m3{dev.q8, dev.k8, dev.v8};
      if (p.additional_kv > 0) {
        e4m3.additional_k = &dev.add_k8;
        e4m3.additional_v = &dev.add_v8;
        e4m3.additional_k_scale = &dev.add_k_scale;
      }
      e4m3.q_scale = &dev.q_scale;
      e4m3.k_scale = &dev.k_scale;
      e4m3.v_scale = &dev.v_scale;
      CallOptions opt;
      opt.backend = "gpu_reference";
      attention_forward(c.params, e4m3, o, &l, opt);
      ++reached.api;
    } else {
      ForwardCall call;
      call.problem = p;
      call.problem.dtype = out_dtype;
      call.in.q = dev.q8;
      call.out = o;
      call.lse = &l;
      call.fp8 = &dev;
      std::string why;
      ASSERT_TRUE(gpu.supports_forward(call, &why)) << why;
      gpu.forward(call);
    }
    GNA_CUDA_OK(cudaDeviceSynchronize());
    const std::string err = compare(out.download(), ref_out.host, c.dim_v, lse.download(),
                                    ref_lse.host, output_tolerance(out_dtype));
    if (!err.empty()) {
      ++failures;
      ADD_FAILURE() << dtype_name(out_dtype) << (through_api ? " api " : " ") << c.describe()
                    << ": " << err << " (seed " << seed << ")";
    }
    reached.additional += c.additional > 0;
    reached.gqa += c.heads_q > c.heads_kv;
    reached.dim128 += c.dim_qk == 128;
    for (int a = 0; a < rank; ++a) {
      reached.causal += c.params.causal[a];
      reached.dilated += c.params.dilation[a] > 1;
      reached.strided += c.params.stride[a] > 1;
    }
  }
  if (configs >= 50) {
    EXPECT_GT(reached.additional, 0);
    EXPECT_GT(reached.gqa, 0);
    EXPECT_GT(reached.causal, 0);
    EXPECT_GT(reached.dilated, 0);
    EXPECT_GT(reached.strided, 0);
    EXPECT_GT(reached.dim128, 0);
    EXPECT_GT(reached.api, 0);
  }
}

TEST(Fp8GpuReference, Rank1) { forward_sweep(1, configs_per_rank(300)); }
TEST(Fp8GpuReference, Rank2) { forward_sweep(2, configs_per_rank(300)); }
TEST(Fp8GpuReference, Rank3) { forward_sweep(3, configs_per_rank(300)); }

// The comparison fails on a wrong value and on an unwritten (poisoned) output.
TEST(Fp8GpuReference, CompareDetectsWrongResults) {
  std::vector<float> want(64 * 600, 1.f), got = want, lse(600, 2.f);
  EXPECT_EQ(compare(got, want, 64, lse, lse, 1e-4), "");
  got[5] = 1.05f;
  EXPECT_EQ(compare(got, want, 64, lse, lse, 1e-4), "");  // one row: a rounding flip
  got[64 * 7] = 1.05f;
  EXPECT_NE(compare(got, want, 64, lse, lse, 1e-4), "");  // two rows of 600
  got = want;
  got[3] = NAN;
  EXPECT_NE(compare(got, want, 64, lse, lse, 1e-4), "");
  got = want;
  std::vector<float> lse2 = lse;
  lse2[9] += 0.01f;
  EXPECT_NE(compare(got, want, 64, lse2, lse, 1e-4), "");
}

// Every e4m3 code, the midpoints between neighbours and the floats beside them: the device's
// conversion (hardware on sm_89+) against the core's portable one. Through the quantization of
// float32 queries whose rows hold 448 (their scale is 1, so each code is the value's own).
TEST(Fp8Quantize, DeviceConversionMatchesTheCore) {
  GNA_SKIP_WITHOUT_GPU();
  std::vector<float> values;
  for (int code = 0; code < 126; ++code) {
    const float a = e4m3_to_float(uint8_t(code)), b = e4m3_to_float(uint8_t(code + 1));
    const float mid = 0.5f * (a + b);
    for (float x : {a, mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)}) {
      values.push_back(x);
      values.push_back(-x);
    }
  }
  values.push_back(NAN);
  values.push_back(-NAN);
  values.push_back(1e-30f);
  values.push_back(-0.f);
  const int dim = 64, per_row = dim - 1;
  const int64_t rows = (int64_t(values.size()) + per_row - 1) / per_row;
  Config c;
  c.params.rank = 1;
  c.params.window[0] = 2;
  c.extent[0] = static_cast<int>(std::max<int64_t>(rows, 2));
  c.dim_qk = c.dim_v = dim;
  Inputs in;
  std::mt19937_64 rng(1);
  in.build(c, rng, DType::f32);
  std::vector<float>& q = in.q.host;
  for (int64_t r = 0; r < c.extent[0]; ++r) {
    q[r * dim] = kE4m3Max;
    for (int j = 0; j < per_row; ++j) {
      const size_t i = r * per_row + j;
      q[r * dim + 1 + j] = i < values.size() ? values[i] : 0.f;
    }
  }
  in.q.upload();
  TensorRef storage[5];
  const Fp8Quantized got = cuda::quantize_fp8(in.problem, in.device(storage), nullptr);
  GNA_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> codes = download_bytes(got.operands.q8.data, q.size());
  int checked = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    const uint8_t want = e4m3_from_float_portable(q[i]);
    if ((want & 0x7f) == 0x7f) {
      EXPECT_EQ(codes[i] & 0x7f, 0x7f) << "NaN at " << i;  // the sign of NaN is not specified
    } else {
      EXPECT_EQ(int(codes[i]), int(want)) << "value " << q[i];
    }
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

// The device pass against the CPU's on the same values (bf16 on the device, float32 on the
// host): Q, its scales, V and its scales bit for bit; K within one e4m3 step where the key means
// (summed in a different order) differ in their last bits; the LSE bias within 1e-3.
TEST(Fp8Quantize, DevicePassMatchesTheReference) {
  GNA_SKIP_WITHOUT_GPU();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  ConfigLimits lim = fp8_limits();
  lim.max_extent[1] = 1200;  // several chunks of the column reductions
  int k_codes = 0, k_off_by_one = 0, configs = 0;
  for (int rank = 1; rank <= 3; ++rank)
    for (int i = 0; i < configs_per_rank(20); ++i) {
      const Config c = random_config(rng, rank, lim);
      SCOPED_TRACE(c.describe() + " seed " + std::to_string(seed));
      Inputs in;
      in.build(c, rng, DType::bf16);
      const Problem& p = in.problem;
      const Fp8Quantized want = reference::quantize_fp8(p, in.host);
      TensorRef storage[5];
      Problem device_problem = p;
      device_problem.dtype = DType::bf16;
      const Fp8Quantized got = cuda::quantize_fp8(device_problem, in.device(storage), nullptr);
      GNA_CUDA_OK(cudaDeviceSynchronize());
      const size_t bytes = fp8_operands_bytes(p);
      const std::vector<uint8_t> block = download_bytes(got.storage.get(), bytes);
      const Fp8Operands g = fp8_operand_views(p, const_cast<uint8_t*>(block.data()), -1);
      const Fp8Operands& w = want.operands;
      auto same_bytes = [&](const char* name, const TensorRef& a, const TensorRef& b) {
        const size_t n = size_t(a.numel()) * dtype_size(a.dtype);
        EXPECT_EQ(std::memcmp(a.data, b.data, n), 0) << name;
      };
      same_bytes("q8", g.q8, w.q8);
      same_bytes("q_scale", g.q_scale, w.q_scale);
      same_bytes("v8", g.v8, w.v8);
      same_bytes("v_scale", g.v_scale, w.v_scale);
      if (p.additional_kv > 0) same_bytes("add_v8", g.add_v8, w.add_v8);
      auto close_floats = [&](const char* name, const TensorRef& a, const TensorRef& b,
                              double rel) {
        const float* x = static_cast<const float*>(a.data);
        const float* y = static_cast<const float*>(b.data);
        for (int64_t j = 0; j < a.numel(); ++j)
          if (!(std::fabs(x[j] - y[j]) <= rel * (1 + std::fabs(y[j])))) {
            ADD_FAILURE() << name << "[" << j << "] " << x[j] << " vs " << y[j];
            return;
          }
      };
      close_floats("k_scale", g.k_scale, w.k_scale, 1e-5);
      close_floats("lse_bias", g.lse_bias, w.lse_bias, 1e-3);
      if (p.additional_kv > 0) close_floats("add_k_scale", g.add_k_scale, w.add_k_scale, 1e-5);
      auto near_codes = [&](const char* name, const TensorRef& a, const TensorRef& b) {
        const uint8_t* x = static_cast<const uint8_t*>(a.data);
        const uint8_t* y = static_cast<const uint8_t*>(b.data);
        for (int64_t j = 0; j < a.numel(); ++j) {
          ++k_codes;
          if (x[j] == y[j]) continue;
          ++k_off_by_one;
          // Same sign, neighbouring magnitudes (zero's two signs are neighbours too).
          const int mx = x[j] & 0x7f, my = y[j] & 0x7f;
          if (std::abs(mx - my) > 1 || ((x[j] ^ y[j]) & 0x80 && mx + my > 1)) {
            ADD_FAILURE() << name << "[" << j << "] code " << int(x[j]) << " vs " << int(y[j]);
            return;
          }
        }
      };
      near_codes("k8", g.k8, w.k8);
      if (p.additional_kv > 0) near_codes("add_k8", g.add_k8, w.add_k8);
      ++configs;
    }
  EXPECT_LE(k_off_by_one, k_codes / 100) << "key codes one step apart";
  EXPECT_GT(configs, 0);
}

// precision fp8 through the public API on bf16 CUDA tensors (device quantization and an FP8
// backend) against the same call on the host's float32 copies (CPU quantization, emulation):
// through the GPU reference (the emulation's walks: tight) and through automatic dispatch (a
// fused kernel where the device has one: its running maximum quantizes P against another
// maximum than the emulation's, and e4m3 tensor cores accumulate S short of fp32, so O within
// 0.07 of max |O| per row and the LSE within 5e-3 relative).
TEST(Fp8Api, PrecisionFp8MatchesTheHostEndToEnd) {
  GNA_SKIP_WITHOUT_GPU();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed + 5);
  ConfigLimits lim = fp8_limits();
  lim.dims = {{64, 64}, {128, 128}};
  std::map<std::string, int> ran;  // configurations per backend automatic dispatch chose
  for (int rank = 1; rank <= 3; ++rank)
    for (int i = 0; i < configs_per_rank(20); ++i) {
      const Config c = random_config(rng, rank, lim);
      SCOPED_TRACE(c.describe() + " seed " + std::to_string(seed));
      Inputs in;
      in.build(c, rng, DType::bf16);
      Case shapes;
      shapes.cfg = c;
      Buffer ref_out, ref_lse, out, lse;
      ref_out.allocate(shapes.token_shape(c.heads_q, c.dim_v), DType::f32);
      ref_lse.allocate(shapes.token_shape(c.heads_q, 0), DType::f32);
      out.allocate(shapes.token_shape(c.heads_q, c.dim_v), DType::bf16);
      lse.allocate(shapes.token_shape(c.heads_q, 0), DType::f32);
      CallOptions fp8;
      fp8.precision = Precision::fp8;
      TensorRef ho = ref_out.host_ref(), hl = ref_lse.host_ref();
      attention_forward(c.params, in.host, ho, &hl, fp8);
      TensorRef storage[5];
      const AttentionTensors dev = in.device(storage);
      for (const bool automatic : {false, true}) {
        CallOptions opt = fp8;
        if (!automatic) opt.backend = "gpu_reference";
        const std::string chosen = select_forward_backend(c.params, dev, opt);
        EXPECT_FALSE(chosen.empty());
        if (automatic) ++ran[chosen];
        out.poison();
        lse.poison();
        TensorRef o = out.device_ref(), l = lse.device_ref();
        attention_forward(c.params, dev, o, &l, opt);
        GNA_CUDA_OK(cudaDeviceSynchronize());
        // Key means summed in another order move a few key codes by one step: looser than the
        // reference sweeps above.
        const bool fused = chosen != "gpu_reference";
        EXPECT_EQ(compare(out.download(), ref_out.host, c.dim_v, lse.download(), ref_lse.host,
                          fused ? 7e-2 : 2e-2, fused ? 5e-3 : 1e-4),
                  "")
            << chosen;
      }
    }
  for (const auto& [name, count] : ran) std::printf("automatic dispatch: %s ran %d\n", name.c_str(), count);
}

TEST(Fp8Api, RefusesTheBackwardOnDevice) {
  GNA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(3);
  Case cs;
  cs.build(random_config(rng, 2, ConfigLimits{}), DType::bf16, rng, false);
  TensorRef storage[6];
  const AttentionTensors in = cs.device_inputs(storage);
  CallOptions fp8;
  fp8.precision = Precision::fp8;
  try {
    select_backward_backend(cs.cfg.params, in, fp8);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("precision"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gna::testing
