// A directory of its own for each test (under gtest's TempDir, named by a prefix, the process id
// and the test's name), so that tests and concurrent test processes never share files; and
// TempDirTest, the fixture that empties it before each test, removes it after, and reads and
// writes the files in it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::testing_util {

// `name` with every '/' (a parameterised test's name has one) made a '_', to name one directory.
inline std::string flat_name(std::string name) {
  std::replace(name.begin(), name.end(), '/', '_');
  return name;
}

inline std::filesystem::path per_test_dir(const std::string& prefix) {
  return std::filesystem::path(testing::TempDir()) /
         flat_name(prefix + "_" + std::to_string(getpid()) + "_" +
                   testing::UnitTest::GetInstance()->current_test_info()->name());
}

// The whole file as bytes ("" when it cannot be opened).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Creates or replaces the file `path`, holding `bytes`.
inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fixture whose tests each have the directory dir_ to themselves: per_test_dir named after the
// test suite, empty (created, unless the fixture is constructed with kAbsent) when the test starts
// and removed when it ends.
class TempDirTest : public testing::Test {
 protected:
  enum class Dir { kCreated, kAbsent };
  explicit TempDirTest(Dir start = Dir::kCreated) : start_(start) {}

  void SetUp() override {
    dir_ = per_test_dir("kiln_" +
                        flat_name(testing::UnitTest::GetInstance()->current_test_suite()->name()));
    std::filesystem::remove_all(dir_);
    if (start_ == Dir::kCreated) std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The path of the file `name` in the directory (`name` itself when it is absolute).
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `bytes` to the file `name` (as path() places it); returns its path.
  std::string write_file(const std::string& name, std::string_view bytes) const {
    testing_util::write_file(path(name), bytes);
    return path(name);
  }
  static std::string read_file(const std::string& path) { return testing_util::read_file(path); }
  // The names of the directory's entries, sorted.
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  std::filesystem::path dir_;

 private:
  Dir start_;
};

}  // namespace kiln::testing_util
