// Registers the GPU reference as backend "gpu_reference" (priority 10, device tensors; the FP8
// forward too).
#include "kernels/gpu_reference/gpu_reference.hpp"

#include <sstream>

#include "backend/registration.hpp"
#include "kernels/common/device_limits.hpp"

namespace gna::gpu_reference {

bool supports(const Problem& p, const TensorRef& q, std::string* why) {
  auto refuse = [&](const std::string& reason) {
    if (why) *why = "gpu_reference: " + reason;
    return false;
  };
  if (q.on_host()) return refuse("tensors are in host memory (needs CUDA device tensors)");
  if (!cuda::device_runs(q.device, KernelFamily::sm80, "gpu_reference", why)) return false;
  if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
    return refuse(std::string("dtype ") + dtype_name(p.dtype) + " not supported (f32, f16, bf16)");
  if (p.dim_qk > kMaxHeadDim || p.dim_v > kMaxHeadDim) {
    std::ostringstream os;
    os << "head dim " << (p.dim_qk > kMaxHeadDim ? p.dim_qk : p.dim_v)
       << " not supported (at most " << kMaxHeadDim << ")";
    return refuse(os.str());
  }
  return true;
}

namespace {

Backend make_backend() {
  Backend b = backend_from(
      "gpu_reference", 10, true,
      [](const ForwardCall& c, std::string* why) {
        return supports(c.problem, c.fp8 ? c.fp8->q8 : c.in.q, why);
      },
      [](const ForwardCall& c) { c.fp8 ? forward_fp8(c) : forward(c); },
      [](const BackwardCall& c, std::string* why) {
        // Gradient buffers are checked by dispatch before any backend runs; support must not
        // depend on them, so that backend selection (which has none) answers like the real call.
        return supports(c.problem, c.in.q, why);
      },
      backward);
  b.head_rules = true;  // every kernel takes each query head's rules (axes_of_head)
  b.fp8 = true;         // the FP8 forward of any GPU, until a faster one takes the call
  return b;
}

}  // namespace

GNA_REGISTER_BACKEND(make_backend);

}  // namespace gna::gpu_reference
