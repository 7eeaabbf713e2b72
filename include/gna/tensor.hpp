// A non-owning view of a strided tensor in host or device memory (strides in elements).
#pragma once

#include <cstdint>

#include "gna/core/problem.hpp"

namespace gna {

constexpr int kMaxTensorRank = 8;

struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::f32;
  int rank = 0;
  int64_t shape[kMaxTensorRank] = {};
  int64_t strides[kMaxTensorRank] = {};
  int device = -1;  // -1: host memory; >= 0: CUDA device ordinal

  bool on_host() const { return device < 0; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
};

// Row-major contiguous view of `data` with the given shape (rank sizes from `shape`).
TensorRef contiguous_tensor(void* data, DType dtype, const int64_t* shape, int rank,
                            int device = -1);
inline TensorRef contiguous_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                   int device = -1) {
  return contiguous_tensor(data, dtype, shape.begin(), static_cast<int>(shape.size()), device);
}

}  // namespace gna
