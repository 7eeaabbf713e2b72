// The unfused operators' CUDA kernels as their device backend: float32/float16/bfloat16 CUDA
// tensors.
#include "backend/unfused_backend.hpp"
#include "kernels/common/scratch.hpp"
#include "kernels/unfused/unfused.hpp"

namespace gna::unfused {
namespace {

UnfusedBackend make_backend() {
  UnfusedBackend b;
  b.name = "cuda";
  b.device = true;
  b.supports = [](DType t, std::string* why) {
    if (t == DType::f32 || t == DType::f16 || t == DType::bf16) return true;
    *why = std::string("dtype must be float32, float16 or bfloat16, got ") + dtype_name(t);
    return false;
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
