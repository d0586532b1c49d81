// Rounds a double or an int64 once to f16 or bf16: the value is an integer significand times a
// power of two, and one routine rounds that to any binary format narrower than both sources.
#include "src/core/float16_rounding.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace kiln {
namespace {

struct Format {
  int precision;  // significand bits, the implicit leading one included
  int min_exp;    // exponent of the smallest normal value
  int max_exp;    // exponent of the largest finite value
  int bias;
};
constexpr Format kHalf{11, -14, 15, 15};
constexpr Format kBFloat16{8, -126, 127, 127};

constexpr uint32_t infinity_bits(const Format& f) {
  return static_cast<uint32_t>(2 * f.bias + 1) << (f.precision - 1);  // exponent all ones
}

// The bits of ±m·2^e (m exact) in format `f`, rounded to nearest even.
uint16_t round_bits(bool negative, uint64_t m, int e, const Format& f) {
  const uint16_t sign = negative ? 0x8000 : 0;
  if (m == 0) return sign;
  const int top = e + std::bit_width(m) - 1;  // the value lies in [2^top, 2^(top+1))
  if (top > f.max_exp) return static_cast<uint16_t>(sign | infinity_bits(f));
  // The result is n·2^quantum: n has `precision` bits for normal values, fewer for subnormals.
  const int exp = std::max(top, f.min_exp);
  const int quantum = exp - (f.precision - 1);
  const int shift = quantum - e;  // bits of m below the quantum
  uint64_t n = 0;
  if (shift <= 0) {
    n = m << -shift;  // exact, and below 2^precision
  } else if (shift <= 64) {
    n = shift == 64 ? 0 : m >> shift;
    const uint64_t rest = shift == 64 ? m : m & ((uint64_t{1} << shift) - 1);
    const uint64_t halfway = uint64_t{1} << (shift - 1);
    if (rest > halfway || (rest == halfway && (n & 1))) ++n;
  }  // shift > 64: below half the quantum, rounds to zero
  // The exponent field sits above the stored significand; n's leading one (when normal) adds 1
  // to it, and a carry out of n (rounding up to 2^precision) moves to the next binade, or to
  // infinity past the largest finite value.
  const uint32_t bits = (static_cast<uint32_t>(exp + f.bias - 1) << (f.precision - 1)) + n;
  return static_cast<uint16_t>(sign | bits);
}

// `v` is not NaN.
uint16_t round_double(double v, const Format& f) {
  const uint64_t u = std::bit_cast<uint64_t>(v);
  const bool negative = u >> 63;
  const int biased = static_cast<int>((u >> 52) & 0x7ff);
  const uint64_t mantissa = u & ((uint64_t{1} << 52) - 1);
  if (biased == 0x7ff) {
    const uint16_t sign = negative ? 0x8000 : 0;
    return static_cast<uint16_t>(sign | infinity_bits(f));  // callers handle NaN first
  }
  if (biased == 0) return round_bits(negative, mantissa, -1074, f);
  return round_bits(negative, mantissa | (uint64_t{1} << 52), biased - 1075, f);
}

uint16_t round_int(int64_t v, const Format& f) {
  const uint64_t magnitude = v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : v;
  return round_bits(v < 0, magnitude, 0, f);
}

template <class T>
T from_bits(uint16_t bits) {
  T t;
  t.bits = bits;
  return t;
}

}  // namespace

half half_from(double v) {
  // NaN: the quiet NaN half(float) makes, keeping the sign.
  if (v != v) return from_bits<half>(std::signbit(v) ? 0xfe00 : 0x7e00);
  return from_bits<half>(round_double(v, kHalf));
}

bfloat16 bfloat16_from(double v) {
  // NaN: what bfloat16(float(v)) gives: the sign, quiet, and the payload's top bits.
  if (v != v) {
    const uint64_t u = std::bit_cast<uint64_t>(v);
    return from_bits<bfloat16>(
        static_cast<uint16_t>(((u >> 48) & 0x8000) | 0x7fc0 | ((u >> 45) & 0x3f)));
  }
  return from_bits<bfloat16>(round_double(v, kBFloat16));
}

half half_from(int64_t v) { return from_bits<half>(round_int(v, kHalf)); }
bfloat16 bfloat16_from(int64_t v) { return from_bits<bfloat16>(round_int(v, kBFloat16)); }

}  // namespace kiln
