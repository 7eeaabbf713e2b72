// The unfused operators on the CPU: plain loops over each query's window slots (PN, NN) or over
// the queries attending each key by the inverse rule (IN), and the bias gradient per head.
#include "gna/reference/unfused.hpp"

#include <limits>
#include <vector>

#include "gna/core/error.hpp"
#include "gna/core/neighborhood.hpp"
#include "reference/token_access.hpp"
#include "util/parallel.hpp"

namespace gna::reference {
namespace {

// A flat row over [batch, heads, tokens] (tokens fastest), as the passes enumerate rows.
struct HeadRow {
  int64_t b;
  int h;
  int x[kMaxRank];
};
HeadRow split_head_row(const Problem& p, int64_t idx) {
  const int64_t tokens = p.tokens();
  HeadRow r{idx / (tokens * p.heads_q), static_cast<int>((idx / tokens) % p.heads_q), {0, 0, 0}};
  token_coordinates(p, idx % tokens, r.x);
  return r;
}

int64_t rows_of(const Problem& p) { return int64_t{p.batch} * p.heads_q * p.tokens(); }

// One query's window over every axis.
struct Window {
  AxisWindow axis[kMaxRank];
  // Full key coordinates of flat slot s; false when the slot holds no key.
  bool key(const Problem& p, int s, int* y) const {
    int slot[kMaxRank];
    split_slot(p.axes, p.rank, s, slot);
    for (int a = 0; a < p.rank; ++a) {
      if (slot[a] >= axis[a].valid) return false;
      y[a] = key_of_slot(p.axes[a], axis[a], slot[a]);
    }
    return true;
  }
};
Window window_of(const Problem& p, const int* x) {
  Window w;
  for (int a = 0; a < p.rank; ++a) w.axis[a] = axis_window(p.axes[a], x[a]);
  return w;
}

int64_t rpb_offset(const Problem& p, const TensorRef& rpb, int h, const int* x, const int* y) {
  int64_t off = h * rpb.strides[0];
  for (int a = 0; a < p.rank; ++a) off += rpb_index(p.axes[a], x[a], y[a]) * rpb.strides[1 + a];
  return off;
}

template <typename T>
const T* row_ptr(const TensorRef& t, const Problem& p, int64_t b, int h, const int* x) {
  return typed<T>(t) + heads_first_offset(t, p.rank, b, h, x);
}

// PN: out[i, s] = a_i . b_key(i,s) (+ bias); `empty` in slots without a key.
template <typename T>
void pn(const Problem& p, const TensorRef& a, const TensorRef& b, const TensorRef* rpb,
        const TensorRef& out, double empty, const Options& opt) {
  const int slots = window_slots(p.axes, p.rank);
  parallel_for(rows_of(p), opt.threads, [&](int64_t begin, int64_t end) {
    for (int64_t idx = begin; idx < end; ++idx) {
      const HeadRow r = split_head_row(p, idx);
      const Window w = window_of(p, r.x);
      const T* a_row = row_ptr<T>(a, p, r.b, r.h, r.x);
      T* o_row = typed<T>(out) + heads_first_offset(out, p.rank, r.b, r.h, r.x);
      for (int s = 0; s < slots; ++s) {
        int y[kMaxRank];
        if (!w.key(p, s, y)) {
          o_row[s] = static_cast<T>(empty);
          continue;
        }
        const T* b_row = row_ptr<T>(b, p, r.b, r.h, y);
        double dot = 0;
        for (int c = 0; c < p.dim_qk; ++c) dot += double(a_row[c]) * double(b_row[c]);
        if (rpb) dot += double(typed<T>(*rpb)[rpb_offset(p, *rpb, r.h, r.x, y)]);
        o_row[s] = static_cast<T>(dot);
      }
    }
  });
}

// NN: out_i = sum over slots with a key of w[i, s] * x_key(i,s).
template <typename T>
void nn(const Problem& p, const TensorRef& w, const TensorRef& x, const TensorRef& out,
        const Options& opt) {
  const int slots = window_slots(p.axes, p.rank);
  parallel_for(rows_of(p), opt.threads, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(p.dim_v);
    for (int64_t idx = begin; idx < end; ++idx) {
      const HeadRow r = split_head_row(p, idx);
      const Window win = window_of(p, r.x);
      const T* w_row = row_ptr<T>(w, p, r.b, r.h, r.x);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int s = 0; s < slots; ++s) {
        int y[kMaxRank];
        if (!win.key(p, s, y)) continue;
        const T* x_row = row_ptr<T>(x, p, r.b, r.h, y);
        for (int c = 0; c < p.dim_v; ++c) acc[c] += double(w_row[s]) * double(x_row[c]);
      }
      T* o_row = typed<T>(out) + heads_first_offset(out, p.rank, r.b, r.h, r.x);
      for (int c = 0; c < p.dim_v; ++c) o_row[c] = static_cast<T>(acc[c]);
    }
  });
}

// IN: out_j = sum over queries i attending key j of w[i, slot(i, j)] * x_i.
template <typename T>
void in(const Problem& p, const TensorRef& w, const TensorRef& x, const TensorRef& out,
        const Options& opt) {
  parallel_for(rows_of(p), opt.threads, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(p.dim_v);
    // Per axis: attending queries (full coordinates), the key's slot in each one's window, and
    // their positions 0..n-1 (enumerated as a product to pair queries with slots).
    std::vector<int> queries[kMaxRank], slots[kMaxRank], positions[kMaxRank];
    for (int64_t idx = begin; idx < end; ++idx) {
      const HeadRow r = split_head_row(p, idx);  // r.x: the key
      for (int a = 0; a < p.rank; ++a) {
        const AxisRule& rule = p.axes[a];
        const AxisQueries q = axis_queries(rule, r.x[a]);
        queries[a].clear();
        slots[a].clear();
        positions[a].clear();
        for (int ig = q.queries.begin; ig < q.queries.end; ++ig) {
          queries[a].push_back(coordinate_of(rule, q.group, ig));
          slots[a].push_back(slot_in_window(rule, q.n, ig, index_in_group(rule, r.x[a])));
          positions[a].push_back(ig - q.queries.begin);
        }
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for_each_in_product(p.rank, positions, [&](const int* t) {
        int xq[kMaxRank], slot[kMaxRank];
        for (int a = 0; a < p.rank; ++a) {
          xq[a] = queries[a][t[a]];
          slot[a] = slots[a][t[a]];
        }
        const double weight = double(row_ptr<T>(w, p, r.b, r.h, xq)[flat_slot(p.axes, p.rank, slot)]);
        const T* x_row = row_ptr<T>(x, p, r.b, r.h, xq);
        for (int c = 0; c < p.dim_v; ++c) acc[c] += weight * double(x_row[c]);
      });
      T* o_row = typed<T>(out) + heads_first_offset(out, p.rank, r.b, r.h, r.x);
      for (int c = 0; c < p.dim_v; ++c) o_row[c] = static_cast<T>(acc[c]);
    }
  });
}

// d_rpb[h, e] = sum over (b, query, slot with a key) whose bias entry is e of d_attn.
template <typename T>
void rpb_grad(const Problem& p, const TensorRef& d_attn, const TensorRef& d_rpb,
              const Options& opt) {
  const int slots = window_slots(p.axes, p.rank);
  int64_t rpb_shape[kMaxTensorRank];
  neighborhood_rpb_shape(p, rpb_shape);
  parallel_for(p.heads_q, opt.threads, [&](int64_t begin, int64_t end) {
    for (int64_t h = begin; h < end; ++h) {
      // Dense [2K0-1, 2K1-1, ..] accumulator of this head, row-major.
      int64_t entries = 1;
      for (int a = 0; a < p.rank; ++a) entries *= rpb_shape[1 + a];
      std::vector<double> acc(entries, 0.0);
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t token = 0; token < p.tokens(); ++token) {
          int x[kMaxRank];
          token_coordinates(p, token, x);
          const Window w = window_of(p, x);
          const T* g_row = row_ptr<T>(d_attn, p, b, static_cast<int>(h), x);
          for (int s = 0; s < slots; ++s) {
            int y[kMaxRank];
            if (!w.key(p, s, y)) continue;
            int64_t e = 0;
            for (int a = 0; a < p.rank; ++a)
              e = e * rpb_shape[1 + a] + rpb_index(p.axes[a], x[a], y[a]);
            acc[e] += double(g_row[s]);
          }
        }
      for (int64_t e = 0; e < entries; ++e) {
        int64_t off = h * d_rpb.strides[0], rest = e;
        for (int a = p.rank - 1; a >= 0; --a) {
          off += (rest % rpb_shape[1 + a]) * d_rpb.strides[1 + a];
          rest /= rpb_shape[1 + a];
        }
        typed<T>(d_rpb)[off] = static_cast<T>(acc[e]);
      }
    }
  });
}

// Calls f(T{}) with the element type of the problem.
template <typename F>
void with_element_type(const Problem& p, F f) {
  if (p.dtype == DType::f64)
    f(double{});
  else
    f(float{});
}

}  // namespace

void na_qk(const Problem& p, const TensorRef& q, const TensorRef& k, const TensorRef* rpb,
           const TensorRef& attn, const Options& opt) {
  check_host_dtype(p, "query", q);
  check_neighborhood_tokens("query", q, p, p.dim_qk, -1);
  check_neighborhood_tokens("key", k, p, p.dim_qk, -1);
  if (rpb) check_neighborhood_rpb("rpb", *rpb, p, -1);
  check_neighborhood_weights("attn", attn, p, -1);
  with_element_type(p, [&](auto t) {
    using T = decltype(t);
    pn<T>(p, q, k, rpb, attn, -std::numeric_limits<double>::infinity(), opt);
  });
}

void na_av(const Problem& p, const TensorRef& attn, const TensorRef& v, const TensorRef& out,
           const Options& opt) {
  check_host_dtype(p, "value", v);
  check_neighborhood_weights("attn", attn, p, -1);
  check_neighborhood_tokens("value", v, p, p.dim_v, -1);
  check_neighborhood_tokens("out", out, p, p.dim_v, -1);
  with_element_type(p, [&](auto t) { nn<decltype(t)>(p, attn, v, out, opt); });
}

void na_qk_backward(const Problem& p, const TensorRef& q, const TensorRef& k,
                    const TensorRef& d_attn, const TensorRef* dq, const TensorRef* dk,
                    const TensorRef* d_rpb, const Options& opt) {
  check_host_dtype(p, "query", q);
  check_neighborhood_tokens("query", q, p, p.dim_qk, -1);
  check_neighborhood_tokens("key", k, p, p.dim_qk, -1);
  check_neighborhood_weights("d_attn", d_attn, p, -1);
  if (dq) check_neighborhood_tokens("dq", *dq, p, p.dim_qk, -1);
  if (dk) check_neighborhood_tokens("dk", *dk, p, p.dim_qk, -1);
  if (d_rpb) check_neighborhood_rpb("d_rpb", *d_rpb, p, -1);
  with_element_type(p, [&](auto t) {
    using T = decltype(t);
    if (dq) nn<T>(p, d_attn, k, *dq, opt);
    if (dk) in<T>(p, d_attn, q, *dk, opt);
    if (d_rpb) rpb_grad<T>(p, d_attn, *d_rpb, opt);
  });
}

void na_av_backward(const Problem& p, const TensorRef& attn, const TensorRef& v,
                    const TensorRef& d_out, const TensorRef* d_attn, const TensorRef* dv,
                    const Options& opt) {
  check_host_dtype(p, "value", v);
  check_neighborhood_weights("attn", attn, p, -1);
  check_neighborhood_tokens("value", v, p, p.dim_v, -1);
  check_neighborhood_tokens("d_out", d_out, p, p.dim_v, -1);
  if (d_attn) check_neighborhood_weights("d_attn", *d_attn, p, -1);
  if (dv) check_neighborhood_tokens("dv", *dv, p, p.dim_v, -1);
  with_element_type(p, [&](auto t) {
    using T = decltype(t);
    if (d_attn) pn<T>(p, d_out, v, nullptr, *d_attn, 0.0, opt);
    if (dv) in<T>(p, attn, d_out, *dv, opt);
  });
}

}  // namespace gna::reference
