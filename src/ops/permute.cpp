#include "gna/ops/permute.hpp"

#include <cstring>

#include "gna/attention_params.hpp"
#include "gna/core/error.hpp"
#include "util/parallel.hpp"

namespace gna {

void validate_permutation_plan(const PermutationPlan& plan) {
  if (plan.rank < 1 || plan.rank > kMaxRank)
    fail_invalid("permutation: rank must be 1, 2 or 3, got ", plan.rank);
  for (int a = 0; a < plan.rank; ++a) {
    if (plan.extent[a] < 1)
      fail_invalid("permutation: axis ", a, ": extent must be >= 1, got ", plan.extent[a]);
    if (plan.tile[a] < 1)
      fail_invalid("permutation: axis ", a, ": tile must be >= 1, got ", plan.tile[a]);
    if (plan.dilation[a] < 1)
      fail_invalid("permutation: axis ", a, ": dilation must be >= 1, got ", plan.dilation[a]);
    if (plan.dilation[a] > plan.extent[a])
      fail_invalid("permutation: axis ", a, ": dilation must be <= extent=", plan.extent[a],
                   ", got ", plan.dilation[a]);
  }
}

namespace {

void check_pair(const PermutationPlan& plan, const TensorRef& heads_last, const TensorRef& permuted,
                const char* heads_last_name, const char* permuted_name) {
  validate_permutation_plan(plan);
  const int r = plan.rank;
  if (heads_last.rank != r + 3)
    fail_invalid(heads_last_name, ": expected ", r + 3, " dims, got ", heads_last.rank);
  for (int a = 0; a < r; ++a)
    if (heads_last.shape[1 + a] != plan.extent[a])
      fail_invalid(heads_last_name, ": dim ", 1 + a, " must equal the plan's extent ",
                   plan.extent[a], ", got ", heads_last.shape[1 + a]);
  int64_t shape[4] = {heads_last.shape[0] * plan.groups(), plan.tokens_per_group(),
                      heads_last.shape[r + 1], heads_last.shape[r + 2]};
  check_tensor(permuted_name, permuted, shape, 4, heads_last.dtype, -1);
  if (!heads_last.on_host()) fail_invalid(heads_last_name, ": must be in host memory");
  if (heads_last.strides[r + 2] != 1 && heads_last.shape[r + 2] > 1)
    fail_invalid(heads_last_name, ": last dimension must be contiguous");
}

// Copies every (token, head) row between the two layouts; padding rows are zeroed when
// `to_permuted`, skipped otherwise.
void copy_rows(const PermutationPlan& plan, const TensorRef& heads_last, const TensorRef& permuted,
               bool to_permuted) {
  const int r = plan.rank;
  const int64_t batch = heads_last.shape[0], heads = heads_last.shape[r + 1];
  const size_t row_bytes = static_cast<size_t>(heads_last.shape[r + 2]) * dtype_size(heads_last.dtype);
  const int esize = dtype_size(heads_last.dtype);
  const int64_t rows = batch * plan.groups() * plan.tokens_per_group();
  parallel_for(rows, 0, [&](int64_t begin, int64_t end) {
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t token = idx % plan.tokens_per_group();
      const int64_t bg = idx / plan.tokens_per_group();
      const int group = static_cast<int>(bg % plan.groups());
      const int64_t b = bg / plan.groups();
      int x[kMaxRank];
      const bool real = plan.original_coordinates(group, token, x);
      for (int64_t h = 0; h < heads; ++h) {
        char* p = static_cast<char*>(permuted.data) +
                  (bg * permuted.strides[0] + token * permuted.strides[1] + h * permuted.strides[2]) * esize;
        if (!real) {
          if (to_permuted) std::memset(p, 0, row_bytes);
          continue;
        }
        int64_t off = b * heads_last.strides[0] + h * heads_last.strides[r + 1];
        for (int a = 0; a < r; ++a) off += x[a] * heads_last.strides[1 + a];
        char* s = static_cast<char*>(heads_last.data) + off * esize;
        if (to_permuted)
          std::memcpy(p, s, row_bytes);
        else
          std::memcpy(s, p, row_bytes);
      }
    }
  });
}

}  // namespace

void permute_tokens(const PermutationPlan& plan, const TensorRef& src, TensorRef& dst) {
  check_pair(plan, src, dst, "permute source", "permute destination");
  copy_rows(plan, src, dst, true);
}

void unpermute_tokens(const PermutationPlan& plan, const TensorRef& src, TensorRef& dst) {
  check_pair(plan, dst, src, "unpermute destination", "unpermute source");
  copy_rows(plan, dst, src, false);
}

}  // namespace gna
