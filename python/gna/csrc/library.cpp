#include "library.h"

#include <c10/util/Exception.h>
#include <dlfcn.h>

#include <cstdio>
#include <string>

namespace gna_torch {
namespace {

Library bound;
bool is_bound = false;

template <typename Entry>
bool resolve(void* handle, const char* name, Entry& entry) {
  entry = reinterpret_cast<Entry>(dlsym(handle, name));
  return entry != nullptr;
}

}  // namespace

const Library& library() {
  TORCH_CHECK(is_bound, "gna: the torch extension is not bound to libgna (import gna first)");
  return bound;
}

void check(gna_status status) {
  if (status == GNA_STATUS_OK) return;
  const std::string message = bound.last_error ? bound.last_error() : "gna: unknown error";
  TORCH_CHECK_VALUE(status != GNA_STATUS_INVALID_ARGUMENT, message);
  TORCH_CHECK_NOT_IMPLEMENTED(status != GNA_STATUS_UNSUPPORTED, message);
  TORCH_CHECK(false, message);
}

}  // namespace gna_torch

extern "C" int gna_torch_bind(const char* path, char* message, int capacity) {
  using gna_torch::bound;
  auto fail = [&](const std::string& why) {
    if (capacity > 0) std::snprintf(message, static_cast<size_t>(capacity), "%s", why.c_str());
    return 1;
  };
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return fail(std::string("dlopen failed: ") + dlerror());
  decltype(&::gna_abi_version) abi_version = nullptr;
  gna_torch::Library entries;
  if (!gna_torch::resolve(handle, "gna_abi_version", abi_version) ||
      !gna_torch::resolve(handle, "gna_last_error", entries.last_error) ||
      !gna_torch::resolve(handle, "gna_validate", entries.validate) ||
      !gna_torch::resolve(handle, "gna_forward", entries.forward) ||
      !gna_torch::resolve(handle, "gna_backward", entries.backward)) {
    return fail(std::string(path) + " lacks an entry point of the C ABI");
  }
  if (abi_version() >= 4) {
    gna_torch::resolve(handle, "gna_validate_heads", entries.validate_heads);
    gna_torch::resolve(handle, "gna_forward_heads", entries.forward_heads);
    gna_torch::resolve(handle, "gna_backward_heads", entries.backward_heads);
  }
  if (abi_version() >= 7) {
    gna_torch::resolve(handle, "gna_forward_counts", entries.forward_counts);
    gna_torch::resolve(handle, "gna_backward_counts", entries.backward_counts);
  }
  bound = entries;
  gna_torch::is_bound = true;
  return 0;
}
