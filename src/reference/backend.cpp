// The CPU reference as the host backend: float32/float64 host tensors, any valid problem.
#include "backend/backend.hpp"
#include "gna/reference/reference.hpp"

namespace gna {
namespace {

bool host_float(DType t, std::string* why) {
  if (t == DType::f32 || t == DType::f64) return true;
  *why = std::string("reference: host tensors must be float32 or float64, got ") + dtype_name(t);
  return false;
}

Backend make_reference_backend() {
  Backend b;
  b.name = "reference";
  b.priority = 0;
  b.device = false;
  b.supports_forward = [](const ForwardCall& c, std::string* why) {
    return host_float(c.problem.dtype, why);
  };
  b.forward = [](const ForwardCall& c) {
    TensorRef out = c.out;
    reference::forward(c.problem, c.in, out, c.lse);
  };
  b.supports_backward = [](const BackwardCall& c, std::string* why) {
    return host_float(c.problem.dtype, why);
  };
  b.backward = [](const BackwardCall& c) {
    reference::Gradients g{c.dq, c.dk, c.dv, c.d_additional_k, c.d_additional_v};
    reference::backward(c.problem, c.in, c.out, c.lse, c.d_out, g);
  };
  return b;
}

GNA_REGISTER_BACKEND(make_reference_backend);

}  // namespace
}  // namespace gna
