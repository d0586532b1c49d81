// argmax and argmin as two reductions a loop can fold, for a backend whose loops cannot fold an
// (index, value) pair and for which the reference kernel means copying the input across (a
// device's: FusionTarget::arg_reductions_as_loops). argmax(x, axis) becomes
//   m = reduce_max(x, axis, keepdims); hit = x == m or x != x (a NaN);
//   reduce_min(select(hit, iota along axis, n), axis)
// the first maximum's index, or the first NaN's when there is one: the kernel's answer, bit for
// bit (-0 and +0 compare equal in both). Only where the reduced axis has a known size.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::compiler {

class ArgReductions : public Pass {
 public:
  std::string name() const override { return "arg_reductions"; }
  bool run(Module& module) override;
};

}  // namespace kiln::compiler
