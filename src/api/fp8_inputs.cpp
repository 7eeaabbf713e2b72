#include "api/fp8_inputs.hpp"

#include <cmath>

#include "gna/core/error.hpp"

namespace gna {
namespace {

struct NamedScale {
  const char* name;
  const TensorRef* tensor;
};

// Host scales are read: each must be finite and > 0 (a zero or non-finite scale makes every
// score of its row NaN or infinite).
void check_scale_values(const char* name, const TensorRef& t) {
  if (!t.on_host() || t.numel() == 0) return;
  int64_t index[kMaxTensorRank] = {};
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = 0;
    for (int d = 0; d < t.rank; ++d) off += index[d] * t.strides[d];
    const float v = static_cast<const float*>(t.data)[off];
    if (!(std::isfinite(v) && v > 0.f))
      fail_invalid(name, ": scales must be finite and > 0, got ", v, " at element ", n);
    for (int d = t.rank - 1; d >= 0 && ++index[d] == t.shape[d]; --d) index[d] = 0;
  }
}

}  // namespace

void check_scales_presence(const Problem& p, const AttentionTensors& in) {
  const NamedScale scales[] = {{"q_scale", in.q_scale},
                               {"k_scale", in.k_scale},
                               {"v_scale", in.v_scale},
                               {"additional_k_scale", in.additional_k_scale}};
  if (p.dtype != DType::e4m3) {
    for (const NamedScale& s : scales)
      if (s.tensor)
        fail_invalid(s.name, ": scales come with float8_e4m3fn inputs only, got ",
                     dtype_name(p.dtype), " inputs");
    return;
  }
  for (int i = 0; i < 3; ++i)
    if (!scales[i].tensor)
      fail_invalid(scales[i].name, ": float8_e4m3fn inputs need their scales, got none");
  if (p.additional_kv > 0 && !in.additional_k_scale)
    fail_invalid("additional_k_scale: float8_e4m3fn additional keys need their scales, got none");
  if (p.additional_kv == 0 && in.additional_k_scale)
    fail_invalid("additional_k_scale: given without additional keys");
}

Fp8Operands given_fp8_operands(const Problem& p, const AttentionTensors& in) {
  check_scales_presence(p, in);
  const int dev = in.q.device;
  int64_t shape[kMaxTensorRank];
  Fp8Operands o;
  o.q8 = in.q;
  o.k8 = in.k;
  o.v8 = in.v;
  int n = token_tensor_shape(p, p.heads_q, 1, shape) - 1;
  check_tensor("q_scale", *in.q_scale, shape, n, DType::f32, dev);
  o.q_scale = *in.q_scale;
  n = token_tensor_shape(p, p.heads_kv, 1, shape) - 1;
  check_tensor("k_scale", *in.k_scale, shape, n, DType::f32, dev);
  o.k_scale = *in.k_scale;
  const int64_t v_shape[3] = {p.batch, p.heads_kv, p.dim_v};
  check_tensor("v_scale", *in.v_scale, v_shape, 3, DType::f32, dev);
  o.v_scale = *in.v_scale;
  if (p.additional_kv > 0) {
    const int64_t k_shape[3] = {p.batch, p.additional_kv, p.heads_kv};
    check_tensor("additional_k_scale", *in.additional_k_scale, k_shape, 3, DType::f32, dev);
    o.add_k8 = *in.additional_k;
    o.add_v8 = *in.additional_v;
    o.add_k_scale = *in.additional_k_scale;
  }
  check_scale_values("q_scale", o.q_scale);
  check_scale_values("k_scale", o.k_scale);
  check_scale_values("v_scale", o.v_scale);
  if (p.additional_kv > 0) check_scale_values("additional_k_scale", o.add_k_scale);
  return o;
}

void check_quantizable(const Problem& p, bool device) {
  const bool ok = p.dtype == DType::f16 || p.dtype == DType::bf16 || p.dtype == DType::f32 ||
                  (!device && p.dtype == DType::f64);
  if (!ok)
    fail_invalid("precision: fp8 quantizes float16, bfloat16 or float32 inputs",
                 device ? "" : " (float64 on the host)", ", got ", dtype_name(p.dtype));
}

void check_fp8_output(const TensorRef& out, bool device) {
  const bool ok = device ? out.dtype == DType::f16 || out.dtype == DType::bf16 ||
                               out.dtype == DType::f32
                         : out.dtype == DType::f32 || out.dtype == DType::f64;
  if (!ok)
    fail_invalid("out: the FP8 forward writes ",
                 device ? "float16, bfloat16 or float32" : "float32 or float64 (host)",
                 ", got ", dtype_name(out.dtype));
}

}  // namespace gna
