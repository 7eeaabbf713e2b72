// The interface between dispatch (src/api) and the backends (the CPU reference in src/reference,
// the CUDA kernels in src/kernels). A backend registers itself once at static-initialisation
// time (see GNA_REGISTER_BACKEND); dispatch asks each, in priority order, whether it supports a
// call.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gna/attention_params.hpp"
#include "gna/core/tiling.hpp"
#include "gna/kernel_options.hpp"

namespace gna {

// The quantized operands of one FP8 forward call (docs/fp8.md; e4m3 as gna/core/fp8.hpp
// converts). Views like the call's other tensors, on the call's device, each with a contiguous
// last dimension. Per query row i and key j the kernels compute, in fp32 but for the two GEMMs'
// e4m3 operands:
//   s_ij = scale * q_scale_i * k_scale_j * dot(q8_i, k8_j)
//   p_ij = exp(s_ij - m) (m: running max), l = sum p_ij, acc += e4m3(p_ij * 448) * v8_j
//   O_i = acc * v_scale / (448 * l)  (out's dtype),  LSE_i = m + ln(l) + lse_bias_i
// The key mean k_mean (f32 [B, Hk, D], over the spatial keys) that k8 is smoothed by cancels in
// the softmax; lse_bias = scale * dot(q, k_mean) restores the LSE of the unsmoothed scores.
struct Fp8Operands {
  TensorRef q8;        // e4m3 [B, spatial.., Hq, D]   q / q_scale
  TensorRef q_scale;   // f32  [B, spatial.., Hq]      amax_d |q| / 448 (1 where 0)
  TensorRef k8;        // e4m3 [B, spatial.., Hk, D]   (k - k_mean) / k_scale
  TensorRef k_scale;   // f32  [B, spatial.., Hk]      amax_d |k - k_mean| / 448 (1 where 0)
  TensorRef v8;        // e4m3 [B, spatial.., Hk, Dv]  v / v_scale
  TensorRef v_scale;   // f32  [B, Hk, Dv]             per channel, amax over every key / 448
  // The additional keys and values (problem.additional_kv > 0; else not read): k_mean
  // subtracted too, v_scale shared.
  TensorRef add_k8;       // e4m3 [B, Na, Hk, D]
  TensorRef add_k_scale;  // f32  [B, Na, Hk]
  TensorRef add_v8;       // e4m3 [B, Na, Hk, Dv]
  // f32 [B, spatial.., Hq]; data null: absent, read as 0 (e4m3 inputs the caller quantized).
  TensorRef lse_bias;
  bool has_lse_bias() const { return lse_bias.data != nullptr; }
};

struct ForwardCall {
  Problem problem;            // validated; in an FP8 call, dtype is the output's
  AttentionTensors in;        // in an FP8 call: what the caller gave (read by support checks only)
  TensorRef out;              // [B, spatial.., Hq, Dv], dtype problem.dtype
  TensorRef* lse = nullptr;   // [B, spatial.., Hq] float32, optional
  void* stream = nullptr;     // cudaStream_t for device tensors
  KernelOptions options;
  // Non-null: an FP8 call; the kernels read their operands here, not from `in`. Only backends
  // with Backend::fp8 are offered it.
  const Fp8Operands* fp8 = nullptr;
};

struct BackwardCall {
  Problem problem;
  AttentionTensors in;
  TensorRef out, lse, d_out;  // forward output, its LSE (float32) and the incoming gradient
  TensorRef dq, dk, dv;
  TensorRef* d_additional_k = nullptr;
  TensorRef* d_additional_v = nullptr;
  void* stream = nullptr;
  KernelOptions options;
};

struct Backend {
  std::string name;
  int priority = 0;          // higher is tried first
  bool device = false;       // runs on CUDA tensors (false: host tensors)
  bool head_rules = false;   // runs problems with per-head rules (Problem::head_rules)
  bool slabs = false;        // runs slab problems (Problem::slab: global-coordinate offsets)
  bool additional_counts = false;  // runs per-batch counts of additional keys
                                   // (AttentionTensors::additional_kv_counts), not in FP8
  bool fp8 = false;          // runs FP8 forward calls (ForwardCall::fp8); its supports_forward
                             // says which
  // Return true when the call can run; otherwise write the reason (which parameter, which limit).
  std::function<bool(const ForwardCall&, std::string* why)> supports_forward;
  std::function<void(const ForwardCall&)> forward;
  std::function<bool(const BackwardCall&, std::string* why)> supports_backward;
  std::function<void(const BackwardCall&)> backward;
  // Optional: automatic dispatch (no backend named) passes over this backend when it returns
  // false (it supports the call but a lower-priority one is expected to run it faster); a
  // caller that names the backend still gets it.
  std::function<bool(const Problem&, std::string* why)> preferred;
  // Optional: gives back the memory the backend keeps between calls
  // (gna::release_cached_memory). A plain function, so that backends sharing one pool name the
  // same one and a release runs it once.
  void (*release_memory)() = nullptr;
};

void register_backend(const Backend& backend);
const std::vector<Backend>& registered_backends();

struct BackendRegistrar {
  explicit BackendRegistrar(const Backend& b) { register_backend(b); }
};

#define GNA_REGISTER_BACKEND_CAT2(a, b) a##b
#define GNA_REGISTER_BACKEND_CAT(a, b) GNA_REGISTER_BACKEND_CAT2(a, b)
#define GNA_REGISTER_BACKEND(make_backend) \
  static ::gna::BackendRegistrar GNA_REGISTER_BACKEND_CAT(gna_backend_registrar_, __LINE__)(make_backend())

}  // namespace gna
