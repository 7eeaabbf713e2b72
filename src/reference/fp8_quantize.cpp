// The FP8 scheme's quantization of host tensors (docs/fp8.md): per token and head scales for Q
// and K (K smoothed by its mean over the spatial keys), per channel scales for V.
#include <cmath>
#include <cstdlib>
#include <vector>

#include "gna/core/fp8.hpp"
#include "reference/fp8.hpp"
#include "reference/token_access.hpp"
#include "util/parallel.hpp"

namespace gna::reference {
namespace {

// Element offset of (b, token, h, 0) in a heads-last tensor of the problem's rank.
int64_t row_offset(const Problem& p, const TensorRef& t, int64_t b, int64_t token, int h) {
  int x[kMaxRank];
  token_coordinates(p, token, x);
  return token_offset(t, p.rank, b, x, h);
}

float* f32(const TensorRef& t) { return static_cast<float*>(t.data); }
uint8_t* codes(const TensorRef& t) { return static_cast<uint8_t*>(t.data); }

// One row quantized at one scale: max_d |x_d - shift_d| / 448, each (x_d - shift_d) encoded at
// its inverse.
template <typename T>
float quantize_row(const T* x, const float* shift, int dim, uint8_t* out) {
  float amax = 0.f;
  for (int d = 0; d < dim; ++d) amax = std::max(amax, std::fabs(float(x[d]) - shift[d]));
  const float inverse = e4m3_inverse_scale(amax);
  for (int d = 0; d < dim; ++d) out[d] = e4m3_encode(float(x[d]) - shift[d], inverse);
  return e4m3_scale(amax);
}

template <typename T>
void quantize_impl(const Problem& p, const AttentionTensors& in, const Fp8Operands& o,
                   std::vector<float>& k_mean) {
  const int64_t tokens = p.tokens();
  const int Hq = p.heads_q, Hk = p.heads_kv, D = p.dim_qk, Dv = p.dim_v;
  const int group = Hq / Hk;
  const T* q = typed<T>(in.q);
  const T* k = typed<T>(in.k);
  const T* v = typed<T>(in.v);

  // Key mean per (b, hk, d) over the spatial keys, summed in double.
  k_mean.assign(size_t(p.batch) * Hk * D, 0.f);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int h = 0; h < Hk; ++h) {
      std::vector<double> sum(D, 0.0);
      for (int64_t t = 0; t < tokens; ++t) {
        const T* row = k + row_offset(p, in.k, b, t, h);
        for (int d = 0; d < D; ++d) sum[d] += double(row[d]);
      }
      for (int d = 0; d < D; ++d) k_mean[(b * Hk + h) * D + d] = float(sum[d] / double(tokens));
    }
  const std::vector<float> zeros(std::max(D, Dv), 0.f);
  const double scale = effective_scale(p);

  const int64_t q_rows = p.batch * tokens * Hq;
  parallel_for(q_rows, threads_for(q_rows, 0, 4 * D), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int h = int(r % Hq);
      const int64_t t = (r / Hq) % tokens, b = r / Hq / tokens;
      const T* row = q + row_offset(p, in.q, b, t, h);
      f32(o.q_scale)[r] = quantize_row(row, zeros.data(), D, codes(o.q8) + r * D);
      const float* mean = &k_mean[(b * Hk + h / group) * D];
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += double(row[d]) * mean[d];
      f32(o.lse_bias)[r] = float(scale * dot);
    }
  });
  const int64_t k_rows = p.batch * tokens * Hk;
  parallel_for(k_rows, threads_for(k_rows, 0, 3 * D), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int h = int(r % Hk);
      const int64_t t = (r / Hk) % tokens, b = r / Hk / tokens;
      f32(o.k_scale)[r] = quantize_row(k + row_offset(p, in.k, b, t, h),
                                       &k_mean[(b * Hk + h) * D], D, codes(o.k8) + r * D);
    }
  });
  for (int64_t b = 0; b < p.batch; ++b)
    for (int j = 0; j < p.additional_kv; ++j)
      for (int h = 0; h < Hk; ++h) {
        const int64_t r = (b * p.additional_kv + j) * Hk + h;
        f32(o.add_k_scale)[r] =
            quantize_row(typed<T>(*in.additional_k) + extra_offset(*in.additional_k, b, j, h),
                         &k_mean[(b * Hk + h) * D], D, codes(o.add_k8) + r * D);
      }

  // V: per (b, hk, channel) amax over every key, spatial and additional.
  float* v_scale = f32(o.v_scale);
  std::vector<float> v_inverse(size_t(p.batch) * Hk * Dv);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int h = 0; h < Hk; ++h) {
      std::vector<float> amax(Dv, 0.f);
      auto visit = [&](const T* row) {
        for (int c = 0; c < Dv; ++c) amax[c] = std::max(amax[c], std::fabs(float(row[c])));
      };
      for (int64_t t = 0; t < tokens; ++t) visit(v + row_offset(p, in.v, b, t, h));
      for (int j = 0; j < p.additional_kv; ++j)
        visit(typed<T>(*in.additional_v) + extra_offset(*in.additional_v, b, j, h));
      for (int c = 0; c < Dv; ++c) {
        v_scale[(b * Hk + h) * Dv + c] = e4m3_scale(amax[c]);
        v_inverse[(b * Hk + h) * Dv + c] = e4m3_inverse_scale(amax[c]);
      }
    }
  auto quantize_v = [&](const T* row, int64_t b, int h, uint8_t* out) {
    for (int c = 0; c < Dv; ++c) out[c] = e4m3_encode(float(row[c]), v_inverse[(b * Hk + h) * Dv + c]);
  };
  parallel_for(k_rows, threads_for(k_rows, 0, Dv), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int h = int(r % Hk);
      const int64_t t = (r / Hk) % tokens, b = r / Hk / tokens;
      quantize_v(v + row_offset(p, in.v, b, t, h), b, h, codes(o.v8) + r * Dv);
    }
  });
  for (int64_t b = 0; b < p.batch; ++b)
    for (int j = 0; j < p.additional_kv; ++j)
      for (int h = 0; h < Hk; ++h)
        quantize_v(typed<T>(*in.additional_v) + extra_offset(*in.additional_v, b, j, h), b, h,
                   codes(o.add_v8) + ((b * p.additional_kv + j) * Hk + h) * Dv);
}

}  // namespace

Fp8Quantized quantize_fp8(const Problem& p, const AttentionTensors& in, std::vector<float>* k_mean) {
  check_host_dtype(p, "query", in.q);
  Fp8Quantized result;
  const size_t bytes = fp8_operands_bytes(p);
  std::shared_ptr<void> storage(std::malloc(std::max<size_t>(bytes, 16)), std::free);
  if (!storage) fail(ErrorKind::runtime, "fp8: out of host memory for ", bytes, " bytes of operands");
  result.storage = storage;
  result.operands = fp8_operand_views(p, storage.get(), -1);
  std::vector<float> mean;
  if (p.dtype == DType::f64)
    quantize_impl<double>(p, in, result.operands, mean);
  else
    quantize_impl<float>(p, in, result.operands, mean);
  if (k_mean) *k_mean = std::move(mean);
  return result;
}

}  // namespace gna::reference
