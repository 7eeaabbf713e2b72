// gna::na_qk / na_av and their backward passes: validate once, then run the CPU reference on
// host tensors or the CUDA kernels on device tensors.
#include "gna/core/error.hpp"
#include "gna/gna.hpp"
#include "gna/reference/unfused.hpp"

#if GNA_HAVE_CUDA
#include "kernels/unfused/unfused.hpp"
#endif

namespace gna {
namespace {

// Host tensors: the reference takes float32/float64; device tensors: the kernels take
// float32/float16/bfloat16 and need a library built with CUDA.
void check_supported(const Problem& p, int device) {
  if (device < 0) {
    if (p.dtype != DType::f32 && p.dtype != DType::f64)
      fail(ErrorKind::unsupported, "unfused operators on host tensors: dtype must be float32 or "
           "float64, got ", dtype_name(p.dtype));
    return;
  }
#if GNA_HAVE_CUDA
  if (p.dtype == DType::f64)
    fail(ErrorKind::unsupported, "unfused operators on CUDA tensors: dtype must be float32, "
         "float16 or bfloat16, got ", dtype_name(p.dtype));
#else
  fail(ErrorKind::unsupported, "unfused operators on CUDA tensors (device ", device,
       "): this library was built without CUDA kernels");
#endif
}

Problem make_checked_problem(const AttentionParams& params, const TensorRef& tokens,
                             const char* name) {
  const Problem p = make_neighborhood_problem(params, tokens, name);
  check_neighborhood_tokens(name, tokens, p, p.dim_qk, tokens.device);
  check_supported(p, tokens.device);
  return p;
}

}  // namespace

void na_qk(const AttentionParams& params, const TensorRef& q, const TensorRef& k,
           const TensorRef* rpb, const TensorRef& attn, const CallOptions& options) {
  const Problem p = make_checked_problem(params, q, "query");
  const int dev = q.device;
  check_neighborhood_tokens("key", k, p, p.dim_qk, dev);
  if (rpb) check_neighborhood_rpb("rpb", *rpb, p, dev);
  check_neighborhood_weights("attn", attn, p, dev);
  if (dev < 0) return reference::na_qk(p, q, k, rpb, attn);
#if GNA_HAVE_CUDA
  unfused::na_qk(p, q, k, rpb, attn, options.stream);
#else
  (void)options;
#endif
}

void na_av(const AttentionParams& params, const TensorRef& attn, const TensorRef& v,
           const TensorRef& out, const CallOptions& options) {
  const Problem p = make_checked_problem(params, v, "value");
  const int dev = v.device;
  check_neighborhood_weights("attn", attn, p, dev);
  check_neighborhood_tokens("out", out, p, p.dim_v, dev);
  if (dev < 0) return reference::na_av(p, attn, v, out);
#if GNA_HAVE_CUDA
  unfused::na_av(p, attn, v, out, options.stream);
#else
  (void)options;
#endif
}

void na_qk_backward(const AttentionParams& params, const TensorRef& q, const TensorRef& k,
                    const TensorRef& d_attn, const TensorRef* dq, const TensorRef* dk,
                    const TensorRef* d_rpb, const CallOptions& options) {
  const Problem p = make_checked_problem(params, q, "query");
  const int dev = q.device;
  check_neighborhood_tokens("key", k, p, p.dim_qk, dev);
  check_neighborhood_weights("d_attn", d_attn, p, dev);
  if (dq) check_neighborhood_tokens("dq", *dq, p, p.dim_qk, dev);
  if (dk) check_neighborhood_tokens("dk", *dk, p, p.dim_qk, dev);
  if (d_rpb) check_neighborhood_rpb("d_rpb", *d_rpb, p, dev);
  if (dev < 0) return reference::na_qk_backward(p, q, k, d_attn, dq, dk, d_rpb);
#if GNA_HAVE_CUDA
  unfused::na_qk_backward(p, q, k, d_attn, dq, dk, d_rpb, options.stream);
#else
  (void)options;
#endif
}

void na_av_backward(const AttentionParams& params, const TensorRef& attn, const TensorRef& v,
                    const TensorRef& d_out, const TensorRef* d_attn, const TensorRef* dv,
                    const CallOptions& options) {
  const Problem p = make_checked_problem(params, v, "value");
  const int dev = v.device;
  check_neighborhood_weights("attn", attn, p, dev);
  check_neighborhood_tokens("d_out", d_out, p, p.dim_v, dev);
  if (d_attn) check_neighborhood_weights("d_attn", *d_attn, p, dev);
  if (dv) check_neighborhood_tokens("dv", *dv, p, p.dim_v, dev);
  if (dev < 0) return reference::na_av_backward(p, attn, v, d_out, d_attn, dv);
#if GNA_HAVE_CUDA
  unfused::na_av_backward(p, attn, v, d_out, d_attn, dv, options.stream);
#else
  (void)options;
#endif
}

}  // namespace gna
