// The CPU reference as the host backend: float32/float64 host tensors, any valid problem (per-head
// rules included).
#include "backend/backend.hpp"
#include "backend/registration.hpp"
#include "gna/reference/reference.hpp"

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
        reference::forward(c.problem, c.in, out, c.lse);
      },
      [](const BackwardCall& c, std::string* why) { return host_float(c.problem.dtype, why); },
      [](const BackwardCall& c) {
        reference::Gradients g{c.dq, c.dk, c.dv, c.d_additional_k, c.d_additional_v};
        reference::backward(c.problem, c.in, c.out, c.lse, c.d_out, g);
      });
  b.head_rules = true;  // every pass reads the rule of each query head (axes_of_head)
  return b;
}

GNA_REGISTER_BACKEND(make_reference_backend);

}  // namespace
}  // namespace gna
