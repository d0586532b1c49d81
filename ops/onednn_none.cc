// ops/onednn_conv.h for a Kiln built without oneDNN (chosen by CMake): every pass declines, so
// ops/conv.cc's own kernels serve every convolution.
#include "ops/onednn_conv.h"

namespace kiln::ops::onednn {

bool built() { return false; }
bool enabled() { return false; }
void set_enabled(bool) {}
Counts counts() { return {}; }

bool forward(const KernelContext&, const ConvShape&, const void*, const void*, void*,
             const Epilogue&) {
  return false;
}
bool input_grad(const KernelContext&, const ConvShape&, const void*, const void*, void*) {
  return false;
}
bool kernel_grad(const KernelContext&, const ConvShape&, const void*, const void*, void*) {
  return false;
}

}  // namespace kiln::ops::onednn
