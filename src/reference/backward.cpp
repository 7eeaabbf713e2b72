// Backward by the textbook formulas, with P recomputed from the forward's LSE:
//   P = exp(scale*q.k - lse),  dP = dO.v,  dS = P * (dP - delta),  delta = rowsum(dO * O)
//   dQ = scale * sum_k dS k   (query-stationary, over the query's window)
//   dK = scale * sum_q dS q,  dV = sum_q P dO   (key-stationary, over the inverse rule)
#include <cmath>
#include <vector>

#include "gna/reference/reference.hpp"
#include "reference/token_access.hpp"
#include "util/parallel.hpp"

namespace gna::reference {
namespace {

template <typename T, typename Acc>
struct BackwardPass {
  const Problem& p;
  const AttentionTensors& in;
  const TensorRef& out;
  const TensorRef& lse;
  const TensorRef& d_out;
  Gradients& g;
  const Options& opt;
  int r = p.rank;
  int group = p.heads_q / p.heads_kv;
  Acc scale = effective_scale(p);
  int64_t tokens = p.tokens();
  std::vector<Acc> delta;  // [B, tokens, Hq]

  int64_t row_index(int64_t b, int64_t token, int h) const {
    return (b * tokens + token) * p.heads_q + h;
  }
  int64_t flat_token(const int* x) const {
    int64_t t = 0;
    for (int a = 0; a < r; ++a) t = t * p.axes[a].extent + x[a];
    return t;
  }
  static Acc dot(const T* a, const T* b, int n) {
    Acc s = 0;
    for (int c = 0; c < n; ++c) s += Acc(a[c]) * Acc(b[c]);
    return s;
  }

  void compute_delta() {
    delta.assign(int64_t{p.batch} * tokens * p.heads_q, Acc(0));
    const int64_t rows = static_cast<int64_t>(delta.size());
    parallel_for(rows, threads_for(rows, opt.threads, p.dim_v), [&](int64_t begin, int64_t end) {
      for (int64_t idx = begin; idx < end; ++idx) {
        const Row row = split_row(p, idx, tokens, p.heads_q);
        const int64_t b = row.b;
        const int h = row.h;
        const int* x = row.x;
        delta[idx] = dot(typed<T>(d_out) + token_offset(d_out, r, b, x, h),
                         typed<T>(out) + token_offset(out, r, b, x, h), p.dim_v);
      }
    });
  }

  // Gradient contributions of one (query, key) pair: returns dS; P via p_out.
  Acc pair(const T* q_row, const T* do_row, Acc lse_q, Acc delta_q, const T* k_row,
           const T* v_row, Acc* p_out) const {
    const Acc prob = std::exp(scale * dot(q_row, k_row, p.dim_qk) - lse_q);
    const Acc dp = dot(do_row, v_row, p.dim_v);
    *p_out = prob;
    return prob * (dp - delta_q);
  }

  void compute_dq() {
    const int64_t total = int64_t{p.batch} * tokens * p.heads_q;
    const int64_t row_work = keys_per_query_bound(p) * (2 * p.dim_qk + p.dim_v);
    parallel_for(total, threads_for(total, opt.threads, row_work), [&](int64_t begin, int64_t end) {
      std::vector<int> keys[kMaxRank];
      std::vector<Acc> acc(p.dim_qk);
      for (int64_t idx = begin; idx < end; ++idx) {
        const Row row = split_row(p, idx, tokens, p.heads_q);
        const int64_t b = row.b;
        const int h = row.h, hk = h / group;
        const int* x = row.x;
        const T* q_row = typed<T>(in.q) + token_offset(in.q, r, b, x, h);
        const T* do_row = typed<T>(d_out) + token_offset(d_out, r, b, x, h);
        const Acc lse_q = load_scalar(lse, lse_offset(lse, r, b, x, h));
        const Acc delta_q = delta[idx];
        std::fill(acc.begin(), acc.end(), Acc(0));
        auto add_key = [&](const T* k_row, const T* v_row) {
          Acc prob;
          const Acc ds = pair(q_row, do_row, lse_q, delta_q, k_row, v_row, &prob);
          for (int c = 0; c < p.dim_qk; ++c) acc[c] += ds * Acc(k_row[c]);
        };
        for_each_attended_key_row<T>(p, in, b, x, h, hk, keys, add_key);
        T* dq_row = typed<T>(g.dq) + token_offset(g.dq, r, b, x, h);
        for (int c = 0; c < p.dim_qk; ++c) dq_row[c] = static_cast<T>(scale * acc[c]);
      }
    });
  }

  // dK/dV of one key row (k_row, v_row of KV head hk in batch b) from the queries of each of
  // its query heads h that attend it: for_each_query(h, f) calls f(x) for each (whatever the
  // heads' rule groups: the sum runs over every query head of the KV head).
  template <typename ForEachQuery>
  void key_gradients(int64_t b, int hk, const T* k_row, const T* v_row, ForEachQuery for_each_query,
                     T* dk_row, T* dv_row) const {
    std::vector<Acc> dk(p.dim_qk, Acc(0)), dv(p.dim_v, Acc(0));
    for (int h = hk * group; h < (hk + 1) * group; ++h) {
      for_each_query(h, [&](const int* x) {
        const T* q_row = typed<T>(in.q) + token_offset(in.q, r, b, x, h);
        const T* do_row = typed<T>(d_out) + token_offset(d_out, r, b, x, h);
        const Acc lse_q = load_scalar(lse, lse_offset(lse, r, b, x, h));
        const Acc delta_q = delta[row_index(b, flat_token(x), h)];
        Acc prob;
        const Acc ds = pair(q_row, do_row, lse_q, delta_q, k_row, v_row, &prob);
        for (int c = 0; c < p.dim_qk; ++c) dk[c] += ds * Acc(q_row[c]);
        for (int c = 0; c < p.dim_v; ++c) dv[c] += prob * Acc(do_row[c]);
      });
    }
    for (int c = 0; c < p.dim_qk; ++c) dk_row[c] = static_cast<T>(scale * dk[c]);
    for (int c = 0; c < p.dim_v; ++c) dv_row[c] = static_cast<T>(dv[c]);
  }

  void compute_dkv() {
    const int64_t keys = key_tokens(p);
    const int64_t total = int64_t{p.batch} * keys * p.heads_kv;
    // About as many queries attend a key as keys a query (the inverse rule), per query head.
    const int64_t row_work = keys_per_query_bound(p) * group * 2 * (p.dim_qk + p.dim_v);
    parallel_for(total, threads_for(total, opt.threads, row_work), [&](int64_t begin, int64_t end) {
      std::vector<int> queries[kMaxRank];
      for (int64_t idx = begin; idx < end; ++idx) {
        const int64_t b = idx / (int64_t{p.heads_kv} * keys);
        const int hk = static_cast<int>(idx % p.heads_kv);
        int y[kMaxRank];
        key_token_coordinates(p, (idx / p.heads_kv) % keys, y);
        // The attending queries per rule, recomputed only where the head's rule changes (once
        // per key row without head rules).
        const AxisRule* queries_of = nullptr;
        key_gradients(
            b, hk, typed<T>(in.k) + token_offset(in.k, r, b, y, hk),
            typed<T>(in.v) + token_offset(in.v, r, b, y, hk),
            [&](int h, auto f) {
              const AxisRule* axes = axes_of_head(p, h);
              if (axes != queries_of) {
                attending_queries_per_axis(p, axes, y, queries);
                queries_of = axes;
              }
              for_each_in_product(r, queries, f);
            },
            typed<T>(g.dk) + token_offset(g.dk, r, b, y, hk),
            typed<T>(g.dv) + token_offset(g.dv, r, b, y, hk));
      }
    });
  }

  void compute_additional() {
    if (p.additional_kv == 0) return;
    const int64_t total = int64_t{p.batch} * p.additional_kv * p.heads_kv;
    const int64_t row_work = tokens * group * 2 * (p.dim_qk + p.dim_v);
    parallel_for(total, threads_for(total, opt.threads, row_work), [&](int64_t begin, int64_t end) {
      for (int64_t idx = begin; idx < end; ++idx) {
        const int hk = static_cast<int>(idx % p.heads_kv);
        const int64_t j = (idx / p.heads_kv) % p.additional_kv;
        const int64_t b = idx / (int64_t{p.heads_kv} * p.additional_kv);
        key_gradients(
            b, hk, typed<T>(*in.additional_k) + extra_offset(*in.additional_k, b, j, hk),
            typed<T>(*in.additional_v) + extra_offset(*in.additional_v, b, j, hk),
            [&](int, auto f) {  // every query attends every additional key it counts
              if (j >= additional_keys_of_item(p, in, b)) return;
              int x[kMaxRank];
              for (int64_t t = 0; t < tokens; ++t) {
                token_coordinates(p, t, x);
                f(x);
              }
            },
            typed<T>(*g.d_additional_k) + extra_offset(*g.d_additional_k, b, j, hk),
            typed<T>(*g.d_additional_v) + extra_offset(*g.d_additional_v, b, j, hk));
      }
    });
  }
};

void check_backward_tensors(const Problem& p, const AttentionTensors& in, const TensorRef& out,
                            const TensorRef& lse, const TensorRef& d_out, const Gradients& g) {
  check_host_dtype(p, "query", in.q);
  const DType dt = p.dtype;
  int64_t shape[kMaxTensorRank];
  int n = output_shape(p, shape);
  check_tensor("out", out, shape, n, dt, -1);
  check_tensor("d_out", d_out, shape, n, dt, -1);
  n = lse_shape(p, shape);
  check_tensor("lse", lse, shape, n, lse.dtype == DType::f64 ? DType::f64 : DType::f32, -1);
  n = token_tensor_shape(p, p.heads_q, p.dim_qk, shape);
  check_tensor("dq", g.dq, shape, n, dt, -1);
  n = key_tensor_shape(p, p.heads_kv, p.dim_qk, shape);
  check_tensor("dk", g.dk, shape, n, dt, -1);
  n = key_tensor_shape(p, p.heads_kv, p.dim_v, shape);
  check_tensor("dv", g.dv, shape, n, dt, -1);
  if (p.additional_kv > 0) {
    if (!g.d_additional_k || !g.d_additional_v)
      fail_invalid("reference: gradients of the additional keys and values are required");
    int64_t ks[4] = {p.batch, p.additional_kv, p.heads_kv, p.dim_qk};
    int64_t vs[4] = {p.batch, p.additional_kv, p.heads_kv, p.dim_v};
    check_tensor("d_additional_k", *g.d_additional_k, ks, 4, dt, -1);
    check_tensor("d_additional_v", *g.d_additional_v, vs, 4, dt, -1);
  }
}

template <typename T, typename Acc>
void run(const Problem& p, const AttentionTensors& in, const TensorRef& out, const TensorRef& lse,
         const TensorRef& d_out, Gradients& g, const Options& opt) {
  BackwardPass<T, Acc> pass{p,      in,          out, lse, d_out, g, opt, p.rank, p.heads_q / p.heads_kv,
                             Acc(effective_scale(p)), p.tokens(), {}};
  pass.compute_delta();
  pass.compute_dq();
  pass.compute_dkv();
  pass.compute_additional();
}

}  // namespace

void backward(const Problem& p, const AttentionTensors& in, const TensorRef& out,
              const TensorRef& lse, const TensorRef& d_out, Gradients& grads, const Options& opt) {
  validate(p);
  check_backward_tensors(p, in, out, lse, d_out, grads);
  if (p.dtype == DType::f64)
    run<double, double>(p, in, out, lse, d_out, grads, opt);
  else if (opt.fp64_accumulate)
    run<float, double>(p, in, out, lse, d_out, grads, opt);
  else
    run<float, float>(p, in, out, lse, d_out, grads, opt);
}

}  // namespace gna::reference
