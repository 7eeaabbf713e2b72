// gna::na_qk / na_av and their backward passes: validate once, then run the registered unfused
// backend for the tensors' memory (the CPU reference on host tensors, the CUDA kernels on device
// tensors).
#include "backend/unfused_backend.hpp"
#include "gna/core/error.hpp"
#include "gna/gna.hpp"

namespace gna {
namespace {

const UnfusedBackend& backend_for(const Problem& p, int device) {
  const bool on_device = device >= 0;
  for (const UnfusedBackend& b : registered_unfused_backends()) {
    if (b.device != on_device) continue;
    std::string why;
    if (!b.supports(p.dtype, device, &why))
      fail(ErrorKind::unsupported, "unfused operators on ", on_device ? "CUDA" : "host",
           " tensors: ", why);
    return b;
  }
  if (on_device)
    fail(ErrorKind::unsupported, "unfused operators on CUDA tensors (device ", device,
         "): this library was built without CUDA kernels");
  fail(ErrorKind::unsupported, "unfused operators on host tensors: no host backend is built in");
}

struct CheckedCall {
  Problem problem;
  const UnfusedBackend* backend;
};

// The problem from the first tensor, which must also have a dtype its backend takes.
CheckedCall check_call(const AttentionParams& params, const TensorRef& tokens, const char* name) {
  const Problem p = make_neighborhood_problem(params, tokens, name);
  check_neighborhood_tokens(name, tokens, p, p.dim_qk, tokens.device);
  return {p, &backend_for(p, tokens.device)};
}

}  // namespace

void na_qk(const AttentionParams& params, const TensorRef& q, const TensorRef& k,
           const TensorRef* rpb, const TensorRef& attn, const CallOptions& options) {
  const CheckedCall c = check_call(params, q, "query");
  const Problem& p = c.problem;
  const int dev = q.device;
  check_neighborhood_tokens("key", k, p, p.dim_qk, dev);
  if (rpb) check_neighborhood_rpb("rpb", *rpb, p, dev);
  check_neighborhood_weights("attn", attn, p, dev);
  c.backend->na_qk(p, q, k, rpb, attn, options.stream);
}

void na_av(const AttentionParams& params, const TensorRef& attn, const TensorRef& v,
           const TensorRef& out, const CallOptions& options) {
  const CheckedCall c = check_call(params, v, "value");
  const Problem& p = c.problem;
  const int dev = v.device;
  check_neighborhood_weights("attn", attn, p, dev);
  check_neighborhood_tokens("out", out, p, p.dim_v, dev);
  c.backend->na_av(p, attn, v, out, options.stream);
}

void na_qk_backward(const AttentionParams& params, const TensorRef& q, const TensorRef& k,
                    const TensorRef& d_attn, const TensorRef* dq, const TensorRef* dk,
                    const TensorRef* d_rpb, const CallOptions& options) {
  const CheckedCall c = check_call(params, q, "query");
  const Problem& p = c.problem;
  const int dev = q.device;
  check_neighborhood_tokens("key", k, p, p.dim_qk, dev);
  check_neighborhood_weights("d_attn", d_attn, p, dev);
  if (dq) check_neighborhood_tokens("dq", *dq, p, p.dim_qk, dev);
  if (dk) check_neighborhood_tokens("dk", *dk, p, p.dim_qk, dev);
  if (d_rpb) check_neighborhood_rpb("d_rpb", *d_rpb, p, dev);
  c.backend->na_qk_backward(p, q, k, d_attn, dq, dk, d_rpb, options.stream);
}

void na_av_backward(const AttentionParams& params, const TensorRef& attn, const TensorRef& v,
                    const TensorRef& d_out, const TensorRef* d_attn, const TensorRef* dv,
                    const CallOptions& options) {
  const CheckedCall c = check_call(params, v, "value");
  const Problem& p = c.problem;
  const int dev = v.device;
  check_neighborhood_weights("attn", attn, p, dev);
  check_neighborhood_tokens("d_out", d_out, p, p.dim_v, dev);
  if (d_attn) check_neighborhood_weights("d_attn", *d_attn, p, dev);
  if (dv) check_neighborhood_tokens("dv", *dv, p, p.dim_v, dev);
  c.backend->na_av_backward(p, attn, v, d_out, d_attn, dv, options.stream);
}

}  // namespace gna
