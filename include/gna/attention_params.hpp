// The user-facing GNA parameters and the tensors of one attention call, and how they become a
// validated Problem. Tensors are heads-last: Q [B, X, (Y, (Z)), Hq, Dqk], K [.., Hkv, Dqk],
// V [.., Hkv, Dv], O [.., Hq, Dv], LSE [B, X, (Y, (Z)), Hq] (fp32, natural log), additional K/V
// [B, Nadd, Hkv, D].
#pragma once

#include "gna/core/problem.hpp"
#include "gna/tensor.hpp"

namespace gna {

struct AttentionParams {
  int rank = 1;
  int window[kMaxRank] = {2, 2, 2};
  int stride[kMaxRank] = {1, 1, 1};
  int dilation[kMaxRank] = {1, 1, 1};
  bool causal[kMaxRank] = {false, false, false};
  float scale = 0.f;  // 0: 1/sqrt(head dim)
};

struct AttentionTensors {
  TensorRef q, k, v;
  const TensorRef* additional_k = nullptr;
  const TensorRef* additional_v = nullptr;
};

// Checks ranks, shapes, dtypes, devices and last-dim contiguity of the tensors (naming the
// tensor, the dimension and the value), then builds and validates the Problem.
Problem make_problem(const AttentionParams& params, const AttentionTensors& t);

// Checks that `tensor` has exactly `shape` (rank and sizes), dtype and device of `like`, and a
// contiguous last dimension. `name` appears in the message.
void check_tensor(const char* name, const TensorRef& tensor, const int64_t* shape, int rank,
                  DType dtype, int device);

// Expected shapes of outputs and gradients for a problem.
int output_shape(const Problem& p, int64_t* shape);  // O: returns rank
int lse_shape(const Problem& p, int64_t* shape);     // LSE
int token_tensor_shape(const Problem& p, int heads, int dim, int64_t* shape);

}  // namespace gna
