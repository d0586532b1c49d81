// DType properties, promotion, and IEEE half conversion.
#include "kiln/dtype.h"

#include <bit>
#include <cmath>

namespace kiln {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case f64: case i64: return 8;
    case f32: case i32: return 4;
    case f16: case bf16: return 2;
    case i8: case u8: case bool_: return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case f32: return "f32";
    case f64: return "f64";
    case f16: return "f16";
    case bf16: return "bf16";
    case i8: return "i8";
    case u8: return "u8";
    case i32: return "i32";
    case i64: return "i64";
    case bool_: return "bool";
  }
  return "?";
}

bool is_floating(DType d) { return d == f32 || d == f64 || d == f16 || d == bf16; }
bool is_integer(DType d) { return d == i8 || d == u8 || d == i32 || d == i64; }
bool is_signed(DType d) { return is_floating(d) || d == i8 || d == i32 || d == i64; }

namespace {
int float_rank(DType d) { return d == f64 ? 3 : d == f32 ? 2 : 1; }
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == bool_) return b;
  if (b == bool_) return a;
  if (is_floating(a) && is_floating(b)) {
    if ((a == f16 && b == bf16) || (a == bf16 && b == f16)) return f32;
    return float_rank(a) >= float_rank(b) ? a : b;
  }
  if (is_floating(a)) return a;
  if (is_floating(b)) return b;
  // Two different integers.
  if ((a == u8 && b == i8) || (a == i8 && b == u8)) return i32;
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

}  // namespace kiln
