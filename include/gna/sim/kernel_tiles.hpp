// The tiles a kernel runs for a rule: the simulator's Q/KV tile shapes and KV tiling taken from
// the kernel's own tile chooser (gna/core/kernel_tiles.hpp, gna/core/tile_choice.hpp), as the
// kernel chooses them at run time with default options. The chooser scores one image and head,
// so batch and heads do not matter.
#pragma once

#include <string>
#include <vector>

#include "gna/sim/config.hpp"
#include "gna/sim/simulator.hpp"

namespace gna::sim {

// The tiled kernels the simulator knows (ids of gna_sim_kernel_tiles, GNA_SIM_KERNEL_*).
enum class TiledKernel : int {
  hopper_forward = 0,   // KV tiles grid or placed, whichever the chooser finds cheaper
  hopper_backward = 1,  // grid KV tiles (it walks per KV tile; the simulator walks per Q tile)
  portable_forward = 2,  // 64- or 128-row Q tiles, KV tiles grid or placed (as the kernel picks
                         // them on a device where the 128-row kernel fits)
  portable_backward = 3,  // 128- or 64-key KV tiles (as the kernel picks them on a device where
                          // the 128-key kernel fits), grid KV tiles (it places its Q tiles)
  // The portable kernels as devices with 99 KB of shared memory per block run them (sm_86 /
  // sm_89 / sm_120, or GNA_MAX_SHARED_MEMORY_BYTES=101376): the forward's 128-row Q tiles with
  // one K/V stage at head dims 128/128, the backward's 64-key KV tiles where it has them.
  portable_forward_99kb = 4,
  portable_backward_99kb = 5,
};

// "hopper-forward", "hopper-backward", "portable-forward", "portable-backward",
// "portable-forward-99kb", "portable-backward-99kb".
const char* kernel_name(TiledKernel k);
const std::vector<TiledKernel>& tiled_kernels();
// The kernel of a name; '-', '_' and ' ' between the words are the same ("hopper forward").
// False when there is none.
bool parse_kernel(const std::string& name, TiledKernel* k);
// The names, comma-separated (for messages).
std::string kernel_names();

// `c` with q_tile, kv_tile, tiling (multi) and kv_tiling set to the kernel's choice for the rule
// of `c` at head dim `head_dim` (c's own tiles and tilings are ignored). Throws gna::Error
// (invalid_argument) naming the head dim when the kernel does not run it, the core's message for
// an invalid rule, and the estimate when scoring the candidates would take more than
// kMaxSimulationSteps.
Config kernel_tiles(const Config& c, TiledKernel k, int head_dim);

// The kernel's predicted time on a simulated configuration, from its measured cost model (the
// core's KernelCostModel, kernel_tiles.hpp): pairs, partial pairs and work items (Q tiles of the
// forward, KV tiles of the backward), in units of one dense tile pair of the chosen tiles, and in
// nanoseconds per (batch item, head) at the head dim the model's times were measured at (the
// portable forward's 64-row Q tiles priced at portable_forward_pair_scale, the portable
// backward's 64-key KV tiles by their kernel's model, portable_backward_cost).
// `speedup` is the prediction the benchmarks compare with (× cuDNN dense): dense attention over
// the same tokens at the kernel's cost per pair, in row-major runs of its tile rows without
// padding (as a dense kernel runs them), against this configuration.
struct KernelPrediction {
  double cost = 0;
  double dense_cost = 0;
  double speedup = 0;  // dense_cost / cost
  // cost x the model's time per pair at kCostModelHeadDim (an H100, bf16); 0 at other
  // head dims, whose times were not measured.
  double ns_per_head = 0;
};
// `r` is simulate(tiles), `tiles` a configuration with the kernel's tiles (kernel_tiles). The simulator
// walks per Q tile on grid Q tiles, so the backwards' predictions count their pairs there even
// where they place their Q tiles; their weights were fitted on the same counts.
KernelPrediction predict(const Config& tiles, const Result& r, TiledKernel k, int head_dim);

}  // namespace gna::sim
