// The one exception type of the library. kind() says what went wrong: input the caller must fix
// (invalid_argument), a valid call no backend can run (unsupported), or a failure while running
// (runtime: CUDA, files). The C ABI maps the kinds to its status codes. A runtime_error whatever
// the kind: it is thrown while the library runs, and callers tell the kinds apart by kind().
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace gna {

enum class ErrorKind { invalid_argument, unsupported, runtime };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
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
