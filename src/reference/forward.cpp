#include <cmath>
#include <limits>
#include <vector>

#include "gna/reference/reference.hpp"
#include "reference/token_access.hpp"
#include "util/parallel.hpp"

namespace gna::reference {
namespace {

template <typename T, typename Acc>
void forward_impl(const Problem& p, const AttentionTensors& in, TensorRef& out, TensorRef* lse,
                  const Options& opt) {
  const int r = p.rank;
  const int group = p.heads_q / p.heads_kv;
  const Acc scale = effective_scale(p);
  const T* q = typed<T>(in.q);
  T* o = typed<T>(out);
  const int64_t tokens = p.tokens();
  const int64_t total = int64_t{p.batch} * tokens * p.heads_q;

  const int64_t row_work = keys_per_query_bound(p) * (p.dim_qk + p.dim_v);
  parallel_for(total, threads_for(total, opt.threads, row_work), [&](int64_t begin, int64_t end) {
    std::vector<int> keys[kMaxRank];
    std::vector<const T*> k_rows, v_rows;
    std::vector<Acc> scores, acc(p.dim_v);
    for (int64_t idx = begin; idx < end; ++idx) {
      const Row row = split_row(p, idx, tokens, p.heads_q);
      const int64_t b = row.b;
      const int h = row.h, hk = h / group;
      const int* x = row.x;
      const T* q_row = q + token_offset(in.q, r, b, x, h);

      k_rows.clear();
      v_rows.clear();
      for_each_attended_key_row<T>(p, in, b, x, h, hk, keys, [&](const T* k_row, const T* v_row) {
        k_rows.push_back(k_row);
        v_rows.push_back(v_row);
      });

      scores.resize(k_rows.size());
      Acc max_score = -std::numeric_limits<Acc>::infinity();
      bool nan_score = false;
      for (size_t j = 0; j < k_rows.size(); ++j) {
        Acc dot = 0;
        for (int c = 0; c < p.dim_qk; ++c) dot += Acc(q_row[c]) * Acc(k_rows[j][c]);
        scores[j] = scale * dot;
        max_score = std::max(max_score, scores[j]);
        nan_score = nan_score || std::isnan(scores[j]);
      }
      Acc denom = 0;
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (size_t j = 0; j < k_rows.size(); ++j) {
        const Acc w = std::exp(scores[j] - max_score);
        denom += w;
        for (int c = 0; c < p.dim_v; ++c) acc[c] += w * Acc(v_rows[j][c]);
      }
      T* o_row = o + token_offset(out, r, b, x, h);
      for (int c = 0; c < p.dim_v; ++c) o_row[c] = static_cast<T>(acc[c] / denom);
      // A +inf score makes the sum +inf: so is the logsumexp, as dense attention computes it
      // (its weights, inf / inf, are NaN there too). A NaN score makes it NaN, also beside a
      // +inf one (std::max passes over NaN).
      const bool infinite = max_score == std::numeric_limits<Acc>::infinity();
      if (lse)
        store_scalar(*lse, lse_offset(*lse, r, b, x, h),
                     nan_score ? std::numeric_limits<Acc>::quiet_NaN()
                     : infinite ? max_score : max_score + std::log(denom));
    }
  });
}

void check_forward_tensors(const Problem& p, const AttentionTensors& in, const TensorRef& out,
                           const TensorRef* lse) {
  check_host_dtype(p, "query", in.q);
  const DType dt = p.dtype;
  int64_t shape[kMaxTensorRank];
  int n = output_shape(p, shape);
  check_tensor("out", out, shape, n, dt, -1);
  if (lse) {
    n = lse_shape(p, shape);
    check_tensor("lse", *lse, shape, n, lse->dtype == DType::f64 ? DType::f64 : DType::f32, -1);
  }
}

}  // namespace

void forward(const Problem& p, const AttentionTensors& in, TensorRef& out, TensorRef* lse,
             const Options& opt) {
  validate(p);
  check_forward_tensors(p, in, out, lse);
  if (p.dtype == DType::f64)
    forward_impl<double, double>(p, in, out, lse, opt);
  else if (opt.fp64_accumulate)
    forward_impl<float, double>(p, in, out, lse, opt);
  else
    forward_impl<float, float>(p, in, out, lse, opt);
}

}  // namespace gna::reference
