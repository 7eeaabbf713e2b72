// What the backends' registrations share: a Backend from its required parts, and the dtype
// check that names the dtypes a backend takes (also as an unfused backend's support check).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/unfused_backend.hpp"
#include "gna/core/problem.hpp"

namespace gna {

inline Backend backend_from(std::string name, int priority, bool device,
                            decltype(Backend::supports_forward) supports_forward,
                            decltype(Backend::forward) forward,
                            decltype(Backend::supports_backward) supports_backward,
                            decltype(Backend::backward) backward) {
  Backend b;
  b.name = std::move(name);
  b.priority = priority;
  b.device = device;
  b.supports_forward = std::move(supports_forward);
  b.forward = std::move(forward);
  b.supports_backward = std::move(supports_backward);
  b.backward = std::move(backward);
  return b;
}

// Whether `t` is one of `allowed`; otherwise writes "<subject> must be a, b or c, got t".
inline bool dtype_one_of(DType t, const std::vector<DType>& allowed, const char* subject,
                         std::string* why) {
  std::string names;
  size_t i = 0;
  for (DType a : allowed) {
    if (a == t) return true;
    names += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + std::string(dtype_name(a));
    ++i;
  }
  if (why) *why = std::string(subject) + " must be " + names + ", got " + dtype_name(t);
  return false;
}

// An unfused backend that takes the dtypes `dtypes` (its operators still to be set).
inline UnfusedBackend unfused_backend_from(std::string name, bool device,
                                           std::vector<DType> dtypes) {
  UnfusedBackend b;
  b.name = std::move(name);
  b.device = device;
  b.supports = [dtypes = std::move(dtypes)](DType t, int, std::string* why) {
    return dtype_one_of(t, dtypes, "dtype", why);
  };
  return b;
}

}  // namespace gna
