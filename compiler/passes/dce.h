// Dead code elimination: removes nodes the requested outputs do not need (placeholders stay).
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::compiler {

class Dce : public Pass {
 public:
  std::string name() const override { return "dce"; }
  bool run(Module& module) override;
};

}  // namespace kiln::compiler
