// CUDA's fusion target (ptx.h): the elemental emitter's loops, and no fused ops yet.
#include "compiler/cuda/ptx.h"
#include "compiler/llvm_ir/loop_target.h"

namespace kiln::compiler::cuda {

const FusionTarget& fusion_target() { return llvm_ir::loop_only_fusion_target(); }

}  // namespace kiln::compiler::cuda
