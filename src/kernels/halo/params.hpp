// Parameters of the halo kernels (host and device): the problem, the box geometry of the plan
// and the tensors. One struct per kernel, passed by value as a __grid_constant__.
#pragma once

#include "kernels/common/token_tensor.cuh"
#include "kernels/halo/plan.hpp"

namespace gna::halo {

// Division of small non-negative ints (below 2^22) by d through a float reciprocal: the kernels
// split row indices over runtime box sides many times per CTA, and an integer division costs
// about twenty instructions. floor((x + 0.5) / d) is exact there: the product's rounding error
// stays below the 0.5 / d distance of (x + 0.5) / d from the nearest integers.
struct SmallDivisor {
  int d = 1;
  float inv = 1.f;
  GNA_HD int div(int x) const { return static_cast<int>((static_cast<float>(x) + 0.5f) * inv); }
};
GNA_HD SmallDivisor small_divisor(int d) { return SmallDivisor{d, 1.f / static_cast<float>(d)}; }

// The grid is (boxes of dilation group 0 x dilation groups, groups of slices_per_cta (batch item,
// head) slices): box index
// blockIdx.x % boxes_total, group blockIdx.x / boxes_total (both row-major over axes).
struct Geometry {
  int cta[kMaxRank];
  int warp[kMaxRank];
  SmallDivisor warp_div[kMaxRank];  // the warp patch's sides
  SmallDivisor grid_div[kMaxRank];  // warps along each axis of the box (cta / warp)
  int boxes[kMaxRank];
  int boxes_total;
  int halo_rows;  // rows of the halo's row tables (the plan's largest halo)
  int tile_rows;  // rows of each halo tile (the whole halo, or a slab of it)
  int walk_rows;  // entries of each warp's walk table
  int slab_planes;  // planes of axis 0 per slab of the halo (plan.hpp)
  int segments;   // walks (slabs) a warp's walk table holds at most
  int slab_table_rows;  // entries of each warp's walk table in the streamed dK / dV kernel
  int slices_per_cta;  // (batch item, head) slices each CTA takes in turn: blockIdx.y counts them
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
