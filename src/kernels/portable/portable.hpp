// Portable fused backend ("portable"): mma.sync kernels for every sm_80+ GPU, fp16/bf16, head
// dims 32/64/128 (V head dim may differ), indexing the heads-last tensors with multi-dimensional
// tiles (no token permutation pass).
#pragma once

#include <string>

#include "backend/backend.hpp"
#include "kernels/portable/tile_plan.hpp"

namespace gna::portable {

// The (dim_qk, dim_v) pairs with compiled kernels.
bool head_dims_supported(int dim_qk, int dim_v);
const char* supported_head_dims();

bool supports_forward(const ForwardCall& call, std::string* why);
bool supports_backward(const BackwardCall& call, std::string* why);

// Tile shapes used for a call: a tile forced in options, else the tile choice's
// (choose_forward_tiles, choose_backward_tiles). shared_limit (bytes per block the device
// allows, 0: no limit) rules out the variants whose kernel does not fit.
TilePlan forward_tiles(const Problem& p, const KernelOptions& options, int shared_limit = 0);
// The e4m3 forward's: Q tiles of at most kE4m3ForwardRowsQ tokens.
TilePlan e4m3_forward_tiles(const Problem& p, const KernelOptions& options);
TilePlan backward_tiles(const Problem& p, const KernelOptions& options, int shared_limit = 0);

// The backward's 64-key variant (one Q / dO stage) exists for the head dims whose 128-key kernel
// needs more than 99 KB of shared memory per block (sm_86 / sm_89 / sm_120 allow 99 KB). It runs
// when the 128-key kernel does not fit the device, when at least a tenth of the best 128-key
// tiles' pairs are partial (masked) ones (measured faster there on the H100, slower on dense and
// perfectly block-sparse problems at head dim 128: docs/performance.md), or when the caller
// forces a KV tile of at most 64 tokens.
constexpr bool backward_small_variant(int dim_qk, int dim_v) {
  return portable_backward_small_head_dims(dim_qk, dim_v);
}
bool backward_runs_small(const Problem& p, const TileShape& kv);

// Shared memory per CTA of the kernels (0 for head dims without that kernel): the forward with
// Q tiles of rows_q rows (e4m3: the FP8 forward's, whose Q tiles have at most 64 rows) and
// kv_stages K/V buffers (2, or 1: the single-stage pipeline where two do not fit), the backward
// with KV tiles of rows_kv keys.
int forward_shared_bytes(int dim_qk, int dim_v, int rows_q, bool e4m3 = false, int kv_stages = 2);
// Whether a single-stage forward kernel exists (compiled where two K/V stages need more than the
// 99 KB of shared memory per block of sm_86 / sm_89 / sm_120, the core's
// portable_forward_single_stage; each more is one kernel per dtype and arch).
constexpr bool forward_single_stage_kernel(int dim_qk, int dim_v, int rows_q) {
  return portable_forward_single_stage(dim_qk, dim_v, rows_q);
}
int backward_shared_bytes(int dim_qk, int dim_v, int rows_kv = kBackwardRowsKV);

void forward(const ForwardCall& call);
void backward(const BackwardCall& call);

// Per (dtype, dim_qk) launchers, defined in the instantiation files; false when dim_v has no
// kernel.
#define GNA_PORTABLE_DECLARE(dt, d)                                              \
  bool launch_forward_##dt##_d##d(const ForwardCall& call, const TilePlan& plan); \
  bool launch_backward_##dt##_d##d(const BackwardCall& call, const TilePlan& plan);
GNA_PORTABLE_DECLARE(f16, 32)
GNA_PORTABLE_DECLARE(f16, 64)
GNA_PORTABLE_DECLARE(f16, 128)
GNA_PORTABLE_DECLARE(bf16, 32)
GNA_PORTABLE_DECLARE(bf16, 64)
GNA_PORTABLE_DECLARE(bf16, 128)
#undef GNA_PORTABLE_DECLARE
// The FP8 forward (call.fp8; output bf16 or fp16), head dims 64/64 and 128/128, sm_89+, with Q
// tiles of at most kE4m3ForwardRowsQ tokens (one m-block per warp).
constexpr int kE4m3ForwardRowsQ = 64;
bool launch_forward_e4m3_d64(const ForwardCall& call, const TilePlan& plan);
bool launch_forward_e4m3_d128(const ForwardCall& call, const TilePlan& plan);

}  // namespace gna::portable
