// The scalar meaning of maximum and minimum, written once for the reference kernels
// (elementwise maximum/minimum, clamp, reduce_max/reduce_min) and the compiled code's own
// combining step; the code generator emits the same rules (compiler/cpu).
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

namespace kiln::ops {

// As XLA: NaN if either operand is NaN (the default quiet NaN), and -0 below +0, so
// max(-0, +0) is +0 and min(-0, +0) is -0 whatever the operands' order.
template <class T>
T max_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    if (a == b) return std::signbit(a) ? b : a;
  }
  return a > b ? a : b;
}

template <class T>
T min_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    if (a == b) return std::signbit(a) ? a : b;
  }
  return a < b ? a : b;
}

}  // namespace kiln::ops
