// Algebraic simplification with exact rules only, so results stay bitwise the same: x*1, 1*x, x/1,
// x+(-0.0), x-(+0.0) (any zero for integers), integer x*0, neg(neg(x)), identity convert,
// reshape, transpose, broadcast_in_dim and slice, reshape of reshape, transpose of transpose;
// a random op's shape_like input replaced by its known shape.
// Caveats: x*1 and x/1 return a signalling NaN unquieted (arithmetic never makes one); the
// identity rules apply only where the shapes are known to be equal (no broadcasting).
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::compiler {

class AlgebraicSimplifier : public Pass {
 public:
  // mask_max_grads: fold select(x <= 0, 0, reduce_window_max_grad(x, dy)) into the gradient's
  // "relu_mask" (off for a backend whose pooling kernels take no mask: FusionTarget).
  explicit AlgebraicSimplifier(bool mask_max_grads = true) : mask_max_grads_(mask_max_grads) {}
  std::string name() const override { return "algebraic_simplifier"; }
  bool run(Module& module) override;

 private:
  bool mask_max_grads_;
};

}  // namespace kiln::compiler
