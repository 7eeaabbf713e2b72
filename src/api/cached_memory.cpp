// gna::release_cached_memory and its C entry point: every registered backend gives back the
// memory it keeps between calls (the GPU backends' scratch pool).
#include <algorithm>
#include <vector>

#include "backend/backend.hpp"
#include "backend/unfused_backend.hpp"
#include "gna/gna.hpp"

namespace gna {

void release_cached_memory() {
  std::vector<void (*)()> releases;
  auto add = [&](void (*release)()) {
    if (release && std::find(releases.begin(), releases.end(), release) == releases.end())
      releases.push_back(release);
  };
  for (const Backend& b : registered_backends()) add(b.release_memory);
  for (const UnfusedBackend& b : registered_unfused_backends()) add(b.release_memory);
  for (void (*release)() : releases) release();
}

}  // namespace gna
