// The unfused operators' CUDA kernels as their device backend: float32/float16/bfloat16 CUDA
// tensors.
#include "backend/registration.hpp"
#include "backend/unfused_backend.hpp"
#include "kernels/common/device_limits.hpp"
#include "kernels/common/scratch.hpp"
#include "kernels/unfused/unfused.hpp"

namespace gna::unfused {
namespace {

UnfusedBackend make_backend() {
  UnfusedBackend b = unfused_backend_from("cuda", true, {DType::f32, DType::f16, DType::bf16});
  b.supports = [dtypes = b.supports](DType t, int device, std::string* why) {
    return dtypes(t, device, why) && cuda::device_runs(device, KernelFamily::sm80, "cuda", why);
  };
  b.na_qk = na_qk;
  b.na_av = na_av;
  b.na_qk_backward = na_qk_backward;
  b.na_av_backward = na_av_backward;
  b.release_memory = cuda::scratch_release;  // the bias gradient's partial sums
  return b;
}

}  // namespace

GNA_REGISTER_UNFUSED_BACKEND(make_backend);

}  // namespace gna::unfused
