#include "gna/core/problem.hpp"

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "gna/core/error.hpp"

namespace gna {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::e4m3: return "float8_e4m3fn";
    case DType::i32: return "int32";
  }
  return "unknown";
}

int dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::e4m3: return 1;
    case DType::i32: return 4;
  }
  return 0;
}

double effective_scale(const Problem& p) {
  return p.scale != 0.f ? double(p.scale) : 1.0 / std::sqrt(static_cast<double>(p.dim_qk));
}

namespace {

// `where` names the rule in messages: "" for Problem::axes, "head rule group g: " otherwise.
void validate_axes(const AxisRule* axes, int rank, const std::string& where) {
  for (int i = 0; i < rank; ++i) {
    const AxisRule& a = axes[i];
    if (a.extent < 1) fail_invalid(where, "axis ", i, ": extent must be >= 1, got ", a.extent);
    if (a.window < 2)
      fail_invalid(where, "axis ", i, ": window (kernel_size) must be >= 2, got ", a.window);
    if (a.dilation < 1) fail_invalid(where, "axis ", i, ": dilation must be >= 1, got ", a.dilation);
    if (a.stride < 1 || a.stride > a.window)
      fail_invalid(where, "axis ", i, ": stride must be in [1, window=", a.window, "], got ",
                   a.stride);
    if (static_cast<int64_t>(a.window) * a.dilation > a.extent)
      fail_invalid(where, "axis ", i, ": window*dilation must be <= extent=", a.extent,
                   ", got window=", a.window, " dilation=", a.dilation);
  }
}

void validate_head_rules(const Problem& p) {
  const HeadRules& r = p.head_rules;
  if (r.groups < 0 || r.groups > kMaxHeadGroups)
    fail_invalid("head rules: groups must be in [0, ", kMaxHeadGroups, "], got ", r.groups);
  if (r.groups == 0) return;
  if (p.heads_q > kMaxHeadsWithRules)
    fail_invalid("head rules: query heads must be <= ", kMaxHeadsWithRules, " with head rules, got ",
                 p.heads_q);
  for (int g = 0; g < r.groups; ++g) {
    for (int a = 0; a < p.rank; ++a)
      if (r.axes[g][a].extent != p.axes[a].extent)
        fail_invalid("head rules: group ", g, " axis ", a, ": extent must equal the layout's (",
                     p.axes[a].extent, "), got ", r.axes[g][a].extent);
    validate_axes(r.axes[g], p.rank, "head rules: group " + std::to_string(g) + " ");
  }
  for (int h = 0; h < p.heads_q; ++h)
    if (r.group_of_head[h] >= r.groups)
      fail_invalid("head rules: group of head ", h, " must be < groups=", r.groups, ", got ",
                   int(r.group_of_head[h]));
}

}  // namespace

Problem problem_of_group(const Problem& p, int g) {
  if (g < 0 || g >= p.head_rules.groups)
    fail_invalid("head rules: group must be in [0, ", p.head_rules.groups, "), got ", g);
  Problem q = p;
  for (int a = 0; a < p.rank; ++a) q.axes[a] = p.head_rules.axes[g][a];
  q.head_rules = HeadRules{};
  return q;
}

Problem whole_layout(const Problem& p) {
  Problem w = p;
  if (!p.slab.active) return w;
  for (int a = 0; a < p.rank; ++a) w.axes[a] = slab_axis(p, a);
  w.slab = Slab{};
  return w;
}

namespace {

// A slab's rule on the whole layout, its query and key slabs inside it, and every query's
// window inside the key slab (the caller sends exactly key_range of its queries, or more).
void validate_slab(const Problem& p) {
  AxisRule axes[kMaxRank];
  for (int a = 0; a < p.rank; ++a) axes[a] = slab_axis(p, a);
  validate_axes(axes, p.rank, "slab: ");
  if (p.head_rules.groups > 0)
    fail_invalid("slab: per-head rules are not taken with slabs (head_rules.groups=",
                 p.head_rules.groups, ")");
  const Slab& s = p.slab;
  for (int a = 0; a < p.rank; ++a) {
    const int queries = p.axes[a].extent;
    if (s.query_offset[a] < 0 || s.query_offset[a] > s.extent[a] - queries)
      fail_invalid("slab: axis ", a, ": query_offset must be in [0, ", s.extent[a] - queries,
                   "] (", queries, " query rows of extent ", s.extent[a], "), got ",
                   s.query_offset[a]);
    if (s.key_extent[a] < 1)
      fail_invalid("slab: axis ", a, ": the key slab must hold >= 1 row, got ", s.key_extent[a]);
    if (s.key_offset[a] < 0 || s.key_offset[a] > s.extent[a] - s.key_extent[a])
      fail_invalid("slab: axis ", a, ": key_offset must be in [0, ", s.extent[a] - s.key_extent[a],
                   "] (", s.key_extent[a], " key rows of extent ", s.extent[a], "), got ",
                   s.key_offset[a]);
    const Range needed = key_range(axes[a], Range{s.query_offset[a], s.query_offset[a] + queries});
    if (needed.begin < s.key_offset[a] || needed.end > s.key_offset[a] + s.key_extent[a])
      fail_invalid("slab: axis ", a, ": queries [", s.query_offset[a], ", ",
                   s.query_offset[a] + queries, ") attend keys [", needed.begin, ", ", needed.end,
                   "), the key slab holds [", s.key_offset[a], ", ",
                   s.key_offset[a] + s.key_extent[a], ")");
  }
}

}  // namespace

void validate(const Problem& p) {
  if (p.rank < 1 || p.rank > kMaxRank) fail_invalid("rank must be 1, 2 or 3, got ", p.rank);
  if (p.slab.active) {
    for (int a = 0; a < p.rank; ++a)
      if (p.axes[a].extent < 1)
        fail_invalid("axis ", a, ": extent must be >= 1, got ", p.axes[a].extent);
    validate_slab(p);
  } else {
    validate_axes(p.axes, p.rank, "");
  }
  int64_t tokens = 1;
  for (int i = 0; i < p.rank; ++i)
    if (__builtin_mul_overflow(tokens, int64_t{p.axes[i].extent}, &tokens) || tokens > INT32_MAX) {
      std::ostringstream extents;
      for (int j = 0; j < p.rank; ++j) extents << (j ? "x" : "") << p.axes[j].extent;
      fail_invalid("tokens (the product of the extents) must be < 2^31, got extents ",
                   extents.str());
    }
  if (p.batch < 1) fail_invalid("batch must be >= 1, got ", p.batch);
  if (p.heads_q < 1) fail_invalid("query heads must be >= 1, got ", p.heads_q);
  if (p.heads_kv < 1) fail_invalid("key/value heads must be >= 1, got ", p.heads_kv);
  if (p.heads_q % p.heads_kv != 0)
    fail_invalid("query heads (", p.heads_q, ") must be a multiple of key/value heads, got ",
                 p.heads_kv);
  if (p.dim_qk < 1) fail_invalid("query/key head dim must be >= 1, got ", p.dim_qk);
  if (p.dim_v < 1) fail_invalid("value head dim must be >= 1, got ", p.dim_v);
  if (p.additional_kv < 0)
    fail_invalid("additional key/value count must be >= 0, got ", p.additional_kv);
  if (!std::isfinite(p.scale)) fail_invalid("scale must be finite, got ", p.scale);
  if (p.scale < 0.f) fail_invalid("scale must be > 0 (or 0 for 1/sqrt(dim)), got ", p.scale);
  validate_head_rules(p);
}

namespace {

void append_axes(std::vector<int>& s, const AxisRule* axes, int rank) {
  for (int a = 0; a < rank; ++a) {
    const AxisRule& r = axes[a];
    s.insert(s.end(), {r.extent, r.window, r.dilation, r.stride, r.causal ? 1 : 0});
  }
}

// The rule is a product over axes and queries form a product grid, so the mean factorizes.
double mean_keys_of_axes(const AxisRule* axes, int rank) {
  double mean = 1.0;
  for (int i = 0; i < rank; ++i) {
    const AxisRule& a = axes[i];
    double total = 0;
    for (int g = 0; g < a.dilation; ++g) {
      const int n = group_length(a, g);
      for (int ig = 0; ig < n; ++ig) total += key_window(a, n, ig).size();
    }
    mean *= total / a.extent;
  }
  return mean;
}

}  // namespace

std::vector<int> rule_signature(const Problem& p) {
  std::vector<int> s{p.rank};
  append_axes(s, p.axes, p.rank);
  const HeadRules& r = p.head_rules;
  if (r.groups > 0) {
    s.push_back(r.groups);
    for (int g = 0; g < r.groups; ++g) append_axes(s, r.axes[g], p.rank);
    s.insert(s.end(), r.group_of_head, r.group_of_head + p.heads_q);
  }
  return s;
}

double mean_keys_per_query(const Problem& p) {
  if (p.head_rules.groups == 0) return mean_keys_of_axes(p.axes, p.rank);
  double sum = 0;
  for (int h = 0; h < p.heads_q; ++h) sum += mean_keys_of_axes(axes_of_head(p, h), p.rank);
  return sum / p.heads_q;
}

AxisRule sta_axis_rule(const StaAxis& sta, int axis) {
  if (sta.tile < 1) fail_invalid("axis ", axis, ": STA tile must be >= 1, got ", sta.tile);
  if (sta.extent % sta.tile != 0)
    fail_invalid("axis ", axis, ": STA extent must be a multiple of tile=", sta.tile, ", got ",
                 sta.extent);
  if (sta.window < sta.tile || sta.window % sta.tile != 0)
    fail_invalid("axis ", axis, ": STA window must be a multiple of tile=", sta.tile, ", got ",
                 sta.window);
  if ((sta.window / sta.tile) % 2 == 0)
    fail_invalid("axis ", axis, ": STA window/tile must be odd, got window=", sta.window,
                 " tile=", sta.tile);
  if (sta.window > sta.extent)
    fail_invalid("axis ", axis, ": STA window must be <= extent=", sta.extent, ", got ",
                 sta.window);
  AxisRule r;
  r.extent = sta.extent;
  r.window = sta.window;
  r.stride = sta.tile;
  r.dilation = 1;
  r.causal = false;
  if (r.window < 2)
    fail_invalid("axis ", axis, ": STA window must be >= 2 tokens, got ", sta.window);
  return r;
}

}  // namespace gna
