// What dispatch checks of an FP8 forward's inputs: the scales that come with float8_e4m3fn
// tensors, and the dtypes the FP8 forward takes and writes.
#pragma once

#include "backend/backend.hpp"

namespace gna {

// The scales of `in` are given only with float8_e4m3fn inputs (p.dtype), and then all of them.
void check_scales_presence(const Problem& p, const AttentionTensors& in);

// The operands of float8_e4m3fn inputs and their scales (shapes, dtypes and devices checked;
// on the host also their values: finite and > 0). No LSE bias: the caller's quantization is
// not known.
Fp8Operands given_fp8_operands(const Problem& p, const AttentionTensors& in);

// Inputs the FP8 forward quantizes: float16 / bfloat16 / float32, float64 on the host.
void check_quantizable(const Problem& p, bool device);

// The output of an FP8 forward: float16 / bfloat16 / float32 on CUDA, float32 / float64 on the
// host (the reference's emulation).
void check_fp8_output(const TensorRef& out, bool device);

}  // namespace gna
