// The public C++ API of gna: generalized neighborhood attention forward and backward on host or
// CUDA tensors, with the backend chosen by dispatch (or forced by name).
#pragma once

#include <string>
#include <vector>

#include "gna/attention_params.hpp"
#include "gna/core/error.hpp"
#include "gna/kernel_options.hpp"
#include "gna/neighborhood_params.hpp"
#include "gna/ops/merge.hpp"

namespace gna {

// The arithmetic of a forward call (docs/fp8.md). automatic: the inputs' dtype (float8_e4m3fn
// inputs run the FP8 forward). fp8: float16 / bfloat16 (float32, float64 on the host) inputs are
// quantized to e4m3 with per-token Q and K scales (K smoothed by its mean) and per-channel V
// scales, and the FP8 forward runs on them; output in the inputs' dtype, LSE float32. Forward
// only: a backward with fp8 is refused.
enum class Precision { automatic = 0, fp8 = 1 };

struct CallOptions {
  std::string backend = "auto";  // "auto" or a registered backend name (see backend_names())
  void* stream = nullptr;        // cudaStream_t for CUDA tensors (null: the default stream)
  KernelOptions kernel;
  Precision precision = Precision::automatic;
};

// out: [B, spatial.., Hq, Dv] in the inputs' dtype; lse (optional): [B, spatial.., Hq] float32
// (float64 allowed for float64 inputs), natural log. float8_e4m3fn inputs (with their scales in
// `in`): out in float16 or bfloat16 (float32 or float64 on the host), lse float32.
void attention_forward(const AttentionParams& params, const AttentionTensors& in, TensorRef& out,
                       TensorRef* lse, const CallOptions& options = {});

struct AttentionGradients {
  TensorRef dq, dk, dv;
  TensorRef* d_additional_k = nullptr;
  TensorRef* d_additional_v = nullptr;
};

void attention_backward(const AttentionParams& params, const AttentionTensors& in,
                        const TensorRef& out, const TensorRef& lse, const TensorRef& d_out,
                        AttentionGradients& grads, const CallOptions& options = {});

// Which backend dispatch would run for this call ("" never: throws with every refusal listed).
std::string select_forward_backend(const AttentionParams& params, const AttentionTensors& in,
                                   const CallOptions& options = {});
std::string select_backward_backend(const AttentionParams& params, const AttentionTensors& in,
                                    const CallOptions& options = {});

std::vector<std::string> backend_names();

// The GPU backends keep their scratch memory (the backward's fp32 dQ accumulator, 4 bytes per
// query element, and per-row statistics) in a pool between calls, so that a training step does
// not map and unmap it each time. This waits for the devices that have such a pool and gives the
// memory back; later calls allocate again. Nothing to do without CUDA.
void release_cached_memory();

// The unfused neighborhood operators (docs/rule.md section 6) on heads-first tensors (shapes in
// gna/neighborhood_params.hpp): PN (na_qk), NN (na_av) and their backward passes, which use the
// inverse-neighborhood operator. params.stride must be 1 on every axis; params.scale is ignored
// (no scale is applied: the caller scales the query). Host tensors run the CPU reference
// (float32/float64), CUDA tensors the CUDA kernels (float32/float16/bfloat16, fp32
// accumulation) on options.stream; options.backend and options.kernel are not used.
//   na_qk: attn = q . k over each query's window (+ rpb [heads, 2K-1 per axis] if given);
//          slots without a key (causal windows) are -inf.
//   na_av: out = attn . v over each query's window (slots without a key are ignored).
void na_qk(const AttentionParams& params, const TensorRef& q, const TensorRef& k,
           const TensorRef* rpb, const TensorRef& attn, const CallOptions& options = {});
void na_av(const AttentionParams& params, const TensorRef& attn, const TensorRef& v,
           const TensorRef& out, const CallOptions& options = {});
// Gradients of na_qk (each output optional): dq, dk and the bias gradient d_rpb.
void na_qk_backward(const AttentionParams& params, const TensorRef& q, const TensorRef& k,
                    const TensorRef& d_attn, const TensorRef* dq, const TensorRef* dk,
                    const TensorRef* d_rpb, const CallOptions& options = {});
// Gradients of na_av (each output optional): d_attn (0 in slots without a key) and dv.
void na_av_backward(const AttentionParams& params, const TensorRef& attn, const TensorRef& v,
                    const TensorRef& d_out, const TensorRef* d_attn, const TensorRef* dv,
                    const CallOptions& options = {});

}  // namespace gna
