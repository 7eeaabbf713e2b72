// The FP8 forward emulated on the CPU (docs/fp8.md): e4m3 operands decoded exactly, scores and
// softmax in fp32 as the kernels compute them, P rounded to e4m3 at 448 times its weight. The
// one difference from a kernel: weights are taken against the row's global maximum, where a
// kernel takes them against its running maximum and rescales.
#include <cmath>
#include <limits>
#include <vector>

#include "gna/core/fp8.hpp"
#include "reference/fp8.hpp"
#include "reference/token_access.hpp"
#include "util/parallel.hpp"

namespace gna::reference {
namespace {

const uint8_t* codes(const TensorRef& t) { return static_cast<const uint8_t*>(t.data); }
float scalar(const TensorRef& t, int64_t off) { return static_cast<const float*>(t.data)[off]; }

// Offset of (b, x, h) in a per-token scalar tensor [B, spatial.., H].
int64_t scalar_offset(const TensorRef& t, int rank, int64_t b, const int* x, int h) {
  return lse_offset(t, rank, b, x, h);
}

// A key of the row: its e4m3 key and value rows and its key scale.
struct Fp8Key {
  const uint8_t* k8;
  const uint8_t* v8;
  float k_scale;
};

template <typename Out>
void forward_impl(const Problem& p, const Fp8Operands& in, TensorRef& out, TensorRef* lse,
                  const Options& opt) {
  const int r = p.rank;
  const int group = p.heads_q / p.heads_kv;
  const float scale = static_cast<float>(effective_scale(p));
  const int64_t tokens = p.tokens();
  const int64_t total = int64_t{p.batch} * tokens * p.heads_q;
  const int64_t row_work = keys_per_query_bound(p) * (p.dim_qk + p.dim_v);
  parallel_for(total, threads_for(total, opt.threads, row_work), [&](int64_t begin, int64_t end) {
    std::vector<int> axis_keys[kMaxRank];
    std::vector<Fp8Key> keys;
    std::vector<float> scores, decoded_q(p.dim_qk);
    std::vector<double> acc(p.dim_v);
    for (int64_t idx = begin; idx < end; ++idx) {
      const Row row = split_row(p, idx, tokens, p.heads_q);
      const int64_t b = row.b;
      const int h = row.h, hk = h / group;
      const int* x = row.x;

      keys.clear();
      attended_keys_per_axis(p, axes_of_head(p, h), x, axis_keys);
      for_each_in_product(r, axis_keys, [&](const int* y) {
        keys.push_back({codes(in.k8) + token_offset(in.k8, r, b, y, hk),
                        codes(in.v8) + token_offset(in.v8, r, b, y, hk),
                        scalar(in.k_scale, scalar_offset(in.k_scale, r, b, y, hk))});
      });
      for (int j = 0; j < p.additional_kv; ++j)
        keys.push_back({codes(in.add_k8) + extra_offset(in.add_k8, b, j, hk),
                        codes(in.add_v8) + extra_offset(in.add_v8, b, j, hk),
                        scalar(in.add_k_scale, b * in.add_k_scale.strides[0] +
                                                   j * in.add_k_scale.strides[1] +
                                                   hk * in.add_k_scale.strides[2])});

      const uint8_t* q8 = codes(in.q8) + token_offset(in.q8, r, b, x, h);
      for (int c = 0; c < p.dim_qk; ++c) decoded_q[c] = e4m3_to_float(q8[c]);
      const float q_scale = scalar(in.q_scale, scalar_offset(in.q_scale, r, b, x, h));
      scores.resize(keys.size());
      float m = -std::numeric_limits<float>::infinity();
      for (size_t j = 0; j < keys.size(); ++j) {
        double dot = 0;  // products of e4m3 values are exact in fp32; their sum nearly so
        for (int c = 0; c < p.dim_qk; ++c) dot += double(decoded_q[c]) * e4m3_to_float(keys[j].k8[c]);
        scores[j] = scale * q_scale * keys[j].k_scale * static_cast<float>(dot);
        m = std::max(m, scores[j]);
      }
      double l = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t j = 0; j < keys.size(); ++j) {
        const float weight = std::exp(scores[j] - m);
        l += weight;
        const double p8 = e4m3_to_float(e4m3_probability(weight));
        for (int c = 0; c < p.dim_v; ++c) acc[c] += p8 * e4m3_to_float(keys[j].v8[c]);
      }
      Out* o = static_cast<Out*>(out.data) + token_offset(out, r, b, x, h);
      const int64_t v_scale_row = b * in.v_scale.strides[0] + hk * in.v_scale.strides[1];
      for (int c = 0; c < p.dim_v; ++c)
        o[c] = static_cast<Out>(acc[c] * scalar(in.v_scale, v_scale_row + c) /
                                (double(kE4m3Max) * l));
      if (lse) {
        const float bias =
            in.has_lse_bias() ? scalar(in.lse_bias, scalar_offset(in.lse_bias, r, b, x, h)) : 0.f;
        store_scalar(*lse, lse_offset(*lse, r, b, x, h), double(m) + std::log(l) + double(bias));
      }
    }
  });
}

}  // namespace

void forward_fp8(const Problem& p, const Fp8Operands& in, TensorRef& out, TensorRef* lse,
                 const Options& opt) {
  validate(p);
  if (!in.q8.on_host()) fail_invalid("reference: fp8 operands must be in host memory, got device ", in.q8.device);
  if (out.dtype != DType::f32 && out.dtype != DType::f64)
    fail_invalid("reference: out must be float32 or float64 for the FP8 forward, got ",
                 dtype_name(out.dtype));
  int64_t shape[kMaxTensorRank];
  int n = output_shape(p, shape);
  check_tensor("out", out, shape, n, out.dtype, -1);
  if (lse) {
    n = lse_shape(p, shape);
    check_tensor("lse", *lse, shape, n, lse->dtype == DType::f64 ? DType::f64 : DType::f32, -1);
  }
  if (out.dtype == DType::f64)
    forward_impl<double>(p, in, out, lse, opt);
  else
    forward_impl<float>(p, in, out, lse, opt);
}

}  // namespace gna::reference
