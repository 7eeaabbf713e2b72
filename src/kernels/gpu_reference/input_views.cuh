// What the reference forward and backward take of a call's inputs alike: the problem, its
// effective scale, and Q, K, V (and the additional keys and values, where present) as token
// tensors.
#pragma once

#include "gna/attention_params.hpp"
#include "gna/core/problem.hpp"
#include "kernels/common/token_tensor.cuh"

namespace gna::gpu_reference {

// Args<T> holds p, scale, q, k, v, add_k and add_v (the kernels' argument structs).
template <template <typename> class Args, typename T>
void set_input_views(Args<T>& args, const Problem& p, const AttentionTensors& in) {
  args.p = p;
  args.scale = effective_scale(p);
  args.q = cuda::token_tensor<const T>(in.q, p.rank);
  args.k = cuda::token_tensor<const T>(in.k, p.rank);
  args.v = cuda::token_tensor<const T>(in.v, p.rank);
  if (p.additional_kv > 0) {
    args.add_k = cuda::token_tensor<const T>(*in.additional_k, 1);
    args.add_v = cuda::token_tensor<const T>(*in.additional_v, 1);
  }
}

}  // namespace gna::gpu_reference
