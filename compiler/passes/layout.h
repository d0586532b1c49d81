// Layout folding (not exact): a transpose feeding an operand of a dot or fused_dot, or swapping a
// dot's result, becomes part of the dot's dimension attributes, so the kernel reads the
// transpose's input in place instead of a materialised copy. Not bit-exact: Eigen packs a
// transposed operand differently, so a folded dot may round differently in the last bits; the
// pipeline runs it after the exact passes.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::compiler {

// Folds transpose(x, perm) into a dot operand when (1) the dot's output keeps its dimension order
// (the operand's free dimensions stay in increasing order in x) and (2) the dot's kernel then
// reads x without a copy (f32/f64: x is [batch, rows, cols] or its transpose in memory; integers:
// the first only; f16/bf16 operands are always converted through a copy, so any fold saves one).
// The transpose stays for its other users, if any (DCE removes it otherwise).
// Also folds transpose(dot(a, b)) that only swaps the two operands' free dimensions into
// dot(b, a) when nothing else reads dot(a, b) and both operands are still read in place (the
// backward pass of x . transpose(w) computes dw that way).
// Reshapes are not folded: undoing one that merges or splits a free dimension changes the dot's
// output shape, and one on a contracting or batch dimension must be mirrored on the other
// operand, so a reshape would remain somewhere else.
class LayoutFolding : public Pass {
 public:
  std::string name() const override { return "layout"; }
  bool exact() const override { return false; }
  bool run(Module& module) override;
};

}  // namespace kiln::compiler
