// The one exception type of the library: invalid input and unsupported configurations.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace gna {

enum class ErrorKind { invalid_argument, unsupported, runtime };

class Error : public std::invalid_argument {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::invalid_argument(msg), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Builds a message from streamable parts: fail_invalid("axis ", 1, ": window ", k, " ...").
template <typename... Parts>
[[noreturn]] void fail(ErrorKind kind, const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(kind, os.str());
}

template <typename... Parts>
[[noreturn]] void fail_invalid(const Parts&... parts) {
  fail(ErrorKind::invalid_argument, parts...);
}

}  // namespace gna
