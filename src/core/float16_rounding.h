// Conversions to the 16-bit float types that round once, to nearest even, from a double or an
// integer. half(float) and bfloat16(float) round correctly from a float, but a double or a
// wide integer sent through float first rounds twice (65519.999999999 became inf, not 65504).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kiln/dtype.h"

namespace kiln {

// Correctly rounded, ties to even; overflow gives inf only past the rounding boundary (65520
// for f16), values below half the smallest subnormal give a signed zero, NaN stays NaN.
half half_from(double v);
bfloat16 bfloat16_from(double v);
// Exact integer sources (a double could not hold every int64).
half half_from(int64_t v);
bfloat16 bfloat16_from(int64_t v);

// `v` as the float type To (float, double, half or bfloat16), rounded once: the functions
// above for half and bfloat16 from a double or an integer, the ordinary conversion otherwise
// (exact, or one rounding already).
template <class To, class From>
To float_cast(From v) {
  static_assert(!std::is_same_v<From, uint64_t>, "float_cast: no uint64_t source");
  constexpr bool k16 = std::is_same_v<To, half> || std::is_same_v<To, bfloat16>;
  if constexpr (std::is_same_v<From, half> || std::is_same_v<From, bfloat16>) {
    return To(static_cast<float>(v));  // exact in float
  } else if constexpr (!k16 || std::is_same_v<From, float>) {
    return To(v);
  } else {
    using Wide = std::conditional_t<std::is_same_v<From, double>, double, int64_t>;
    if constexpr (std::is_same_v<To, half>) {
      return half_from(static_cast<Wide>(v));
    } else {
      return bfloat16_from(static_cast<Wide>(v));
    }
  }
}

}  // namespace kiln
