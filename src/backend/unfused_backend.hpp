// The interface between the unfused operators (gna::na_qk / na_av and their backward passes,
// src/api) and what runs them: the CPU reference on host tensors (src/reference), the CUDA
// kernels on device tensors (src/kernels/unfused). One backend per kind of memory registers
// itself at static-initialisation time (GNA_REGISTER_UNFUSED_BACKEND). Callers validate the
// problem and tensors first (gna/neighborhood_params.hpp); streams are void* (cudaStream_t) and
// host backends ignore them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "gna/neighborhood_params.hpp"

namespace gna {

struct UnfusedBackend {
  std::string name;
  bool device = false;  // runs on CUDA tensors (false: host tensors)
  // Return true when the dtype can run on the device (-1: host); otherwise write why (which
  // dtypes the backend takes, which devices).
  std::function<bool(DType, int device, std::string* why)> supports;
  std::function<void(const Problem&, const TensorRef& q, const TensorRef& k, const TensorRef* rpb,
                     const TensorRef& attn, void* stream)>
      na_qk;
  std::function<void(const Problem&, const TensorRef& attn, const TensorRef& v,
                     const TensorRef& out, void* stream)>
      na_av;
  // Every output optional (null: not computed).
  std::function<void(const Problem&, const TensorRef& q, const TensorRef& k,
                     const TensorRef& d_attn, const TensorRef* dq, const TensorRef* dk,
                     const TensorRef* d_rpb, void* stream)>
      na_qk_backward;
  std::function<void(const Problem&, const TensorRef& attn, const TensorRef& v,
                     const TensorRef& d_out, const TensorRef* d_attn, const TensorRef* dv,
                     void* stream)>
      na_av_backward;
  // Optional, as Backend::release_memory.
  void (*release_memory)() = nullptr;
};

void register_unfused_backend(const UnfusedBackend& backend);
const std::vector<UnfusedBackend>& registered_unfused_backends();

struct UnfusedBackendRegistrar {
  explicit UnfusedBackendRegistrar(const UnfusedBackend& b) { register_unfused_backend(b); }
};

#define GNA_REGISTER_UNFUSED_BACKEND(make_backend)                                         \
  static ::gna::UnfusedBackendRegistrar GNA_REGISTER_BACKEND_CAT(                          \
      gna_unfused_backend_registrar_, __LINE__)(make_backend())

}  // namespace gna
