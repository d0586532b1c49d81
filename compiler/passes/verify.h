// Checks a module's invariants: inputs refer to earlier nodes, every node's shape function
// re-run gives its recorded output types, outputs and placeholders exist. Violations throw a
// kiln::Error naming the node. Never changes the module.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::compiler {

class Verify : public Pass {
 public:
  std::string name() const override { return "verify"; }
  bool run(Module& module) override;
};

}  // namespace kiln::compiler
