#include "gna/neighborhood_params.hpp"

#include "gna/core/error.hpp"
#include "gna/core/neighborhood.hpp"

namespace gna {

Problem make_neighborhood_problem(const AttentionParams& params, const TensorRef& tokens,
                                  const char* name) {
  if (params.rank < 1 || params.rank > kMaxRank)
    fail_invalid("rank must be 1, 2 or 3, got ", params.rank);
  const int r = params.rank;
  if (!params.head_groups.empty())
    fail_invalid("head rules: the unfused operators take one rule for every head, got ",
                 params.head_groups.size(), " head groups");
  if (tokens.rank != r + 3)
    fail_invalid(name, ": expected ", r + 3, " dims [batch, heads, ", r, " spatial dims, dim], got ",
                 tokens.rank, " dims");
  for (int a = 0; a < r; ++a)
    if (params.stride[a] != 1)
      fail_invalid("axis ", a, ": stride must be 1 for the unfused operators, got ",
                   params.stride[a]);
  check_layout(name, tokens);
  Problem p;
  p.rank = r;
  p.batch = checked_size(name, tokens, 0, "batch");
  p.heads_q = p.heads_kv = checked_size(name, tokens, 1, "heads");
  for (int a = 0; a < r; ++a) {
    p.axes[a].extent = checked_size(name, tokens, 2 + a, "extent");
    p.axes[a].window = params.window[a];
    p.axes[a].stride = 1;
    p.axes[a].dilation = params.dilation[a];
    p.axes[a].causal = params.causal[a];
  }
  p.dim_qk = p.dim_v = checked_size(name, tokens, r + 2, "head dim");
  p.dtype = tokens.dtype;
  validate(p);  // the rule's checks: window, dilation, window*dilation <= extent, ...
  return p;
}

int neighborhood_tokens_shape(const Problem& p, int dim, int64_t* shape) {
  shape[0] = p.batch;
  shape[1] = p.heads_q;
  for (int a = 0; a < p.rank; ++a) shape[2 + a] = p.axes[a].extent;
  shape[2 + p.rank] = dim;
  return p.rank + 3;
}

int neighborhood_weights_shape(const Problem& p, int64_t* shape) {
  return neighborhood_tokens_shape(p, window_slots(p.axes, p.rank), shape);
}

int neighborhood_rpb_shape(const Problem& p, int64_t* shape) {
  shape[0] = p.heads_q;
  for (int a = 0; a < p.rank; ++a) shape[1 + a] = rpb_extent(p.axes[a]);
  return p.rank + 1;
}

void check_neighborhood_tokens(const char* name, const TensorRef& t, const Problem& p, int dim,
                               int device) {
  int64_t shape[kMaxTensorRank];
  const int n = neighborhood_tokens_shape(p, dim, shape);
  check_tensor(name, t, shape, n, p.dtype, device);
}

void check_neighborhood_weights(const char* name, const TensorRef& t, const Problem& p,
                                int device) {
  int64_t shape[kMaxTensorRank];
  const int n = neighborhood_weights_shape(p, shape);
  if (t.rank == n && t.shape[n - 1] != shape[n - 1])
    fail_invalid(name, ": last dim must be prod(kernel_size)=", shape[n - 1], ", got ",
                 t.shape[n - 1]);
  check_tensor(name, t, shape, n, p.dtype, device);
}

void check_neighborhood_rpb(const char* name, const TensorRef& t, const Problem& p, int device) {
  int64_t shape[kMaxTensorRank];
  const int n = neighborhood_rpb_shape(p, shape);
  check_tensor(name, t, shape, n, p.dtype, device);
}

}  // namespace gna
