// The CPU fusion target: the elemental emitter's loops (llvm_ir::LoopFusionTarget), and the
// CPU's fused dot and convolution.
#include "compiler/cpu/fusion_target.h"

#include <string>

#include "compiler/cpu/fused_dot.h"
#include "compiler/llvm_ir/loop_target.h"

namespace kiln::compiler::cpu {
namespace {

class CpuFusionTarget final : public llvm_ir::LoopFusionTarget {
 public:
  // fused_dot and fused_conv take the floating types (bf16 and f16 with the bias and
  // activation applied to the f32 sums before their one rounding: compiler/cpu/fused_dot.h).
  bool epilogue_dtype(DType t) const override { return is_floating(t); }
  std::string fused_dot_layout_refusal(const Shape& a, const Shape& b,
                                       const Attrs& attrs) const override {
    return compiler::fused_dot_layout_refusal(a, b, attrs);
  }
  // The pool is computed image by image right after the epilogue (compiler/cpu/fused_conv.h).
  bool conv_pool_dtype(DType t) const override { return t == f32 || t == f64; }
};

}  // namespace

const FusionTarget& fusion_target() {
  static const CpuFusionTarget target;
  return target;
}

}  // namespace kiln::compiler::cpu
