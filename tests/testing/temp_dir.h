// A directory path of its own for each test (under gtest's TempDir, named by a prefix, the
// process id and the test's name), so that tests and concurrent test processes never share
// files. Only the path: creating or clearing it is the fixture's business.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace kiln::testing_util {

inline std::filesystem::path per_test_dir(const std::string& prefix) {
  return std::filesystem::path(testing::TempDir()) /
         (prefix + "_" + std::to_string(getpid()) + "_" +
          testing::UnitTest::GetInstance()->current_test_info()->name());
}

}  // namespace kiln::testing_util
