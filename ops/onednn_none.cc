// ops/onednn_conv.h and ops/onednn_matmul.h for a Kiln built without oneDNN (chosen by CMake):
// every pass declines, so ops/conv.cc's and ops/linalg.cc's own kernels serve every case.
#include "ops/onednn_conv.h"
#include "ops/onednn_matmul.h"

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
bool fused_forward(const KernelContext&, const ConvShape&, const void*, const void*, void*,
                   const BiasActivation&) {
  return false;
}

bool lowp_matmul_supported(DType) { return false; }
bool matmul(const KernelContext&, const MatmulShape&, const void*, const void*, void*,
            const BiasActivation*) {
  return false;
}
bool sgemm_block(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t, int64_t,
                 int64_t, bool, bool) {
  return false;
}
int64_t sgemm_count() { return 0; }
std::string cpu_isa() { return "none"; }
std::string matmul_path(DType) { return "widen to f32: Kiln is built without oneDNN"; }
int64_t matmul_count() { return 0; }
int64_t fused_matmul_count() { return 0; }

}  // namespace kiln::ops::onednn
