// What gna-sim prints: human-readable tables and JSON.
#pragma once

#include <string>
#include <vector>

#include "cli_options.hpp"
#include "gna/sim/simulator.hpp"
#include "gna/sim/sweep.hpp"

namespace gna::sim::cli {

std::string result_table(const Options& o, const Result& r);
std::string result_json(const Options& o, const Result& r);

struct SweepRun {
  std::vector<SweepEntry> shown;  // the selection
  size_t simulated = 0;           // strides simulated
  size_t kept = 0;                // strides that beat every smaller stride
  size_t block_sparse = 0;        // perfectly block-sparse strides
  double seconds = 0;             // time of the sweep itself
};

std::string sweep_table(const Options& o, const SweepRun& s);
std::string sweep_json(const Options& o, const SweepRun& s);

std::string presets_table();
std::string presets_json();

}  // namespace gna::sim::cli
