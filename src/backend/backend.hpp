// The interface between dispatch (src/api) and the backends (the CPU reference in src/reference,
// the CUDA kernels in src/kernels). A backend registers itself once at static-initialisation
// time (see GNA_REGISTER_BACKEND); dispatch asks each, in priority order, whether it supports a
// call.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gna/attention_params.hpp"
#include "gna/core/tiling.hpp"
#include "gna/kernel_options.hpp"

namespace gna {

struct ForwardCall {
  Problem problem;            // validated
  AttentionTensors in;
  TensorRef out;              // [B, spatial.., Hq, Dv], dtype of the inputs
  TensorRef* lse = nullptr;   // [B, spatial.., Hq] float32, optional
  void* stream = nullptr;     // cudaStream_t for device tensors
  KernelOptions options;
};

struct BackwardCall {
  Problem problem;
  AttentionTensors in;
  TensorRef out, lse, d_out;  // forward output, its LSE (float32) and the incoming gradient
  TensorRef dq, dk, dv;
  TensorRef* d_additional_k = nullptr;
  TensorRef* d_additional_v = nullptr;
  void* stream = nullptr;
  KernelOptions options;
};

struct Backend {
  std::string name;
  int priority = 0;          // higher is tried first
  bool device = false;       // runs on CUDA tensors (false: host tensors)
  bool head_rules = false;   // runs problems with per-head rules (Problem::head_rules)
  // Return true when the call can run; otherwise write the reason (which parameter, which limit).
  std::function<bool(const ForwardCall&, std::string* why)> supports_forward;
  std::function<void(const ForwardCall&)> forward;
  std::function<bool(const BackwardCall&, std::string* why)> supports_backward;
  std::function<void(const BackwardCall&)> backward;
  // Optional: automatic dispatch (no backend named) passes over this backend when it returns
  // false (it supports the call but a lower-priority one is expected to run it faster); a
  // caller that names the backend still gets it.
  std::function<bool(const Problem&, std::string* why)> preferred;
  // Optional: gives back the memory the backend keeps between calls
  // (gna::release_cached_memory). A plain function, so that backends sharing one pool name the
  // same one and a release runs it once.
  void (*release_memory)() = nullptr;
};

void register_backend(const Backend& backend);
const std::vector<Backend>& registered_backends();

struct BackendRegistrar {
  explicit BackendRegistrar(const Backend& b) { register_backend(b); }
};

#define GNA_REGISTER_BACKEND_CAT2(a, b) a##b
#define GNA_REGISTER_BACKEND_CAT(a, b) GNA_REGISTER_BACKEND_CAT2(a, b)
#define GNA_REGISTER_BACKEND(make_backend) \
  static ::gna::BackendRegistrar GNA_REGISTER_BACKEND_CAT(gna_backend_registrar_, __LINE__)(make_backend())

}  // namespace gna
