// Shared by the C ABI entry points: run a body, turn exceptions into a status code and keep the
// message for the caller's thread.
#pragma once

#include <exception>
#include <string>

#include "gna/core/error.hpp"
#include "gna/gna.h"

namespace gna::c_abi {

inline gna_status status_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_argument: return GNA_STATUS_INVALID_ARGUMENT;
    case ErrorKind::unsupported: return GNA_STATUS_UNSUPPORTED;
    case ErrorKind::runtime: return GNA_STATUS_RUNTIME_ERROR;
  }
  return GNA_STATUS_RUNTIME_ERROR;
}

template <typename F>
gna_status guarded(std::string& last_error, F f) {
  try {
    last_error.clear();
    f();
    return GNA_STATUS_OK;
  } catch (const Error& e) {
    last_error = e.what();
    return status_of(e.kind());
  } catch (const std::exception& e) {
    last_error = e.what();
    return GNA_STATUS_RUNTIME_ERROR;
  } catch (...) {
    last_error = "unknown error";
    return GNA_STATUS_RUNTIME_ERROR;
  }
}

}  // namespace gna::c_abi
