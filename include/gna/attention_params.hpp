// The user-facing GNA parameters and the tensors of one attention call, and how they become a
// validated Problem. Tensors are heads-last: Q [B, X, (Y, (Z)), Hq, Dqk], K [.., Hkv, Dqk],
// V [.., Hkv, Dv], O [.., Hq, Dv], LSE [B, X, (Y, (Z)), Hq] (fp32, natural log), additional K/V
// [B, Nadd, Hkv, D]; their per-batch counts [B] (int32).
#pragma once

#include <initializer_list>
#include <vector>

#include "gna/core/problem.hpp"
#include "gna/tensor.hpp"

namespace gna {

// The rule of one group of query heads, per axis (extents come from the query, as for
// AttentionParams' own rule).
struct HeadGroupRule {
  int window[kMaxRank] = {2, 2, 2};
  int stride[kMaxRank] = {1, 1, 1};
  int dilation[kMaxRank] = {1, 1, 1};
  bool causal[kMaxRank] = {false, false, false};
};

struct AttentionParams {
  int rank = 1;
  int window[kMaxRank] = {2, 2, 2};
  int stride[kMaxRank] = {1, 1, 1};
  int dilation[kMaxRank] = {1, 1, 1};
  bool causal[kMaxRank] = {false, false, false};
  float scale = 0.f;  // 0: 1/sqrt(head dim)
  // Per-head rules (STA's searched plans give each head its own window): query head h follows
  // head_groups[group_of_head[h]], and window / stride / dilation / causal above are not read.
  // Empty: every head follows the rule above. At most kMaxHeadGroups groups and
  // kMaxHeadsWithRules query heads; group_of_head holds one entry per query head.
  std::vector<HeadGroupRule> head_groups;
  std::vector<int> group_of_head;
  // A slab problem (gna/core/slab.hpp) when slab.active: its extent and offsets are read, its
  // key_extent comes from the key tensor's shape.
  Slab slab;
};

struct AttentionTensors {
  TensorRef q, k, v;
  const TensorRef* additional_k = nullptr;
  const TensorRef* additional_v = nullptr;
  // Per-batch counts of additional keys (joint attention with padded text): int32 [B] on the
  // query's device; batch item b attends only the first attended_additional_keys(count[b],
  // Nadd) additional keys (gna/core/problem.hpp: clamped, read where the kernels run, no
  // synchronisation), and the gradients of the others are zero. Null: every additional key. A
  // backend runs counts only where it says so (Backend::additional_counts).
  const TensorRef* additional_kv_counts = nullptr;
  // float8_e4m3fn q, k, v (and additional keys and values) come with their float32 scales
  // (docs/fp8.md): the value of an element is its e4m3 value times its scale.
  const TensorRef* q_scale = nullptr;             // [B, spatial.., Hq]: per token and head
  const TensorRef* k_scale = nullptr;             // [B, spatial.., Hkv]: per token and head
  const TensorRef* v_scale = nullptr;             // [B, Hkv, Dv]: per channel
  const TensorRef* additional_k_scale = nullptr;  // [B, Nadd, Hkv]: per token and head
};

// Checks ranks, shapes, dtypes, devices and last-dim contiguity of the tensors (naming the
// tensor, the dimension and the value), then builds and validates the Problem.
Problem make_problem(const AttentionParams& params, const AttentionTensors& t);

// Checks that `tensor` is a valid view (check_layout) and has exactly `shape` (rank and sizes),
// `dtype`, `device` and a contiguous last dimension. `name` appears in the message.
void check_tensor(const char* name, const TensorRef& tensor, const int64_t* shape, int rank,
                  DType dtype, int device);

// A view any call can trust before looking at its sizes: rank in [0, 8], a known dtype, sizes
// and strides >= 0, element count and byte reach below 2^63, and, when it has elements, a
// non-null data pointer aligned to the element size.
void check_layout(const char* name, const TensorRef& tensor);

// Size `dim` of `tensor` as an int (a Problem field), refused when it does not fit: "name: size
// of dim 1 (what) must be < 2^31, got ...". Call after check_layout (sizes >= 0).
int checked_size(const char* name, const TensorRef& tensor, int dim, const char* what);

struct NamedTensor {
  const char* name;
  const TensorRef* tensor;  // null: absent
};

// An output must give every element its own address and share no memory with the other
// tensors of the call (same device, overlapping byte ranges [first element, last element]).
void check_output(const NamedTensor& output, const NamedTensor* others, size_t count);
inline void check_output(const NamedTensor& output, std::initializer_list<NamedTensor> others) {
  check_output(output, others.begin(), others.size());
}

// Expected shapes of outputs and gradients for a problem.
int output_shape(const Problem& p, int64_t* shape);  // O: returns rank
int lse_shape(const Problem& p, int64_t* shape);     // LSE
int token_tensor_shape(const Problem& p, int heads, int dim, int64_t* shape);
int key_tensor_shape(const Problem& p, int heads, int dim, int64_t* shape);  // K, V, dK, dV

}  // namespace gna
