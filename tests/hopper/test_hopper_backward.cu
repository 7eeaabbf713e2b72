// The Hopper backward kernel (dQ, dK, dV and the additional keys' gradients) against the CPU
// reference: randomized sweep per rank (extents, windows, strides, dilations, causal flags,
// batch, GQA, head dims 32/64/128, additional keys, forced tile shapes, deterministic mode on
// a quarter of the configurations), each in fp16 and bf16, fresh random inputs, gradients
// poisoned with NaN before each call (tolerances: tests/gpu_reference/gpu_harness.hpp).
// Configurations per rank: GNA_HOPPER_BWD_SWEEP (default 24); seed: GNA_TEST_SEED.
// Placed Q tiles: a sweep forcing them (KernelOptions::q_placements) at head dim 128 (the one
// with placed kernels) against the reference, asserting that placed launches ran and that their
// runs differ from the grid's on some configurations, and that other head dims choose the grid;
// GNA_HOPPER_BWD_SWEEP configurations per rank.
// Per-batch counts of additional keys: half of the configurations with additional keys give
// random counts (0, all, in between, or outside [0, Nadd]: clamped); AdditionalCountsSweep
// gives them to every configuration, checks the forward too, and asserts that each kind ran.
// Also: deterministic mode gives the same bits in repeated runs. (That the inverse tile ranges
// the kernel walks mirror the forward's is a CPU test: Tiling.InverseTileRangesMirrorForward.)
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/backend.hpp"
#include "gna/core/kernel_tiles.hpp"
#include "gna/core/tiling.hpp"
#include "gpu_harness.hpp"
#include "kernels/hopper/backward_launch.hpp"
#include "kernels/hopper/tma_host.hpp"

namespace gna::testing {
namespace {

bool have_sm90() { return hopper::is_sm90(0); }

#define SKIP_WITHOUT_SM90() \
  if (!have_sm90()) GTEST_SKIP() << "no sm_90 device"

int sweep_size() {
  const char* v = std::getenv("GNA_HOPPER_BWD_SWEEP");
  return v ? std::max(1, std::atoi(v)) : 24;
}

ConfigLimits limits() {
  ConfigLimits lim;
  lim.dims = {{32, 32}, {64, 64}, {128, 128}};
  return lim;
}

// A random power-of-two tile of `tokens` tokens over `rank` axes.
TileShape random_tile(std::mt19937_64& rng, int rank, int tokens) {
  TileShape t;
  int left = tokens;
  for (int a = 0; a < rank - 1; ++a) {
    int e = 0;
    while ((1 << (e + 1)) <= left && uniform(rng, 0, 1)) ++e;
    t.size[a] = 1 << e;
    left >>= e;
  }
  t.size[rank - 1] = left;
  return t;
}

// Random per-batch counts of `additional` keys, each kind about as often.
std::vector<int32_t> random_counts(std::mt19937_64& rng, int batch, int additional) {
  std::vector<int32_t> counts(batch);
  for (int32_t& n : counts) {
    const int kind = uniform(rng, 0, 6);
    n = kind <= 1 ? 0 : kind <= 3 ? additional : kind <= 5 ? uniform(rng, 0, additional)
        : uniform(rng, 0, 1) ? -uniform(rng, 1, 9) : additional + uniform(rng, 1, 200);
  }
  return counts;
}

// Configuration i in fp16 and in bf16 (the same values) against the reference; the failures.
int check_both_dtypes(const Config& c, const KernelOptions& kopt, std::mt19937_64& rng, int i,
                      uint64_t seed) {
  Case f16;
  f16.build(c, DType::f16, rng, true);
  Case bf16;
  bf16.copy_as(f16, DType::bf16);
  int failures = 0;
  for (Case* cs : {&f16, &bf16}) {
    const std::string err = cs->check_backward("hopper", kopt);
    if (!err.empty()) {
      ++failures;
      ADD_FAILURE() << dtype_name(cs->q.dtype) << " config " << i << ": " << c.describe()
                    << (kopt.deterministic ? " deterministic" : "") << ": " << err
                    << " (GNA_TEST_SEED=" << seed << ")";
    }
  }
  return failures;
}

void sweep(int rank) {
  SKIP_WITHOUT_SM90();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed + 31 * rank);
  const ConfigLimits lim = limits();
  const int configs = sweep_size();
  int failures = 0, checked = 0, deterministic = 0;
  for (int i = 0; i < configs && failures < 5; ++i, ++checked) {
    Config c = random_config(rng, rank, lim);
    if (c.additional > 0 && uniform(rng, 0, 1) == 0)
      c.counts = random_counts(rng, c.batch, c.additional);
    KernelOptions kopt;
    if (uniform(rng, 0, 3) == 0) {
      kopt.q_tile = random_tile(rng, rank, 64);
      kopt.kv_tile = random_tile(rng, rank, 128);
    }
    kopt.deterministic = uniform(rng, 0, 3) == 0;
    deterministic += kopt.deterministic;
    failures += check_both_dtypes(c, kopt, rng, i, seed);
  }
  std::printf("hopper backward sweep rank %d: %d configurations x {f16, bf16} (%d deterministic), "
              "%d failed, seed %llu\n",
              rank, checked, deterministic, failures, static_cast<unsigned long long>(seed));
}

TEST(HopperBackward, RandomSweepRank1) { sweep(1); }
TEST(HopperBackward, RandomSweepRank2) { sweep(2); }
TEST(HopperBackward, RandomSweepRank3) { sweep(3); }

// Every configuration with additional keys and per-batch counts (ranks 1 to 3, 2 to 4 batch
// items, deterministic mode on a quarter), forward and backward in fp16 and bf16 against the
// reference; each kind of count must have run.
TEST(HopperBackward, AdditionalCountsSweep) {
  SKIP_WITHOUT_SM90();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed + 97);
  const ConfigLimits lim = limits();
  const int configs = sweep_size();
  int zero = 0, all = 0, between = 0, clamped = 0, failures = 0, checked = 0;
  for (int i = 0; i < configs && failures < 5; ++i, ++checked) {
    Config c = random_config(rng, 1 + i % 3, lim);
    c.batch = uniform(rng, 2, 4);
    c.additional = uniform(rng, 1, 200);
    c.counts = random_counts(rng, c.batch, c.additional);
    for (int32_t n : c.counts) {
      if (n < 0 || n > c.additional) ++clamped;
      else if (n == 0) ++zero;
      else if (n == c.additional) ++all;
      else ++between;
    }
    KernelOptions kopt;
    kopt.deterministic = uniform(rng, 0, 3) == 0;
    Case f16;
    f16.build(c, DType::f16, rng, true);
    Case bf16;
    bf16.copy_as(f16, DType::bf16);
    for (Case* cs : {&f16, &bf16}) {
      const std::string err =
          cs->check_forward("hopper", kopt) + cs->check_backward("hopper", kopt);
      if (!err.empty()) {
        ++failures;
        ADD_FAILURE() << dtype_name(cs->q.dtype) << " config " << i << ": " << c.describe()
                      << (kopt.deterministic ? " deterministic" : "") << ": " << err
                      << " (GNA_TEST_SEED=" << seed << ")";
      }
    }
  }
  std::printf("hopper counts sweep (forward + backward): %d configurations x {f16, bf16}, %d "
              "failed, seed %llu; counts: %d zero, %d all, %d between, %d clamped\n",
              checked, failures, static_cast<unsigned long long>(seed), zero, all, between,
              clamped);
  EXPECT_GT(zero, 0);
  EXPECT_GT(all, 0);
  EXPECT_GT(between, 0);
  EXPECT_GT(clamped, 0);
}

// The rule of a configuration (one image and head), as the tile chooser sees it.
Problem problem_of(const Config& c) {
  Problem p;
  p.rank = c.params.rank;
  for (int a = 0; a < p.rank; ++a)
    p.axes[a] = AxisRule{c.extent[a], c.params.window[a], c.params.dilation[a],
                         c.params.stride[a], c.params.causal[a]};
  p.batch = c.batch;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.dim_qk = c.dim_qk;
  p.dim_v = c.dim_v;
  p.additional_kv = c.additional;
  return p;
}

// Whether some KV tile's placed Q tile run differs from its grid run under the tiles the
// backward chooses (the placed path really ran), from the core's tiling math; and whether some
// placed run ends past its group on the outermost axis (rows of the next folded batch or zero
// fill, which must not add into dQ).
struct PlacedQUse {
  bool differs = false;
  bool past_end_axis0 = false;
};
PlacedQUse placed_q_use(const Problem& p, const KernelOptions& kopt) {
  const ScoredTiles t = hopper::choose_backward_tiles(p, kopt);
  PlacedQUse u;
  if (t.placement != KvPlacement::placed) return u;
  for (int a = 0; a < p.rank; ++a)
    for (int g = 0; g < p.axes[a].dilation; ++g) {
      const int n = group_length(p.axes[a], g), tq = t.q.size[a], tk = t.kv.size[a];
      for (int kt = 0; kt < tiles_along(n, tk); ++kt) {
        const QTileRun placed = q_tile_run(p.axes[a], n, kt, tq, tk, KvPlacement::placed);
        const QTileRun grid = q_tile_run(p.axes[a], n, kt, tq, tk, KvPlacement::grid);
        u.differs = u.differs || placed.first != grid.first || placed.count != grid.count;
        if (a == 0) u.past_end_axis0 = u.past_end_axis0 || placed.first + placed.count * tq > n;
      }
    }
  return u;
}

// Placed Q tiles forced over a random sweep of every rank at head dim 128, the head dim with
// placed kernels (forced tile shapes on a quarter of the configurations, deterministic mode on an
// eighth: it runs the grid whatever is asked), each in fp16 and bf16 against the reference with
// NaN-poisoned gradients.
TEST(HopperBackward, PlacedQTiles) {
  SKIP_WITHOUT_SM90();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed + 977);
  ConfigLimits lim = limits();
  lim.dims = {{128, 128}};
  ASSERT_TRUE(hopper_backward_placed_q_head_dim(128));
  const int configs = sweep_size();
  int failures = 0, differs = 0, past_end = 0, deterministic = 0, checked = 0;
  const int64_t placed_before = hopper::backward_launch_count().placed_q;
  // The configurations to run, then more (up to 4x) until enough differ from the grid.
  const int wanted_differs = std::max(1, configs / 4);
  for (int i = 0; (i < 3 * configs || (differs < wanted_differs && i < 12 * configs)) &&
                  failures < 5;
       ++i, ++checked) {
    const int rank = 1 + i % 3;
    const Config c = random_config(rng, rank, lim);
    KernelOptions kopt;
    kopt.q_placements = KvPlacements::placed;
    if (uniform(rng, 0, 3) == 0) {
      kopt.q_tile = random_tile(rng, rank, 64);
      kopt.kv_tile = random_tile(rng, rank, 128);
    }
    kopt.deterministic = uniform(rng, 0, 7) == 0;
    deterministic += kopt.deterministic;
    const Problem p = problem_of(c);
    for (int d : {32, 64}) {  // no placed kernels there: the chooser keeps the grid
      Problem other = p;
      other.dim_qk = other.dim_v = d;
      EXPECT_EQ(hopper::choose_backward_tiles(other, kopt).placement, KvPlacement::grid) << d;
    }
    if (!kopt.deterministic) {
      const PlacedQUse use = placed_q_use(p, kopt);
      differs += use.differs;
      past_end += use.differs && use.past_end_axis0;
    } else {
      EXPECT_EQ(hopper::choose_backward_tiles(p, kopt).placement, KvPlacement::grid);
    }
    failures += check_both_dtypes(c, kopt, rng, i, seed);
  }
  const int64_t placed_launches = hopper::backward_launch_count().placed_q - placed_before;
  std::printf("hopper backward placed Q tiles: %d configurations x {f16, bf16} (%d deterministic), "
              "%d failed, %lld placed launches, %d differing from the grid (%d past the outermost "
              "axis), seed %llu\n",
              checked, deterministic, failures, static_cast<long long>(placed_launches), differs,
              past_end, static_cast<unsigned long long>(seed));
  EXPECT_EQ(failures, 0);
  EXPECT_GT(placed_launches, 0);
  EXPECT_GE(differs, wanted_differs)
      << "too few configurations ran placed Q tiles that differ from the grid in " << checked;
}

// Deterministic mode: three runs give bitwise identical gradients (problems where many KV tiles
// add into each Q tile's dQ rows, GQA and additional keys included).
TEST(HopperBackward, DeterministicBitwise) {
  SKIP_WITHOUT_SM90();
  std::mt19937_64 rng(test_seed());
  struct Shape {
    int rank, extent[3], window[3], stride[3], heads_q, heads_kv, dim, additional;
  };
  const Shape shapes[] = {
      {1, {700, 1, 1}, {300, 1, 1}, {1, 1, 1}, 2, 1, 128, 0},
      {2, {40, 40, 1}, {21, 17, 1}, {1, 2, 1}, 2, 2, 64, 70},
      {3, {12, 14, 16}, {7, 9, 11}, {1, 1, 3}, 4, 2, 32, 0},
  };
  for (const Shape& sh : shapes) {
    Config c;
    c.params.rank = sh.rank;
    for (int a = 0; a < sh.rank; ++a) {
      c.extent[a] = sh.extent[a];
      c.params.window[a] = sh.window[a];
      c.params.stride[a] = sh.stride[a];
    }
    c.batch = 2;
    c.heads_q = sh.heads_q;
    c.heads_kv = sh.heads_kv;
    c.dim_qk = c.dim_v = sh.dim;
    c.additional = sh.additional;
    Case cs;
    cs.build(c, DType::bf16, rng, true);
    KernelOptions kopt;
    kopt.deterministic = true;
    std::vector<float> first[5];
    for (int run = 0; run < 3; ++run) {
      const std::string err = cs.check_backward("hopper", kopt);
      EXPECT_EQ(err, "") << c.describe();
      const Buffer* bufs[5] = {&cs.dq, &cs.dk, &cs.dv, &cs.dak, &cs.dav};
      for (int t = 0; t < 5; ++t) {
        if (bufs[t]->shape.empty()) continue;
        const std::vector<float> got = bufs[t]->download();
        if (run == 0)
          first[t] = got;
        else
          EXPECT_TRUE(got == first[t]) << "gradient " << t << " differs in run " << run << ": "
                                       << c.describe();
      }
    }
  }
}

// Gradient tensors that tensor maps cannot address (a head stride that is not a multiple of 8
// elements) are written element by element instead of through the maps: that epilogue gives the
// same dK / dV bits as the tensor-map one (whose results are checked against the reference),
// also with per-batch counts of additional keys (zero rows past a count: a whole tile's and a
// partial tile's).
TEST(HopperBackward, UnalignedGradientStrides) {
  SKIP_WITHOUT_SM90();
  std::mt19937_64 rng(test_seed());
  for (const int variant : {0, 1, 2}) {
    const int additional = variant > 0 ? 70 : 0;
    Config c;
    if (variant == 2) c.counts = {0, 33};
    c.params.rank = 2;
    c.extent[0] = 20;
    c.extent[1] = 36;
    c.params.window[0] = 7;
    c.params.window[1] = 9;
    c.batch = 2;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.dim_qk = c.dim_v = 64;
    c.additional = additional;
    Case cs;
    cs.build(c, DType::bf16, rng, true);
    ASSERT_EQ(cs.check_backward("hopper"), "") << c.describe();
    // [B, tokens.., Hkv, D] views with head stride D + 4 over padded buffers, NaN-poisoned.
    const int D = c.dim_qk, pad = 4;
    auto padded_view = [&](const Buffer& like, void** mem) {
      TensorRef t = like.device_ref();
      const int r = t.rank;
      const int64_t rows = like.numel() / D;
      cudaMalloc(mem, rows * (D + pad) * 2);
      cudaMemset(*mem, 0xFF, rows * (D + pad) * 2);
      t.data = *mem;
      int64_t stride = D + pad;
      t.strides[r - 1] = 1;
      for (int i = r - 2; i >= 0; --i) {
        t.strides[i] = stride;
        stride *= t.shape[i];
      }
      return t;
    };
    auto unpad = [&](void* mem, int64_t rows) {
      std::vector<uint8_t> bits(rows * (D + pad) * 2), packed(rows * D * 2);
      cudaMemcpy(bits.data(), mem, bits.size(), cudaMemcpyDeviceToHost);
      for (int64_t i = 0; i < rows; ++i)
        std::memcpy(packed.data() + i * D * 2, bits.data() + i * (D + pad) * 2, D * 2);
      return from_bits(packed, DType::bf16);
    };
    void* mem[4] = {};
    TensorRef dk = padded_view(cs.dk, &mem[0]), dv = padded_view(cs.dv, &mem[1]);
    TensorRef dak, dav;
    TensorRef storage[6];
    AttentionTensors in = cs.device_inputs(storage);
    cs.o.upload();
    cs.lse.upload();
    cs.dq.poison();
    AttentionGradients g{cs.dq.device_ref(), dk, dv};
    if (additional > 0) {
      dak = padded_view(cs.dak, &mem[2]);
      dav = padded_view(cs.dav, &mem[3]);
      g.d_additional_k = &dak;
      g.d_additional_v = &dav;
    }
    CallOptions opt;
    opt.backend = "hopper";
    attention_backward(c.params, in, cs.o.device_ref(), cs.lse.device_ref(), cs.d_o.device_ref(),
                       g, opt);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(unpad(mem[0], cs.dk.numel() / D) == cs.dk.download()) << "dk, " << c.describe();
    EXPECT_TRUE(unpad(mem[1], cs.dv.numel() / D) == cs.dv.download()) << "dv, " << c.describe();
    if (additional > 0) {
      EXPECT_TRUE(unpad(mem[2], cs.dak.numel() / D) == cs.dak.download()) << c.describe();
      EXPECT_TRUE(unpad(mem[3], cs.dav.numel() / D) == cs.dav.download()) << c.describe();
    }
    for (void* m : mem)
      if (m) cudaFree(m);
  }
}

}  // namespace
}  // namespace gna::testing
