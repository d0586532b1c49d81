// The CPU backend's answers to the fusion pass (compiler/passes/fusion.h): the elemental emitter's
// loops (compiler/llvm_ir/loop_target.h) and the CPU's fused dot and convolution.
#pragma once

#include "compiler/passes/fusion.h"

namespace kiln::compiler::cpu {

const FusionTarget& fusion_target();

}  // namespace kiln::compiler::cpu
