// Registration of the Hopper (sm_90a) backend: the forward kernel (forward_launch) and, when it
// supports the call, the backward kernel.
#include <string>

#include "backend/registration.hpp"
#include "kernels/common/scratch.hpp"
#include "kernels/hopper/backward_launch.hpp"
#include "kernels/hopper/forward_launch.hpp"

namespace gna::hopper {
namespace {

Backend make_hopper_backend() {
  Backend b = backend_from(
      "hopper", 100, true,
      [](const ForwardCall& c, std::string* why) { return supports(c, why); },
      [](const ForwardCall& c) { forward(c); },
      [](const BackwardCall& c, std::string* why) { return supports_backward(c, why); },
      [](const BackwardCall& c) { backward(c); });
  b.release_memory = cuda::scratch_release;  // the backward's scratch
  b.head_rules = true;  // forward and backward run per-head rules (head_rules.hpp)
  b.fp8 = true;         // the forward's e4m3 kernels (head dims 64, 128)
  b.additional_counts = true;  // read per batch on the device (additional_counts.hpp)
  b.slabs = true;       // the rule at global coordinates, the tensors' rows per axis (tensor_rows.hpp)
  return b;
}

}  // namespace

GNA_REGISTER_BACKEND(make_hopper_backend);

}  // namespace gna::hopper
