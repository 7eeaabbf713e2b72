// Registers the portable fused kernels as backend "portable" (priority 50, device tensors):
// what they support, with the refusal naming the parameter and the limit, and the tile choice.
#include <cuda_runtime.h>

#include "backend/registration.hpp"
#include "gna/core/error.hpp"
#include "kernels/common/device_limits.hpp"
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

// The launch grid's and the tile rows' limits.
bool grid_supported(const Problem& p, std::string* why) {
  if (int64_t(p.batch) * p.heads_q > 65535)
    return refuse(why, str("batch * heads ", int64_t(p.batch) * p.heads_q, " exceeds 65535"));
  int groups = 1;
  for (int a = 0; a < p.rank; ++a) {
    groups *= p.axes[a].dilation;
    if (p.axes[a].extent > 1023 * 1023)
      return refuse(why, str("axis ", a, ": extent ", p.axes[a].extent, " too large"));
  }
  if (groups > 65535) return refuse(why, str("dilation groups ", groups, " exceed 65535"));
  return true;
}

bool f32_tokens(const TensorRef& t, int rank) {
  return t.data != nullptr && t.dtype == DType::f32 && t.rank == rank && t.strides[rank - 1] == 1;
}

// An e4m3 operand in 16-byte rows: base 16-byte aligned, every stride but the last a multiple
// of 16 elements.
bool e4m3_rows(const TensorRef& t, const char* name, std::string* why) {
  if (t.dtype != DType::e4m3)
    return refuse(why, str("e4m3: ", name, ": dtype ", dtype_name(t.dtype), " (expected float8_e4m3fn)"));
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
    return refuse(why, str("e4m3: ", name, ": data pointer must be 16-byte aligned"));
  for (int i = 0; i + 1 < t.rank; ++i)
    if (t.strides[i] % 16 != 0 && t.shape[i] > 1)
      return refuse(why, str("e4m3: ", name, ": stride of dim ", i, " is ", t.strides[i],
                             " (must be a multiple of 16 elements)"));
  return true;
}

// FP8 calls (call.fp8, docs/fp8.md): e4m3 operands at head dims 64/64 and 128/128, O in bf16 or
// fp16, on sm_89+ with the e4m3 kernels' code loaded.
bool supports_fp8(const ForwardCall& call, std::string* why) {
  const Problem& p = call.problem;
  const Fp8Operands& f = *call.fp8;
  if (f.q8.on_host()) return refuse(why, "e4m3: tensors are in host memory (needs CUDA device tensors)");
  if (!((p.dim_qk == 64 && p.dim_v == 64) || (p.dim_qk == 128 && p.dim_v == 128)))
    return refuse(why, str("e4m3: head dims ", p.dim_qk, "/", p.dim_v,
                           " (qk/v) not supported (64/64, 128/128)"));
  if (p.dtype != DType::bf16 && p.dtype != DType::f16)
    return refuse(why, str("e4m3: output dtype ", dtype_name(p.dtype),
                           " not supported (bfloat16, float16)"));
  for (const auto& [t, name] : {std::pair<const TensorRef*, const char*>{&f.q8, "query"},
                                {&f.k8, "key"}, {&f.v8, "value"}})
    if (!e4m3_rows(*t, name, why)) return false;
  const int device = f.q8.device;
  std::string reason;
  if (!e4m3_mma_runs_on(cuda::compute_capability(device), embedded_code(KernelFamily::sm80), &reason))
    return refuse(why, "e4m3: " + reason);
  const int limit = shared_limit(device);
  const int need = forward_shared_bytes(p.dim_qk, p.dim_v, 64, true);
  if (limit > 0 && need > limit)
    return refuse(why, str("e4m3: forward at head dims ", p.dim_qk, "/", p.dim_v, " needs ", need,
                           " bytes of shared memory per block, ", cuda::shared_memory_allowance(device)));
  if (!grid_supported(p, why)) return false;
  if (tile_forced(call.options.q_tile, p.rank) && call.options.q_tile.volume(p.rank) > kE4m3ForwardRowsQ)
    return refuse(why, str("e4m3: query tile volume ", call.options.q_tile.volume(p.rank),
                           " not supported (at most ", kE4m3ForwardRowsQ, " tokens)"));
  const int token_rank = p.rank + 2;  // [B, spatial.., H]
  if (!f32_tokens(f.q_scale, token_rank) || !f32_tokens(f.k_scale, token_rank) ||
      (f.has_lse_bias() && !f32_tokens(f.lse_bias, token_rank)))
    return refuse(why, "e4m3: q_scale, k_scale and lse_bias must be float32 [B, spatial.., H]");
  // The epilogue reads v_scale two channels at a time.
  if (!f32_tokens(f.v_scale, 3) || reinterpret_cast<uintptr_t>(f.v_scale.data) % 8 != 0 ||
      f.v_scale.strides[0] % 2 != 0 || f.v_scale.strides[1] % 2 != 0)
    return refuse(why, "e4m3: v_scale must be float32 [B, Hk, Dv], channels contiguous, 8-byte "
                       "aligned with even strides");
  if (call.lse && call.lse->dtype != DType::f32) return refuse(why, "e4m3: LSE must be float32");
  if (p.additional_kv > 0) {
    if (!f32_tokens(f.add_k_scale, 3))
      return refuse(why, "e4m3: add_k_scale must be float32 [B, Na, Hk]");
    if (!e4m3_rows(f.add_k8, "additional keys", why) || !e4m3_rows(f.add_v8, "additional values", why))
      return false;
  }
  return aligned_rows(call.out, "out", why);
}

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
  if (!grid_supported(p, why)) return false;
  if (!aligned_rows(in.q, "query", why) || !aligned_rows(in.k, "key", why) ||
      !aligned_rows(in.v, "value", why))
    return false;
  if (p.additional_kv > 0 && (!aligned_rows(*in.additional_k, "additional keys", why) ||
                              !aligned_rows(*in.additional_v, "additional values", why)))
    return false;
  // Forced tiles whose kernel variant does not fit the device (a forced tile that no variant
  // runs is the tile choice's error).
  const int wide_single = forward_shared_bytes(p.dim_qk, p.dim_v, 128, false, 1);
  const int wide = wide_single > 0 ? wide_single : forward_shared_bytes(p.dim_qk, p.dim_v, 128);
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
  b.fp8 = true;  // the e4m3 forward (head dims 64, 128; sm_89+)
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
  if (call.fp8 != nullptr) return supports_fp8(call, why);
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
  auto fits = [&](int rows_q, int kv_stages) {
    const int bytes = forward_shared_bytes(p.dim_qk, p.dim_v, rows_q, false, kv_stages);
    return bytes > 0 && (shared_limit <= 0 || bytes <= shared_limit);
  };
  TilePlan plan = choose_forward_tiles(p, options.q_tile, options.kv_tile,
                                       fits(128, 2) || fits(128, 1), options.kv_placements);
  // One K/V stage where two do not fit (the 128-row kernel at head dims 128/128 in 99 KB).
  const int rows = plan.q.volume(p.rank) > 64 ? 128 : 64;
  plan.kv_stages = fits(rows, 2) ? 2 : 1;
  return plan;
}

TilePlan e4m3_forward_tiles(const Problem& p, const KernelOptions& options) {
  return choose_forward_tiles(p, options.q_tile, options.kv_tile, /*wide_fits=*/false,
                              options.kv_placements);
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
  const Problem& p = call.problem;
  if (call.fp8 != nullptr) {
    const TilePlan plan = e4m3_forward_tiles(p, call.options);
    const bool launched = p.dim_qk == 64    ? launch_forward_e4m3_d64(call, plan)
                          : p.dim_qk == 128 ? launch_forward_e4m3_d128(call, plan)
                                            : false;
    if (!launched)
      fail(ErrorKind::unsupported, "portable: e4m3: head dims ", p.dim_qk, "/", p.dim_v,
           " not supported (64/64, 128/128)");
    return;
  }
  const TilePlan plan = forward_tiles(call.problem, call.options, shared_limit(call.in.q.device));
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
