// The CPU reference of the unfused operators as their host backend: float32/float64 host tensors.
#include "backend/registration.hpp"
#include "backend/unfused_backend.hpp"
#include "gna/reference/unfused.hpp"

namespace gna {
namespace {

UnfusedBackend make_unfused_reference_backend() {
  UnfusedBackend b = unfused_backend_from("reference", false, {DType::f32, DType::f64});
  b.na_qk = [](const Problem& p, const TensorRef& q, const TensorRef& k, const TensorRef* rpb,
               const TensorRef& attn, void*) { reference::na_qk(p, q, k, rpb, attn); };
  b.na_av = [](const Problem& p, const TensorRef& attn, const TensorRef& v, const TensorRef& out,
               void*) { reference::na_av(p, attn, v, out); };
  b.na_qk_backward = [](const Problem& p, const TensorRef& q, const TensorRef& k,
                        const TensorRef& d_attn, const TensorRef* dq, const TensorRef* dk,
                        const TensorRef* d_rpb, void*) {
    reference::na_qk_backward(p, q, k, d_attn, dq, dk, d_rpb);
  };
  b.na_av_backward = [](const Problem& p, const TensorRef& attn, const TensorRef& v,
                        const TensorRef& d_out, const TensorRef* d_attn, const TensorRef* dv,
                        void*) { reference::na_av_backward(p, attn, v, d_out, d_attn, dv); };
  return b;
}

GNA_REGISTER_UNFUSED_BACKEND(make_unfused_reference_backend);

}  // namespace
}  // namespace gna
