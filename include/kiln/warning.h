// Warnings: mistakes that run but train badly (a loss's from_logits against a softmax output,
// binary labels outside [0, 1]). By default printed to std::cerr as "kiln: warning: <message>".
#pragma once

#include <functional>
#include <string>

namespace kiln {

using WarningHandler = std::function<void(const std::string& message)>;

// Sends every later warning to `handler` (the message without the "kiln: warning: " prefix);
// an empty handler restores printing to std::cerr. Returns the handler it replaces (empty for
// the default), so a test can capture warnings and put the previous handler back.
WarningHandler set_warning_handler(WarningHandler handler);

// Reports `message` to the current handler. Thread-safe.
void warn(const std::string& message);

}  // namespace kiln
