// gna-sim: how fast can a GNA configuration possibly be (docs/rule.md section 8).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli_options.hpp"
#include "gna/core/error.hpp"
#include "gna/sim/svg.hpp"
#include "report.hpp"

namespace {

using namespace gna::sim;
using namespace gna::sim::cli;

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out.good()) gna::fail(gna::ErrorKind::runtime, "cannot write '", path, "'");
}

int run(const Options& o) {
  switch (o.command) {
    case Command::help:
      std::cout << usage();
      return 0;
    case Command::presets:
      std::cout << (o.json ? presets_json() : presets_table());
      return 0;
    case Command::simulate: {
      if (o.has_end_to_end) validate(o.end_to_end);
      const Result r = simulate(o.config);
      std::cout << (o.json ? result_json(o, r) : result_table(o, r));
      return 0;
    }
    case Command::sweep: {
      if (o.has_end_to_end) validate(o.end_to_end);
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<SweepEntry> all = sweep(o.config);
      SweepRun s;
      s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      s.simulated = all.size();
      s.kept = pruned(all).size();
      s.block_sparse = block_sparse_strides(all).size();
      s.shown = o.selection == Selection::all            ? all
                : o.selection == Selection::block_sparse ? block_sparse_strides(all)
                                                         : pruned(all);
      if (!o.svg_path.empty()) write_file(o.svg_path, sweep_svg(o.config, s.shown));
      std::cout << (o.json ? sweep_json(o, s) : sweep_table(o, s));
      return 0;
    }
    case Command::show: {
      write_file(o.svg_path, query_svg(o.config, o.query, o.q_tile_union));
      std::cout << "wrote " << o.svg_path << "\n";
      return 0;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse_options(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "gna-sim: " << e.what() << "\n\n" << usage();
    return 2;
  }
  try {
    apply_kernel_tiles(o);
    return run(o);
  } catch (const gna::Error& e) {
    std::cerr << "gna-sim: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {  // out of memory and the like: an error, not an abort
    std::cerr << "gna-sim: error: " << e.what() << "\n";
    return 1;
  }
}
