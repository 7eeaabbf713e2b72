// Host side of the Hopper forward kernel: support checks, tile choice
// with the core's tile chooser, tensor maps over the heads-last tensors (no token permutation),
// and one launch per dilation-group combination (and per batch index where batches cannot be
// folded into the outermost axis of a tensor map).
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "gna/core/error.hpp"
#include "gna/core/kernel_tiles.hpp"
#include "gna/core/tile_choice.hpp"
#include "kernels/hopper/forward_kernel.cuh"
#include "kernels/hopper/forward_launch.hpp"
#include "kernels/hopper/forward_schedule.hpp"
#include "kernels/hopper/head_rules.hpp"
#include "kernels/hopper/slab_tiles.hpp"
#include "kernels/hopper/tma_host.hpp"

namespace gna::hopper {

std::vector<ScoredTiles> ranked_tiles(const Problem& p, const KernelOptions& options) {
  // The forward as the core's tile chooser sees it: gna/core/kernel_tiles.hpp.
  // With head rules one shape and one placement for every group (a TMA box is fixed per
  // launch), scored over the groups weighted by their heads.
  // A slab is scored as the whole layout under its rule (whole_layout).
  const TileKernel k = hopper_forward_tile_kernel(p.dim_qk, options.kv_placements);
  return ranked_tile_choices_for_groups(head_rule_groups(whole_layout(p)), k, options.q_tile,
                                        options.kv_tile);
}

ScoredTiles choose_tiles(const Problem& p, const KernelOptions& options) {
  const TileKernel k = hopper_forward_tile_kernel(p.dim_qk, options.kv_placements);
  return tile_choice_for_groups(head_rule_groups(whole_layout(p)), k, options.q_tile,
                                options.kv_tile);
}

namespace {
std::atomic<int64_t> launches{0}, head_rule_launches{0};
}  // namespace

bool call_tiles(const ForwardCall& call, ScoredTiles* tiles, std::string* why) {
  const Problem& p = call.problem;
  const KernelOptions& o = call.options;
  const ScoredTiles chosen = choose_tiles(p, o);
  if (!p.slab.active) {
    *tiles = chosen;
    return true;
  }
  const auto ranked = [&](KvPlacements placements) {
    KernelOptions with = o;
    with.kv_placements = placements;
    return ranked_tiles(p, with);
  };
  std::vector<int> key{p.dim_qk};
  for (int a = 0; a < p.rank; ++a) key.insert(key.end(), {o.q_tile.size[a], o.kv_tile.size[a]});
  return slab_tiles(p, SlabWalk::forward, chosen, ranked, o.kv_placements, key, tiles, why);
}

ForwardLaunchCount forward_launch_count() {
  return ForwardLaunchCount{launches.load(), head_rule_launches.load()};
}

namespace {

bool is_f32_vector(const TensorRef& t, int rank) {
  return t.data != nullptr && t.dtype == DType::f32 && t.rank == rank && t.strides[rank - 1] == 1;
}

// FP8 calls (ForwardCall::fp8): the e4m3 kernels, head dims 64 and 128, O in bf16 or fp16.
bool supports_fp8(const ForwardCall& call, std::string* why) {
  const Fp8Operands& f = *call.fp8;
  const Problem& p = call.problem;
  std::string m;
  if (!device_dtype_and_dims_supported(p, f.q8, {64, 128}, &m)) return refuse(why, "e4m3: " + m);
  for (const TensorRef* t : {&f.q8, &f.k8, &f.v8})
    if (t->dtype != DType::e4m3)
      return refuse(why, std::string("e4m3: operand dtype ") + dtype_name(t->dtype) +
                             " (expected float8_e4m3fn)");
  const int token_rank = p.rank + 2;  // [B, spatial.., H]
  if (!is_f32_vector(f.q_scale, token_rank) || !is_f32_vector(f.k_scale, token_rank) ||
      (f.has_lse_bias() && !is_f32_vector(f.lse_bias, token_rank)))
    return refuse(why, "e4m3: q_scale, k_scale and lse_bias must be float32 [B, spatial.., H]");
  // O's epilogue reads v_scale two channels at a time.
  if (!is_f32_vector(f.v_scale, 3) || reinterpret_cast<uintptr_t>(f.v_scale.data) % 8 != 0 ||
      f.v_scale.strides[0] % 2 != 0 || f.v_scale.strides[1] % 2 != 0)
    return refuse(why, "e4m3: v_scale must be float32 [B, Hk, Dv], channels contiguous, 8-byte "
                       "aligned with even strides");
  if (call.lse && call.lse->dtype != DType::f32) return refuse(why, "LSE must be float32");
  if (!tma_readable(f.q8, "query", &m) || !tma_readable(f.k8, "key", &m) ||
      !tma_readable(f.v8, "value", &m) || !tma_readable(call.out, "output", &m))
    return refuse(why, "e4m3: " + m);
  if (p.additional_kv > 0) {
    if (!tma_readable(f.add_k8, "additional keys", &m) ||
        !tma_readable(f.add_v8, "additional values", &m))
      return refuse(why, "e4m3: " + m);
    if (f.add_k_scale.data == nullptr || f.add_k_scale.dtype != DType::f32 ||
        f.add_k_scale.rank != 3)
      return refuse(why, "e4m3: add_k_scale must be float32 [B, Na, Hk]");
  }
  if (p.head_rules.groups > 0) return refuse(why, "e4m3: per-head rules not supported");
  return true;
}

}  // namespace

bool supports(const ForwardCall& call, std::string* why) {
  if (call.fp8 != nullptr) return supports_fp8(call, why);
  std::string m;
  if (!device_dtype_and_dims_supported(call.problem, call.in.q, {32, 64, 128, 256}, &m))
    return refuse(why, m);
  if (call.lse && call.lse->dtype != DType::f32) return refuse(why, "LSE must be float32");
  if (!qkv_readable(call.in, &m) || !tma_readable(call.out, "output", &m)) return refuse(why, m);
  if (call.in.additional_k && !additional_readable(call.in, &m)) return refuse(why, m);
  if (!head_rules_supported(call.problem, &m)) return refuse(why, m);
  ScoredTiles tiles;
  if (call.problem.slab.active && !call_tiles(call, &tiles, &m)) return refuse(why, m);
  return true;
}

namespace {

// The persistent kernel's KV loop runs at the one-item kernel's speed, but its item change is
// not yet cheaper than a new CTA (the epilogue sits on the consumers' ping-pong path; H100 A/B
// and profile in docs/hopper_forward.md). It pays off when items are short and fill the GPU
// more than once: fewer than kPersistentMaxKvTiles KV tiles per item on average (NA 56x56 7x7,
// d32: 0.70 against 0.81 ms; FLUX stride 16x16 at 50 tiles per item is 2% slower). Sets the
// work hand-out fields of `fp` and the grid.
constexpr double kPersistentMaxKvTiles = 24;

bool use_persistent(const ForwardSchedule& sched, FwdParams& fp, int head_dim, int device,
                    void* stream, int* grid) {
  fp.tile_order = nullptr;
  fp.work_counter = nullptr;
  if (head_dim > 128) return false;  // no persistent kernel for head dim 256
  if (sched.kind == ForwardSchedule::one_cta_per_item) return false;
  const int sms = sm_count(device);
  const bool persistent =
      sched.kind == ForwardSchedule::persistent ||
      (fp.items > sms && mean_kv_tiles(fp) < kPersistentMaxKvTiles);
  if (!persistent) return false;
  int ctas = sched.ctas > 0 ? sched.ctas : sms;
  *grid = ctas < fp.items ? ctas : fp.items;
  if (sched.longest_first) fp.tile_order = longest_first_order(fp, device, stream);
  if (sched.dynamic) fp.work_counter = work_counter(device, stream);
  return true;
}

void run_with_tiles(const ForwardCall& call, const ScoredTiles& tiles) {
  // Launches, tensor maps and tile counts follow the layout and the dilations, which every
  // head-rule group shares (supports); the groups' rules travel in FwdParams::rules.
  const Problem& rules_problem = call.problem;
  const Problem launch_p = launch_problem(rules_problem);
  const Problem& p = launch_p;
  if (p.batch == 0 || p.heads_q == 0 || p.tokens() == 0) return;  // nothing to compute
  const int r = p.rank;
  const int D = p.dim_qk;
  const int es = dtype_size(p.dtype);  // of O (FP8 calls too)
  const Fp8Operands* f8 = call.fp8;
  const TensorRef& q = f8 ? f8->q8 : call.in.q;
  const TensorRef& k = f8 ? f8->k8 : call.in.k;
  const TensorRef& v = f8 ? f8->v8 : call.in.v;
  const TensorRef& o = call.out;
  const LaunchPlan plan =
      f8 ? plan_launches(p, {&q, &k, &v, &o, call.lse, &f8->q_scale, &f8->k_scale,
                             f8->has_lse_bias() ? &f8->lse_bias : nullptr})
         : plan_launches(p, {&q, &k, &v, &o, call.lse});
  // A [B, spatial.., H] float tensor of the slice, as the kernel addresses LSE.
  auto token_floats = [&](const TensorRef& t, const LaunchSlice& s) {
    TokenFloats tf;
    tf.data = static_cast<const float*>(t.data) + plan.origin(s, t);
    tf.batch_stride = t.strides[0];
    tf.head_stride = t.strides[r + 1];
    for (int ka = 0; ka < kAxes; ++ka) tf.axis_stride[ka] = plan.axis_stride(p, t, ka);
    return tf;
  };

  CUtensorMap maps[5];
  for (const LaunchSlice& s : plan.slices) {
    if (!s.has_queries()) continue;  // a slab without queries in this dilation group
    FwdParams fp{};
    set_slice_fields(fp, p, plan, s, tiles.q, tiles.kv);
    fp.kv_placement = tiles.placement;
    fp.counts = additional_counts_of(call.in);
    set_head_group_rules(fp.rules, rules_problem, s.group, plan.off);
    fp.scale_log2 = effective_scale(p) * 1.4426950408889634f;

    fp.o = static_cast<char*>(o.data) + plan.origin(s, o) * es;
    fp.o_batch_stride = o.strides[0];
    fp.o_head_stride = o.strides[r + 1];
    fp.lse = nullptr;
    if (call.lse) {
      const TensorRef& l = *call.lse;
      fp.lse = static_cast<float*>(l.data) + plan.origin(s, l);
      fp.lse_batch_stride = l.strides[0];
      fp.lse_head_stride = l.strides[r + 1];
    }
    for (int ka = 0; ka < kAxes; ++ka) {
      fp.o_axis_stride[ka] = plan.axis_stride(p, o, ka);
      if (call.lse) fp.lse_axis_stride[ka] = plan.axis_stride(p, *call.lse, ka);
    }
    // For rank < 3 the placeholder outer axis carries the batch: its "coordinate" is the batch
    // index, and the batch stride does the addressing.

    encode_token_map(&maps[0], p, plan, s, q, fp.q_tile, D);
    encode_token_map(&maps[1], p, plan, s, k, fp.kv_tile, D, TokenRows::keys);
    encode_token_map(&maps[2], p, plan, s, v, fp.kv_tile, D, TokenRows::keys);
    if (p.additional_kv > 0 && f8) {
      encode_additional_map(&maps[3], f8->add_k8, DType::e4m3, D, kv_tile_tokens(D));
      encode_additional_map(&maps[4], f8->add_v8, DType::e4m3, D, kv_tile_tokens(D));
    } else if (p.additional_kv > 0) {
      encode_additional_map(&maps[3], *call.in.additional_k, p.dtype, D, kv_tile_tokens(D));
      encode_additional_map(&maps[4], *call.in.additional_v, p.dtype, D, kv_tile_tokens(D));
    } else {
      maps[3] = maps[1];
      maps[4] = maps[2];
    }
    fp.items = fp.q_tiles_per_image * p.heads_q * plan.per_run;
    int grid = fp.items;
    const bool persistent =
        use_persistent(call.options.schedule, fp, D, q.device, call.stream, &grid);
    const bool bf16 = p.dtype == DType::bf16;
    ++launches;
    if (fp.rules.groups > 0) ++head_rule_launches;
    if (f8) {
      Fp8Scales& sc = fp.fp8;
      sc.q_scale = token_floats(f8->q_scale, s);
      sc.k_scale = token_floats(f8->k_scale, s);
      if (f8->has_lse_bias()) sc.lse_bias = token_floats(f8->lse_bias, s);
      sc.v_scale = static_cast<const float*>(f8->v_scale.data);
      sc.v_scale_batch_stride = f8->v_scale.strides[0];
      sc.v_scale_head_stride = f8->v_scale.strides[1];
      if (p.additional_kv > 0) {
        sc.add_k_scale = static_cast<const float*>(f8->add_k_scale.data);
        sc.add_k_scale_batch_stride = f8->add_k_scale.strides[0];
        sc.add_k_scale_token_stride = f8->add_k_scale.strides[1];
        sc.add_k_scale_head_stride = f8->add_k_scale.strides[2];
      }
      if (D == 64)
        launch_e4m3_d64(bf16, maps, fp, grid, persistent, call.stream);
      else
        launch_e4m3_d128(bf16, maps, fp, grid, persistent, call.stream);
    } else if (D == 32)
      launch_d32(bf16, maps, fp, grid, persistent, call.stream);
    else if (D == 64)
      launch_d64(bf16, maps, fp, grid, persistent, call.stream);
    else if (D == 128)
      launch_d128(bf16, maps, fp, grid, persistent, call.stream);
    else
      launch_d256(bf16, maps, fp, grid, persistent, call.stream);
  }
}

// Opt-in autotune: the cost model's best candidates are timed once on the call's own tensors
// (warm-up, then the median of three launches) and the fastest is kept for the process, per
// problem signature (rule, heads, batch, head dim, dtype, additional keys, forced tiles and KV
// placement).
constexpr int kAutotuneCandidates = 4;

ScoredTiles autotuned_tiles(const ForwardCall& call) {
  const Problem& p = call.problem;
  static std::mutex mu;
  static std::map<std::vector<int>, ScoredTiles> cache;
  std::vector<int> key = rule_signature(p);
  key.insert(key.end(), {p.heads_q, p.heads_kv, p.batch, p.dim_qk, static_cast<int>(p.dtype),
                         call.fp8 != nullptr, p.additional_kv,
                         static_cast<int>(call.options.kv_placements)});
  for (int a = 0; a < p.rank; ++a)
    key.insert(key.end(), {call.options.q_tile.size[a], call.options.kv_tile.size[a]});
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  const std::vector<ScoredTiles> ranked = ranked_tiles(p, call.options);
  const int n = std::min<int>(kAutotuneCandidates, static_cast<int>(ranked.size()));
  cudaStream_t stream = static_cast<cudaStream_t>(call.stream);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  ScoredTiles best = ranked.front();
  float best_ms = INFINITY;
  for (int c = 0; c < n; ++c) {
    run_with_tiles(call, ranked[c]);  // warm-up
    float times[3];
    for (float& t : times) {
      cudaEventRecord(start, stream);
      run_with_tiles(call, ranked[c]);
      cudaEventRecord(stop, stream);
      cudaEventSynchronize(stop);
      cudaEventElapsedTime(&t, start, stop);
    }
    std::sort(times, times + 3);
    if (times[1] < best_ms) {
      best_ms = times[1];
      best = ranked[c];
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(key, best);
  return best;
}

}  // namespace

void forward(const ForwardCall& call) {
  if (call.problem.slab.active) {  // its tiles start on the slab's rows; no autotune
    ScoredTiles tiles;
    std::string why;
    if (!call_tiles(call, &tiles, &why)) fail(ErrorKind::unsupported, "hopper: ", why);
    run_with_tiles(call, tiles);
    return;
  }
  if (call.options.autotune) {
    // The winner is already in the output after tuning; run once more so that every call ends
    // with exactly one launch of the chosen configuration on the stream.
    run_with_tiles(call, autotuned_tiles(call));
    return;
  }
  run_with_tiles(call, choose_tiles(call.problem, call.options));
}

}  // namespace gna::hopper
