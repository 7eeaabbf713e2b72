// Which paths the portable forward's tiles took, counted in device memory while a test asks for
// it, so that the random sweeps can assert that they reach each path (placed KV tiles, partial
// pairs' bitmask masks, warps that run a partial pair as full, partial pairs whose K/V rows are all
// real keys loaded as full ones, mask axes a partial pair skips, the FP8 forward's tiles, the
// single-stage pipeline's tiles). Off by default: the kernels then
// count nothing (one test of a null launch parameter per tile).
#pragma once

namespace gna::portable {

struct ForwardPathCounts {
  unsigned long long tiles = 0;           // (Q tile, KV tile) pairs run (per CTA)
  unsigned long long placed_tiles = 0;    // of them spatial tiles placed per Q tile
  unsigned long long masked_warps = 0;    // warp tiles of partial pairs masked by their bitmasks
  unsigned long long full_row_warps = 0;  // warp tiles of partial pairs run as full (every row
                                          // of the warp keeps every key)
  unsigned long long partial_full_loads = 0;  // partial pairs' K/V tiles of real keys only,
                                              // loaded without the zero-fill checks
  unsigned long long partial_fill_loads = 0;  // partial pairs' K/V tiles with rows zero filled
  unsigned long long skipped_mask_axes = 0;   // axes of partial pairs on which every row keeps
                                              // every key (no mask work there)
  unsigned long long e4m3_tiles = 0;          // of the tiles, those of the FP8 forward (e4m3
                                              // operands)
  unsigned long long single_stage_tiles = 0;  // of the tiles, those of single-stage launches
                                              // (one K/V buffer)
};

// Starts (zeroing the counts) or stops counting; not thread-safe (tests).
void count_forward_paths(bool on);
// The counts so far (synchronizes the device); zeros when not counting.
ForwardPathCounts forward_path_counts();
// The device counters the forward launches add to: nullptr when not counting.
ForwardPathCounts* forward_path_counts_device();

// The portable backward's paths, likewise: placed Q tiles, partial pairs' bitmask masks, warps
// that run a partial pair as full, partial pairs whose Q rows are all real queries loaded as full
// ones, mask axes a partial pair skips, and partial pairs masked query by query (Q tiles with a
// side that is not a power of two).
struct BackwardPathCounts {
  unsigned long long items = 0;               // (KV tile, Q tile) pairs run (per CTA)
  unsigned long long placed_items = 0;        // of them with Q tiles placed per KV tile
  unsigned long long masked_warps = 0;        // warp tiles of partial pairs masked by bitmasks
  unsigned long long full_row_warps = 0;      // warp tiles of partial pairs run as full (every
                                              // key row of the warp keeps every query)
  unsigned long long partial_full_loads = 0;  // partial pairs' Q / dO tiles of real queries
                                              // only, loaded without the zero-fill checks
  unsigned long long partial_fill_loads = 0;  // partial pairs' Q / dO tiles with rows zero filled
  unsigned long long skipped_mask_axes = 0;   // axes of partial pairs on which every key row
                                              // keeps every query (no mask work there)
  unsigned long long query_masked_items = 0;  // partial pairs masked query by query
};

// Starts (zeroing the counts) or stops counting the backward's paths; not thread-safe (tests).
void count_backward_paths(bool on);
// The counts so far (synchronizes the device); zeros when not counting.
BackwardPathCounts backward_path_counts();
// The device counters the backward launches add to: nullptr when not counting.
BackwardPathCounts* backward_path_counts_device();

}  // namespace gna::portable
