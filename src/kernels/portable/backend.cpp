// Registers the portable fused kernels as backend "portable" (priority 50, device tensors):
// what they support, with the refusal naming the parameter and the limit, and the tile choice.
#include <cuda_runtime.h>

#include "backend/registration.hpp"
#include "gna/core/error.hpp"
#include "kernels/common/scratch.hpp"
#include "kernels/common/support_checks.hpp"
#include "kernels/portable/portable.hpp"

namespace gna::portable {
namespace {

using cuda::str;

bool refuse(std::string* why, const std::string& reason) {
  return cuda::refuse(why, "portable", reason);
}

bool aligned_rows(const TensorRef& t, const char* name, std::string* why) {
  return cuda::aligned_rows(t, name, "portable", why);
}

// Shared memory per block the kernels may use (the device's, capped by the environment).
int shared_limit(int device) { return cuda::shared_memory_per_block(device); }

bool supports_problem(const Problem& p, const AttentionTensors& in, const KernelOptions& opt,
                      bool forward, std::string* why) {
  if (!cuda::half_tensors_supported(p, in.q, "portable", why)) return false;
  if (!head_dims_supported(p.dim_qk, p.dim_v))
    return refuse(why, str("head dims ", p.dim_qk, "/", p.dim_v, " (qk/v) not supported (",
                           supported_head_dims(), ")"));
  if (!cuda::sm80_supported(in.q.device, "portable", why)) return false;
  // The smallest kernel variant must fit (the forward falls back to 64-row Q tiles, the backward
  // to 64-key KV tiles where that variant exists).
  const int limit = shared_limit(in.q.device);
  const int need =
      forward ? forward_shared_bytes(p.dim_qk, p.dim_v, 64)
              : backward_shared_bytes(p.dim_qk, p.dim_v,
                                      backward_small_variant(p.dim_qk, p.dim_v) ? kBackwardRowsKVSmall
                                                                               : kBackwardRowsKV);
  if (limit > 0 && need > limit)
    return refuse(why, str(forward ? "forward" : "backward", " at head dims ", p.dim_qk, "/",
                           p.dim_v, " needs ", need, " bytes of shared memory per block, ",
                           cuda::shared_memory_allowance(in.q.device)));
  if (int64_t(p.batch) * p.heads_q > 65535)
    return refuse(why, str("batch * heads ", int64_t(p.batch) * p.heads_q, " exceeds 65535"));
  int groups = 1;
  for (int a = 0; a < p.rank; ++a) {
    groups *= p.axes[a].dilation;
    if (p.axes[a].extent > 1023 * 1023)
      return refuse(why, str("axis ", a, ": extent ", p.axes[a].extent, " too large"));
  }
  if (groups > 65535) return refuse(why, str("dilation groups ", groups, " exceed 65535"));
  if (!aligned_rows(in.q, "query", why) || !aligned_rows(in.k, "key", why) ||
      !aligned_rows(in.v, "value", why))
    return false;
  if (p.additional_kv > 0 && (!aligned_rows(*in.additional_k, "additional keys", why) ||
                              !aligned_rows(*in.additional_v, "additional values", why)))
    return false;
  // Forced tiles whose kernel variant does not fit the device (a forced tile that no variant
  // runs is the tile choice's error).
  const int wide = forward_shared_bytes(p.dim_qk, p.dim_v, 128);
  if (forward && tile_forced(opt.q_tile, p.rank) && opt.q_tile.volume(p.rank) > 64 && limit > 0 &&
      wide > limit)
    return refuse(why, str("query tile volume ", opt.q_tile.volume(p.rank), " needs ", wide,
                           " bytes of shared memory per block, ",
                           cuda::shared_memory_allowance(in.q.device), " (at most 64 tokens here)"));
  const int wide_backward = backward_shared_bytes(p.dim_qk, p.dim_v, kBackwardRowsKV);
  if (!forward && tile_forced(opt.kv_tile, p.rank) && !backward_runs_small(p, opt.kv_tile) &&
      limit > 0 && wide_backward > limit)
    return refuse(why, str("key/value tile volume ", opt.kv_tile.volume(p.rank), " needs ",
                           wide_backward, " bytes of shared memory per block, ",
                           cuda::shared_memory_allowance(in.q.device), " (at most ",
                           kBackwardRowsKVSmall, " tokens here)"));
  return true;
}

Backend make_backend() {
  Backend b =
      backend_from("portable", 50, true, supports_forward, forward, supports_backward, backward);
  b.release_memory = cuda::scratch_release;  // the backward's scratch
  return b;
}

}  // namespace

bool head_dims_supported(int dim_qk, int dim_v) {
  const int pairs[][2] = {{32, 32}, {64, 64}, {128, 128}, {64, 128}, {128, 64}};
  for (const auto& pr : pairs)
    if (pr[0] == dim_qk && pr[1] == dim_v) return true;
  return false;
}

const char* supported_head_dims() { return "32/32, 64/64, 128/128, 64/128, 128/64"; }

bool supports_forward(const ForwardCall& call, std::string* why) {
  if (!supports_problem(call.problem, call.in, call.options, true, why)) return false;
  if (!aligned_rows(call.out, "out", why)) return false;
  return true;
}

bool supports_backward(const BackwardCall& call, std::string* why) {
  if (!supports_problem(call.problem, call.in, call.options, false, why)) return false;
  if (call.options.deterministic) {  // dQ is accumulated with atomics in arrival order
    if (why) *why = "portable: no deterministic backward (dQ uses atomic additions)";
    return false;
  }
  // Gradient buffers are checked by dispatch before any backend runs (selection has none).
  return aligned_rows(call.d_out, "d_out", why);
}

TilePlan forward_tiles(const Problem& p, const KernelOptions& options, int shared_limit) {
  const bool wide_fits =
      shared_limit <= 0 || forward_shared_bytes(p.dim_qk, p.dim_v, 128) <= shared_limit;
  return choose_forward_tiles(p, options.q_tile, options.kv_tile, wide_fits, options.kv_placements);
}

bool backward_runs_small(const Problem& p, const TileShape& kv) {
  return backward_small_variant(p.dim_qk, p.dim_v) && kv.volume(p.rank) <= kBackwardRowsKVSmall;
}

TilePlan backward_tiles(const Problem& p, const KernelOptions& options, int shared_limit) {
  // A forced KV tile's volume picks the variant (backward_runs_small).
  const bool fits = shared_limit <= 0 ||
                    backward_shared_bytes(p.dim_qk, p.dim_v, kBackwardRowsKV) <= shared_limit;
  return choose_backward_tiles(p, options.q_tile, options.kv_tile, fits,
                               backward_small_variant(p.dim_qk, p.dim_v), options.q_placements);
}

void forward(const ForwardCall& call) {
  const TilePlan plan = forward_tiles(call.problem, call.options, shared_limit(call.in.q.device));
  const Problem& p = call.problem;
  const bool f16 = p.dtype == DType::f16;
  bool launched = false;
  switch (p.dim_qk) {
    case 32: launched = f16 ? launch_forward_f16_d32(call, plan) : launch_forward_bf16_d32(call, plan); break;
    case 64: launched = f16 ? launch_forward_f16_d64(call, plan) : launch_forward_bf16_d64(call, plan); break;
    case 128: launched = f16 ? launch_forward_f16_d128(call, plan) : launch_forward_bf16_d128(call, plan); break;
  }
  if (!launched)
    fail(ErrorKind::unsupported, "portable: head dims ", p.dim_qk, "/", p.dim_v, " not supported (",
         supported_head_dims(), ")");
}

void backward(const BackwardCall& call) {
  const TilePlan plan = backward_tiles(call.problem, call.options, shared_limit(call.in.q.device));
  const Problem& p = call.problem;
  const bool f16 = p.dtype == DType::f16;
  bool launched = false;
  switch (p.dim_qk) {
    case 32: launched = f16 ? launch_backward_f16_d32(call, plan) : launch_backward_bf16_d32(call, plan); break;
    case 64: launched = f16 ? launch_backward_f16_d64(call, plan) : launch_backward_bf16_d64(call, plan); break;
    case 128: launched = f16 ? launch_backward_f16_d128(call, plan) : launch_backward_bf16_d128(call, plan); break;
  }
  if (!launched)
    fail(ErrorKind::unsupported, "portable: head dims ", p.dim_qk, "/", p.dim_v, " not supported (",
         supported_head_dims(), ")");
}

GNA_REGISTER_BACKEND(make_backend);

}  // namespace gna::portable
