// Unrolls scans, whose number of steps is always a constant (the "length" attribute):
//  - fully, when the node asks for it (unroll >= length) or the loop is small (at most
//    kMaxAutoUnrollSteps steps and kMaxAutoUnrollNodes body nodes in all once unrolled): each
//    step becomes ordinary nodes of the enclosing graph, so constant folding, CSE and fusion see
//    across steps, and no loop thunk runs;
//  - by the node's unroll factor k (1 < k < length) otherwise: a scan of length / k steps whose
//    body runs k steps, and the length % k steps left over inlined after it (before it when the
//    scan runs in reverse).
// Row t of an xs is slice + squeeze, the ys are concatenated rows. A scan is left alone when a
// type at its boundary has an unknown dimension (kiln::function traces with concrete shapes;
// a model's graph may not know its batch size until it is compiled), when its body holds a
// stateful or random op, or when it has no steps.
#pragma once

#include <cstdint>

#include "compiler/passes/pass.h"

namespace kiln::compiler {

class UnrollLoops : public Pass {
 public:
  static constexpr int64_t kMaxAutoUnrollSteps = 4;
  static constexpr int64_t kMaxAutoUnrollNodes = 64;

  std::string name() const override { return "unroll_loops"; }
  bool run(Module& module) override;
};

}  // namespace kiln::compiler
