// The warning handler: std::cerr unless a caller (a test, an application's logger) sets one.
#include "kiln/warning.h"

#include <iostream>
#include <mutex>
#include <utility>

namespace kiln {
namespace {

std::mutex& handler_mutex() {
  static std::mutex mu;
  return mu;
}

WarningHandler& current_handler() {
  static WarningHandler handler;
  return handler;
}

}  // namespace

WarningHandler set_warning_handler(WarningHandler handler) {
  std::lock_guard lock(handler_mutex());
  return std::exchange(current_handler(), std::move(handler));
}

void warn(const std::string& message) {
  WarningHandler handler;
  {
    std::lock_guard lock(handler_mutex());
    handler = current_handler();
  }
  if (handler) {
    handler(message);
    return;
  }
  std::cerr << "kiln: warning: " + message + "\n" << std::flush;
}

}  // namespace kiln
