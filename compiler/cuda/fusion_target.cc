// CUDA's fusion target (ptx.h): the elemental emitter's loops, and no fused ops yet.
#include "compiler/cuda/ptx.h"
#include "compiler/llvm_ir/loop_target.h"

namespace kiln::compiler::cuda {
namespace {

class CudaFusionTarget final : public llvm_ir::LoopFusionTarget {
 public:
  bool epilogue_dtype(DType) const override { return false; }
  std::string fused_dot_layout_refusal(const Shape&, const Shape&, const Attrs&) const override {
    return "the CUDA backend has no fused dot";
  }
  bool conv_pool_dtype(DType) const override { return false; }
};

}  // namespace

const FusionTarget& fusion_target() {
  static const CudaFusionTarget target;
  return target;
}

}  // namespace kiln::compiler::cuda
