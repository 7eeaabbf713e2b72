// Per-batch counts of additional keys as the Hopper kernels read them (joint attention with
// padded text; AttentionTensors::additional_kv_counts): int32 [B] in device memory, read where
// the kernels run (no host synchronisation), clamped by the core's attended_additional_keys.
// The forward walks only the additional-KV tiles holding a batch item's counted keys and masks
// the last one's tail; the backward's additional launch gives a KV tile wholly past the count
// no Q tiles (its dK and dV come out zero) and masks the keys past it in the others.
#pragma once

#include <cstdint>

#include "gna/attention_params.hpp"
#include "gna/core/problem.hpp"

namespace gna::hopper {

struct AdditionalCounts {
  const int32_t* data = nullptr;  // null: every additional key of every batch item
  int64_t stride = 0;             // elements
};

inline AdditionalCounts additional_counts_of(const AttentionTensors& in) {
  AdditionalCounts c;
  if (in.additional_kv_counts) {
    c.data = static_cast<const int32_t*>(in.additional_kv_counts->data);
    c.stride = in.additional_kv_counts->strides[0];
  }
  return c;
}

// The additional keys batch item `batch` (index into the whole call's batch) attends.
GNA_HD int additional_keys_of_batch(const AdditionalCounts& c, int additional_kv, int batch) {
  return c.data ? attended_additional_keys(c.data[batch * c.stride], additional_kv)
                : additional_kv;
}

}  // namespace gna::hopper
