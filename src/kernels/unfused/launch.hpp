// The four kernels of the unfused operators, each over every dtype (f32/f16/bf16) and rank;
// gna::unfused's entry points (ops.cpp) compose them. Tensors validated by the caller.
#pragma once

#include "gna/neighborhood_params.hpp"

namespace gna::unfused {

// PN: out[i, slot] = a_i . b_key(i,slot) (+ rpb); `empty` in slots without a key.
void launch_pn(const Problem& p, const TensorRef& a, const TensorRef& b, const TensorRef* rpb,
               const TensorRef& out, float empty, void* stream);
// NN: out_i = sum over slots with a key of w[i, slot] * x_key(i,slot).
void launch_nn(const Problem& p, const TensorRef& w, const TensorRef& x, const TensorRef& out,
               void* stream);
// IN: out_j = sum over the queries i attending key j of w[i, slot(i, j)] * x_i.
void launch_in(const Problem& p, const TensorRef& w, const TensorRef& x, const TensorRef& out,
               void* stream);
// d_rpb[h, e] = sum over (b, query, slot with a key) of bias entry e of d_attn.
void launch_rpb_grad(const Problem& p, const TensorRef& d_attn, const TensorRef& d_rpb,
                     void* stream);

}  // namespace gna::unfused
