// Common subexpression elimination: pure nodes with the same op, inputs and attributes (constants:
// the same bytes) are computed once. Random and stateful ops are never merged.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::compiler {

class Cse : public Pass {
 public:
  std::string name() const override { return "cse"; }
  bool run(Module& module) override;
};

}  // namespace kiln::compiler
