// Dispatch: validates a call once, then runs it on the highest-priority registered backend that
// supports it (or on the one the caller names), explaining every refusal when none can.
#include <cstdint>
#include <sstream>
#include <string>

#include "api/fp8_inputs.hpp"
#include "backend/backend.hpp"
#include "backend/fp8_quantizer.hpp"
#include "gna/gna.hpp"

namespace gna {
namespace {

bool fp8_call(const ForwardCall& call) { return call.fp8 != nullptr; }
bool fp8_call(const BackwardCall&) { return false; }

template <typename Call, typename Supports>
const Backend& choose(const Call& call, bool device, const std::string& wanted, Supports supports) {
  std::ostringstream refusals;
  bool any = false;
  for (const Backend& b : registered_backends()) {
    if (wanted != "auto" && b.name != wanted) continue;
    std::string why;
    if (b.device != device) {
      if (wanted == "auto") continue;
      why = b.name + ": runs on " + (b.device ? "CUDA" : "host") + " tensors, got " +
            (device ? "CUDA" : "host") + " tensors";
    } else if (call.problem.head_rules.groups > 0 && !b.head_rules) {
      why = b.name + ": does not run per-head rules (head_rules.groups=" +
            std::to_string(call.problem.head_rules.groups) + ")";
    } else if (call.problem.slab.active && (!b.slabs || fp8_call(call))) {
      why = b.name + (b.slabs ? ": does not run slabs in the FP8 forward"
                              : ": does not run slabs (query and key offsets)");
    } else if (call.in.additional_kv_counts && (!b.additional_counts || fp8_call(call))) {
      why = b.name + (b.additional_counts
                          ? ": does not run additional_kv_counts in the FP8 forward"
                          : ": does not run per-batch counts of additional keys "
                            "(additional_kv_counts)");
    } else if (fp8_call(call) && !b.fp8) {
      why = b.name + ": does not run the FP8 forward";
    } else if (supports(b) && supports(b)(call, &why)) {
      if (wanted != "auto" || !b.preferred || b.preferred(call.problem, &why)) return b;
    }
    if (why.empty()) {
      why = b.name + ": not supported";
    }
    refusals << (any ? "; " : "") << why;
    any = true;
  }
  if (wanted != "auto" && !any) {
    std::ostringstream names;
    for (const Backend& b : registered_backends()) names << " " << b.name;
    fail_invalid("backend: unknown backend '", wanted, "' (available:", names.str(), ")");
  }
  if (!any) refusals << "no backend for " << (device ? "CUDA" : "host") << " tensors is built in";
  fail(ErrorKind::unsupported, "no backend can run this call: ", refusals.str());
}

// Validates once and fills what forward and backward calls share.
void check_options(const KernelOptions& o) {
  for (int a = 0; a < kMaxRank; ++a) {
    if (o.q_tile.size[a] < 0)
      fail_invalid("options: q_tile[", a, "] must be >= 0 (0: the backend's choice), got ",
                   o.q_tile.size[a]);
    if (o.kv_tile.size[a] < 0)
      fail_invalid("options: kv_tile[", a, "] must be >= 0 (0: the backend's choice), got ",
                   o.kv_tile.size[a]);
  }
  if (o.schedule.ctas < 0)
    fail_invalid("options: schedule.ctas must be >= 0 (0: one per SM), got ", o.schedule.ctas);
  if (static_cast<int>(o.kv_placements) > static_cast<int>(KvPlacements::either))
    fail_invalid("options: kv_placements must be grid (0), placed (1) or either (2), got ",
                 static_cast<int>(o.kv_placements));
  if (static_cast<int>(o.q_placements) > static_cast<int>(KvPlacements::either))
    fail_invalid("options: q_placements must be grid (0), placed (1) or either (2), got ",
                 static_cast<int>(o.q_placements));
}

template <typename Call>
Call make_call(const AttentionParams& params, const AttentionTensors& in, const CallOptions& options) {
  check_options(options.kernel);
  Call call;
  call.problem = make_problem(params, in);
  call.in = in;
  call.stream = options.stream;
  call.options = options.kernel;
  return call;
}

DType lse_dtype(const Problem& p) { return p.dtype == DType::f64 ? DType::f64 : DType::f32; }

const Backend& forward_backend(const ForwardCall& call, const std::string& wanted) {
  return choose(call, !call.in.q.on_host(), wanted,
                [](const Backend& b) { return b.supports_forward; });
}

const Backend& backward_backend(const BackwardCall& call, const std::string& wanted) {
  return choose(call, !call.in.q.on_host(), wanted,
                [](const Backend& b) { return b.supports_backward; });
}

// The backward has no FP8 path: a forward run in FP8 is for inference.
void refuse_fp8_backward(const AttentionTensors& in, const CallOptions& options) {
  if (options.precision == Precision::fp8)
    fail_invalid("precision: the backward does not run in fp8 (the FP8 forward is for "
                 "inference); run the forward and backward in the inputs' dtype");
  if (in.q.dtype == DType::e4m3)
    fail_invalid("query: float8_e4m3fn inputs have no backward (the FP8 forward is for "
                 "inference)");
  if (in.q_scale || in.k_scale || in.v_scale || in.additional_k_scale)
    fail_invalid("q_scale: scales belong to float8_e4m3fn inputs, which have no backward");
}

// Where the quantized operands' views point before the quantization places them.
void* const kQuantizedPlaceholder = reinterpret_cast<void*>(uintptr_t{1} << 20);

// The FP8 forward of a call (float8_e4m3fn inputs, or precision fp8): the call made an FP8 one
// with `layout` (the given operands, or the quantized ones' views at a placeholder address until
// the quantization places them), its problem's dtype the output's.
bool fp8_forward(const CallOptions& options, ForwardCall& call, Fp8Operands& layout) {
  Problem& p = call.problem;
  check_scales_presence(p, call.in);
  if (options.precision != Precision::automatic && options.precision != Precision::fp8)
    fail_invalid("precision: must be automatic (0) or fp8 (1), got ",
                 static_cast<int>(options.precision));
  const bool device = !call.in.q.on_host();
  if (p.dtype == DType::e4m3) {
    layout = given_fp8_operands(p, call.in);
    p.dtype = call.out.dtype;
  } else if (options.precision == Precision::fp8) {
    check_quantizable(p, device);
    // Backends judge these views as they will be (non-null, aligned as the scratch pool's);
    // none reads them before the quantized operands replace them.
    layout = fp8_operand_views(p, kQuantizedPlaceholder, call.in.q.device);
  } else {
    return false;
  }
  check_fp8_output(call.out, device);
  call.fp8 = &layout;
  return true;
}

// A forward call checked and ready to run (out and lse given), FP8 or not.
ForwardCall forward_call(const AttentionParams& params, const AttentionTensors& in, TensorRef& out,
                         TensorRef* lse, const CallOptions& options, Fp8Operands& layout) {
  ForwardCall call = make_call<ForwardCall>(params, in, options);
  call.out = out;
  call.lse = lse;
  fp8_forward(options, call, layout);
  const Problem& p = call.problem;
  int64_t shape[kMaxTensorRank];
  int n = output_shape(p, shape);
  check_tensor("out", out, shape, n, p.dtype, in.q.device);
  if (lse) {
    n = lse_shape(p, shape);
    check_tensor("lse", *lse, shape, n, lse_dtype(p), in.q.device);
  }
  const std::initializer_list<NamedTensor> all = {
      {"query", &in.q}, {"key", &in.k}, {"value", &in.v}, {"additional keys", in.additional_k},
      {"additional values", in.additional_v},
      {"additional_kv_counts", in.additional_kv_counts}, {"q_scale", in.q_scale},
      {"k_scale", in.k_scale}, {"v_scale", in.v_scale},
      {"additional_k_scale", in.additional_k_scale}, {"out", &out}, {"lse", lse}};
  check_output({"out", &out}, all);
  if (lse) check_output({"lse", lse}, all);
  return call;
}

}  // namespace

void attention_forward(const AttentionParams& params, const AttentionTensors& in, TensorRef& out,
                       TensorRef* lse, const CallOptions& options) {
  Fp8Operands layout;
  ForwardCall call = forward_call(params, in, out, lse, options, layout);
  const Backend& backend = forward_backend(call, options.backend);
  if (call.fp8 && in.q.dtype != DType::e4m3) {
    // Quantized only once a backend has taken the call.
    const Fp8Quantizer* quantizer = fp8_quantizer(!in.q.on_host());
    if (!quantizer)
      fail(ErrorKind::unsupported, "precision: fp8 needs the quantization of ",
           in.q.on_host() ? "host" : "CUDA", " tensors, which is not built in");
    const Fp8Quantized quantized = quantizer->quantize(call.problem, in, options.stream);
    call.fp8 = &quantized.operands;
    backend.forward(call);
    return;
  }
  backend.forward(call);
}

void attention_backward(const AttentionParams& params, const AttentionTensors& in,
                        const TensorRef& out, const TensorRef& lse, const TensorRef& d_out,
                        AttentionGradients& grads, const CallOptions& options) {
  refuse_fp8_backward(in, options);
  BackwardCall call = make_call<BackwardCall>(params, in, options);
  const Problem& p = call.problem;
  const int dev = in.q.device;
  int64_t shape[kMaxTensorRank];
  int n = output_shape(p, shape);
  check_tensor("out", out, shape, n, p.dtype, dev);
  check_tensor("d_out", d_out, shape, n, p.dtype, dev);
  n = lse_shape(p, shape);
  check_tensor("lse", lse, shape, n, lse_dtype(p), dev);
  n = token_tensor_shape(p, p.heads_q, p.dim_qk, shape);
  check_tensor("dq", grads.dq, shape, n, p.dtype, dev);
  n = key_tensor_shape(p, p.heads_kv, p.dim_qk, shape);
  check_tensor("dk", grads.dk, shape, n, p.dtype, dev);
  n = key_tensor_shape(p, p.heads_kv, p.dim_v, shape);
  check_tensor("dv", grads.dv, shape, n, p.dtype, dev);
  if (p.additional_kv > 0) {
    if (!grads.d_additional_k || !grads.d_additional_v)
      fail_invalid("gradients of the additional keys and values are required");
    int64_t ks[4] = {p.batch, p.additional_kv, p.heads_kv, p.dim_qk};
    int64_t vs[4] = {p.batch, p.additional_kv, p.heads_kv, p.dim_v};
    check_tensor("d_additional_k", *grads.d_additional_k, ks, 4, p.dtype, dev);
    check_tensor("d_additional_v", *grads.d_additional_v, vs, 4, p.dtype, dev);
  }
  const TensorRef* dak = p.additional_kv > 0 ? grads.d_additional_k : nullptr;
  const TensorRef* dav = p.additional_kv > 0 ? grads.d_additional_v : nullptr;
  const std::initializer_list<NamedTensor> all = {
      {"query", &in.q}, {"key", &in.k}, {"value", &in.v}, {"additional keys", in.additional_k},
      {"additional values", in.additional_v},
      {"additional_kv_counts", in.additional_kv_counts}, {"out", &out}, {"lse", &lse},
      {"d_out", &d_out}, {"dq", &grads.dq}, {"dk", &grads.dk}, {"dv", &grads.dv},
      {"d_additional_k", dak}, {"d_additional_v", dav}};
  for (const NamedTensor& g : {NamedTensor{"dq", &grads.dq}, NamedTensor{"dk", &grads.dk},
                               NamedTensor{"dv", &grads.dv}, NamedTensor{"d_additional_k", dak},
                               NamedTensor{"d_additional_v", dav}})
    if (g.tensor) check_output(g, all);
  call.out = out;
  call.lse = lse;
  call.d_out = d_out;
  call.dq = grads.dq;
  call.dk = grads.dk;
  call.dv = grads.dv;
  call.d_additional_k = grads.d_additional_k;
  call.d_additional_v = grads.d_additional_v;
  backward_backend(call, options.backend).backward(call);
}

std::string select_forward_backend(const AttentionParams& params, const AttentionTensors& in,
                                   const CallOptions& options) {
  ForwardCall call = make_call<ForwardCall>(params, in, options);
  // An FP8 call's output dtype: the inputs' where they are quantized, float16 for e4m3 inputs
  // on CUDA (float32 on the host), as no output is given here.
  call.out.dtype = in.q.dtype != DType::e4m3 ? in.q.dtype
                   : in.q.on_host()          ? DType::f32
                                             : DType::f16;
  Fp8Operands layout;
  fp8_forward(options, call, layout);
  return forward_backend(call, options.backend).name;
}

std::string select_backward_backend(const AttentionParams& params, const AttentionTensors& in,
                                    const CallOptions& options) {
  refuse_fp8_backward(in, options);
  return backward_backend(make_call<BackwardCall>(params, in, options), options.backend).name;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const Backend& b : registered_backends()) names.push_back(b.name);
  return names;
}

}  // namespace gna
