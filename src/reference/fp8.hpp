// The CPU reference of the FP8 forward (docs/fp8.md): the scheme's quantization of host
// activations, and its forward emulated on the quantized operands, as the kernels compute it but
// with each row's global score maximum in place of their running maximum.
#pragma once

#include <vector>

#include "backend/fp8_quantizer.hpp"
#include "gna/reference/reference.hpp"

namespace gna::reference {

// Quantizes host float32/float64 q, k, v (and the additional keys and values) of a validated
// problem. k_mean (if given) receives the key mean, [B, Hk, D].
Fp8Quantized quantize_fp8(const Problem& p, const AttentionTensors& in,
                          std::vector<float>* k_mean = nullptr);

// out [B, spatial.., Hq, Dv] float32 or float64, lse [B, spatial.., Hq] float32 or null.
void forward_fp8(const Problem& p, const Fp8Operands& in, TensorRef& out, TensorRef* lse,
                 const Options& opt = {});

}  // namespace gna::reference
