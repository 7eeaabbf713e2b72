// Host side of the halo kernels: parameters from the call and the plan, grids, launches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/common/cuda_check.hpp"
#include "kernels/common/scratch.hpp"
#include "kernels/common/support_checks.hpp"
#include "kernels/halo/dkdv_kernel.cuh"
#include "kernels/halo/dq_kernel.cuh"
#include "kernels/halo/forward_kernel.cuh"
#include "kernels/halo/halo.hpp"

namespace gna::halo {

inline Geometry geometry(const Problem& p, const Plan& plan) {
  Geometry g;
  g.boxes_total = 1;
  for (int a = 0; a < kMaxRank; ++a) {
    g.cta[a] = plan.shape.cta[a];
    g.warp[a] = plan.shape.warp[a];
    g.warp_div[a] = small_divisor(g.warp[a]);
    g.grid_div[a] = small_divisor(g.cta[a] / g.warp[a]);
    g.boxes[a] = a < p.rank ? plan.boxes[a] : 1;
    g.boxes_total *= g.boxes[a];
  }
  g.halo_rows = plan.halo_rows;
  g.tile_rows = plan.tile_rows;
  g.walk_rows = plan.walk_rows;
  g.slab_planes = plan.slab_planes;
  g.segments = plan.segments;
  g.slab_table_rows = plan.slab_table_rows;
  g.slices_per_cta = 1;
  return g;
}

// The grid of a kernel (plan.hpp, slice_grid) from its occupancy at `bytes` of shared memory.
template <typename Kernel>
SliceGrid launch_grid(Kernel kernel, int bytes, int64_t x_blocks, int64_t slices, int device) {
  int per_sm = 1, sms = 132;
  GNA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, bytes));
  GNA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return slice_grid(x_blocks, slices, int64_t(std::max(per_sm, 1)) * sms);
}

// The layout the kernel computes must match the bytes the plan promised dispatch.
inline void check_bytes(int layout, int planned, const char* pass) {
  if (layout != planned)
    fail(ErrorKind::runtime, "halo: ", pass, " shared memory layout of ", layout,
         " bytes differs from the plan's ", planned);
}

inline int dilation_groups(const Problem& p) {
  int groups = 1;
  for (int a = 0; a < p.rank; ++a) groups *= p.axes[a].dilation;
  return groups;
}

template <typename Kernel>
void set_shared(Kernel kernel, int bytes) {
  GNA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// The plan a pass launches: of the whole halo (where it fits) and its slabs that fit
// (slab_candidates), the one with the most resident CTAs per SM (registers and shared memory, by
// the occupancy calculator), then the most planes (each slab costs a round of loads and two
// barriers per slice), then (dK / dV) K / V tiles. Halos that fit but leave few CTAs per SM (hdit 13x13 at head dim 64: one
// CTA of 115 KB) thus stream in slabs too. Cached per plan and kernel pair.
// A pass's kernels: the whole halo, slabs, and (dK / dV) slabs with K / V in registers
// (Plan::kv_registers; the other passes give their streamed kernel again).
template <typename Kernel>
struct PassKernels {
  Kernel whole, streamed, kv_registers;
  Kernel of(const Plan& plan) const { return plan.slabs == 1 ? whole : plan.kv_registers ? kv_registers : streamed; }
};
template <typename Kernel>
PassKernels<Kernel> pass_kernels(Kernel whole, Kernel streamed, Kernel kv_registers) {
  return PassKernels<Kernel>{whole, streamed, kv_registers};
}

template <typename Kernel>
Plan launch_plan(const Plan& whole, Pass pass, int d, const PassKernels<Kernel>& kernels, int device) {
  const int limit = cuda::shared_memory_per_block(device);
  std::vector<int> key{static_cast<int>(pass), d, device, limit, whole.halo_rows, whole.walk_rows};
  for (int a = 0; a < kMaxRank; ++a) {
    key.push_back(whole.halo[a]);
    key.push_back(whole.walk[a]);
    key.push_back(whole.shape.cta[a]);
  }
  static std::mutex mu;
  static std::map<std::pair<const void*, std::vector<int>>, std::pair<int, bool>> chosen;  // planes, kv_registers
  const auto id = std::make_pair(reinterpret_cast<const void*>(kernels.whole), key);
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = chosen.find(id);
    if (it != chosen.end()) return with_slabs(whole, it->second.first, it->second.second);
  }
  const std::vector<Plan> plans = slab_candidates(whole, pass, d, limit);
  if (plans.empty()) return whole;  // dispatch refuses it
  int best = 0, best_ctas = -1;
  for (size_t i = 0; i < plans.size(); ++i) {
    const Kernel kernel = kernels.of(plans[i]);
    const int bytes = shared_bytes(plans[i], pass, d);
    int ctas = 0;
    set_shared(kernel, bytes);
    GNA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, kWarps * 32, bytes));
    if (ctas > best_ctas) {
      best = static_cast<int>(i);
      best_ctas = ctas;
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  chosen[id] = std::make_pair(plans[best].slab_planes, plans[best].kv_registers);
  return plans[best];
}

// What each pass launches (halo.hpp, launched_plan).
template <typename Kernel>
Launched launched(const Plan& whole, Pass pass, int d, const PassKernels<Kernel>& kernels, int device) {
  const Plan plan = launch_plan(whole, pass, d, kernels, device);
  const Kernel kernel = kernels.of(plan);
  const int bytes = shared_bytes(plan, pass, d);
  Launched l;
  l.slabs = plan.slabs;
  l.slab_planes = plan.slab_planes;
  l.kv_registers = plan.kv_registers;
  l.bytes = bytes;
  set_shared(kernel, bytes);
  GNA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&l.ctas_per_sm, kernel, kWarps * 32, bytes));
  return l;
}
template <typename T, int D>
auto forward_kernels() {
  return pass_kernels(halo_forward_kernel<T, D, false>, halo_forward_kernel<T, D, true>, halo_forward_kernel<T, D, true>);
}
template <typename T, int D>
auto dq_kernels() {
  return pass_kernels(halo_dq_kernel<T, D, false>, halo_dq_kernel<T, D, true>, halo_dq_kernel<T, D, true>);
}
template <typename T, int D>
auto dkdv_kernels() {
  return pass_kernels(halo_dkdv_kernel<T, D, false>, halo_dkdv_kernel<T, D, true>, halo_dkdv_kernel<T, D, true, true>);
}
template <typename T, int D>
Launched forward_launched(const Plan& keys_whole, int device) {
  return launched(keys_whole, Pass::forward, D, forward_kernels<T, D>(), device);
}
template <typename T, int D>
Launched backward_launched(const Plan& whole, Pass pass, int device) {
  return pass == Pass::dq ? launched(whole, pass, D, dq_kernels<T, D>(), device)
                          : launched(whole, pass, D, dkdv_kernels<T, D>(), device);
}

template <typename T, int D>
void launch_forward(const ForwardCall& call, const Plan& whole) {
  const Problem& p = call.problem;
  const auto kernels = forward_kernels<T, D>();
  const Plan plan = launch_plan(whole, Pass::forward, D, kernels, call.in.q.device);
  ForwardParams<T> P;
  P.p = p;
  P.geo = geometry(p, plan);
  P.scale_log2 = static_cast<float>(effective_scale(p) * 1.4426950408889634);
  P.q = cuda::token_tensor<const T>(call.in.q, p.rank);
  P.k = cuda::token_tensor<const T>(call.in.k, p.rank);
  P.v = cuda::token_tensor<const T>(call.in.v, p.rank);
  P.o = cuda::token_tensor<T>(call.out, p.rank);
  P.write_lse = call.lse != nullptr;
  if (call.lse) P.lse = cuda::token_tensor<float>(*call.lse, p.rank);
  const int bytes = ForwardLayout<D>(P.geo).bytes;
  check_bytes(bytes, forward_shared_bytes(plan, D), "forward");
  auto kernel = kernels.of(plan);
  set_shared(kernel, bytes);
  const int64_t x_blocks = int64_t(P.geo.boxes_total) * dilation_groups(p);
  const int64_t slices = int64_t(p.batch) * p.heads_q;
  const SliceGrid sg = launch_grid(kernel, bytes, x_blocks, slices, call.in.q.device);
  P.geo.slices_per_cta = sg.slices_per_cta;
  const dim3 grid(static_cast<unsigned>(x_blocks), static_cast<unsigned>(sg.rows));
  kernel<<<grid, kWarps * 32, bytes, static_cast<cudaStream_t>(call.stream)>>>(P);
  GNA_CUDA_CHECK_LAUNCH();
}

template <typename T, int D>
void launch_backward(const BackwardCall& call, const Plan& keys_whole, const Plan& queries_whole) {
  const Problem& p = call.problem;
  const auto dq_set = dq_kernels<T, D>();
  const auto dkdv_set = dkdv_kernels<T, D>();
  const Plan keys_plan = launch_plan(keys_whole, Pass::dq, D, dq_set, call.in.q.device);
  const Plan queries_plan = launch_plan(queries_whole, Pass::dkdv, D, dkdv_set, call.in.q.device);
  cudaStream_t stream = static_cast<cudaStream_t>(call.stream);
  const float scale = static_cast<float>(effective_scale(p));
  float* delta = cuda::scratch_alloc<float>(size_t(p.batch) * p.tokens() * p.heads_q, stream);

  DqParams<T> Q;
  Q.p = p;
  Q.geo = geometry(p, keys_plan);
  Q.scale = scale;
  Q.scale_log2 = static_cast<float>(effective_scale(p) * 1.4426950408889634);
  Q.q = cuda::token_tensor<const T>(call.in.q, p.rank);
  Q.k = cuda::token_tensor<const T>(call.in.k, p.rank);
  Q.v = cuda::token_tensor<const T>(call.in.v, p.rank);
  Q.o = cuda::token_tensor<const T>(call.out, p.rank);
  Q.d_o = cuda::token_tensor<const T>(call.d_out, p.rank);
  Q.lse = cuda::token_tensor<const float>(call.lse, p.rank);
  Q.dq = cuda::token_tensor<T>(call.dq, p.rank);
  Q.delta = delta;
  const int dq_bytes = DqLayout<D>(Q.geo).bytes;
  check_bytes(dq_bytes, dq_shared_bytes(keys_plan, D), "dQ pass");
  auto dq_kernel = dq_set.of(keys_plan);
  set_shared(dq_kernel, dq_bytes);
  const int groups = dilation_groups(p);
  const int device = call.in.q.device;
  const int64_t q_blocks = int64_t(Q.geo.boxes_total) * groups, q_slices = int64_t(p.batch) * p.heads_q;
  const SliceGrid q_grid = launch_grid(dq_kernel, dq_bytes, q_blocks, q_slices, device);
  Q.geo.slices_per_cta = q_grid.slices_per_cta;
  dq_kernel<<<dim3(static_cast<unsigned>(q_blocks), static_cast<unsigned>(q_grid.rows)), kWarps * 32, dq_bytes, stream>>>(Q);
  GNA_CUDA_CHECK_LAUNCH();

  DkdvParams<T> K;
  K.p = p;
  K.geo = geometry(p, queries_plan);
  K.scale = Q.scale;
  K.scale_log2 = Q.scale_log2;
  K.q = Q.q;
  K.k = Q.k;
  K.v = Q.v;
  K.d_o = Q.d_o;
  K.lse = Q.lse;
  K.delta = delta;
  K.dk = cuda::token_tensor<T>(call.dk, p.rank);
  K.dv = cuda::token_tensor<T>(call.dv, p.rank);
  const int kv_bytes = DkdvLayout<D>(K.geo, queries_plan.slabs > 1, queries_plan.kv_registers).bytes;
  check_bytes(kv_bytes, dkdv_shared_bytes(queries_plan, D), "dK/dV pass");
  auto kv_kernel = dkdv_set.of(queries_plan);
  set_shared(kv_kernel, kv_bytes);
  const int64_t kv_blocks = int64_t(K.geo.boxes_total) * groups, kv_slices = int64_t(p.batch) * p.heads_kv;
  const SliceGrid kv_grid = launch_grid(kv_kernel, kv_bytes, kv_blocks, kv_slices, device);
  K.geo.slices_per_cta = kv_grid.slices_per_cta;
  kv_kernel<<<dim3(static_cast<unsigned>(kv_blocks), static_cast<unsigned>(kv_grid.rows)), kWarps * 32, kv_bytes, stream>>>(K);
  GNA_CUDA_CHECK_LAUNCH();
  cuda::scratch_free(delta, stream);
}

// The fp16 or bf16 instance at head dim D, for the call's dtype (halo.hpp).
template <int D>
void launch_forward_for_dtype(const ForwardCall& call, const Plan& keys_plan) {
  if (call.problem.dtype == DType::f16)
    launch_forward<__half, D>(call, keys_plan);
  else
    launch_forward<__nv_bfloat16, D>(call, keys_plan);
}

template <int D>
Launched forward_launched_for_dtype(const Problem& p, const Plan& keys_whole, int device) {
  return p.dtype == DType::f16 ? forward_launched<__half, D>(keys_whole, device)
                               : forward_launched<__nv_bfloat16, D>(keys_whole, device);
}

template <int D>
void launch_backward_for_dtype(const BackwardCall& call, const Plan& keys_plan, const Plan& queries_plan) {
  if (call.problem.dtype == DType::f16)
    launch_backward<__half, D>(call, keys_plan, queries_plan);
  else
    launch_backward<__nv_bfloat16, D>(call, keys_plan, queries_plan);
}

template <int D>
Launched backward_launched_for_dtype(const Problem& p, const Plan& whole, Pass pass, int device) {
  return p.dtype == DType::f16 ? backward_launched<__half, D>(whole, pass, device)
                               : backward_launched<__nv_bfloat16, D>(whole, pass, device);
}

}  // namespace gna::halo
