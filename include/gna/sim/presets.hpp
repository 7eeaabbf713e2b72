// The use cases of docs/rule.md section 9 as ready-made simulator configurations.
#pragma once

#include <string>
#include <vector>

#include "gna/sim/config.hpp"

namespace gna::sim {

struct Preset {
  std::string name;
  std::string description;  // model, heads, head dim, the windows worth trying
  Config config;            // first window of the use case, stride 1 (standard NA)
};

const std::vector<Preset>& presets();

// nullptr when no preset has that name.
const Preset* find_preset(const std::string& name);

}  // namespace gna::sim
