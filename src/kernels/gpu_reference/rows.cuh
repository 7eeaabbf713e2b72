// The rows of the reference kernels: one warp a row of a [batch, tokens, heads] layout.
#pragma once

#include <cstdint>

#include "gna/core/problem.hpp"

namespace gna::gpu_reference {

constexpr int kRowThreads = 256;  // threads of a block, 8 rows

// The row of this thread's warp.
__device__ inline int64_t warp_row() {
  return (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
}

// Blocks of kRowThreads for `rows` rows.
inline unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows * 32 + kRowThreads - 1) / kRowThreads);
}

// A query row (of [batch, tokens, heads_q]): its image, token and head.
struct QueryRow {
  int b, h;
  int64_t token;
};

__device__ inline QueryRow query_row(const Problem& p, int64_t row) {
  QueryRow r;
  r.h = static_cast<int>(row % p.heads_q);
  r.token = (row / p.heads_q) % p.tokens();
  r.b = static_cast<int>(row / p.heads_q / p.tokens());
  return r;
}

}  // namespace gna::gpu_reference
