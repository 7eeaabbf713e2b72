// A host backend that takes every call and only counts it, for the C ABI tests that check
// dispatch passes over backends that say nothing about a feature (slabs, counts, head rules).
#pragma once

#include <string>

#include "backend/backend.hpp"

namespace gna::test {

// `calls` counts the forward and backward calls it ran; priority places it above (> 0) or
// below (< 0) the reference.
inline Backend counting_host_backend(const char* name, int priority, int* calls) {
  Backend b;
  b.name = name;
  b.priority = priority;
  b.device = false;
  b.supports_forward = [](const ForwardCall&, std::string*) { return true; };
  b.forward = [calls](const ForwardCall&) { ++*calls; };
  b.supports_backward = [](const BackwardCall&, std::string*) { return true; };
  b.backward = [calls](const BackwardCall&) { ++*calls; };
  return b;
}

}  // namespace gna::test
