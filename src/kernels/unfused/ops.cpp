// gna::unfused's entry points: the forward operators and their backward passes, each a
// composition of the four kernels (launch.hpp).
#include <cmath>

#include "kernels/unfused/launch.hpp"
#include "kernels/unfused/unfused.hpp"

namespace gna::unfused {

void na_qk(const Problem& p, const TensorRef& q, const TensorRef& k, const TensorRef* rpb,
           const TensorRef& attn, void* stream) {
  launch_pn(p, q, k, rpb, attn, -INFINITY, stream);
}

void na_av(const Problem& p, const TensorRef& attn, const TensorRef& v, const TensorRef& out,
           void* stream) {
  launch_nn(p, attn, v, out, stream);
}

void na_qk_backward(const Problem& p, const TensorRef& q, const TensorRef& k,
                    const TensorRef& d_attn, const TensorRef* dq, const TensorRef* dk,
                    const TensorRef* d_rpb, void* stream) {
  if (dq) launch_nn(p, d_attn, k, *dq, stream);
  if (dk) launch_in(p, d_attn, q, *dk, stream);
  if (d_rpb) launch_rpb_grad(p, d_attn, *d_rpb, stream);
}

void na_av_backward(const Problem& p, const TensorRef& attn, const TensorRef& v,
                    const TensorRef& d_out, const TensorRef* d_attn, const TensorRef* dv,
                    void* stream) {
  if (d_attn) launch_pn(p, d_out, v, nullptr, *d_attn, 0.f, stream);
  if (dv) launch_in(p, attn, d_out, *dv, stream);
}

}  // namespace gna::unfused
