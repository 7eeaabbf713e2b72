// A TensorRef as the C ABI's gna_tensor, for the tests that call the C entry points.
#pragma once

#include "gna/core/axis_rule.hpp"
#include "gna/gna.h"
#include "gna/tensor.hpp"

namespace gna::test {

inline gna_tensor to_c(const TensorRef& r) {
  gna_tensor t{};
  t.data = r.data;
  t.dtype = static_cast<int32_t>(r.dtype);
  t.rank = r.rank;
  t.device = r.device;
  for (int i = 0; i < r.rank; ++i) {
    t.shape[i] = r.shape[i];
    t.strides[i] = r.strides[i];
  }
  return t;
}

// The C ABI's gna_params of per-axis rules (scale 0: the default).
inline gna_params params_of(const AxisRule* axes, int rank) {
  gna_params p{};
  p.rank = rank;
  for (int a = 0; a < rank; ++a) {
    p.window[a] = axes[a].window;
    p.stride[a] = axes[a].stride;
    p.dilation[a] = axes[a].dilation;
    p.causal[a] = axes[a].causal;
  }
  return p;
}

}  // namespace gna::test
