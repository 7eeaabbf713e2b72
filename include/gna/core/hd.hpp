// Marks functions callable from both host and CUDA device code: the core is shared by the
// CPU reference, every kernel, the simulator and the Python package.
#pragma once

#if defined(__CUDACC__)
#define GNA_HD __host__ __device__ __forceinline__
#else
#define GNA_HD inline
#endif

namespace gna {

constexpr int kMaxRank = 3;

GNA_HD int min_i(int a, int b) { return a < b ? a : b; }
GNA_HD int max_i(int a, int b) { return a > b ? a : b; }
GNA_HD int clamp_i(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
// Ceiling division for a > 0 numerator and b > 0 (callers guarantee it).
GNA_HD int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Half-open integer range [begin, end).
struct Range {
  int begin = 0;
  int end = 0;
  GNA_HD bool empty() const { return end <= begin; }
  GNA_HD int size() const { return end > begin ? end - begin : 0; }
  GNA_HD bool contains(int v) const { return begin <= v && v < end; }
};

}  // namespace gna
