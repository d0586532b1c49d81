// Merges a scan with the augmented copy of it that its gradient recorded (the same inputs and
// steps, a body that also returns the residuals the backward scan reads; attribute "augments"
// names the original's body): the original's users read the augmented scan's leading outputs,
// so the forward steps run once. The augmented scan is emitted where the original was (its
// inputs are the same), and DCE removes nothing else.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::compiler {

class MergeAugmentedScans : public Pass {
 public:
  std::string name() const override { return "merge_augmented_scans"; }
  bool run(Module& module) override;
};

}  // namespace kiln::compiler
