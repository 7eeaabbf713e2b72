// Problems and tile shapes written as text, for tables of recorded tile choices: a rule is
// "extent,window,dilation,stride,causal" per axis, separated by spaces; tiles are "QxQ/KVxKV".
#pragma once

#include <sstream>
#include <string>

#include "gna/core/problem.hpp"

namespace gna::test {

inline Problem rule_from_text(const std::string& text) {
  Problem p;
  p.rank = 0;
  std::istringstream axes(text);
  std::string axis;
  while (axes >> axis) {
    AxisRule& r = p.axes[p.rank++];
    int causal = 0;
    char c;
    std::istringstream(axis) >> r.extent >> c >> r.window >> c >> r.dilation >> c >> r.stride >>
        c >> causal;
    r.causal = causal != 0;
  }
  validate(p);
  return p;
}

inline std::string tiles_text(const TileShape& q, const TileShape& kv, int rank) {
  std::ostringstream os;
  for (int a = 0; a < rank; ++a) os << (a ? "x" : "") << q.size[a];
  os << "/";
  for (int a = 0; a < rank; ++a) os << (a ? "x" : "") << kv.size[a];
  return os.str();
}

}  // namespace gna::test
