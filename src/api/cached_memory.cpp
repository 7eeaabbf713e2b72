// gna::release_cached_memory and its C entry point: every registered backend gives back the
// memory it keeps between calls (the GPU backends' scratch pool).
#include <algorithm>
#include <vector>

#include "backend/backend.hpp"
#include "gna/gna.hpp"

namespace gna {

void release_cached_memory() {
  std::vector<void (*)()> releases;
  for (const Backend& b : registered_backends())
    if (b.release_memory &&
        std::find(releases.begin(), releases.end(), b.release_memory) == releases.end())
      releases.push_back(b.release_memory);
  for (void (*release)() : releases) release();
}

}  // namespace gna
