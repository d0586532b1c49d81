// Reverse-mode automatic differentiation. Gradients are more nodes of the same graph, built
// from each primitive's gradient rule (OpDef::gradient); value_and_grad and grad differentiate
// a C++ function of concrete tensors by tracing it.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "kiln/ops.h"
#include "kiln/tensor.h"

namespace kiln {

// The gradients of y with respect to each of xs: symbolic values recorded into y's graph
// under the "gradients/" name scope. y and xs must be symbolic values of one graph. dy is the
// gradient flowing into y (default ones_like(y), so a non-scalar y gives the gradient of
// sum(y)); a concrete dy becomes a constant. Only floating-point values carry gradients, and
// non-differentiable ops (comparisons, stop_gradient, ...) stop them: an x that y does not
// depend on through differentiable ops gets zeros_like(x). Throws kiln::Error naming the op
// and node when a differentiable op on the way has no gradient rule.
std::vector<Tensor> gradients(const Tensor& y, const std::vector<Tensor>& xs,
                              const Tensor& dy = {});
// The same for several ys of one graph (tf.gradients): the gradients of sum_i <ys[i], dys[i]>.
// dys is empty (ones for every y) or one per y (an undefined one means ones).
std::vector<Tensor> gradients(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                              const std::vector<Tensor>& dys = {});

using DifferentiableFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Traces f on placeholders shaped like the concrete `args`, builds the gradients of f's result
// with respect to every argument (with cotangent dy, default ones), runs the graph with the
// reference interpreter and returns the concrete value and gradients.
std::pair<Tensor, std::vector<Tensor>> value_and_grad(const DifferentiableFn& f,
                                                      const std::vector<Tensor>& args,
                                                      const Tensor& dy = {});
std::vector<Tensor> grad(const DifferentiableFn& f, const std::vector<Tensor>& args,
                         const Tensor& dy = {});

// stop_gradient and unbroadcast are in kiln/ops.h (gradient rules of ops use them).

}  // namespace kiln
