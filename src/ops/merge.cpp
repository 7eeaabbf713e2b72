#include "gna/ops/merge.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gna/attention_params.hpp"
#include "gna/core/error.hpp"
#include "util/parallel.hpp"

namespace gna {
namespace {

// Offset of row `row` (row-major over all dims but the last) in a tensor with `dims` dims.
int64_t row_offset(const TensorRef& t, int dims, int64_t row) {
  int64_t off = 0;
  for (int d = dims - 1; d >= 0; --d) {
    off += (row % t.shape[d]) * t.strides[d];
    row /= t.shape[d];
  }
  return off;
}

double load(const TensorRef& t, int64_t off) {
  return t.dtype == DType::f64 ? static_cast<const double*>(t.data)[off]
                               : static_cast<const float*>(t.data)[off];
}
void store(const TensorRef& t, int64_t off, double v) {
  if (t.dtype == DType::f64)
    static_cast<double*>(t.data)[off] = v;
  else
    static_cast<float*>(t.data)[off] = static_cast<float>(v);
}

}  // namespace

void merge_attentions(const std::vector<TensorRef>& outputs, const std::vector<TensorRef>& lses,
                      TensorRef& out, TensorRef* lse_out) {
  if (outputs.empty()) fail_invalid("merge: at least one output is required, got 0");
  if (outputs.size() != lses.size())
    fail_invalid("merge: number of outputs (", outputs.size(), ") must equal number of lses, got ",
                 lses.size());
  const TensorRef& first = outputs[0];
  if (first.dtype != DType::f32 && first.dtype != DType::f64)
    fail_invalid("merge: outputs must be float32 or float64 on the CPU, got ", dtype_name(first.dtype));
  const int rank = first.rank;
  if (rank < 2) fail_invalid("merge: outputs must have >= 2 dims, got ", rank);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string name = "merge: outputs[" + std::to_string(i) + "]";
    check_tensor(name.c_str(), outputs[i], first.shape, rank, first.dtype, -1);
    const std::string lname = "merge: lses[" + std::to_string(i) + "]";
    check_tensor(lname.c_str(), lses[i], first.shape, rank - 1, lses[0].dtype, -1);
  }
  check_tensor("merge: out", out, first.shape, rank, first.dtype, -1);
  if (lse_out) check_tensor("merge: lse_out", *lse_out, first.shape, rank - 1, lses[0].dtype, -1);
  // Rows are merged in parallel, each read whole before it is written: results may replace an
  // input view exactly (in place), but must not land on other rows still to be read.
  const auto same_view = [](const TensorRef& a, const TensorRef* b) {
    if (b == nullptr || a.data != b->data || a.rank != b->rank || a.dtype != b->dtype) return false;
    for (int d = 0; d < a.rank; ++d)
      if (a.shape[d] != b->shape[d] || a.strides[d] != b->strides[d]) return false;
    return true;
  };
  std::vector<std::string> names;
  std::vector<NamedTensor> all;
  names.reserve(2 * outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    names.push_back("outputs[" + std::to_string(i) + "]");
    if (!same_view(outputs[i], &out)) all.push_back({names.back().c_str(), &outputs[i]});
    names.push_back("lses[" + std::to_string(i) + "]");
    if (!same_view(lses[i], lse_out)) all.push_back({names.back().c_str(), &lses[i]});
  }
  all.push_back({"lse_out", lse_out});
  check_output({"merge: out", &out}, all.data(), all.size());
  if (lse_out) {
    all.back() = {"out", &out};
    check_output({"merge: lse_out", lse_out}, all.data(), all.size());
  }

  int64_t rows = 1;
  for (int d = 0; d < rank - 1; ++d) rows *= first.shape[d];
  const int64_t dim = first.shape[rank - 1];
  parallel_for(rows, 0, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(dim), weight(outputs.size());
    for (int64_t row = begin; row < end; ++row) {
      double m = -std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < outputs.size(); ++i) {
        weight[i] = load(lses[i], row_offset(lses[i], rank - 1, row));
        m = std::max(m, weight[i]);
      }
      double denom = 0;
      for (auto& w : weight) {
        w = std::isinf(m) ? 0.0 : std::exp(w - m);  // all parts empty: weights 0
        denom += w;
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t i = 0; i < outputs.size(); ++i) {
        if (weight[i] == 0.0) continue;
        const int64_t off = row_offset(outputs[i], rank - 1, row);
        for (int64_t c = 0; c < dim; ++c) acc[c] += weight[i] * load(outputs[i], off + c);
      }
      const int64_t o = row_offset(out, rank - 1, row);
      for (int64_t c = 0; c < dim; ++c) store(out, o + c, denom > 0 ? acc[c] / denom : 0.0);
      if (lse_out) store(*lse_out, row_offset(*lse_out, rank - 1, row), m + std::log(denom));
    }
  });
}

}  // namespace gna
