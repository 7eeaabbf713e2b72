// What differs between the torches the extension builds against: 1.13 (Debian's) predates
// SymInt::maybe_as_int and c10::fromIntArrayRefSlow. The builder (python/cmake_build.py) defines
// GNA_TORCH_MAJOR; without it, the newer API.
#pragma once

#include <c10/core/SymInt.h>
#include <c10/core/SymIntArrayRef.h>

#include <vector>

namespace gna_torch {

#if defined(GNA_TORCH_MAJOR) && GNA_TORCH_MAJOR < 2
inline bool is_concrete(const c10::SymInt& n) { return !n.is_symbolic(); }
inline c10::SymIntArrayRef sym_ints(const std::vector<int64_t>& values) {
  return c10::fromIntArrayRef(c10::IntArrayRef(values));
}
#else
inline bool is_concrete(const c10::SymInt& n) { return n.maybe_as_int().has_value(); }
inline c10::SymIntArrayRef sym_ints(const std::vector<int64_t>& values) {
  return c10::fromIntArrayRefSlow(c10::IntArrayRef(values));
}
#endif

}  // namespace gna_torch
