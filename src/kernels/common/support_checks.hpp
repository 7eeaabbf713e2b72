// Host-side support checks shared by the mma.sync backends (halo, portable): each refusal is
// written to `why` as "<backend>: <reason>", naming the parameter and the limit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <sstream>
#include <string>

#include "gna/core/problem.hpp"
#include "gna/tensor.hpp"
#include "kernels/common/device_limits.hpp"

namespace gna::cuda {

template <typename... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

inline bool refuse(std::string* why, const char* backend, const std::string& reason) {
  if (why) *why = std::string(backend) + ": " + reason;
  return false;
}

// CUDA tensors of f16/bf16 on an sm_80+ device.
inline bool half_tensors_supported(const Problem& p, const TensorRef& q, const char* backend,
                                   std::string* why) {
  if (q.on_host())
    return refuse(why, backend, "tensors are in host memory (needs CUDA device tensors)");
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    return refuse(why, backend, str("dtype ", dtype_name(p.dtype), " not supported (f16, bf16)"));
  return true;
}

// An sm_80+ device for which the library has code (device_limits.hpp).
inline bool sm80_supported(int device, const char* backend, std::string* why) {
  return device_runs(device, KernelFamily::sm80, backend, why);
}

// 16-byte rows: the base address and every stride but the last are multiples of 8 elements.
inline bool aligned_rows(const TensorRef& t, const char* name, const char* backend,
                         std::string* why) {
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
    return refuse(why, backend, str(name, ": data pointer must be 16-byte aligned"));
  for (int i = 0; i + 1 < t.rank; ++i)
    if (t.strides[i] % 8 != 0 && t.shape[i] > 1)
      return refuse(why, backend, str(name, ": stride of dim ", i, " is ", t.strides[i],
                                      " (must be a multiple of 8 elements)"));
  return true;
}

}  // namespace gna::cuda
