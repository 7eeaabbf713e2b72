// Slabs on the Hopper forward and backward (gna/core/slab.hpp; query and key rows as launch
// parameters, kernels/hopper/tensor_rows.hpp) against the CPU reference's slab call: random
// sweeps per rank (extents, windows, strides, dilations, causal flags, batch, GQA, head dims 64
// and 128, additional keys on some), a query slab of random offset and extent along axis 0
// (and, on a quarter of the configurations of rank >= 2, along axis 1 too), its key slab the
// keys its queries attend (gna::key_range) widened by a few random rows, each in fp16 and bf16,
// inputs exact in both, outputs and gradients poisoned with NaN before each call (tolerances:
// tests/gpu_reference/gpu_harness.hpp). A slab runs tiles that start on its first rows
// (kernels/hopper/slab_tiles.hpp): on rank 1 half the slabs start on multiples of 128 rows
// (run), the others mostly not (refused with the reason, counted); slabs of rank >= 2 along
// axis 0 alone are never refused. The sweep asserts that it reached query slabs off the whole
// layout's tile grid, slabs without queries in a dilation group, both Q placements of the
// backward, the persistent forward, and rank-1 slabs run and refused. Refusals with their
// reasons: deterministic mode, FP8, a rank-1 slab off the tile grid. Configurations per rank:
// GNA_HOPPER_SLAB_SWEEP (default 24); seed: GNA_TEST_SEED.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gna/core/kernel_tiles.hpp"
#include "gna/core/slab.hpp"
#include "gpu_harness.hpp"
#include "kernels/hopper/backward_launch.hpp"
#include "kernels/hopper/forward_launch.hpp"
#include "kernels/hopper/tma_host.hpp"

namespace gna::testing {
namespace {

bool have_sm90() { return hopper::is_sm90(0); }

#define SKIP_WITHOUT_SM90() \
  if (!have_sm90()) GTEST_SKIP() << "no sm_90 device"

int sweep_size() {
  const char* v = std::getenv("GNA_HOPPER_SLAB_SWEEP");
  return v ? std::max(1, std::atoi(v)) : 24;
}

// A slab of a configuration: per axis the query rows [query_offset, + query_extent) and the key
// rows [key_offset, + key_extent) of the whole layout (cfg.extent).
struct SlabShape {
  int query_offset[kMaxRank] = {0, 0, 0}, query_extent[kMaxRank] = {1, 1, 1};
  int key_offset[kMaxRank] = {0, 0, 0}, key_extent[kMaxRank] = {1, 1, 1};
};

AxisRule rule_of(const Config& c, int a) {
  return AxisRule{c.extent[a], c.params.window[a], c.params.dilation[a], c.params.stride[a],
                  c.params.causal[a]};
}

SlabShape random_slab(std::mt19937_64& rng, const Config& c) {
  SlabShape s;
  const int rank = c.params.rank;
  const bool second = rank >= 2 && uniform(rng, 0, 3) == 0;
  for (int a = 0; a < rank; ++a) {
    const int L = c.extent[a];
    if (a == 0 || (a == 1 && second)) {
      s.query_offset[a] = uniform(rng, 0, L - 1);
      s.query_extent[a] = uniform(rng, 1, L - s.query_offset[a]);
      // Thin slabs on some: fewer rows than the dilation leaves groups without queries.
      if (uniform(rng, 0, 7) == 0) s.query_extent[a] = std::min(s.query_extent[a], uniform(rng, 1, 3));
    } else {
      s.query_offset[a] = 0;
      s.query_extent[a] = L;
    }
    // Rank 1: half the slabs on multiples of 128 rows (a Q and KV tile of the only axis).
    const bool on_grid = rank == 1 && c.params.dilation[0] == 1 && uniform(rng, 0, 1) == 0;
    if (on_grid && L > 128) {
      s.query_offset[a] = 128 * uniform(rng, 0, (L - 1) / 128);
      s.query_extent[a] = uniform(rng, 1, L - s.query_offset[a]);
    }
    const Range keys = key_range(rule_of(c, a), Range{s.query_offset[a],
                                                      s.query_offset[a] + s.query_extent[a]});
    int begin = std::max(0, keys.begin - uniform(rng, 0, 1) * uniform(rng, 0, 3));
    if (on_grid) begin = begin / 128 * 128;
    const int end = std::min(L, keys.end + uniform(rng, 0, 1) * uniform(rng, 0, 3));
    s.key_offset[a] = begin;
    s.key_extent[a] = end - begin;
  }
  return s;
}

std::string describe(const SlabShape& s, int rank) {
  std::ostringstream os;
  os << "queries";
  for (int a = 0; a < rank; ++a)
    os << (a ? "x" : " ") << "[" << s.query_offset[a] << "+" << s.query_extent[a] << "]";
  os << " keys";
  for (int a = 0; a < rank; ++a)
    os << (a ? "x" : " ") << "[" << s.key_offset[a] << "+" << s.key_extent[a] << "]";
  return os.str();
}

AttentionParams slab_params(const Config& c, const SlabShape& s) {
  AttentionParams p = c.params;
  p.slab.active = true;
  for (int a = 0; a < c.params.rank; ++a) {
    p.slab.extent[a] = c.extent[a];
    p.slab.query_offset[a] = s.query_offset[a];
    p.slab.key_offset[a] = s.key_offset[a];
  }
  return p;
}

std::vector<int64_t> shape_of(const Config& c, const int* extent, int heads, int dim) {
  std::vector<int64_t> s{c.batch};
  for (int a = 0; a < c.params.rank; ++a) s.push_back(extent[a]);
  s.push_back(heads);
  if (dim > 0) s.push_back(dim);
  return s;
}

// One slab problem: inputs, the reference's outputs and gradients, device copies in one dtype
// (the query tensors hold the slab's queries, the key tensors its key rows); the harness's
// checks run on the slab's parameters.
struct SlabCase : Case {
  SlabShape slab;
  AttentionParams params;

  void allocate(DType dtype) {
    const Config& c = cfg;
    q.allocate(shape_of(c, slab.query_extent, c.heads_q, c.dim_qk), dtype);
    o.allocate(shape_of(c, slab.query_extent, c.heads_q, c.dim_v), dtype);
    d_o.allocate(shape_of(c, slab.query_extent, c.heads_q, c.dim_v), dtype);
    dq.allocate(shape_of(c, slab.query_extent, c.heads_q, c.dim_qk), dtype);
    lse.allocate(shape_of(c, slab.query_extent, c.heads_q, 0), DType::f32);
    k.allocate(shape_of(c, slab.key_extent, c.heads_kv, c.dim_qk), dtype);
    v.allocate(shape_of(c, slab.key_extent, c.heads_kv, c.dim_v), dtype);
    dk.allocate(shape_of(c, slab.key_extent, c.heads_kv, c.dim_qk), dtype);
    dv.allocate(shape_of(c, slab.key_extent, c.heads_kv, c.dim_v), dtype);
    if (c.additional > 0) {
      for (Buffer* b : {&ak, &dak}) b->allocate({c.batch, c.additional, c.heads_kv, c.dim_qk}, dtype);
      for (Buffer* b : {&av, &dav}) b->allocate({c.batch, c.additional, c.heads_kv, c.dim_v}, dtype);
    }
  }

  AttentionTensors host_inputs(TensorRef* t) {
    t[0] = q.host_ref();
    t[1] = k.host_ref();
    t[2] = v.host_ref();
    AttentionTensors in{t[0], t[1], t[2]};
    if (cfg.additional > 0) {
      t[3] = ak.host_ref();
      t[4] = av.host_ref();
      in.additional_k = &t[3];
      in.additional_v = &t[4];
    }
    return in;
  }
  // Random inputs (exact in fp16 and bf16) and the CPU reference's slab forward and backward;
  // the backward reads O as the device dtype holds it.
  void build(const Config& c, const SlabShape& s, DType dtype, std::mt19937_64& rng) {
    cfg = c;
    slab = s;
    params = slab_params(c, s);
    allocate(dtype);
    for (Buffer* b : {&q, &k, &v, &d_o, &ak, &av}) {
      if (b->shape.empty()) continue;
      b->host = random_values(rng, b->numel());
      b->upload();
    }
    TensorRef t[5];
    AttentionTensors in = host_inputs(t);
    CallOptions host;
    host.backend = "reference";
    TensorRef ho = o.host_ref(), hl = lse.host_ref();
    attention_forward(params, in, ho, &hl, host);
    ref_o = o.host;
    ref_lse = lse.host;
    o.upload();
    o.host = o.download();
    lse.upload();
    AttentionGradients g{dq.host_ref(), dk.host_ref(), dv.host_ref()};
    TensorRef hdak, hdav;
    if (c.additional > 0) {
      hdak = dak.host_ref();
      hdav = dav.host_ref();
      g.d_additional_k = &hdak;
      g.d_additional_v = &hdav;
    }
    TensorRef ho2 = o.host_ref();
    attention_backward(params, in, ho2, hl, d_o.host_ref(), g, host);
    ref_dq = dq.host;
    ref_dk = dk.host;
    ref_dv = dv.host;
    ref_dak = dak.host;
    ref_dav = dav.host;
  }

  // The same problem and reference results in another dtype.
  void copy_as(const SlabCase& other, DType dtype) {
    cfg = other.cfg;
    slab = other.slab;
    params = other.params;
    allocate(dtype);
    const Buffer* from[] = {&other.q, &other.k, &other.v, &other.ak, &other.av, &other.d_o};
    Buffer* to[] = {&q, &k, &v, &ak, &av, &d_o};
    for (int i = 0; i < 6; ++i) {
      if (from[i]->shape.empty()) continue;
      to[i]->host = from[i]->host;
      to[i]->upload();
    }
    ref_o = other.ref_o;
    ref_lse = other.ref_lse;
    ref_dq = other.ref_dq;
    ref_dk = other.ref_dk;
    ref_dv = other.ref_dv;
    ref_dak = other.ref_dak;
    ref_dav = other.ref_dav;
  }

  std::string check_forward(const KernelOptions& kopt) {
    return check_forward_with(params, "hopper", kopt);
  }
  std::string check_backward(const KernelOptions& kopt) {
    o.host = ref_o;  // the reference's O and LSE, as its backward read them
    lse.host = ref_lse;
    return check_backward_with(params, "hopper", kopt);
  }
};

// What a configuration reaches (the sweep asserts each was reached somewhere).
struct Reached {
  int off_grid = 0;            // a query slab starting off the whole layout's Q tile grid
  int keys_outside = 0;        // a key slab whose edge tiles hold keys outside the key tensor
  int group_without_queries = 0;  // a dilation group with no query of the slab
  int placed_q = 0, grid_q = 0;   // backward launches by Q placement
  int persistent = 0;
};

void note_reached(const Config& c, const SlabShape& s, const KernelOptions& kopt, Reached& r) {
  Problem whole;
  whole.rank = c.params.rank;
  for (int a = 0; a < whole.rank; ++a) whole.axes[a] = rule_of(c, a);
  whole.dim_qk = whole.dim_v = c.dim_qk;
  const ScoredTiles fwd = hopper::choose_tiles(whole, kopt);
  const ScoredTiles bwd = hopper::choose_backward_tiles(whole, kopt);
  bool off = false, outside = false, empty_group = false;
  for (int a = 0; a < whole.rank; ++a) {
    const AxisRule& r = whole.axes[a];
    for (int g = 0; g < r.dilation; ++g) {
      const SlabGroupRows qr = slab_group_rows(r, g, s.query_offset[a], s.query_extent[a]);
      const SlabGroupRows kr = slab_group_rows(r, g, s.key_offset[a], s.key_extent[a]);
      if (qr.count == 0) empty_group = true;
      if (qr.count > 0 && (qr.begin % fwd.q.size[a] != 0 || (qr.begin + qr.count) % fwd.q.size[a] != 0))
        off = true;
      if (kr.count > 0 && (kr.begin % bwd.kv.size[a] != 0 ||
                           ((kr.begin + kr.count) % bwd.kv.size[a] != 0 &&
                            kr.begin + kr.count < group_length(r, g))))
        outside = true;
    }
  }
  r.off_grid += off;
  r.keys_outside += outside;
  r.group_without_queries += empty_group;
  r.persistent += kopt.schedule.kind == ForwardSchedule::persistent;
}

// Whether hopper takes the slab (forward and backward); otherwise the refusal must be the
// tile grid's, and `refusal` holds it.
bool hopper_takes(const SlabCase& cs, const KernelOptions& kopt, std::string* refusal) {
  TensorRef t[6];
  const AttentionTensors in = cs.device_inputs(t);
  CallOptions opt;
  opt.backend = "hopper";
  opt.kernel = kopt;
  try {
    select_forward_backend(cs.params, in, opt);
    select_backward_backend(cs.params, in, opt);
    return true;
  } catch (const Error& e) {
    *refusal = e.what();
    return false;
  }
}

// -1: hopper refused the slab (off its tile grid); else the failures.
int check_both_dtypes(const Config& c, const SlabShape& s, const KernelOptions& kopt,
                      std::mt19937_64& rng, int i, uint64_t seed) {
  SlabCase f16;
  f16.build(c, s, DType::f16, rng);
  std::string refusal;
  if (!hopper_takes(f16, kopt, &refusal)) {
    const bool grid = refusal.find("tile starts on the slab's first rows") != std::string::npos;
    const bool along_axis0 = c.params.rank == 1 || s.query_extent[1] == c.extent[1];
    if (!grid || (c.params.rank >= 2 && along_axis0)) {
      ADD_FAILURE() << "config " << i << ": " << c.describe() << " " << describe(s, c.params.rank)
                    << ": refused: " << refusal << " (GNA_TEST_SEED=" << seed << ")";
      return 1;
    }
    return -1;
  }
  SlabCase bf16;
  bf16.copy_as(f16, DType::bf16);
  int failures = 0;
  for (SlabCase* cs : {&f16, &bf16}) {
    std::string err;
    try {
      err = cs->check_forward(kopt);
      err += cs->check_backward(kopt);
    } catch (const std::exception& e) {
      err = std::string("threw: ") + e.what();
    }
    if (!err.empty()) {
      ++failures;
      ADD_FAILURE() << dtype_name(cs->q.dtype) << " config " << i << ": " << c.describe() << " "
                    << describe(s, c.params.rank) << ": " << err << " (GNA_TEST_SEED=" << seed
                    << ")";
    }
  }
  return failures;
}

void sweep(int rank) {
  SKIP_WITHOUT_SM90();
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed + 53 * rank);
  ConfigLimits lim;
  lim.dims = {{64, 64}, {128, 128}};
  lim.max_additional = 40;
  const int configs = sweep_size();
  int failures = 0, checked = 0, refused = 0;
  Reached reached;
  const hopper::BackwardLaunchCount before = hopper::backward_launch_count();
  for (int i = 0; i < configs && failures < 5; ++i, ++checked) {
    Config c = random_config(rng, rank, lim);
    if (uniform(rng, 0, 5) != 0) c.additional = 0;
    const SlabShape s = random_slab(rng, c);
    KernelOptions kopt;
    const int sched = uniform(rng, 0, 2);
    if (sched == 1) {
      kopt.schedule.kind = ForwardSchedule::persistent;
      kopt.schedule.ctas = uniform(rng, 1, 7);
    }
    if (c.dim_qk == 128)
      kopt.q_placements = uniform(rng, 0, 1) ? KvPlacements::placed : KvPlacements::grid;
    note_reached(c, s, kopt, reached);
    const hopper::BackwardLaunchCount b0 = hopper::backward_launch_count();
    const int result = check_both_dtypes(c, s, kopt, rng, i, seed);
    if (result < 0) {
      ++refused;
      continue;
    }
    failures += result;
    const hopper::BackwardLaunchCount b1 = hopper::backward_launch_count();
    reached.placed_q += b1.placed_q > b0.placed_q;
    reached.grid_q += (b1.launches - b0.launches) > (b1.placed_q - b0.placed_q);
  }
  (void)before;
  std::printf("hopper slab sweep rank %d: %d configurations x {f16, bf16} (%d refused: off the "
              "tile grid), %d failed; reached: %d off the whole layout's Q grid, %d with keys "
              "outside the key tensor, %d with a dilation group without queries, %d placed / %d "
              "grid backward, %d persistent; seed %llu\n",
              rank, checked, refused, failures, reached.off_grid, reached.keys_outside,
              reached.group_without_queries, reached.placed_q, reached.grid_q, reached.persistent,
              static_cast<unsigned long long>(seed));
  if (failures == 0 && configs >= 16) {
    EXPECT_GT(checked - refused, 0);
    EXPECT_GT(reached.grid_q, 0);
    if (rank >= 2) {
      EXPECT_GT(reached.off_grid, 0);
      EXPECT_GT(reached.placed_q, 0);
      EXPECT_GT(reached.persistent, 0);
    } else {
      EXPECT_GT(refused, 0);
    }
  }
}

TEST(HopperSlab, RandomSweepRank1) { sweep(1); }
TEST(HopperSlab, RandomSweepRank2) { sweep(2); }
TEST(HopperSlab, RandomSweepRank3) { sweep(3); }

// A fixed 3-D slab (the shape of a halo rank): dispatch picks hopper for both directions.
Config halo_config() {
  Config c;
  c.params.rank = 3;
  const int ext[3] = {12, 16, 16}, win[3] = {5, 7, 7};
  for (int a = 0; a < 3; ++a) {
    c.extent[a] = ext[a];
    c.params.window[a] = win[a];
  }
  c.batch = 1;
  c.heads_q = c.heads_kv = 2;
  c.dim_qk = c.dim_v = 64;
  return c;
}
SlabShape halo_slab(const Config& c) {
  SlabShape s;
  s.query_offset[0] = 6;
  s.query_extent[0] = 6;
  const Range keys = key_range(rule_of(c, 0), Range{6, 12});
  s.key_offset[0] = keys.begin;
  s.key_extent[0] = keys.end - keys.begin;
  for (int a = 1; a < 3; ++a) s.query_extent[a] = s.key_extent[a] = c.extent[a];
  return s;
}

TEST(HopperSlab, DispatchChoosesHopper) {
  SKIP_WITHOUT_SM90();
  const Config c = halo_config();
  std::mt19937_64 rng(1);
  SlabCase cs;
  cs.build(c, halo_slab(c), DType::bf16, rng);
  TensorRef t[6];
  const AttentionTensors in = cs.device_inputs(t);
  EXPECT_EQ(select_forward_backend(cs.params, in, {}), "hopper");
  EXPECT_EQ(select_backward_backend(cs.params, in, {}), "hopper");
}

TEST(HopperSlab, RefusesDeterministicModeWithReason) {
  SKIP_WITHOUT_SM90();
  const Config c = halo_config();
  std::mt19937_64 rng(2);
  SlabCase cs;
  cs.build(c, halo_slab(c), DType::bf16, rng);
  KernelOptions kopt;
  kopt.deterministic = true;
  try {
    cs.check_backward(kopt);
    ADD_FAILURE() << "a deterministic slab backward ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hopper: deterministic mode does not run slabs"),
              std::string::npos)
        << e.what();
  }
}

// Rank 1: a slab on multiples of 128 rows runs; one off them is refused with the reason (its
// first Q tile would start before the query tensor).
TEST(HopperSlab, Rank1SlabsOnTheTileGrid) {
  SKIP_WITHOUT_SM90();
  Config c;
  c.params.rank = 1;
  c.extent[0] = 512;
  c.params.window[0] = 256;
  c.heads_q = 2;
  c.heads_kv = 1;
  c.dim_qk = c.dim_v = 64;
  SlabShape on;
  on.query_offset[0] = 256;
  on.query_extent[0] = 256;
  on.key_offset[0] = 128;  // key_range of [256, 512): [128, 512)
  on.key_extent[0] = 384;
  std::mt19937_64 rng(4);
  SlabCase cs;
  cs.build(c, on, DType::bf16, rng);
  std::string refusal;
  ASSERT_TRUE(hopper_takes(cs, {}, &refusal)) << refusal;
  EXPECT_EQ(cs.check_forward({}) + cs.check_backward({}), "");
  SlabShape off = on;
  off.query_offset[0] = 300;
  off.query_extent[0] = 100;
  off.key_offset[0] = 172;  // key_range of [300, 400)
  off.key_extent[0] = 340;
  SlabCase cs_off;
  cs_off.build(c, off, DType::bf16, rng);
  EXPECT_FALSE(hopper_takes(cs_off, {}, &refusal));
  EXPECT_NE(refusal.find("hopper: slab: no forward tile starts on the slab's first rows"),
            std::string::npos)
      << refusal;
}

TEST(HopperSlab, RefusesFp8WithReason) {
  SKIP_WITHOUT_SM90();
  const Config c = halo_config();
  std::mt19937_64 rng(3);
  SlabCase cs;
  cs.build(c, halo_slab(c), DType::bf16, rng);
  TensorRef t[6];
  const AttentionTensors in = cs.device_inputs(t);
  TensorRef out = cs.o.device_ref(), l = cs.lse.device_ref();
  CallOptions opt;
  opt.backend = "hopper";
  opt.precision = Precision::fp8;
  try {
    attention_forward(cs.params, in, out, &l, opt);
    ADD_FAILURE() << "an FP8 slab forward ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hopper: does not run slabs in the FP8 forward"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace gna::testing
