#include <algorithm>

#include "backend/backend.hpp"

namespace gna {

static std::vector<Backend>& registry() {
  static std::vector<Backend> backends;
  return backends;
}

void register_backend(const Backend& backend) {
  auto& r = registry();
  r.push_back(backend);
  std::stable_sort(r.begin(), r.end(),
                   [](const Backend& a, const Backend& b) { return a.priority > b.priority; });
}

const std::vector<Backend>& registered_backends() { return registry(); }

}  // namespace gna
