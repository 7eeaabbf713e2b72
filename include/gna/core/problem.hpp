// Description of one GNA problem (shapes, per-axis rule, heads, dtypes) and its validation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gna/core/axis_rule.hpp"
#include "gna/core/slab.hpp"

namespace gna {

// e4m3: OCP float8_e4m3fn (gna/core/fp8.hpp), the operands of the FP8 forward only. i32: the
// per-batch counts of additional keys only (AttentionTensors::additional_kv_counts).
enum class DType : int32_t { f32 = 0, f64 = 1, f16 = 2, bf16 = 3, e4m3 = 4, i32 = 5 };

const char* dtype_name(DType t);
int dtype_size(DType t);

// Per-head rules (STA's searched plans give each head its own window): query head h follows the
// per-axis rules of group group_of_head[h]; the groups share Problem::axes' extents. groups == 0:
// every head follows Problem::axes. A backend runs them only where it says so
// (Backend::head_rules); dispatch refuses them elsewhere.
constexpr int kMaxHeadGroups = 8;
constexpr int kMaxHeadsWithRules = 256;
struct HeadRules {
  int groups = 0;
  AxisRule axes[kMaxHeadGroups][kMaxRank];
  uint8_t group_of_head[kMaxHeadsWithRules] = {};
};

// A rank-1..3 token layout with the rule of each axis. Plain data, copyable to the device.
struct Problem {
  int rank = 1;
  AxisRule axes[kMaxRank];  // with head rules: the extents, and the rule of group 0
  HeadRules head_rules;
  int batch = 1;
  int heads_q = 1;
  int heads_kv = 1;
  int dim_qk = 64;
  int dim_v = 64;
  int additional_kv = 0;  // extra keys/values every query attends to (same softmax)
  float scale = 0.f;      // 0 means 1/sqrt(dim_qk); see effective_scale()
  DType dtype = DType::f32;
  // A slab problem (gna/core/slab.hpp): axes' extents are then the query tensor's, the rule's
  // are slab.extent (slab_axis). A backend runs slabs only where it says so (Backend::slabs);
  // dispatch refuses them elsewhere.
  Slab slab;

  GNA_HD int64_t tokens() const {
    int64_t t = 1;
    for (int a = 0; a < rank; ++a) t *= axes[a].extent;
    return t;
  }
};

// The per-axis rules query head h follows.
GNA_HD const AxisRule* axes_of_head(const Problem& p, int h) {
  return p.head_rules.groups > 0 ? p.head_rules.axes[p.head_rules.group_of_head[h]] : p.axes;
}

// The rule of axis a at global coordinates: axes[a] with the whole layout's extent on a slab.
GNA_HD AxisRule slab_axis(const Problem& p, int a) {
  AxisRule r = p.axes[a];
  if (p.slab.active) r.extent = p.slab.extent[a];
  return r;
}

// The additional keys a batch item attends when the call gives per-batch counts
// (AttentionTensors::additional_kv_counts): the first `count` of them, the count clamped to
// [0, additional_kv]. Kernels read the counts on the device, where refusing a value would need
// a synchronisation, so every reader clamps the same way.
GNA_HD int attended_additional_keys(int count, int additional_kv) {
  return clamp_i(count, 0, additional_kv);
}

// The problem over the whole layout under the same rule (slab inactive): what a slab's tile
// choice is scored on. Without a slab, p itself.
Problem whole_layout(const Problem& p);

// Rows of the key and value tensors on axis a: the query tensor's, or the key slab's.
GNA_HD int key_extent(const Problem& p, int a) {
  return p.slab.active ? p.slab.key_extent[a] : p.axes[a].extent;
}

// The problem with every head following the rule of head-rule group g (groups 0).
Problem problem_of_group(const Problem& p, int g);

// Softmax scale (double so that the float64 reference is exact; kernels round it to float).
double effective_scale(const Problem& p);

// Throws gna::Error naming the axis, the parameter and the value when p is not valid.
void validate(const Problem& p);

// The rule as a key for caches of per-problem choices (tile shapes): rank, then per axis extent,
// window, dilation, stride and causal flag; then, with head rules, each group's and the head map.
std::vector<int> rule_signature(const Problem& p);

// Keys attended per query, averaged over queries (and over heads, with head rules; exact, by
// per-axis sums), excluding additional KV tokens. For non-causal problems this is prod(window).
double mean_keys_per_query(const Problem& p);

// Sliding Tile Attention parameters (docs/rule.md section 4), per axis: tile T and window W in
// tokens.
struct StaAxis {
  int extent = 1;
  int tile = 1;
  int window = 1;
};

// Converts STA to the equivalent GNA rule (window W, stride T), rejecting what STA cannot
// express (W not a multiple of T, W/T even, L not a multiple of T, W > L).
AxisRule sta_axis_rule(const StaAxis& sta, int axis);

}  // namespace gna
