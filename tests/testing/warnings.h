// Collects the warnings kiln::warn gives while it lives (tests that check what a user is warned
// about, and that a correct setup is not).
#pragma once

#include <string>
#include <vector>

#include "kiln/warning.h"

namespace kiln::testing_util {

class CaptureWarnings {
 public:
  CaptureWarnings()
      : previous_(set_warning_handler([this](const std::string& m) { messages.push_back(m); })) {}
  ~CaptureWarnings() { set_warning_handler(previous_); }
  CaptureWarnings(const CaptureWarnings&) = delete;
  std::vector<std::string> messages;

 private:
  WarningHandler previous_;
};

}  // namespace kiln::testing_util
