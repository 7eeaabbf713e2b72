#include "gna/attention_params.hpp"

#include "gna/core/error.hpp"

namespace gna {

TensorRef contiguous_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            int device) {
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

int token_tensor_shape(const Problem& p, int heads, int dim, int64_t* shape) {
  shape[0] = p.batch;
  for (int a = 0; a < p.rank; ++a) shape[1 + a] = p.axes[a].extent;
  shape[1 + p.rank] = heads;
  shape[2 + p.rank] = dim;
  return p.rank + 3;
}

int output_shape(const Problem& p, int64_t* shape) {
  return token_tensor_shape(p, p.heads_q, p.dim_v, shape);
}

int lse_shape(const Problem& p, int64_t* shape) {
  token_tensor_shape(p, p.heads_q, 1, shape);
  return p.rank + 2;
}

static void print_shape(std::ostringstream& os, const int64_t* s, int rank) {
  os << "[";
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << s[i];
  os << "]";
}

void check_tensor(const char* name, const TensorRef& t, const int64_t* shape, int rank,
                  DType dtype, int device) {
  if (t.data == nullptr && t.numel() > 0) fail_invalid(name, ": data pointer is null");
  bool same = t.rank == rank;
  for (int i = 0; same && i < rank; ++i) same = t.shape[i] == shape[i];
  if (!same) {
    std::ostringstream os;
    os << name << ": expected shape ";
    print_shape(os, shape, rank);
    os << ", got ";
    print_shape(os, t.shape, t.rank);
    throw Error(ErrorKind::invalid_argument, os.str());
  }
  if (t.dtype != dtype)
    fail_invalid(name, ": expected dtype ", dtype_name(dtype), ", got ", dtype_name(t.dtype));
  if (t.device != device)
    fail_invalid(name, ": expected device ", device, " (-1 = host), got ", t.device);
  if (rank > 0 && t.strides[rank - 1] != 1 && t.shape[rank - 1] > 1)
    fail_invalid(name, ": last dimension must be contiguous (stride 1), got stride ",
                 t.strides[rank - 1]);
  for (int i = 0; i < rank; ++i)
    if (t.strides[i] < 0) fail_invalid(name, ": stride of dim ", i, " must be >= 0, got ", t.strides[i]);
}

Problem make_problem(const AttentionParams& params, const AttentionTensors& t) {
  if (params.rank < 1 || params.rank > kMaxRank)
    fail_invalid("rank must be 1, 2 or 3, got ", params.rank);
  const int r = params.rank;
  if (t.q.rank != r + 3)
    fail_invalid("query: expected ", r + 3, " dims [batch, ", r, " spatial dims, heads, dim], got ",
                 t.q.rank, " dims");
  if (t.k.rank != r + 3) fail_invalid("key: expected ", r + 3, " dims, got ", t.k.rank, " dims");
  if (t.v.rank != r + 3) fail_invalid("value: expected ", r + 3, " dims, got ", t.v.rank, " dims");
  Problem p;
  p.rank = r;
  p.batch = static_cast<int>(t.q.shape[0]);
  for (int a = 0; a < r; ++a) {
    p.axes[a].extent = static_cast<int>(t.q.shape[1 + a]);
    p.axes[a].window = params.window[a];
    p.axes[a].stride = params.stride[a];
    p.axes[a].dilation = params.dilation[a];
    p.axes[a].causal = params.causal[a];
  }
  p.heads_q = static_cast<int>(t.q.shape[r + 1]);
  p.dim_qk = static_cast<int>(t.q.shape[r + 2]);
  p.heads_kv = static_cast<int>(t.k.shape[r + 1]);
  p.dim_v = static_cast<int>(t.v.shape[r + 2]);
  p.dtype = t.q.dtype;
  p.scale = params.scale;
  if ((t.additional_k == nullptr) != (t.additional_v == nullptr))
    fail_invalid("additional keys and additional values must be given together");
  if (t.additional_k) {
    if (t.additional_k->rank != 4)
      fail_invalid("additional keys: expected 4 dims [batch, tokens, heads, dim], got ",
                   t.additional_k->rank, " dims");
    p.additional_kv = static_cast<int>(t.additional_k->shape[1]);
  }
  validate(p);

  int64_t shape[kMaxTensorRank];
  const int dev = t.q.device;
  int n = token_tensor_shape(p, p.heads_q, p.dim_qk, shape);
  check_tensor("query", t.q, shape, n, p.dtype, dev);
  n = token_tensor_shape(p, p.heads_kv, p.dim_qk, shape);
  check_tensor("key", t.k, shape, n, p.dtype, dev);
  n = token_tensor_shape(p, p.heads_kv, p.dim_v, shape);
  check_tensor("value", t.v, shape, n, p.dtype, dev);
  if (t.additional_k) {
    int64_t ks[4] = {p.batch, p.additional_kv, p.heads_kv, p.dim_qk};
    int64_t vs[4] = {p.batch, p.additional_kv, p.heads_kv, p.dim_v};
    check_tensor("additional keys", *t.additional_k, ks, 4, p.dtype, dev);
    check_tensor("additional values", *t.additional_v, vs, 4, p.dtype, dev);
  }
  return p;
}

}  // namespace gna
