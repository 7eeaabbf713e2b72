#include "backend/unfused_backend.hpp"

namespace gna {

static std::vector<UnfusedBackend>& registry() {
  static std::vector<UnfusedBackend> backends;
  return backends;
}

void register_unfused_backend(const UnfusedBackend& backend) { registry().push_back(backend); }

const std::vector<UnfusedBackend>& registered_unfused_backends() { return registry(); }

}  // namespace gna
