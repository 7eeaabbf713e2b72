// Choices a caller may force on a kernel call; zeros mean "let the backend choose".
#pragma once

#include "gna/core/tiling.hpp"

namespace gna {

struct KernelOptions {
  TileShape q_tile = TileShape{{0, 0, 0}};   // all zero: default
  TileShape kv_tile = TileShape{{0, 0, 0}};
  bool autotune = false;       // benchmark candidate tiles once per problem signature
  bool deterministic = false;  // backward: same bits every run
};

}  // namespace gna
