// The warning handler: a set handler receives each warning; an empty one restores std::cerr.
#include "kiln/warning.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace kiln {
namespace {

TEST(Warning, GoesToTheHandlerThenBackToStderrWithThePrefix) {
  std::vector<std::string> got;
  WarningHandler previous = set_warning_handler([&](const std::string& m) { got.push_back(m); });
  warn("first");
  EXPECT_EQ(got, std::vector<std::string>{"first"});
  EXPECT_TRUE(static_cast<bool>(set_warning_handler(previous)));  // returns the test's handler

  testing::internal::CaptureStderr();
  warn("second");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, previous ? "" : "kiln: warning: second\n");
  EXPECT_EQ(got.size(), 1u);  // the test's handler no longer sees warnings
}

}  // namespace
}  // namespace kiln
