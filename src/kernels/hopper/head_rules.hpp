// Per-head rules (Problem::head_rules) as the Hopper kernels take them: each head-rule group's
// per-axis rules in kernel axes (right-aligned like FwdParams::axes / BwdParams::axes, in group
// coordinates of the launch's dilation group: extent = group length, dilation 1) and the query
// head -> group map. A work item reads its head's group once and takes every rule-dependent
// quantity (KV walk, tile classes, masks, row windows) from that group's rules; without head
// rules (groups == 0) it takes the launch's axes.
#pragma once

#include <cstdint>
#include <string>

#include "gna/core/axis_rule.hpp"
#include "gna/core/hd.hpp"
#include "gna/core/problem.hpp"
#include "kernels/hopper/tile_sizes.hpp"

namespace gna::hopper {

struct HeadGroupRules {
  int groups;  // 0: every head follows the launch's axes
  AxisRule axes[kMaxHeadGroups][kAxes];
  // One entry past the heads (group 0), so that a walk stepping past its last head may read it.
  uint8_t group_of_head[kMaxHeadsWithRules + 1];
};

// The rules of query head `head` in a kernel instantiated for launches with head rules
// (kRules: its group's) or without (the launch's axes; the rules are not read, so that the
// kernel without head rules compiles to the plain one).
template <bool kRules, typename Params>
GNA_HD const AxisRule* axes_of_item(const Params& p, int head) {
  if constexpr (kRules)
    return p.rules.axes[p.rules.group_of_head[head]];
  else
    return p.axes;
}

// Whether the Hopper kernels can run p's head rules in one launch per dilation group: every
// group has the layout's dilations (a launch's tensor maps are those of one dilation group).
// Otherwise writes the reason, naming the groups, the axis and the dilations.
bool head_rules_supported(const Problem& p, std::string* why);

// The problem whose axes decide the launches (plan_launches, tile counts): with head rules,
// group 0's rules (their dilations are every group's); else p.
Problem launch_problem(const Problem& p);

// Fills `rules` for the launch of dilation groups `group` (per problem axis) with `off` placeholder
// axes in front: groups = 0 without head rules.
void set_head_group_rules(HeadGroupRules& rules, const Problem& p, const int* group, int off);

}  // namespace gna::hopper
