// The hook kiln::function's tracer installs on its thread: while a capture is installed,
// Variable::value() returns the capture's placeholder for the variable, and assigning a
// symbolic value records an update instead of failing.
#pragma once

#include "kiln/variable.h"

namespace kiln::detail {

class VariableCapture {
 public:
  virtual ~VariableCapture() = default;
  // The symbolic value standing for `v` in the graph being traced. While it runs, the capture
  // is uninstalled, so v.value() gives the concrete value.
  virtual const Tensor& read(const Variable& v) = 0;
  // `value` (symbolic) becomes v's value after each run of the traced graph.
  virtual void assign(const Variable& v, const Tensor& value) = 0;
};

// The tensor a variable holds, for a compiled step donating its buffer: the step moves it out
// (so that the run holds the only handle), runs, and puts back the result (the same Tensor
// when the buffer was updated in place). Not a public API: no checks.
struct VariableAccess {
  // Write access: marks stale the host copy value() keeps of a device value.
  static Tensor& held(const Variable& v);
  // The tensor held, read where it lives (on a device for a variable kept there).
  static const Tensor& stored(const Variable& v);
  // Renames a variable (a functional model making its layers' names unique renames their
  // weights to match, before anything reads them by name).
  static void rename(const Variable& v, std::string name);
};

// This thread's capture, or nullptr.
VariableCapture*& variable_capture();

// Installs `capture` for the guard's lifetime (restoring the previous one after).
class VariableCaptureScope {
 public:
  explicit VariableCaptureScope(VariableCapture* capture) : previous_(variable_capture()) {
    variable_capture() = capture;
  }
  ~VariableCaptureScope() { variable_capture() = previous_; }
  VariableCaptureScope(const VariableCaptureScope&) = delete;
  VariableCaptureScope& operator=(const VariableCaptureScope&) = delete;

 private:
  VariableCapture* previous_;
};

}  // namespace kiln::detail
