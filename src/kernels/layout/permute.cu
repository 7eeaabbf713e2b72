#include "kernels/layout/permute.hpp"

#include <cuda_runtime.h>

#include <cstdint>

#include "gna/core/error.hpp"
#include "kernels/common/cuda_check.hpp"

namespace gna::cuda {
namespace {

// Both sides in bytes. A "unit" is a contiguous run of run_bytes: all heads of a token when
// heads and dims are packed on both sides, else one head's dims.
struct LayoutArgs {
  PermutationPlan plan;
  int batch = 1;
  int groups = 1;
  int64_t tokens_per_group = 1;
  const char* src = nullptr;
  char* dst = nullptr;
  int64_t hl_batch = 0, hl_axis[kMaxRank] = {0, 0, 0}, hl_unit = 0;  // heads-last strides
  int64_t pm_batch = 0, pm_token = 0, pm_unit = 0;                  // permuted strides
  int units_per_token = 1;
  int run_bytes = 0;
  int threads_per_unit = 1;  // power of two
};

// Copies a run with `lanes` threads; each thread keeps up to 4 vectors in flight (all loads of a
// batch issued before its stores).
template <typename Vec>
__device__ __forceinline__ void copy_run(const char* __restrict__ from, char* __restrict__ to,
                                         int run_bytes, int lane, int lanes) {
  const int n = run_bytes / static_cast<int>(sizeof(Vec));
  const Vec* src = reinterpret_cast<const Vec*>(from);
  Vec* dst = reinterpret_cast<Vec*>(to);
  constexpr int kBatch = 4;
  int c = lane;
  for (; c + (kBatch - 1) * lanes < n; c += kBatch * lanes) {
    Vec v[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) v[i] = src[c + i * lanes];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) dst[c + i * lanes] = v[i];
  }
  for (; c < n; c += lanes) dst[c] = src[c];
}

template <typename Vec>
__device__ __forceinline__ void zero_run(char* to, int run_bytes, int lane, int lanes) {
  const int n = run_bytes / static_cast<int>(sizeof(Vec));
  Vec z;
  memset(&z, 0, sizeof(Vec));
  for (int c = lane; c < n; c += lanes) reinterpret_cast<Vec*>(to)[c] = z;
}

// Iterates the permuted side (padding included).
template <typename Vec>
__global__ void permute_kernel(LayoutArgs args, int64_t units) {
  const int lanes = args.threads_per_unit;
  const int64_t unit = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / lanes;
  if (unit >= units) return;
  const int lane = threadIdx.x % lanes;
  const int u = static_cast<int>(unit % args.units_per_token);
  const int64_t token_index = unit / args.units_per_token;  // over [B * groups, tokens_per_group]
  const int64_t token = token_index % args.tokens_per_group;
  const int64_t bg = token_index / args.tokens_per_group;
  const int g = static_cast<int>(bg % args.groups);
  const int b = static_cast<int>(bg / args.groups);
  char* to = args.dst + bg * args.pm_batch + token * args.pm_token + u * args.pm_unit;
  int x[kMaxRank];
  if (!args.plan.original_coordinates(g, token, x)) {
    zero_run<Vec>(to, args.run_bytes, lane, lanes);
    return;
  }
  int64_t from = b * args.hl_batch + u * args.hl_unit;
  for (int a = 0; a < args.plan.rank; ++a) from += x[a] * args.hl_axis[a];
  copy_run<Vec>(args.src + from, to, args.run_bytes, lane, lanes);
}

// Iterates the heads-last side (real tokens only).
template <typename Vec>
__global__ void unpermute_kernel(LayoutArgs args, int64_t units) {
  const int lanes = args.threads_per_unit;
  const int64_t unit = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / lanes;
  if (unit >= units) return;
  const int lane = threadIdx.x % lanes;
  const PermutationPlan& plan = args.plan;
  const int u = static_cast<int>(unit % args.units_per_token);
  int64_t rest = unit / args.units_per_token;
  int x[kMaxRank];
  int64_t to = u * args.hl_unit;
  for (int a = plan.rank - 1; a >= 0; --a) {
    x[a] = static_cast<int>(rest % plan.extent[a]);
    rest /= plan.extent[a];
    to += x[a] * args.hl_axis[a];
  }
  const int b = static_cast<int>(rest);
  to += b * args.hl_batch;
  int g;
  int64_t token;
  plan.permuted_position(x, &g, &token);
  const int64_t from = (int64_t(b) * args.groups + g) * args.pm_batch + token * args.pm_token +
                       u * args.pm_unit;
  copy_run<Vec>(args.src + from, args.dst + to, args.run_bytes, lane, lanes);
}

void check_plan_tensors(const PermutationPlan& plan, const TensorRef& heads_last,
                        const TensorRef& permuted, const char* hl_name, const char* pm_name) {
  if (plan.rank < 1 || plan.rank > kMaxRank) fail_invalid("permutation: rank must be 1..3, got ", plan.rank);
  for (int a = 0; a < plan.rank; ++a) {
    if (plan.tile[a] < 1) fail_invalid("permutation: axis ", a, ": tile must be >= 1, got ", plan.tile[a]);
    if (plan.dilation[a] < 1)
      fail_invalid("permutation: axis ", a, ": dilation must be >= 1, got ", plan.dilation[a]);
  }
  const int trailing = heads_last.rank - 1 - plan.rank;  // 1 (LSE: heads) or 2 (heads, dim)
  if (trailing != 1 && trailing != 2)
    fail_invalid("permutation: ", hl_name, " must have ", plan.rank + 2, " or ", plan.rank + 3,
                 " dims, got ", heads_last.rank);
  if (permuted.rank != 2 + trailing)
    fail_invalid("permutation: ", pm_name, " must have ", 2 + trailing, " dims, got ", permuted.rank);
  if (heads_last.dtype != permuted.dtype)
    fail_invalid("permutation: ", hl_name, " and ", pm_name, " dtypes differ");
  if (heads_last.on_host() || permuted.on_host())
    fail_invalid("permutation: tensors must be in device memory");
  for (int a = 0; a < plan.rank; ++a)
    if (heads_last.shape[1 + a] != plan.extent[a])
      fail_invalid("permutation: ", hl_name, " dim ", 1 + a, " is ", heads_last.shape[1 + a],
                   ", plan extent is ", plan.extent[a]);
  const int64_t expect[4] = {heads_last.shape[0] * plan.groups(), plan.tokens_per_group(),
                             heads_last.shape[plan.rank + 1],
                             trailing == 2 ? heads_last.shape[plan.rank + 2] : 1};
  for (int i = 0; i < permuted.rank; ++i)
    if (permuted.shape[i] != expect[i])
      fail_invalid("permutation: ", pm_name, " dim ", i, " is ", permuted.shape[i], ", expected ",
                   expect[i]);
  if (heads_last.strides[heads_last.rank - 1] != 1 || permuted.strides[permuted.rank - 1] != 1)
    fail_invalid("permutation: last dimension must be contiguous");
}

LayoutArgs make_args(const PermutationPlan& plan, const TensorRef& heads_last,
                     const TensorRef& permuted) {
  const int64_t e = dtype_size(heads_last.dtype);
  const int r = plan.rank;
  const bool has_dim = heads_last.rank == r + 3;
  const int64_t heads = heads_last.shape[r + 1];
  const int64_t dim = has_dim ? heads_last.shape[r + 2] : 1;
  LayoutArgs args;
  args.plan = plan;
  args.batch = static_cast<int>(heads_last.shape[0]);
  args.groups = plan.groups();
  args.tokens_per_group = plan.tokens_per_group();
  args.hl_batch = heads_last.strides[0] * e;
  for (int a = 0; a < r; ++a) args.hl_axis[a] = heads_last.strides[1 + a] * e;
  args.pm_batch = permuted.strides[0] * e;
  args.pm_token = permuted.strides[1] * e;
  // Heads packed with dims (or heads alone for LSE) on both sides: one run per token.
  const bool packed = !has_dim || heads == 1 ||
                      (heads_last.strides[r + 1] == dim && permuted.strides[2] == dim);
  if (packed) {
    args.units_per_token = 1;
    args.run_bytes = static_cast<int>(heads * dim * e);
  } else {
    args.units_per_token = static_cast<int>(heads);
    args.run_bytes = static_cast<int>(dim * e);
    args.hl_unit = heads_last.strides[r + 1] * e;
    args.pm_unit = permuted.strides[2] * e;
  }
  return args;
}

// Largest vector width (16, 8, 4, 2, 1 bytes) dividing every address and run of the copy.
int vector_bytes(const LayoutArgs& a, const void* src, const void* dst) {
  uint64_t bits = static_cast<uint64_t>(a.run_bytes) | reinterpret_cast<uintptr_t>(src) |
                  reinterpret_cast<uintptr_t>(dst) | static_cast<uint64_t>(a.hl_batch) |
                  static_cast<uint64_t>(a.pm_batch) | static_cast<uint64_t>(a.pm_token) |
                  static_cast<uint64_t>(a.hl_unit) | static_cast<uint64_t>(a.pm_unit);
  for (int i = 0; i < a.plan.rank; ++i) bits |= static_cast<uint64_t>(a.hl_axis[i]);
  for (int v = 16; v > 1; v /= 2)
    if (bits % v == 0) return v;
  return 1;
}

template <template <typename> class Kernel>
void launch(LayoutArgs args, int64_t units, cudaStream_t stream) {
  if (units == 0 || args.run_bytes == 0) return;
  const int vec = vector_bytes(args, args.src, args.dst);
  const int chunks = args.run_bytes / vec;
  // At most one warp per run: the index arithmetic of a unit is paid once per warp and
  // amortized over the whole run.
  constexpr int kThreads = 256;
  int lanes = 1;
  while (lanes < chunks && lanes < 32) lanes *= 2;
  args.threads_per_unit = lanes;
  const int64_t blocks = (units * lanes + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks);
  switch (vec) {
    case 16: Kernel<uint4>::launch(grid, kThreads, stream, args, units); break;
    case 8: Kernel<uint2>::launch(grid, kThreads, stream, args, units); break;
    case 4: Kernel<uint32_t>::launch(grid, kThreads, stream, args, units); break;
    case 2: Kernel<uint16_t>::launch(grid, kThreads, stream, args, units); break;
    default: Kernel<uint8_t>::launch(grid, kThreads, stream, args, units); break;
  }
  GNA_CUDA_CHECK_LAUNCH();
}

template <typename Vec>
struct PermuteLaunch {
  static void launch(unsigned g, int t, cudaStream_t s, const LayoutArgs& a, int64_t n) {
    permute_kernel<Vec><<<g, t, 0, s>>>(a, n);
  }
};
template <typename Vec>
struct UnpermuteLaunch {
  static void launch(unsigned g, int t, cudaStream_t s, const LayoutArgs& a, int64_t n) {
    unpermute_kernel<Vec><<<g, t, 0, s>>>(a, n);
  }
};

}  // namespace

void permute_tokens(const PermutationPlan& plan, const TensorRef& src, TensorRef& dst,
                    void* stream) {
  check_plan_tensors(plan, src, dst, "source (heads-last)", "destination (permuted)");
  LayoutArgs args = make_args(plan, src, dst);
  args.src = static_cast<const char*>(src.data);
  args.dst = static_cast<char*>(dst.data);
  const int64_t units = int64_t(args.batch) * args.groups * args.tokens_per_group * args.units_per_token;
  launch<PermuteLaunch>(args, units, static_cast<cudaStream_t>(stream));
}

void unpermute_tokens(const PermutationPlan& plan, const TensorRef& src, TensorRef& dst,
                      void* stream) {
  check_plan_tensors(plan, dst, src, "destination (heads-last)", "source (permuted)");
  LayoutArgs args = make_args(plan, dst, src);
  args.src = static_cast<const char*>(src.data);
  args.dst = static_cast<char*>(dst.data);
  int64_t tokens = 1;
  for (int a = 0; a < plan.rank; ++a) tokens *= plan.extent[a];
  const int64_t units = int64_t(args.batch) * tokens * args.units_per_token;
  launch<UnpermuteLaunch>(args, units, static_cast<cudaStream_t>(stream));
}

}  // namespace gna::cuda
