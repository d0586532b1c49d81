// The CPU backend's answers to the fusion pass (compiler/passes/fusion.h): which elementwise
// ops and reductions its loop emitter (fused_kernel.h) can compute, for which dtypes and layouts.
#pragma once

#include "compiler/passes/fusion.h"

namespace kiln::compiler::cpu {

const FusionTarget& fusion_target();

}  // namespace kiln::compiler::cpu
