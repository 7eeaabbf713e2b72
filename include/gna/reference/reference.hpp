// The CPU reference: plain, obviously correct loops over the attended keys of each query (and,
// for dK/dV, over the queries attending each key, by the inverse rule). The oracle of every test.
// Host tensors in float32 or float64 (all of one dtype; LSE float32 or float64).
#pragma once

#include "gna/attention_params.hpp"

namespace gna::reference {

struct Options {
  bool fp64_accumulate = true;  // fp32 accumulation when false
  int threads = 0;              // 0: hardware concurrency
};

// out [B, spatial.., Hq, Dv]; lse [B, spatial.., Hq] (natural log of the softmax denominator,
// scale included) or null.
void forward(const Problem& p, const AttentionTensors& in, TensorRef& out, TensorRef* lse,
             const Options& opt = {});

struct Gradients {
  TensorRef dq, dk, dv;
  TensorRef* d_additional_k = nullptr;
  TensorRef* d_additional_v = nullptr;
};

// Given the forward's out and lse and the incoming gradient d_out, writes dq, dk, dv (and the
// additional keys'/values' gradients when additional KV is present).
void backward(const Problem& p, const AttentionTensors& in, const TensorRef& out,
              const TensorRef& lse, const TensorRef& d_out, Gradients& grads,
              const Options& opt = {});

}  // namespace gna::reference
