// The portable fused kernels against the CPU reference: >= 500 random configurations per rank
// (GNA_TEST_CONFIGS overrides), each in fp16 and bf16, forward (O, LSE) and backward (dQ, dK,
// dV and the additional keys' gradients); larger problems against the GPU reference. The
// forward's paths are counted on the device (path_counts.hpp): each sweep asserts that it ran
// placed KV tiles, partial pairs masked by their bitmasks, warps that ran a partial pair as full,
// partial pairs' K/V tiles loaded as full ones (all rows real keys) and with zero-filled rows, and
// (ranks 2 and 3) partial pairs' axes left unmasked; the backward's likewise (placed Q tiles,
// bitmask-masked warp tiles, warps running a partial pair as full, partial pairs' Q / dO tiles
// loaded as full ones and with zero-filled rows, unmasked axes, and partial pairs of Q tiles with
// a side that is not a power of two masked query by query). The sweeps also run with shared memory capped
// (GNA_MAX_SHARED_MEMORY_BYTES, CTest entries test_portable_smem_*): every kernel they choose must
// fit the cap.
#include <cstdio>

#include "backend/backend.hpp"
#include "gpu_harness.hpp"
#include "kernels/common/device_limits.hpp"
#include "kernels/portable/path_counts.hpp"
#include "kernels/portable/portable.hpp"

namespace gna::testing {
namespace {

bool portable_backward_available() {
  for (const auto& b : registered_backends())
    if (b.name == "portable") {
      BackwardCall call;
      call.problem.dtype = DType::bf16;
      std::string why;
      b.supports_backward(call, &why);
      return why.find("not available") == std::string::npos;
    }
  return false;
}

void sweep(int rank, int configs) {
  GNA_SKIP_WITHOUT_GPU();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed + 17 * rank);
  const bool backward = portable_backward_available();
  // The shared memory the kernels may use: the device's, or the cap under test.
  const int limit = cuda::shared_memory_per_block(0);
  const int device_limit = cuda::device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  if (const char* cap = std::getenv(kSharedMemoryCapVariable)) {
    ASSERT_EQ(limit, std::min(device_limit, std::atoi(cap))) << "the cap is not in force";
  }
  ConfigLimits lim;
  int failures = 0, checked = 0, wide = 0, small_backward = 0, wide_backward = 0;
  int wide_fits = 0;   // unforced configurations whose 128-row forward fits the limit
  int changed = 0;     // configurations whose kernels a cap below the device's limit changed
  int over_limit = 0;  // chosen kernels needing more than the limit (must stay 0)
  int single_stage = 0;  // forward plans with one K/V stage (two do not fit the limit)
  // Where the limit holds one K/V stage of the 128-row head-dim-128 forward but not two (99 KB),
  // every tenth configuration takes head dims 128/128 and a forced 128-row Q tile, so that the
  // single-stage kernel runs in every such sweep whatever the random dims and the tile choice.
  const bool single_stage_only = portable::forward_shared_bytes(128, 128, 128, false, 2) > limit &&
                                 portable::forward_shared_bytes(128, 128, 128, false, 1) <= limit;
  int single_stage_pinned = 0;
  portable::count_forward_paths(true);
  portable::count_backward_paths(true);
  for (int i = 0; i < configs && failures < 5; ++i, ++checked) {
    Config c = random_config(rng, rank, lim);
    const bool pin_single_stage = single_stage_only && i % 10 == 0;
    if (pin_single_stage) c.dim_qk = c.dim_v = 128;
    Case f16;
    f16.build(c, DType::f16, rng, backward);
    // Every other configuration forces the best 64-row Q / 64-token KV tiles, so that both
    // forward variants (64- and 128-row Q tiles) and the backward's 64-key variant (where the
    // head dims have it) run whatever the tile choice prefers; every fourth forces the best
    // 128-token KV tiles on the backward, so that its 128-key kernel runs too.
    KernelOptions forward_options, backward_options;
    {
      TensorRef storage[6];
      const Problem p = make_problem(c.params, f16.device_inputs(storage));
      if (i % 2) {
        const portable::TilePlan t = portable::choose_tiles(p, 64, 64);
        forward_options.q_tile = t.q;
        forward_options.kv_tile = t.kv;
        backward_options = forward_options;
      } else if (i % 4 == 2 && portable::backward_shared_bytes(c.dim_qk, c.dim_v) <= limit) {
        const portable::TilePlan t = portable::choose_tiles(p, 64, 128);
        backward_options.q_tile = t.q;
        backward_options.kv_tile = t.kv;
      } else if (i % 8 == 4) {
        // A Q tile with a side that is not a power of two (the backward's query-by-query masks):
        // the best 64-row one with its longest side shortened by one.
        TileShape q = portable::choose_tiles(p, 64, 128).q;
        int longest = 0;
        for (int a = 1; a < rank; ++a)
          if (q.size[a] > q.size[longest]) longest = a;
        if (q.size[longest] >= 4) {
          --q.size[longest];
          backward_options.q_tile = q;
        }
      }
      if (pin_single_stage) {
        const TileShape q = portable::choose_tiles(p, 128, 64).q;
        if (q.volume(rank) > 64) {
          forward_options.q_tile = q;
          ++single_stage_pinned;
        }
      }
      // KV tiles placed per Q tile in every third configuration, on the grid in every third
      // (others: the tile chooser's placement).
      if (i % 3 == 1) forward_options.kv_placements = KvPlacements::placed;
      if (i % 3 == 2) forward_options.kv_placements = KvPlacements::grid;
      // Q tiles placed per KV tile in the backward likewise, offset by one configuration.
      if (i % 3 == 2) backward_options.q_placements = KvPlacements::placed;
      if (i % 3 == 0) backward_options.q_placements = KvPlacements::grid;
      const portable::TilePlan forward_plan = portable::forward_tiles(p, forward_options, limit);
      const int forward_rows = forward_plan.q.volume(rank);
      const int forward_bytes = portable::forward_shared_bytes(c.dim_qk, c.dim_v, forward_rows,
                                                               false, forward_plan.kv_stages);
      single_stage += forward_plan.kv_stages == 1;
      over_limit += forward_bytes > limit;
      changed += forward_rows !=
                 portable::forward_tiles(p, forward_options, device_limit).q.volume(rank);
      if (i % 2 == 0 && forward_rows > 64) ++wide;
      const int wide_single = portable::forward_shared_bytes(c.dim_qk, c.dim_v, 128, false, 1);
      wide_fits += i % 2 == 0 &&
                   (portable::forward_shared_bytes(c.dim_qk, c.dim_v, 128) <= limit ||
                    (wide_single > 0 && wide_single <= limit));
      if (backward) {
        const bool small = portable::backward_runs_small(
            p, portable::backward_tiles(p, backward_options, limit).kv);
        const int kv_rows = small ? portable::kBackwardRowsKVSmall : portable::kBackwardRowsKV;
        over_limit += portable::backward_shared_bytes(c.dim_qk, c.dim_v, kv_rows) > limit;
        changed += small != portable::backward_runs_small(
                                p, portable::backward_tiles(p, backward_options, device_limit).kv);
        ++(small ? small_backward : wide_backward);
      }
    }
    Case bf16;
    bf16.copy_as(f16, DType::bf16);
    for (Case* cs : {&f16, &bf16}) {
      std::string err = cs->check_forward("portable", forward_options);
      if (backward) err += cs->check_backward("portable", backward_options);
      if (!err.empty()) {
        ++failures;
        ADD_FAILURE() << dtype_name(cs->q.dtype) << " config " << i << ": " << c.describe()
                      << (i % 2 ? " (64-token tiles forced)" : i % 4 == 2 ? " (128-token backward KV tiles forced)" : "") << ": " << err
                      << " (GNA_TEST_SEED=" << seed << ")";
      }
    }
  }
  const portable::ForwardPathCounts paths = portable::forward_path_counts();
  portable::count_forward_paths(false);
  const portable::BackwardPathCounts bpaths = portable::backward_path_counts();
  portable::count_backward_paths(false);
  std::printf("rank %d: %d random configurations x {f16, bf16}, forward%s (%d of the "
              "unforced half with 128-row Q tiles; backward: %d runs of the 64-key variant, %d of "
              "the 128-key kernel); %d bytes of shared memory per block (device: %d), kernels of "
              "%d configurations chosen smaller by it, %d forwards with one K/V stage (%d pinned); "
              "seed %llu\n",
              rank, checked, backward ? " and backward" : "", wide, small_backward, wide_backward,
              limit, device_limit, changed, single_stage, single_stage_pinned,
              static_cast<unsigned long long>(seed));
  std::printf("rank %d forward paths: %llu tiles, %llu of them placed; partial pairs: %llu warp "
              "tiles masked by bitmasks, %llu run as full (every row keeps every key); K/V "
              "loads %llu as full (all rows real), %llu with zero-filled rows; %llu axes "
              "unmasked\n",
              rank, paths.tiles, paths.placed_tiles, paths.masked_warps, paths.full_row_warps,
              paths.partial_full_loads, paths.partial_fill_loads, paths.skipped_mask_axes);
  if (backward)
    std::printf("rank %d backward paths: %llu items, %llu of them placed; partial pairs: %llu "
                "warp tiles masked, %llu run as full (every key row keeps every query); Q/dO "
                "loads %llu as full (all rows real), %llu with zero-filled rows; %llu axes "
                "unmasked; %llu pairs masked query by query\n",
                rank, bpaths.items, bpaths.placed_items, bpaths.masked_warps,
                bpaths.full_row_warps, bpaths.partial_full_loads, bpaths.partial_fill_loads,
                bpaths.skipped_mask_axes, bpaths.query_masked_items);
  EXPECT_EQ(over_limit, 0) << "kernels chosen that need more than " << limit << " bytes";
  EXPECT_GT(paths.tiles, 0u) << "the forward's path counts saw no tile";
  if (checked >= 100) {
    EXPECT_GT(paths.placed_tiles, 0u) << "no placed KV tile ran";
    EXPECT_GT(paths.masked_warps, 0u) << "no partial pair ran with bitmask masks";
    EXPECT_GT(paths.full_row_warps, 0u) << "no warp ran a partial pair as full";
    EXPECT_GT(paths.partial_full_loads, 0u) << "no partial pair's K/V tile loaded as a full one";
    EXPECT_GT(paths.partial_fill_loads, 0u) << "no partial pair's K/V tile had zero-filled rows";
    if (rank > 1) EXPECT_GT(paths.skipped_mask_axes, 0u) << "no partial pair left an axis unmasked";
  }
  if (checked >= 100 && wide_fits >= 10) {
    EXPECT_GT(wide, 0) << "no configuration ran the 128-row forward";
  }
  // Single-stage launches (one K/V buffer) ran exactly where the plans asked for them, and in
  // every sweep under a limit that holds no second stage.
  EXPECT_EQ(paths.single_stage_tiles > 0, single_stage > 0)
      << single_stage << " single-stage plans, " << paths.single_stage_tiles << " tiles";
  if (single_stage_only && checked >= 10)
    EXPECT_GT(single_stage_pinned, 0) << "no 128-row head-dim-128 forward pinned under the limit";
  EXPECT_GE(single_stage, single_stage_pinned) << "a pinned 128-row head-dim-128 forward ran two stages";
  if (checked >= 100 && backward) {
    EXPECT_GT(small_backward, 0) << "no configuration ran the 64-key backward";
    EXPECT_GT(wide_backward, 0) << "no configuration ran the 128-key backward";
    EXPECT_GT(bpaths.placed_items, 0u) << "no placed Q tile ran in the backward";
    EXPECT_GT(bpaths.masked_warps, 0u) << "no backward partial pair ran with masks";
    EXPECT_GT(bpaths.full_row_warps, 0u) << "no backward warp ran a partial pair as full";
    EXPECT_GT(bpaths.partial_full_loads, 0u) << "no backward partial pair's Q tile loaded as full";
    EXPECT_GT(bpaths.partial_fill_loads, 0u) << "no backward partial pair's Q tile had zero fill";
    EXPECT_GT(bpaths.query_masked_items, 0u) << "no backward pair masked query by query";
    if (rank > 1) EXPECT_GT(bpaths.skipped_mask_axes, 0u) << "no backward partial pair left an axis unmasked";
  }
}

TEST(Portable, Rank1) { sweep(1, configs_per_rank(500)); }
TEST(Portable, Rank2) { sweep(2, configs_per_rank(500)); }
TEST(Portable, Rank3) { sweep(3, configs_per_rank(500)); }

// Larger problems than the CPU reference handles quickly: the GPU reference is the oracle.
struct Large {
  int rank;
  int extent[3], window[3], stride[3], dilation[3];
  bool causal[3];
  int heads_q, heads_kv, dim, additional;
};

void compare_with_gpu_reference(const Large& L, DType dtype, bool backward) {
  std::mt19937_64 rng(test_seed());
  Config c;
  c.params.rank = L.rank;
  for (int a = 0; a < L.rank; ++a) {
    c.extent[a] = L.extent[a];
    c.params.window[a] = L.window[a];
    c.params.stride[a] = L.stride[a];
    c.params.dilation[a] = L.dilation[a];
    c.params.causal[a] = L.causal[a];
  }
  c.batch = 1;
  c.heads_q = L.heads_q;
  c.heads_kv = L.heads_kv;
  c.dim_qk = c.dim_v = L.dim;
  c.additional = L.additional;
  Case ref;
  ref.cfg = c;
  // Inputs as in Case::build, outputs from the GPU reference (fp32 inputs of the same values).
  Case got;
  got.cfg = c;
  for (Case* cs : {&ref, &got}) {
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
    if (c.additional > 0) {
      cs->ak.allocate({1, c.additional, c.heads_kv, c.dim_qk}, t);
      cs->av.allocate({1, c.additional, c.heads_kv, c.dim_v}, t);
      cs->dak.allocate({1, c.additional, c.heads_kv, c.dim_qk}, t);
      cs->dav.allocate({1, c.additional, c.heads_kv, c.dim_v}, t);
    }
  }
  for (auto member : {&Case::q, &Case::k, &Case::v, &Case::d_o, &Case::ak, &Case::av}) {
    if ((ref.*member).shape.empty()) continue;
    (ref.*member).host = random_values(rng, (ref.*member).numel());
    (got.*member).host = (ref.*member).host;
    (ref.*member).upload();
    (got.*member).upload();
  }
  ASSERT_EQ(ref.check_forward("gpu_reference").find("CUDA"), std::string::npos);
  got.ref_o = ref.o.download();
  got.ref_lse = ref.lse.download();
  std::string err = got.check_forward("portable");
  EXPECT_EQ(err, "") << dtype_name(dtype);
  if (!backward) return;
  // Backward from the same O and LSE (as the device dtype holds O).
  got.o.host = got.o.download();
  ref.o.host = got.o.host;
  ref.o.upload();
  got.lse.host = got.ref_lse;
  got.lse.upload();
  ref.lse.host = got.ref_lse;
  ref.lse.upload();
  ASSERT_EQ(ref.check_backward("gpu_reference").find("CUDA"), std::string::npos);
  got.ref_dq = ref.dq.download();
  got.ref_dk = ref.dk.download();
  got.ref_dv = ref.dv.download();
  if (c.additional > 0) {
    got.ref_dak = ref.dak.download();
    got.ref_dav = ref.dav.download();
  }
  got.o.upload();
  err = got.check_backward("portable");
  EXPECT_EQ(err, "") << dtype_name(dtype);
}

TEST(Portable, LargeAgainstGpuReference) {
  GNA_SKIP_WITHOUT_GPU();
  if (configs_per_rank(500) < 500) GTEST_SKIP() << "subset run";
  const bool backward = portable_backward_available();
  const Large cases[] = {
      // hunyuan-like: 3-D, stride making it block-sparse, GQA, additional tokens
      {3, {15, 24, 40}, {9, 12, 12}, {8, 4, 4}, {1, 1, 1}, {false, false, false}, 4, 2, 128, 77},
      // flux-like 2-D NA
      {2, {96, 96}, {40, 40}, {1, 1}, {1, 1}, {false, false}, 2, 2, 128, 0},
      // dense 2-D (window = layout)
      {2, {48, 64}, {48, 64}, {1, 1}, {1, 1}, {false, false}, 2, 1, 64, 0},
      // 1-D long, causal, dilated
      {1, {4096}, {512}, {64}, {2}, {true}, 2, 1, 64, 0},
      // 3-D causal time axis, dilation on one axis
      {3, {12, 20, 20}, {6, 9, 7}, {2, 1, 3}, {1, 2, 1}, {true, false, false}, 2, 2, 32, 5},
  };
  for (const Large& L : cases)
    for (DType t : {DType::f16, DType::bf16}) compare_with_gpu_reference(L, t, backward);
}

// Boxes larger than the kernels' walk tables: the forward refills its table of 1024 walk steps
// as a Q tile's walk passes its end (more than 1024 KV tiles per Q tile; the 1-D case also needs
// more than 10 bits per axis), the backward takes the rule path (more than 1024 Q tiles along
// an axis per KV tile).
TEST(Portable, LargeBoxesAgainstGpuReference) {
  GNA_SKIP_WITHOUT_GPU();
  // Billions of pairs: far too slow under compute-sanitizer, whose runs use a subset.
  if (configs_per_rank(500) < 500) GTEST_SKIP() << "subset run";
  const bool backward = portable_backward_available();
  const Large cases[] = {
      {1, {70000}, {70000}, {1}, {1}, {false}, 1, 1, 32, 0},
      {2, {256, 288}, {256, 288}, {1, 1}, {1, 1}, {false, false}, 1, 1, 32, 0},
      {3, {32, 48, 48}, {32, 48, 48}, {1, 1, 1}, {1, 1, 1}, {false, false, false}, 1, 1, 32, 0},
  };
  for (const Large& L : cases) compare_with_gpu_reference(L, DType::bf16, backward);
}

// Refusals name the parameter and the limit.
TEST(Portable, RefusesUnsupported) {
  GNA_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(1);
  Config c;
  c.params.rank = 1;
  c.extent[0] = 16;
  c.params.window[0] = 4;
  c.dim_qk = c.dim_v = 96;
  Case cs;
  cs.cfg = c;
  cs.q.allocate(cs.token_shape(1, 96), DType::bf16);
  cs.k.allocate(cs.token_shape(1, 96), DType::bf16);
  cs.v.allocate(cs.token_shape(1, 96), DType::bf16);
  cs.o.allocate(cs.token_shape(1, 96), DType::bf16);
  TensorRef storage[6];
  AttentionTensors in = cs.device_inputs(storage);
  TensorRef out = cs.o.device_ref();
  CallOptions opt;
  opt.backend = "portable";
  try {
    attention_forward(c.params, in, out, nullptr, opt);
    FAIL() << "expected gna::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head dims 96/96"), std::string::npos) << e.what();
  }
  // Dispatch falls back to a backend that can run it.
  opt.backend = "auto";
  EXPECT_NE(select_forward_backend(c.params, in, opt), "portable");
}

}  // namespace
}  // namespace gna::testing
