// For tests that compare Kiln's oneDNN paths with its own kernels.
#pragma once

#include "ops/conv_direct.h"
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

// Switches the direct few-channel convolution kernels (ops/conv_direct.h) off while it lives, so
// that oneDNN's paths and Kiln's im2col GEMM serve the small-channel cases too.
class DirectConvOff {
 public:
  DirectConvOff() : saved_(ops::direct_conv::enabled()) { ops::direct_conv::set_enabled(false); }
  ~DirectConvOff() { ops::direct_conv::set_enabled(saved_); }
  DirectConvOff(const DirectConvOff&) = delete;
  DirectConvOff& operator=(const DirectConvOff&) = delete;

 private:
  bool saved_;
};

}  // namespace kiln::testing
