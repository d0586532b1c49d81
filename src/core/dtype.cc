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

half::half(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag > 0x7f800000u) {  // NaN
    bits = static_cast<uint16_t>(sign | 0x7e00u);
    return;
  }
  if (mag >= 0x477ff000u) {  // rounds to >= 65520: infinity
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (mag < 0x38800000u) {  // subnormal half (or zero): scale into integer units of 2^-24
    float scaled = std::bit_cast<float>(mag) * 16777216.0f;  // exact
    uint32_t r = static_cast<uint32_t>(std::nearbyint(scaled));
    bits = static_cast<uint16_t>(sign | r);
    return;
  }
  uint32_t rounded = mag + 0xfffu + ((mag >> 13) & 1u);
  bits = static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

half::operator float() const {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t man = bits & 0x3ffu;
  if (exp == 0) {
    float v = static_cast<float>(man) / 16777216.0f;
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

}  // namespace kiln
