// The FP8 scheme's quantization of CUDA tensors (docs/fp8.md), registered as the device
// quantizer: K's per-channel mean, then K per token and head; Q per token and head with the LSE
// bias; V's per-channel amax, then V. One pass over each tensor (two over K and V: the mean or
// the amax first), no full-size fp32 intermediate. Operands live in the scratch pool.
#pragma once

#include "backend/fp8_quantizer.hpp"

namespace gna::cuda {

// f16 / bf16 / f32 device tensors of a validated problem, on `stream` (cudaStream_t).
Fp8Quantized quantize_fp8(const Problem& p, const AttentionTensors& in, void* stream);

}  // namespace gna::cuda
