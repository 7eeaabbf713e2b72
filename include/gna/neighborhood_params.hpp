// The tensors of the unfused neighborhood operators (PN, NN, IN; docs/rule.md section 6) and how
// their shapes become a validated Problem. Tensors are heads-first, NATTEN's legacy layout:
//   tokens  [B, heads, X, (Y, (Z)), D]         (query, key, value, outputs, their gradients)
//   weights [B, heads, X, (Y, (Z)), prod(K)]   (attention weights, one per window slot)
//   rpb     [heads, 2K0-1, (2K1-1, (2K2-1))]   (relative positional bias)
// Any strides with a contiguous last dimension. The rule's stride must be 1 on every axis.
#pragma once

#include "gna/attention_params.hpp"

namespace gna {

// Problem of an unfused call: batch, heads and extents from `tokens` (a heads-first token
// tensor named `name` in messages), dim_qk = dim_v = its last dimension, heads_q = heads_kv.
// Checks the rule (docs/rule.md section 2) and that every axis has stride 1.
Problem make_neighborhood_problem(const AttentionParams& params, const TensorRef& tokens,
                                  const char* name);

// Expected shapes (return the rank).
int neighborhood_tokens_shape(const Problem& p, int dim, int64_t* shape);
int neighborhood_weights_shape(const Problem& p, int64_t* shape);
int neighborhood_rpb_shape(const Problem& p, int64_t* shape);

// Check a tensor of the call (shape, dtype, device, contiguous last dimension), naming it and
// the offending value: tokens with head dim `dim`, weights with prod(K) slots, the bias.
void check_neighborhood_tokens(const char* name, const TensorRef& t, const Problem& p, int dim,
                               int device);
void check_neighborhood_weights(const char* name, const TensorRef& t, const Problem& p,
                                int device);
void check_neighborhood_rpb(const char* name, const TensorRef& t, const Problem& p, int device);

// Element offset of (b, h, x[0..rank)) in a heads-first tensor (tokens or weights).
inline int64_t heads_first_offset(const TensorRef& t, int rank, int64_t b, int64_t h,
                                  const int* x) {
  int64_t off = b * t.strides[0] + h * t.strides[1];
  for (int a = 0; a < rank; ++a) off += x[a] * t.strides[2 + a];
  return off;
}

}  // namespace gna
