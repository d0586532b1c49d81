// For tests that compare Kiln's oneDNN paths with its own kernels.
#pragma once

#include "ops/onednn_conv.h"

namespace kiln::testing {

// Runs f with the oneDNN paths switched on or off, restoring the setting.
template <class F>
auto with_onednn(bool on, F&& f) {
  const bool saved = ops::onednn::enabled();
  ops::onednn::set_enabled(on);
  struct Restore {
    bool saved;
    ~Restore() { ops::onednn::set_enabled(saved); }
  } restore{saved};
  return f();
}

}  // namespace kiln::testing
