// Algebraic simplification with exact rules only (the result is bitwise the same): x*1, x/1,
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::compiler {

class AlgebraicSimplifier : public Pass {
 public:
  std::string name() const override { return "algebraic_simplifier"; }
  bool run(Module& module) override;
};

}  // namespace kiln::compiler
