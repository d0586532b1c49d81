// What the fuzz targets that run the graphs they load share: which error codes an input may give,
// and element counts that stop at a cap instead of overflowing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "kiln/error.h"
#include "kiln/shape.h"

namespace kiln::fuzz {

inline bool one_of(ErrorCode code, std::initializer_list<ErrorCode> allowed) {
  return std::find(allowed.begin(), allowed.end(), code) != allowed.end();
}

// The elements of `shape`, each unknown dimension taken as `unknown`; cap + 1 once past `cap`.
inline uint64_t capped_elements(const Shape& shape, uint64_t unknown, uint64_t cap) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    const uint64_t size = d == kUnknownDim ? unknown : static_cast<uint64_t>(d);
    if (__builtin_mul_overflow(n, size, &n) || n > cap) return cap + 1;
  }
  return n;
}

}  // namespace kiln::fuzz
