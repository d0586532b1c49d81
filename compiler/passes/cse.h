// Common subexpression elimination: pure nodes with the same op, inputs and attributes are
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::compiler {

class Cse : public Pass {
 public:
  std::string name() const override { return "cse"; }
  bool run(Module& module) override;
};

}  // namespace kiln::compiler
