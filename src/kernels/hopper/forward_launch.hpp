// Host side of the Hopper forward kernel: tile choice, tensor maps and launches.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "gna/core/tile_choice.hpp"
#include "kernels/hopper/forward_params.hpp"

namespace gna::hopper {

// Per-axis Q and KV tiles for the problem's axes (index = problem axis) and the KV placement
// (ScoredTiles::placement), chosen by the core's tile chooser among options.kv_placements; a
// tile forced in options is honoured, or an error when it is not a tile of the forward.
ScoredTiles choose_tiles(const Problem& p, const KernelOptions& options);
// All candidates (power-of-two shapes of 128 tokens) ranked by the cost model, best first.
std::vector<ScoredTiles> ranked_tiles(const Problem& p, const KernelOptions& options);
// The tiles a call runs (call.problem and call.options are read): choose_tiles', or on a slab
// tiles that start on the slab's first rows (slab_tiles.hpp); false with the reason when a slab
// has none.
bool call_tiles(const ForwardCall& call, ScoredTiles* tiles, std::string* why);

// Whether the kernel can run the call (device, dtype, head dims, strides, alignment).
// forward() uses choose_tiles, or with options.autotune the fastest of the best few candidates
// timed once per problem signature (cached for the process); options.schedule maps the work
// items to CTAs.
bool supports(const ForwardCall& call, std::string* why);
void forward(const ForwardCall& call);

// Test hook: forward kernel launches of this process so far, and those of them that ran per-head
// rules (one launch per dilation group and batch run, whatever the number of head-rule groups).
struct ForwardLaunchCount {
  int64_t launches = 0;
  int64_t with_head_rules = 0;
};
ForwardLaunchCount forward_launch_count();

// Kernel launchers, one per (head dim, dtype): defined in the forward_d*.cu instantiation files.
// grid: CTAs; persistent: the persistent kernel (else one CTA per item).
void launch_d32(bool bf16, const void* maps, const FwdParams& p, int grid, bool persistent,
                void* stream);
void launch_d64(bool bf16, const void* maps, const FwdParams& p, int grid, bool persistent,
                void* stream);
void launch_d128(bool bf16, const void* maps, const FwdParams& p, int grid, bool persistent,
                 void* stream);
void launch_d256(bool bf16, const void* maps, const FwdParams& p, int grid, bool persistent,
                 void* stream);
// e4m3 operands (the FP8 scheme; forward_e4m3_d*.cu), O in bf16 (bf16_out) or fp16.
void launch_e4m3_d64(bool bf16_out, const void* maps, const FwdParams& p, int grid,
                     bool persistent, void* stream);
void launch_e4m3_d128(bool bf16_out, const void* maps, const FwdParams& p, int grid,
                      bool persistent, void* stream);

}  // namespace gna::hopper
