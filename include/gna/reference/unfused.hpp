// The CPU reference of the unfused neighborhood operators (docs/rule.md section 6), heads-first
// tensors as in gna/neighborhood_params.hpp, host float32 or float64 (all of one dtype), fp64
// accumulation. No softmax scale: the caller scales the query.
//   na_qk (PN): attn[b,h,i,slot] = q[b,h,i] . k[b,h,key(i,slot)] (+ rpb[h, K-1 + key'-query'])
//               slots without a key (causal windows near the start): -inf
//   na_av (NN): out[b,h,i] = sum over slots with a key of attn[b,h,i,slot] * v[b,h,key(i,slot)]
// The backward passes are these two and the inverse-neighborhood operator (IN), which sums over
// the queries attending a key (by the core's inverse rule, no scatter).
#pragma once

#include "gna/neighborhood_params.hpp"
#include "gna/reference/reference.hpp"

namespace gna::reference {

// p: from make_neighborhood_problem. rpb may be null.
void na_qk(const Problem& p, const TensorRef& q, const TensorRef& k, const TensorRef* rpb,
           const TensorRef& attn, const Options& opt = {});
void na_av(const Problem& p, const TensorRef& attn, const TensorRef& v, const TensorRef& out,
           const Options& opt = {});

// Every output optional (null: not computed).
//   dq = NN(d_attn, k), dk = IN(d_attn, q), d_rpb[h, e] = sum of d_attn over (b, query, slot)
//   whose bias entry is e.
void na_qk_backward(const Problem& p, const TensorRef& q, const TensorRef& k,
                    const TensorRef& d_attn, const TensorRef* dq, const TensorRef* dk,
                    const TensorRef* d_rpb, const Options& opt = {});
//   d_attn = PN(d_out, v) (0 in slots without a key), dv = IN(attn, d_out).
void na_av_backward(const Problem& p, const TensorRef& attn, const TensorRef& v,
                    const TensorRef& d_out, const TensorRef* d_attn, const TensorRef* dv,
                    const Options& opt = {});

}  // namespace gna::reference
