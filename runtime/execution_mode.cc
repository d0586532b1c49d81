// The process-wide default execution mode (declared in kiln/execution_mode.h):
// KILN_INTERPRET from the environment, or what set_default_execution_mode chose; and whether
// compiled programs may use excess precision (KILN_EXCESS_PRECISION, set_allow_excess_precision).
#include <atomic>
#include <cstdlib>
#include <string_view>

#include "kiln/execution_mode.h"

namespace kiln {

namespace {

std::atomic<int> g_mode_override{-1};

ExecutionMode mode_from_environment() {
  static const ExecutionMode mode = [] {
    const char* v = std::getenv("KILN_INTERPRET");
    bool interpret = v && *v && std::string_view(v) != "0";
    return interpret ? ExecutionMode::kInterpreted : ExecutionMode::kCompiled;
  }();
  return mode;
}

}  // namespace

ExecutionMode default_execution_mode() {
  int o = g_mode_override.load(std::memory_order_relaxed);
  return o < 0 ? mode_from_environment() : static_cast<ExecutionMode>(o);
}

void set_default_execution_mode(ExecutionMode mode) {
  g_mode_override.store(static_cast<int>(mode), std::memory_order_relaxed);
}

namespace {

std::atomic<int> g_excess_override{-1};

bool excess_from_environment() {
  static const bool allow = [] {
    const char* v = std::getenv("KILN_EXCESS_PRECISION");
    return !(v && std::string_view(v) == "0");
  }();
  return allow;
}

}  // namespace

bool allow_excess_precision() {
  int o = g_excess_override.load(std::memory_order_relaxed);
  return o < 0 ? excess_from_environment() : o != 0;
}

void set_allow_excess_precision(bool allow) {
  g_excess_override.store(allow ? 1 : 0, std::memory_order_relaxed);
}

const char* execution_mode_name(ExecutionMode mode) {
  return mode == ExecutionMode::kCompiled ? "compiled" : "interpreted";
}

}  // namespace kiln
