// The CPU reference as the host backend: float32/float64 host tensors, any valid problem (per-head
// rules included), and the FP8 forward's emulation (float32/float64 output) with the host
// quantizer.
#include "backend/backend.hpp"
#include "backend/fp8_quantizer.hpp"
#include "backend/registration.hpp"
#include "gna/reference/reference.hpp"
#include "reference/fp8.hpp"

namespace gna {
namespace {

bool host_float(DType t, std::string* why) {
  return dtype_one_of(t, {DType::f32, DType::f64}, "reference: host tensors", why);
}

Backend make_reference_backend() {
  Backend b = backend_from(
      "reference", 0, false,
      [](const ForwardCall& c, std::string* why) { return host_float(c.problem.dtype, why); },
      [](const ForwardCall& c) {
        TensorRef out = c.out;
        if (c.fp8)
          reference::forward_fp8(c.problem, *c.fp8, out, c.lse);
        else
          reference::forward(c.problem, c.in, out, c.lse);
      },
      [](const BackwardCall& c, std::string* why) { return host_float(c.problem.dtype, why); },
      [](const BackwardCall& c) {
        reference::Gradients g{c.dq, c.dk, c.dv, c.d_additional_k, c.d_additional_v};
        reference::backward(c.problem, c.in, c.out, c.lse, c.d_out, g);
      });
  b.head_rules = true;  // every pass reads the rule of each query head (axes_of_head)
  b.slabs = true;      // the rule at global coordinates (slab_axis), offsets per axis
  b.fp8 = true;        // the FP8 forward's emulation, output in float32/float64
  b.additional_counts = true;  // attended_additional_keys per batch item (token_access.hpp)
  return b;
}

Fp8Quantizer make_host_quantizer() {
  Fp8Quantizer q;
  q.name = "reference";
  q.quantize = [](const Problem& p, const AttentionTensors& in, void*) {
    return reference::quantize_fp8(p, in);
  };
  return q;
}

GNA_REGISTER_BACKEND(make_reference_backend);
GNA_REGISTER_FP8_QUANTIZER(make_host_quantizer);

}  // namespace
}  // namespace gna
