// CUDA's fusion target (ptx.h): the elemental emitter's loops, and cuBLASLt's bias epilogue on
// dots.
#include "compiler/cuda/ptx.h"
#include "compiler/llvm_ir/loop_target.h"

namespace kiln::compiler::cuda {

const FusionTarget& fusion_target() { return llvm_ir::device_fusion_target(); }

}  // namespace kiln::compiler::cuda
