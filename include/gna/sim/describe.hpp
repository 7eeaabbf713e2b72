// One-line descriptions of a configuration, shared by the pictures and the command line.
#pragma once

#include <string>

#include "gna/sim/config.hpp"

namespace gna::sim {

// "30x48x80": the first `rank` values joined by 'x'.
std::string shape_string(const int* values, int rank);

// "shape 30x48x80, window 18x24x24, stride 1x1x1, dilation 1x1x1, causal 0x0x0" (the stride
// left out when with_stride is false).
std::string problem_description(const Config& c, bool with_stride = true);

// "multi-dimensional tiling, static KV tiles: Q tile 2x8x8, KV tile 2x8x8" or the 1-D form.
std::string tiling_description(const Config& c);

}  // namespace gna::sim
