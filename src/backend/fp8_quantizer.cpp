#include "backend/fp8_quantizer.hpp"

#include <vector>

#include "gna/core/error.hpp"

namespace gna {

static std::vector<Fp8Quantizer>& quantizers() {
  static std::vector<Fp8Quantizer> registry;
  return registry;
}

void register_fp8_quantizer(const Fp8Quantizer& quantizer) { quantizers().push_back(quantizer); }

const Fp8Quantizer* fp8_quantizer(bool device) {
  for (const Fp8Quantizer& q : quantizers())
    if (q.device == device) return &q;
  return nullptr;
}

namespace {

// Places contiguous tensors one after another, each at a 16-byte boundary.
struct Placer {
  char* base;
  int device;
  size_t bytes = 0;

  TensorRef place(DType dtype, std::initializer_list<int64_t> shape) {
    bytes = (bytes + 15) / 16 * 16;
    TensorRef t = contiguous_tensor(base ? base + bytes : nullptr, dtype, shape, device);
    bytes += static_cast<size_t>(t.numel()) * dtype_size(dtype);
    return t;
  }
  // [B, spatial.., heads(, dim)]: the rank follows the problem.
  TensorRef place_tokens(const Problem& p, DType dtype, int heads, int dim) {
    int64_t shape[kMaxTensorRank];
    int n = token_tensor_shape(p, heads, dim, shape);
    if (dim == 0) --n;  // per-token scalars: no dim axis
    bytes = (bytes + 15) / 16 * 16;
    TensorRef t = contiguous_tensor(base ? base + bytes : nullptr, dtype, shape, n, device);
    bytes += static_cast<size_t>(t.numel()) * dtype_size(dtype);
    return t;
  }
};

Fp8Operands layout(const Problem& p, Placer& at) {
  Fp8Operands o;
  o.q8 = at.place_tokens(p, DType::e4m3, p.heads_q, p.dim_qk);
  o.q_scale = at.place_tokens(p, DType::f32, p.heads_q, 0);
  o.k8 = at.place_tokens(p, DType::e4m3, p.heads_kv, p.dim_qk);
  o.k_scale = at.place_tokens(p, DType::f32, p.heads_kv, 0);
  o.v8 = at.place_tokens(p, DType::e4m3, p.heads_kv, p.dim_v);
  o.v_scale = at.place(DType::f32, {p.batch, p.heads_kv, p.dim_v});
  if (p.additional_kv > 0) {
    o.add_k8 = at.place(DType::e4m3, {p.batch, p.additional_kv, p.heads_kv, p.dim_qk});
    o.add_k_scale = at.place(DType::f32, {p.batch, p.additional_kv, p.heads_kv});
    o.add_v8 = at.place(DType::e4m3, {p.batch, p.additional_kv, p.heads_kv, p.dim_v});
  }
  o.lse_bias = at.place_tokens(p, DType::f32, p.heads_q, 0);
  return o;
}

}  // namespace

Fp8Operands fp8_operand_views(const Problem& p, void* base, int device) {
  Placer at{static_cast<char*>(base), device};
  return layout(p, at);
}

size_t fp8_operands_bytes(const Problem& p) {
  Placer at{nullptr, -1};
  layout(p, at);
  return at.bytes;
}

}  // namespace gna
