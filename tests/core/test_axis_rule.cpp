#include <gtest/gtest.h>
#include "gna/core/axis_rule.hpp"
TEST(AxisRule, Placeholder) { EXPECT_TRUE(true); }
