// Parameters of the halo kernels (host and device): the problem, the box geometry of the plan
// and the tensors. One struct per kernel, passed by value as a __grid_constant__.
#pragma once

#include "kernels/common/token_tensor.cuh"
#include "kernels/halo/plan.hpp"

namespace gna::halo {

// The grid is (boxes of dilation group 0 x dilation groups, heads, batch): box index
// blockIdx.x % boxes_total, group blockIdx.x / boxes_total (both row-major over axes).
struct Geometry {
  int cta[kMaxRank];
  int warp[kMaxRank];
  int boxes[kMaxRank];
  int boxes_total;
  int halo_rows;  // rows allocated for the halo (the plan's largest)
  int walk_rows;  // entries of each warp's walk table
};

template <typename T>
struct ForwardParams {
  Problem p;
  Geometry geo;
  float scale_log2;
  cuda::TokenTensor<const T> q, k, v;
  cuda::TokenTensor<T> o;
  cuda::TokenTensor<float> lse;
  bool write_lse;
};

// dQ pass (query boxes over the keys of their windows); also writes delta = rowsum(dO * O) of
// its queries for the dK / dV pass.
template <typename T>
struct DqParams {
  Problem p;
  Geometry geo;
  float scale, scale_log2;
  cuda::TokenTensor<const T> q, k, v, o, d_o;
  cuda::TokenTensor<const float> lse;
  cuda::TokenTensor<T> dq;
  float* delta;  // [B, tokens, Hq] in plain token order
};

// dK / dV pass (key boxes over the queries whose windows hold them), every query head of the
// key head's group.
template <typename T>
struct DkdvParams {
  Problem p;
  Geometry geo;
  float scale, scale_log2;
  cuda::TokenTensor<const T> q, k, v, d_o;
  cuda::TokenTensor<const float> lse;
  const float* delta;
  cuda::TokenTensor<T> dk, dv;
};

}  // namespace gna::halo
