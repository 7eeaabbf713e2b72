// The unfused neighborhood operators on CUDA tensors (float32/float16/bfloat16, fp32
// accumulation), the device side of gna::na_qk / na_av and their backward passes. Callers
// validate the problem and tensors first (gna/neighborhood_params.hpp). Streams are void*
// (cudaStream_t) so that host-only layers can include this. Every pass is deterministic: the
// inverse-neighborhood operator gathers over the queries of each key (inverse rule) and the
// bias gradient reduces per-chunk partial sums in a fixed order (no atomics).
#pragma once

#include "gna/neighborhood_params.hpp"

namespace gna::unfused {

void na_qk(const Problem& p, const TensorRef& q, const TensorRef& k, const TensorRef* rpb,
           const TensorRef& attn, void* stream);
void na_av(const Problem& p, const TensorRef& attn, const TensorRef& v, const TensorRef& out,
           void* stream);
void na_qk_backward(const Problem& p, const TensorRef& q, const TensorRef& k,
                    const TensorRef& d_attn, const TensorRef* dq, const TensorRef* dk,
                    const TensorRef* d_rpb, void* stream);
void na_av_backward(const Problem& p, const TensorRef& attn, const TensorRef& v,
                    const TensorRef& d_out, const TensorRef* d_attn, const TensorRef* dv,
                    void* stream);

}  // namespace gna::unfused
