// The halo kernels against the GPU reference (fp32 inputs of the same values): random
// configurations biased to the image regime (extents 5-64, windows 3-13, dilation up to
// extent / window, causal and strided axes, batch up to 256, GQA, head dims 32 / 64), fp16 and
// bf16, forward (O, LSE) and backward (dQ, dK, dV) into poisoned outputs; every instantiation
// must be reached, and (2-D, 3-D) walks of every length modulo the 4-chunk step (the walks'
// partial first step) and of more than one step, 2-D boxes of each shape (8x8, 4x16 / 16x4), and
// (3-D) halos streamed in slabs in every pass. Then bitwise determinism of forward and backward.
// The sweeps also run with shared memory capped (GNA_MAX_SHARED_MEMORY_BYTES, CTest entries
// test_halo_smem_*): every pass they launch must fit the cap.
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "backend/backend.hpp"
#include "gpu_harness.hpp"
#include "kernels/common/device_limits.hpp"
#include "kernels/halo/halo.hpp"
#include "kernels/halo/plan.hpp"

namespace gna::testing {
namespace {

Config image_config(std::mt19937_64& rng, int rank) {
  Config c;
  c.params.rank = rank;
  const int max_extent[] = {0, 64, 64, 20};
  int64_t tokens = 1, keys = 1;
  for (int a = 0; a < rank; ++a) {
    const int L = uniform(rng, 5, max_extent[rank]);
    int K = uniform(rng, 3, std::min(13, L));
    if (rank == 3) K = std::min(K, 7);  // a 3-D halo of larger windows exceeds shared memory
    const int d = uniform(rng, 0, 2) == 0 ? uniform(rng, 1, std::max(1, L / K)) : 1;
    c.extent[a] = L;
    c.params.window[a] = K;
    c.params.dilation[a] = d;
    c.params.stride[a] = uniform(rng, 0, 3) == 0 ? uniform(rng, 1, K) : 1;
    c.params.causal[a] = uniform(rng, 0, 4) == 0;
    tokens *= L;
    keys *= K;
  }
  // Batch up to 256 where the problem is small; the oracle's pairs stay bounded.
  const int64_t per_item = tokens * keys;
  const int max_batch = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(256, 4000000 / per_item)));
  c.batch = uniform(rng, 0, 3) == 0 ? max_batch : uniform(rng, 1, std::min(4, max_batch));
  c.heads_kv = uniform(rng, 1, 2);
  c.heads_q = c.heads_kv * uniform(rng, 1, 2);
  c.dim_qk = c.dim_v = uniform(rng, 0, 1) ? 32 : 64;
  return c;
}

// Fills ref (fp32) and got (dtype) with the same inputs; runs the GPU reference on ref.
void build_pair(const Config& c, DType dtype, std::mt19937_64& rng, Case& ref, Case& got) {
  for (Case* cs : {&ref, &got}) {
    cs->cfg = c;
    const DType t = cs == &ref ? DType::f32 : dtype;
    cs->q.allocate(cs->token_shape(c.heads_q, c.dim_qk), t);
    cs->k.allocate(cs->token_shape(c.heads_kv, c.dim_qk), t);
    cs->v.allocate(cs->token_shape(c.heads_kv, c.dim_v), t);
    cs->o.allocate(cs->token_shape(c.heads_q, c.dim_v), t);
    cs->lse.allocate(cs->token_shape(c.heads_q, 0), DType::f32);
    cs->d_o.allocate(cs->token_shape(c.heads_q, c.dim_v), t);
    cs->dq.allocate(cs->token_shape(c.heads_q, c.dim_qk), t);
    cs->dk.allocate(cs->token_shape(c.heads_kv, c.dim_qk), t);
    cs->dv.allocate(cs->token_shape(c.heads_kv, c.dim_v), t);
  }
  for (auto member : {&Case::q, &Case::k, &Case::v, &Case::d_o}) {
    (ref.*member).host = random_values(rng, (ref.*member).numel());
    (got.*member).host = (ref.*member).host;
    (ref.*member).upload();
    (got.*member).upload();
  }
}

// Per pass (forward, dQ, dK / dV) on device 0: 1 where the launch streams the halo in slabs
// although the whole halo fits (for more resident CTAs), 2 where the whole halo does not fit, else 0.
// *max_bytes: the most shared memory per block a pass launches with.
std::vector<int> streamed_passes(const Problem& p, int* max_bytes = nullptr) {
  const int limit = cuda::shared_memory_per_block(0);
  std::vector<int> streamed;
  for (const auto& [side, pass] : {std::pair{halo::Side::keys_of_queries, halo::Pass::forward},
                                   {halo::Side::keys_of_queries, halo::Pass::dq},
                                   {halo::Side::queries_of_keys, halo::Pass::dkdv}}) {
    const halo::Plan whole = halo::make_plan(p, side);
    const bool must = halo::pass_plan(whole, pass, p.dim_qk, limit).slabs > 1;
    streamed.push_back(must ? 2 : halo::launched_slabs(p, whole, pass, 0) > 1 ? 1 : 0);
    if (max_bytes) *max_bytes = std::max(*max_bytes, halo::launched_plan(p, whole, pass, 0).bytes);
  }
  return streamed;
}

bool halo_supports(Case& got, std::string* why, Problem* problem = nullptr) {
  TensorRef storage[6];
  const AttentionTensors in = got.device_inputs(storage);
  for (const Backend& b : registered_backends())
    if (b.name == "halo") {
      ForwardCall f;
      f.problem = make_problem(got.cfg.params, in);
      if (problem) *problem = f.problem;
      f.in = in;
      f.out = got.o.device_ref();
      BackwardCall bw;
      bw.problem = f.problem;
      bw.in = in;
      bw.out = bw.d_out = bw.dq = bw.dk = bw.dv = f.out;
      bw.dk = got.dk.device_ref();
      bw.dv = got.dv.device_ref();
      return b.supports_forward(f, why) && b.supports_backward(bw, why);
    }
  *why = "no halo backend";
  return false;
}

// Forward and backward of one configuration in one dtype; "" when within tolerance.
std::string check(const Config& c, DType dtype, std::mt19937_64& rng, bool* ran, Problem* problem,
                  std::string* refusal = nullptr) {
  Case ref, got;
  build_pair(c, dtype, rng, ref, got);
  std::string why;
  *ran = halo_supports(got, &why, problem);
  if (refusal) *refusal = why;
  if (!*ran) return "";
  if (ref.check_forward("gpu_reference").find("CUDA") != std::string::npos) return "reference failed";
  got.ref_o = ref.o.download();
  got.ref_lse = ref.lse.download();
  std::string err = got.check_forward("halo");
  // Backward from the forward's O (as the dtype holds it) and LSE, on both sides.
  got.o.host = got.ref_o;
  got.o.upload();
  got.o.host = got.o.download();
  ref.o.host = got.o.host;
  ref.o.upload();
  ref.lse.host = got.ref_lse;
  ref.lse.upload();
  got.lse.host = got.ref_lse;
  if (ref.check_backward("gpu_reference").find("CUDA") != std::string::npos) return err + "reference backward failed";
  got.ref_dq = ref.dq.download();
  got.ref_dk = ref.dk.download();
  got.ref_dv = ref.dv.download();
  err += got.check_backward("halo");
  return err;
}

void sweep(int rank, int configs) {
  GNA_SKIP_WITHOUT_GPU();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed + 31 * rank);
  int failures = 0, ran = 0, refused = 0, dilated = 0, causal = 0, strided = 0, gqa = 0, big_batch = 0;
  std::map<std::string, int> instances;
  // Chunks of the longest warp walk (forward and dQ; dK / dV) modulo the 4-chunk step, and
  // whether a walk took more than one step.
  std::set<int> walk_residues;
  int multi_step = 0;
  int long_boxes = 0;  // 2-D configurations on 4x16 or 16x4 boxes
  int streamed[3] = {0, 0, 0};  // runs whose forward, dQ, dK / dV pass had to stream its halo in slabs
  int occupancy_slabs = 0;      // runs with a pass that streamed a halo that fits, for occupancy
  // The shared memory the kernels may use: the device's, or the cap under test; the most a
  // launched pass used. Under a cap, halos may be refused for shared memory alone.
  const int limit = cuda::shared_memory_per_block(0);
  const int device_limit = cuda::device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  if (const char* cap = std::getenv(kSharedMemoryCapVariable)) {
    ASSERT_EQ(limit, std::min(device_limit, std::atoi(cap))) << "the cap is not in force";
  }
  int most_bytes = 0, refused_for_memory = 0;
  for (int i = 0; i < configs && failures < 5; ++i) {
    const Config c = image_config(rng, rank);
    for (DType t : {DType::f16, DType::bf16}) {
      bool did = false;
      Problem problem;
      std::string why;
      const std::string err = check(c, t, rng, &did, &problem, &why);
      if (!did) {
        ++refused;
        refused_for_memory += why.find("bytes of shared memory per block") != std::string::npos;
        continue;
      }
      ++ran;
      for (halo::Side side : {halo::Side::keys_of_queries, halo::Side::queries_of_keys}) {
        const int chunks = halo::make_plan(problem, side).walk_rows / halo::kChunk;
        walk_residues.insert(chunks % 4);
        multi_step += chunks > 4;
      }
      ++instances[std::string(dtype_name(t)) + " d" + std::to_string(c.dim_qk)];
      long_boxes += rank == 2 && halo::box_shape(problem).cta[0] != halo::box_shape(problem).cta[1];
      const std::vector<int> slabs = streamed_passes(problem, &most_bytes);
      for (int pass = 0; pass < 3; ++pass) streamed[pass] += slabs[pass] == 2;
      occupancy_slabs += slabs[0] == 1 || slabs[1] == 1 || slabs[2] == 1;
      for (int a = 0; a < rank; ++a) {
        dilated += c.params.dilation[a] > 1;
        causal += c.params.causal[a];
        strided += c.params.stride[a] > 1;
      }
      gqa += c.heads_q != c.heads_kv;
      big_batch += c.batch >= 64;
      if (!err.empty()) {
        ++failures;
        ADD_FAILURE() << dtype_name(t) << " config " << i << ": " << c.describe() << ": " << err
                      << " (GNA_TEST_SEED=" << seed << ")";
      }
    }
  }
  std::printf("rank %d: %d runs (%d refused), dilated axes %d, causal %d, strided %d, GQA %d, "
              "batch >= 64 %d, walk residues %zu, multi-step %d, 4x16 / 16x4 boxes %d, streamed halos "
              "(fwd / dQ / dK dV) %d / %d / %d, slabs for occupancy %d, shared memory per block %d "
              "of %d allowed (device: %d), seed %llu;", rank, ran,
              refused, dilated, causal, strided, gqa, big_batch, walk_residues.size(), multi_step, long_boxes,
              streamed[0], streamed[1], streamed[2], occupancy_slabs, most_bytes, limit, device_limit,
              static_cast<unsigned long long>(seed));
  for (const auto& [name, n] : instances) std::printf(" %s: %d", name.c_str(), n);
  std::printf("\n");
  EXPECT_LE(most_bytes, limit) << "a pass launched with more shared memory than allowed";
  // 3-D halos too large for shared memory stream in slabs: nothing is refused (under a cap
  // below the device's, only for shared memory).
  EXPECT_EQ(refused - (limit < device_limit ? refused_for_memory : 0), 0)
      << "every configuration must run on the halo kernels";
  if (configs >= 50) {
    for (const char* name : {"float16 d32", "float16 d64", "bfloat16 d32", "bfloat16 d64"})
      EXPECT_GT(instances[name], 0) << "instantiation " << name << " not reached";
    EXPECT_GT(dilated, 0);
    EXPECT_GT(causal, 0);
    EXPECT_GT(strided, 0);
    EXPECT_GT(gqa, 0);
    // 3-D items are large, so a batch of 64 fits the sweep's size cap only by chance there.
    if (rank < 3) EXPECT_GT(big_batch, 0);
    if (rank > 1) {  // 1-D walks are 1 or 2 chunks (16 + window - 1 tokens)
      EXPECT_EQ(walk_residues.size(), 4u) << "walk lengths of every residue modulo 4 chunks must be reached";
      EXPECT_GT(multi_step, 0);
    }
    if (rank == 2) EXPECT_GT(long_boxes, 0) << "4x16 / 16x4 boxes not reached";
    if (rank == 3)
      for (int i = 0; i < 3; ++i) EXPECT_GT(streamed[i], 0) << "pass " << i << ": no halo streamed in slabs";
    if (rank > 1) EXPECT_GT(occupancy_slabs, 0) << "no halo that fits streamed for occupancy";
  }
}

TEST(Halo, Rank1) { sweep(1, configs_per_rank(150)); }
TEST(Halo, Rank2) { sweep(2, configs_per_rank(100)); }
TEST(Halo, Rank3) { sweep(3, configs_per_rank(100)); }

// The image-model shapes, the 3-D 7x7x7 case included, are dispatched to the halo kernels.
TEST(Halo, DispatchPicksHalo) {
  GNA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(1);
  Config c;
  c.params.rank = 2;
  c.extent[0] = c.extent[1] = 28;
  c.params.window[0] = c.params.window[1] = 7;
  c.batch = 2;
  c.heads_q = c.heads_kv = 2;
  Case ref, got;
  build_pair(c, DType::bf16, rng, ref, got);
  TensorRef storage[6];
  EXPECT_EQ(select_forward_backend(c.params, got.device_inputs(storage)), "halo");
  EXPECT_EQ(select_backward_backend(c.params, got.device_inputs(storage)), "halo");
  // 3-D 7x7x7 at head dim 64: the halo streams in slabs, faster than the Hopper backend there.
  Config three;
  three.params.rank = 3;
  three.extent[0] = 16;
  three.extent[1] = three.extent[2] = 32;
  three.params.window[0] = three.params.window[1] = three.params.window[2] = 7;
  three.batch = 1;
  three.heads_q = three.heads_kv = 1;
  three.dim_qk = three.dim_v = 64;
  Case ref3, got3;
  build_pair(three, DType::bf16, rng, ref3, got3);
  EXPECT_EQ(select_forward_backend(three.params, got3.device_inputs(storage)), "halo");
  EXPECT_EQ(select_backward_backend(three.params, got3.device_inputs(storage)), "halo");
}

// The streamed dK / dV pass at more than one CTA per SM: the 3-D 7x7x7 case (query halo 11^3)
// streams at two or more CTAs per SM at both head dims (head dim 64 with K / V in registers, no
// tiles; 32 with tiles, which fit as many); hdit 7x7 at head dim 64 streams with K / V tiles at
// three. Both results match the reference, GQA
// included.
TEST(Halo, DkdvSlabsForOccupancy) {
  GNA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(test_seed() + 7);
  struct Shape {
    int rank, extent[3], window, dim;
    bool kv_registers;
    int ctas;
  };
  const Shape shapes[] = {{3, {16, 32, 32}, 7, 64, true, 2}, {3, {16, 32, 32}, 7, 32, false, 2},
                          {2, {128, 128, 1}, 7, 64, false, 3}};
  for (const Shape& sh : shapes) {
    Config c;
    c.params.rank = sh.rank;
    for (int a = 0; a < sh.rank; ++a) {
      c.extent[a] = sh.extent[a];
      c.params.window[a] = sh.window;
    }
    c.batch = 1;
    c.heads_kv = 1;
    c.heads_q = 2;
    c.dim_qk = c.dim_v = sh.dim;
    for (DType t : {DType::bf16, DType::f16}) {
      bool ran = false;
      Problem problem;
      const std::string err = check(c, t, rng, &ran, &problem);
      ASSERT_TRUE(ran) << c.describe();
      EXPECT_EQ(err, "") << dtype_name(t) << " " << c.describe();
      const halo::Plan whole = halo::make_plan(problem, halo::Side::queries_of_keys);
      const halo::Launched l = halo::launched_plan(problem, whole, halo::Pass::dkdv, 0);
      std::printf("%s %s dK/dV: %d slabs of %d planes, K / V %s, %d CTAs per SM, %d bytes\n", c.describe().c_str(),
                  dtype_name(t), l.slabs, l.slab_planes, l.kv_registers ? "in registers" : "tiles", l.ctas_per_sm,
                  l.bytes);
      EXPECT_GT(l.slabs, 1) << c.describe();
      EXPECT_EQ(l.kv_registers, sh.kv_registers) << c.describe();
      EXPECT_GE(l.ctas_per_sm, sh.ctas) << c.describe();
    }
  }
}

// Same inputs, same bits: forward (O, LSE) and backward (no atomics anywhere).
TEST(Halo, Deterministic) {
  GNA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(test_seed());
  for (int rank = 1; rank <= 3; ++rank) {
    Config c = image_config(rng, rank);
    Case ref, got;
    build_pair(c, DType::bf16, rng, ref, got);
    std::string why;
    if (!halo_supports(got, &why)) continue;
    std::vector<std::vector<float>> first;
    for (int run = 0; run < 2; ++run) {
      TensorRef storage[6];
      AttentionTensors in = got.device_inputs(storage);
      CallOptions opt;
      opt.backend = "halo";
      TensorRef out = got.o.device_ref(), l = got.lse.device_ref();
      got.o.poison();
      attention_forward(c.params, in, out, &l, opt);
      AttentionGradients g{got.dq.device_ref(), got.dk.device_ref(), got.dv.device_ref()};
      attention_backward(c.params, in, got.o.device_ref(), got.lse.device_ref(), got.d_o.device_ref(), g, opt);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<std::vector<float>> now{got.o.download(), got.lse.download(), got.dq.download(),
                                          got.dk.download(), got.dv.download()};
      if (run == 0) {
        first = now;
        continue;
      }
      for (size_t i = 0; i < now.size(); ++i)
        EXPECT_EQ(std::memcmp(now[i].data(), first[i].data(), now[i].size() * 4), 0)
            << "tensor " << i << " differs between runs: " << c.describe();
    }
  }
}

}  // namespace
}  // namespace gna::testing
