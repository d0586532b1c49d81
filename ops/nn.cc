// Neural-network functions composed from primitives: activations (relu, gelu, sigmoid,
// softplus, swish) and the numerically stable softmax, log_softmax and logsumexp.
#include <cmath>
#include <numbers>

#include "kiln/ops.h"

namespace kiln {
namespace {

// Integer and bool inputs compute in f32, as the float-only elementwise ops do.
Tensor as_float(const Tensor& x) { return is_floating(x.dtype()) ? x : convert(x, f32); }

// The maximum over `axes` (kept), with infinities replaced by 0 so that subtracting it
// never makes inf - inf: rows of -inf then give exp(-inf) = 0 instead of NaN.
Tensor finite_max(const Tensor& x, const Axes& axes) {
  Tensor m = max(x, axes, /*keepdims=*/true);
  return where(is_finite(m), m, scalar_like(0, m));
}

}  // namespace

// x where x > 0, else 0, as where(x <= 0, 0, x): NaN passes through (NaN <= 0 is false), -0
// becomes +0, and the gradient at 0 is 0, as in TensorFlow, PyTorch and JAX (max(x, 0) would
// split it). The mask x <= 0 is also relu(x) <= 0, so a compiled training step reads it from
// relu's output and the pre-activation need not be kept (compiler/passes/epilogue_fusion.cc).
Tensor relu(const Tensor& x) {
  Tensor zero = scalar_like(0, x);
  return where(x <= zero, zero, x);
}

Tensor gelu(const Tensor& x, bool approximate) {
  Tensor xf = as_float(x);
  if (approximate) {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    constexpr double kSqrt2OverPi = 0.7978845608028654;
    Tensor inner = kSqrt2OverPi * (xf + 0.044715 * xf * xf * xf);
    return 0.5 * xf * (1.0 + tanh(inner));
  }
  return 0.5 * xf * (1.0 + erf(xf * (1.0 / std::numbers::sqrt2)));
}

Tensor sigmoid(const Tensor& x) { return logistic(x); }

// max(x, 0) + log1p(exp(-|x|)): exp never overflows and large x gives x exactly. max (not
// relu) so that the gradient at 0 is 1/2, sigmoid(0): max splits it at the tie.
Tensor softplus(const Tensor& x) {
  Tensor xf = as_float(x);
  return maximum(xf, scalar_like(0, xf)) + log1p(exp(-abs(xf)));
}

Tensor swish(const Tensor& x) {
  Tensor xf = as_float(x);
  return xf * sigmoid(xf);
}

Tensor softmax(const Tensor& x, int64_t axis) {
  Tensor xf = as_float(x);
  Tensor e = exp(xf - max(xf, {axis}, /*keepdims=*/true));
  return e / sum(e, {axis}, /*keepdims=*/true);
}

Tensor log_softmax(const Tensor& x, int64_t axis) {
  Tensor xf = as_float(x);
  Tensor shifted = xf - max(xf, {axis}, /*keepdims=*/true);
  return shifted - log(sum(exp(shifted), {axis}, /*keepdims=*/true));
}

Tensor logsumexp(const Tensor& x, Axes axes, bool keepdims) {
  Tensor xf = as_float(x);
  Tensor m = finite_max(xf, axes);
  Tensor out = log(sum(exp(xf - m), axes, keepdims));
  if (keepdims || xf.rank() == 0) return out + m;
  // Drop the kept axes of m to match `out` (every axis when `axes` is empty).
  Axes squeezed;
  if (axes.empty()) {
    for (int64_t d = 0; d < xf.rank(); ++d) squeezed.push_back(d);
  } else {
    for (int64_t a : axes) squeezed.push_back(a < 0 ? a + xf.rank() : a);
  }
  return out + squeeze(m, squeezed);
}

}  // namespace kiln
