// Quantization of a call's activations into the FP8 forward's operands (the scheme of
// docs/fp8.md), registered per memory kind like the backends: the CPU reference quantizes host
// tensors, kernels/common device tensors. Dispatch quantizes, then runs an FP8 backend.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "backend/backend.hpp"

namespace gna {

// Operands and the memory that holds them (device memory is given back, ordered on the call's
// stream, when the last copy goes, so a forward enqueued before that still reads it).
struct Fp8Quantized {
  Fp8Operands operands;
  std::shared_ptr<void> storage;
};

struct Fp8Quantizer {
  std::string name;
  bool device = false;  // quantizes CUDA tensors (false: host tensors)
  // Validated problem; in: its f16 / bf16 / f32 (f64 on the host) tensors.
  std::function<Fp8Quantized(const Problem&, const AttentionTensors&, void* stream)> quantize;
};

void register_fp8_quantizer(const Fp8Quantizer& quantizer);
// The quantizer of host (device false) or CUDA tensors; null when none is built in.
const Fp8Quantizer* fp8_quantizer(bool device);

// Views of contiguous operands for `p` laid out in one block of memory from `base` (null: the
// layout alone, its byte count from fp8_operands_bytes), each view 16-byte aligned.
Fp8Operands fp8_operand_views(const Problem& p, void* base, int device);
size_t fp8_operands_bytes(const Problem& p);

}  // namespace gna

#define GNA_REGISTER_FP8_QUANTIZER(make_quantizer)                                          \
  static const bool GNA_REGISTER_BACKEND_CAT(gna_fp8_quantizer_, __LINE__) =                \
      (::gna::register_fp8_quantizer(make_quantizer()), true)
