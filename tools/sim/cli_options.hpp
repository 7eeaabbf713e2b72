// The gna-sim command line: subcommands, flags and their validation. Flag errors throw
// UsageError (the caller prints the usage and exits 2); problem errors are left to the
// library's validation (gna::Error, the core's messages).
#pragma once

#include <stdexcept>
#include <string>

#include "gna/sim/config.hpp"
#include "gna/sim/kernel_tiles.hpp"
#include "gna/sim/simulator.hpp"

namespace gna::sim::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Command { simulate, sweep, presets, show, help };
enum class Selection { pruned, all, block_sparse };

struct Options {
  Command command = Command::simulate;
  std::string preset;  // empty when none
  Config config;
  // --kernel: the tiles and KV tiling are the kernel's choice at head_dim (apply_kernel_tiles).
  bool has_kernel = false;
  TiledKernel kernel = TiledKernel::hopper_forward;
  int head_dim = 128;
  bool has_end_to_end = false;
  EndToEnd end_to_end;
  bool json = false;
  std::string svg_path;  // empty when none
  int query[kMaxRank] = {0, 0, 0};
  bool q_tile_union = false;
  Selection selection = Selection::pruned;
};

Options parse_options(int argc, const char* const* argv);

// With --kernel, sets the config's tiles and tilings to the kernel's choice (gna::Error for an
// invalid rule or head dim); otherwise nothing.
void apply_kernel_tiles(Options& o);

const char* usage();

}  // namespace gna::sim::cli
