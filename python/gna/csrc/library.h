// libgna's C ABI as the torch extension reaches it: the entry points of the libgna the Python
// package loaded (bound at import by gna_torch_bind, so that one library serves both paths), and
// the status codes turned into the exceptions Python sees.
#pragma once

#include <gna/gna.h>

namespace gna_torch {

struct Library {
  decltype(&::gna_last_error) last_error = nullptr;
  decltype(&::gna_validate) validate = nullptr;
  decltype(&::gna_forward) forward = nullptr;
  decltype(&::gna_backward) backward = nullptr;
  // ABI version 4 (per-head rules); null in an older library.
  decltype(&::gna_validate_heads) validate_heads = nullptr;
  decltype(&::gna_forward_heads) forward_heads = nullptr;
  decltype(&::gna_backward_heads) backward_heads = nullptr;
  // ABI version 7 (per-batch counts of additional keys); null in an older library.
  decltype(&::gna_forward_counts) forward_counts = nullptr;
  decltype(&::gna_backward_counts) backward_counts = nullptr;
};

// The bound library; throws when gna_torch_bind has not run.
const Library& library();

// Throws for a failed status: ValueError (invalid argument), NotImplementedError (no backend
// runs the call; Python's gna.UnsupportedError derives from it), RuntimeError otherwise. The
// message is the library's.
void check(gna_status status);

}  // namespace gna_torch

// Binds the extension to the libgna at `path` (dlopen: the same instance when the process already
// loaded it). Returns 0, or non-zero with a message in `message`.
extern "C" int gna_torch_bind(const char* path, char* message, int capacity);
