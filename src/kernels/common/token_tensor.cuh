// Device view of a heads-last token tensor [B, X, (Y, (Z)), H, D] (or [B, X.., H] for LSE, or
// [B, N, H, D] for additional KV): a base pointer and element strides. The last dimension is
// contiguous (checked by make_problem).
#pragma once

#include <cstdint>

#include "gna/core/hd.hpp"
#include "gna/tensor.hpp"

namespace gna::cuda {

template <typename T>
struct TokenTensor {
  T* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_axis[kMaxRank] = {0, 0, 0};
  int64_t stride_head = 0;

  // Offset of token (b, x[0..rank)) and head h.
  GNA_HD int64_t offset(int b, const int* x, int rank, int h) const {
    int64_t o = b * stride_batch + h * stride_head;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int a = 0; a < kMaxRank; ++a)
      if (a < rank) o += x[a] * stride_axis[a];
    return o;
  }
  GNA_HD T* at(int b, const int* x, int rank, int h) const { return data + offset(b, x, rank, h); }
};

// spatial_rank: number of token axes between batch and heads (rank of the problem, or 1 for
// additional KV [B, N, H, D]).
template <typename T>
TokenTensor<T> token_tensor(const TensorRef& t, int spatial_rank) {
  TokenTensor<T> v;
  v.data = static_cast<T*>(t.data);
  v.stride_batch = t.strides[0];
  for (int a = 0; a < spatial_rank; ++a) v.stride_axis[a] = t.strides[1 + a];
  v.stride_head = t.strides[1 + spatial_rank];
  return v;
}

}  // namespace gna::cuda
