// Host side of the Hopper backward: support check, tile choice with the core's tile chooser,
// scratch buffers, and the launches (row pass; one backward launch per dilation-group
// combination and batch run, tensor maps over the heads-last tensors; one launch for the
// additional keys; dQ conversion).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "gna/core/error.hpp"
#include "gna/core/kernel_tiles.hpp"
#include "gna/core/tile_choice.hpp"
#include "kernels/common/backward_postpass.hpp"
#include "kernels/common/backward_prepass.hpp"
#include "kernels/common/cuda_check.hpp"
#include "kernels/common/scratch.hpp"
#include "kernels/hopper/backward_launch.hpp"
#include "kernels/hopper/head_rules.hpp"
#include "kernels/hopper/slab_tiles.hpp"
#include "kernels/hopper/tma_host.hpp"

namespace gna::hopper {

// The backward as the core's tile chooser sees it: gna/core/kernel_tiles.hpp (placed Q tiles
// only at the head dims with placed kernels). Deterministic mode keeps grid Q tiles: its turn
// counters order the KV tiles adding into one grid Q tile, which placed Q tiles (one run per KV
// tile) do not share.
TileKernel backward_tile_kernel(const Problem& p, const KernelOptions& options) {
  return hopper_backward_tile_kernel(
      p.dim_qk, options.deterministic ? KvPlacements::grid : options.q_placements);
}

// With head rules one shape and one placement for every group, scored over the groups weighted
// by their heads.
// A slab is scored as the whole layout under its rule (whole_layout).
ScoredTiles choose_backward_tiles(const Problem& p, const KernelOptions& options) {
  return tile_choice_for_groups(head_rule_groups(whole_layout(p)),
                                backward_tile_kernel(p, options), options.q_tile,
                                options.kv_tile);
}

bool backward_call_tiles(const BackwardCall& call, ScoredTiles* tiles, std::string* why) {
  const Problem& p = call.problem;
  const KernelOptions& o = call.options;
  const ScoredTiles chosen = choose_backward_tiles(p, o);
  if (!p.slab.active) {
    *tiles = chosen;
    return true;
  }
  const auto ranked = [&](KvPlacements placements) {
    KernelOptions with = o;
    with.q_placements = placements;
    return ranked_tile_choices_for_groups(head_rule_groups(whole_layout(p)),
                                          backward_tile_kernel(p, with), o.q_tile, o.kv_tile);
  };
  std::vector<int> key{p.dim_qk, o.deterministic ? 1 : 0};
  for (int a = 0; a < p.rank; ++a) key.insert(key.end(), {o.q_tile.size[a], o.kv_tile.size[a]});
  return slab_tiles(p, SlabWalk::backward, chosen, ranked, o.q_placements, key, tiles, why);
}

bool supports_backward(const BackwardCall& call, std::string* why) {
  std::string m;
  if (!device_dtype_and_dims_supported(call.problem, call.in.q, {32, 64, 128}, &m))
    return refuse(why, m);
  if (!qkv_readable(call.in, &m)) return refuse(why, m);
  // d_out is absent when dispatch only selects a backend; the call itself always has it.
  if (call.d_out.data != nullptr && !tma_readable(call.d_out, "d_out", &m)) return refuse(why, m);
  if (call.problem.additional_kv > 0 && !additional_readable(call.in, &m)) return refuse(why, m);
  if (!head_rules_supported(call.problem, &m)) return refuse(why, m);
  // The turn counters order every KV tile adding into a Q tile; a slab runs only its own.
  if (call.problem.slab.active && call.options.deterministic)
    return refuse(why, "deterministic mode does not run slabs (query and key offsets)");
  ScoredTiles tiles;
  if (call.problem.slab.active && !backward_call_tiles(call, &tiles, &m)) return refuse(why, m);
  return true;
}

namespace {

std::atomic<int64_t> launches{0}, head_rule_launches{0}, placed_q_launches{0};

// Element strides of the [B, tokens, Hq] row scratch per problem axis (plain token order).
struct RowStrides {
  int64_t batch;
  int64_t axis[kMaxRank];
};
RowStrides row_strides(const Problem& p) {
  RowStrides s{};
  int64_t stride = p.heads_q;
  for (int a = p.rank - 1; a >= 0; --a) {
    s.axis[a] = stride;
    stride *= p.axes[a].extent;
  }
  s.batch = stride;
  return s;
}

void launch_kernel(int D, bool bf16, KvPlacement q_placement, const CUtensorMap* maps,
                   const BwdParams& bp, int grid, void* stream) {
  if (grid == 0) return;
  ++launches;
  if (bp.rules.groups > 0) ++head_rule_launches;
  if (q_placement == KvPlacement::placed) ++placed_q_launches;
  if (D == 32)
    launch_backward_d32(bf16, q_placement, maps, bp, grid, stream);
  else if (D == 64)
    launch_backward_d64(bf16, q_placement, maps, bp, grid, stream);
  else
    launch_backward_d128(bf16, q_placement, maps, bp, grid, stream);
}

// Fields common to both kinds of launch.
BwdParams base_params(const Problem& p, const LaunchPlan& plan, const LaunchSlice& s,
                      const ScoredTiles& tiles) {
  BwdParams bp{};
  set_slice_fields(bp, p, plan, s, tiles.q, tiles.kv);
  for (int ka = 0; ka < kAxes; ++ka) bp.kv_tiles[ka] = tiles_meeting(s.k_rows[ka], bp.kv_tile[ka]);
  bp.heads_kv = p.heads_kv;
  bp.scale = static_cast<float>(effective_scale(p));
  bp.scale_log2 = static_cast<float>(effective_scale(p) * 1.4426950408889634);
  return bp;
}

// Row scratch pointers and strides of a slice (dilation folded into the axis strides).
void set_rows(BwdParams& bp, const Problem& p, const LaunchPlan& plan, const LaunchSlice& s,
              const float* lse2, const float* delta) {
  const RowStrides rs = row_strides(p);
  int64_t origin = static_cast<int64_t>(s.run) * rs.batch;
  for (int a = 0; a < p.rank; ++a) origin += s.q_rows[a + plan.off].first * rs.axis[a];
  bp.lse2 = lse2 + origin;
  bp.delta = delta + origin;
  bp.row_batch_stride = rs.batch;
  for (int ka = 0; ka < kAxes; ++ka) {
    const int a = ka - plan.off;
    bp.row_axis_stride[ka] = a < 0 ? 0 : rs.axis[a] * p.axes[a].dilation;
  }
}

// The fp32 dQ accumulator as a token tensor [B, spatial.., Hq, D] (contiguous), for its maps.
TensorRef accumulator_ref(const Problem& p, float* data, int device) {
  TensorRef t;
  t.data = data;
  t.dtype = DType::f32;
  t.device = device;
  t.rank = p.rank + 3;
  t.shape[0] = p.batch;
  for (int a = 0; a < p.rank; ++a) t.shape[1 + a] = p.axes[a].extent;
  t.shape[p.rank + 1] = p.heads_q;
  t.shape[p.rank + 2] = p.dim_qk;
  int64_t stride = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    t.strides[i] = stride;
    stride *= t.shape[i];
  }
  return t;
}

}  // namespace

BackwardLaunchCount backward_launch_count() {
  return BackwardLaunchCount{launches.load(), head_rule_launches.load(), placed_q_launches.load()};
}

namespace {

// The query heads of head-rule group g as an arithmetic progression first + i * step (i < count);
// false when they are not one (or the group has no head).
bool group_heads(const Problem& p, int g, int* first, int* step, int* count) {
  int n = 0, h0 = -1, d = 1;
  for (int h = 0; h < p.heads_q; ++h) {
    if (p.head_rules.group_of_head[h] != g) continue;
    if (n == 0) h0 = h;
    else if (n == 1) d = h - h0;
    else if (h != h0 + n * d) return false;
    ++n;
  }
  if (n == 0) return false;
  *first = h0;
  *step = d;
  *count = n;
  return true;
}

// Heads first + i * step of a heads-last tensor (head axis `axis`).
TensorRef head_view(const TensorRef& t, int axis, int first, int step, int count) {
  TensorRef v = t;
  v.data = static_cast<char*>(t.data) + first * t.strides[axis] * dtype_size(t.dtype);
  v.shape[axis] = count;
  v.strides[axis] = t.strides[axis] * step;
  return v;
}

}  // namespace

bool backward_splits_by_group(const Problem& p, const KernelOptions& options) {
  if (p.head_rules.groups < 2 || p.heads_kv != p.heads_q || p.additional_kv > 0) return false;
  const TileKernel k = backward_tile_kernel(p, options);
  const std::vector<WeightedProblem> groups = head_rule_groups(p);
  if (groups.size() < 2) return false;
  double heads = 0, apart = 0;
  for (const WeightedProblem& g : groups) {
    heads += g.weight;
    apart += g.weight * tile_choice(g.problem, k, options.q_tile, options.kv_tile).cost;
  }
  const double together =
      heads * tile_choice_for_groups(groups, k, options.q_tile, options.kv_tile).cost;
  // The launches of every group pay their own tail and setup: split only for a clear gain.
  return apart < (1 - kSplitMargin) * together;
}

std::vector<BackwardCall> backward_group_calls(const BackwardCall& call) {
  const Problem& p = call.problem;
  if (!backward_splits_by_group(p, call.options)) return {};
  std::vector<BackwardCall> parts;
  const int head_axis = p.rank + 1;  // heads-last: [B, axes..., H, D] and the LSE [B, axes..., H]
  for (int g = 0; g < p.head_rules.groups; ++g) {
    bool has_heads = false;
    for (int h = 0; h < p.heads_q; ++h) has_heads = has_heads || p.head_rules.group_of_head[h] == g;
    if (!has_heads) continue;
    int first = 0, step = 1, count = 0;
    if (!group_heads(p, g, &first, &step, &count)) return {};
    auto view = [&](const TensorRef& t) { return head_view(t, head_axis, first, step, count); };
    BackwardCall c = call;
    c.problem = problem_of_group(p, g);
    c.problem.heads_q = c.problem.heads_kv = count;
    c.in.q = view(call.in.q);
    c.in.k = view(call.in.k);
    c.in.v = view(call.in.v);
    c.out = view(call.out);
    c.lse = view(call.lse);
    c.d_out = view(call.d_out);
    c.dq = view(call.dq);
    c.dk = view(call.dk);
    c.dv = view(call.dv);
    if (!supports_backward(c, nullptr)) return {};
    parts.push_back(c);
  }
  return parts;
}

void backward(const BackwardCall& call) {
  // Head-rule groups whose tiles differ enough run as one call per group on views of their heads.
  const std::vector<BackwardCall> parts = backward_group_calls(call);
  if (!parts.empty()) {
    for (const BackwardCall& c : parts) backward(c);
    return;
  }

  // Launches, tensor maps and tile counts follow the layout and the dilations, which every
  // head-rule group shares (supports); the groups' rules travel in BwdParams::rules (spatial
  // launches; the additional keys' launch has no rule).
  const Problem& rules_problem = call.problem;
  const Problem launch_p = launch_problem(rules_problem);
  const Problem& p = launch_p;
  if (p.batch == 0 || p.heads_q == 0 || p.tokens() == 0) return;
  cudaStream_t stream = static_cast<cudaStream_t>(call.stream);
  const int D = p.dim_qk;
  const int es = dtype_size(p.dtype);
  const bool bf16 = p.dtype == DType::bf16;
  ScoredTiles tiles;
  std::string refusal;
  if (!backward_call_tiles(call, &tiles, &refusal))
    fail(ErrorKind::unsupported, "hopper: ", refusal);

  const int64_t rows = int64_t(p.batch) * p.tokens() * p.heads_q;
  float* lse2 = cuda::scratch_alloc<float>(rows, stream);
  float* delta = cuda::scratch_alloc<float>(rows, stream);
  float* dq_accum = cuda::scratch_alloc<float>(rows * D, stream);
  GNA_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, rows * D * sizeof(float), stream));
  cuda::launch_backward_prepass(p, call.out, call.d_out, call.lse, delta, lse2, stream);
  const TensorRef accumulator = accumulator_ref(p, dq_accum, call.in.q.device);

  // dK / dV join the plan so that batches fold into axis 0 only where their maps can fold too.
  const LaunchPlan plan =
      plan_launches(p, {&call.in.q, &call.in.k, &call.in.v, &call.d_out, &call.dk, &call.dv});
  std::string why;
  const bool grads_by_tma =
      tma_readable(call.dk, "dk", &why) && tma_readable(call.dv, "dv", &why);
  Problem p_add = p;  // additional keys: every token (of the query tensor), no dilation groups
  for (int a = 0; a < p.rank; ++a) p_add.axes[a].dilation = 1;
  p_add.slab = Slab{};
  const LaunchPlan plan_add =
      p.additional_kv > 0 ? plan_launches(p_add, {&call.in.q, &call.d_out}) : LaunchPlan{};

  // Deterministic mode: turn counters per (batch, query head, Q tile) of every launch.
  int* turns = nullptr;
  std::vector<int64_t> turn_offset;
  if (call.options.deterministic) {
    int64_t total = 0;
    auto count = [&](const Problem& pp, const LaunchPlan& pl) {
      for (const LaunchSlice& s : pl.slices) {
        const BwdParams bp = base_params(pp, pl, s, tiles);
        turn_offset.push_back(total);
        total += int64_t(bp.q_tiles_per_image) * pl.per_run * p.heads_q;
      }
    };
    count(p, plan);
    if (p.additional_kv > 0) count(p_add, plan_add);
    turns = cuda::scratch_alloc<int>(total, stream);
    GNA_CUDA_CHECK(cudaMemsetAsync(turns, 0, std::max<int64_t>(total, 1) * sizeof(int), stream));
  }
  size_t launch_index = 0;

  CUtensorMap maps[7];
  for (const LaunchSlice& s : plan.slices) {
    BwdParams bp = base_params(p, plan, s, tiles);
    set_head_group_rules(bp.rules, rules_problem, s.group, plan.off);
    bp.kv_tiles_per_image = bp.kv_tiles[0] * bp.kv_tiles[1] * bp.kv_tiles[2];
    // Where every KV tile's Q box is the whole image (dense) the order changes nothing in L2,
    // and row order measured faster there; in deterministic mode too (there the stride-1
    // case measured 22% slower with the outermost axis fastest).
    bool dense = true;
    for (const AxisRule& a : bp.axes) dense = dense && !a.causal && a.window >= a.extent;
    for (int g = 0; g < bp.rules.groups; ++g)
      for (const AxisRule& a : bp.rules.axes[g]) dense = dense && !a.causal && a.window >= a.extent;
    bp.kv_outer_axis_fastest = dense || call.options.deterministic ? 0 : 1;
    set_rows(bp, p, plan, s, lse2, delta);
    bp.dk = static_cast<char*>(call.dk.data) + plan.origin(s, call.dk, TokenRows::keys) * es;
    bp.dv = static_cast<char*>(call.dv.data) + plan.origin(s, call.dv, TokenRows::keys) * es;
    bp.dk_batch_stride = call.dk.strides[0];
    bp.dv_batch_stride = call.dv.strides[0];
    bp.dk_head_stride = call.dk.strides[p.rank + 1];
    bp.dv_head_stride = call.dv.strides[p.rank + 1];
    for (int ka = 0; ka < kAxes; ++ka) {
      bp.dk_axis_stride[ka] = plan.axis_stride(p, call.dk, ka);
      bp.dv_axis_stride[ka] = plan.axis_stride(p, call.dv, ka);
    }
    bp.turns = turns ? turns + turn_offset[launch_index] : nullptr;
    ++launch_index;
    encode_token_map(&maps[0], p, plan, s, call.in.q, bp.q_tile, D);
    encode_token_map(&maps[1], p, plan, s, call.d_out, bp.q_tile, D);
    encode_token_map(&maps[2], p, plan, s, call.in.k, bp.kv_tile, D, TokenRows::keys);
    encode_token_map(&maps[3], p, plan, s, call.in.v, bp.kv_tile, D, TokenRows::keys);
    encode_token_map(&maps[4], p, plan, s, accumulator, bp.q_tile, D);
    // A KV tile reaching past the extent into the next folded batch would store rows of it.
    bp.store_by_tma =
        grads_by_tma && (plan.per_run == 1 || bp.axes[0].extent % bp.kv_tile[0] == 0);
    if (bp.store_by_tma) {
      encode_token_map(&maps[5], p, plan, s, call.dk, bp.kv_tile, D, TokenRows::keys);
      encode_token_map(&maps[6], p, plan, s, call.dv, bp.kv_tile, D, TokenRows::keys);
    }
    const int grid = bp.kv_tiles_per_image * p.heads_kv * plan.per_run;
    launch_kernel(D, bf16, tiles.placement, maps, bp, grid, stream);
  }

  if (p.additional_kv > 0) {
    for (const LaunchSlice& s : plan_add.slices) {
      BwdParams bp = base_params(p_add, plan_add, s, tiles);
      bp.additional = 1;
      bp.kv_tiles_per_image = tiles_along(p.additional_kv, kBwdKvRows);
      bp.counts = additional_counts_of(call.in);
      set_rows(bp, p_add, plan_add, s, lse2, delta);
      const TensorRef& dak = *call.d_additional_k;
      const TensorRef& dav = *call.d_additional_v;
      // Additional tensors [B, N, Hkv, D]: the batch is the launch's batch index.
      bp.dk = static_cast<char*>(dak.data) + s.run * dak.strides[0] * es;
      bp.dv = static_cast<char*>(dav.data) + s.run * dav.strides[0] * es;
      bp.dk_batch_stride = dak.strides[0];
      bp.dv_batch_stride = dav.strides[0];
      bp.dk_head_stride = dak.strides[2];
      bp.dv_head_stride = dav.strides[2];
      bp.dk_axis_stride[2] = dak.strides[1];
      bp.dv_axis_stride[2] = dav.strides[1];
      bp.turns = turns ? turns + turn_offset[launch_index] : nullptr;
      ++launch_index;
      encode_token_map(&maps[0], p_add, plan_add, s, call.in.q, bp.q_tile, D);
      encode_token_map(&maps[1], p_add, plan_add, s, call.d_out, bp.q_tile, D);
      encode_additional_map(&maps[2], *call.in.additional_k, p.dtype, D, kBwdKvRows);
      encode_additional_map(&maps[3], *call.in.additional_v, p.dtype, D, kBwdKvRows);
      encode_token_map(&maps[4], p_add, plan_add, s, accumulator, bp.q_tile, D);
      bp.store_by_tma = tma_readable(dak, "d_additional_k", &why) &&
                        tma_readable(dav, "d_additional_v", &why);
      if (bp.store_by_tma) {
        encode_additional_map(&maps[5], dak, p.dtype, D, kBwdKvRows);
        encode_additional_map(&maps[6], dav, p.dtype, D, kBwdKvRows);
      }
      const int grid = bp.kv_tiles_per_image * p.heads_kv * plan_add.per_run;
      launch_kernel(D, bf16, KvPlacement::grid, maps, bp, grid, stream);  // every grid Q tile
    }
  }

  cuda::launch_backward_postpass(p, dq_accum, call.dq, static_cast<float>(effective_scale(p)),
                                 stream);
  cuda::scratch_free(lse2, stream);
  cuda::scratch_free(delta, stream);
  cuda::scratch_free(dq_accum, stream);
  if (turns) cuda::scratch_free(turns, stream);
}

}  // namespace gna::hopper
