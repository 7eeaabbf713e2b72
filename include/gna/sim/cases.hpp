// The benchmark cases: one table read by the simulator's presets, gna-kernel-bench and the Python
// benchmark (through gna_sim_case in gna/gna_sim.h), so that every tool times the same problems.
#pragma once

#include <string>
#include <vector>

namespace gna::sim {

struct BenchCase {
  const char* name;   // unique, e.g. "hunyuan 18x24x24 s16x8x8"
  const char* model;  // the use case it belongs to (hunyuan, flux4k, nat, ...)
  // Space-separated sets it belongs to: kernel (gna-kernel-bench's default), image
  // (gna-kernel-bench --image), peers (gna.bench's default), quick (gna.bench --quick), hopper
  // (the Hopper forward's cases), hopper-bwd (the Hopper backward's cases).
  const char* sets;
  int rank;
  int extent[3];
  int window[3];
  int stride[3];
  int dilation[3];
  bool causal[3];
  int batch, heads, head_dim;
  const char* dtype;      // "bf16" or "f16"
  int additional_tokens;  // extra unmasked key/value tokens (every query attends them)
  int flex_tile[3];       // token tile FlexAttention's tokens are reordered by; 0s: row-major
};

const std::vector<BenchCase>& bench_cases();

// nullptr when no case has that name.
const BenchCase* find_bench_case(const std::string& name);

// Whether `c` belongs to `set` (one word of its sets).
bool in_set(const BenchCase& c, const std::string& set);

}  // namespace gna::sim
