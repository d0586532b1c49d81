// Output (epilogue) fusion: dot -> add(bias) -> activation chains become one fused_dot kernel op
// (compiler/fused_dot.h) that applies the bias and activation to each block of the GEMM's output
// while it is in cache. Refuses, with a note, when an intermediate is used elsewhere (e.g. the
// pre-activation the backward pass needs: then only the bias is fused).
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::compiler {

class DotEpilogue : public Pass {
 public:
  std::string name() const override { return "dot_epilogue"; }
  bool run(Module& module) override;
};

}  // namespace kiln::compiler
