#include "kernels/hopper/head_rules.hpp"

#include <sstream>

namespace gna::hopper {

bool head_rules_supported(const Problem& p, std::string* why) {
  const HeadRules& r = p.head_rules;
  for (int g = 1; g < r.groups; ++g)
    for (int a = 0; a < p.rank; ++a)
      if (r.axes[g][a].dilation != r.axes[0][a].dilation) {
        if (why) {
          std::ostringstream os;
          os << "head rules: groups 0 and " << g << " have different dilations on axis " << a
             << " (" << r.axes[0][a].dilation << " and " << r.axes[g][a].dilation
             << "); one launch runs one dilation per axis (run each group as its own call)";
          *why = os.str();
        }
        return false;
      }
  return true;
}

Problem launch_problem(const Problem& p) {
  if (p.head_rules.groups == 0) return p;
  Problem q = p;
  for (int a = 0; a < p.rank; ++a) q.axes[a] = p.head_rules.axes[0][a];
  return q;
}

void set_head_group_rules(HeadGroupRules& rules, const Problem& p, const int* group, int off) {
  const HeadRules& r = p.head_rules;
  rules.groups = r.groups;
  if (r.groups == 0) return;
  for (int g = 0; g < r.groups; ++g)
    for (int ka = 0; ka < kAxes; ++ka) {
      const int a = ka - off;
      if (a < 0) {
        rules.axes[g][ka] = AxisRule{1, 1, 1, 1, false};
        continue;
      }
      AxisRule rule = r.axes[g][a];
      rule.extent = group_length(rule, group[a]);
      rule.dilation = 1;
      rules.axes[g][ka] = rule;
    }
  for (int h = 0; h < p.heads_q; ++h) rules.group_of_head[h] = r.group_of_head[h];
}

}  // namespace gna::hopper
