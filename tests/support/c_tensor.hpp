// A TensorRef as the C ABI's gna_tensor, for the tests that call the C entry points.
#pragma once

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

}  // namespace gna::test
