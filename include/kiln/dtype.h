// Element types, their sizes and names, 16-bit float storage types and the promotion rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace kiln {

enum class DType : uint8_t { f32, f64, f16, bf16, i8, u8, i32, i64, bool_ };

inline constexpr DType f32 = DType::f32;
inline constexpr DType f64 = DType::f64;
inline constexpr DType f16 = DType::f16;
inline constexpr DType bf16 = DType::bf16;
inline constexpr DType i8 = DType::i8;
inline constexpr DType u8 = DType::u8;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;
inline constexpr DType bool_ = DType::bool_;
inline constexpr int kNumDTypes = 9;

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "bool", ...
bool is_floating(DType dtype);
bool is_integer(DType dtype);  // i8, u8, i32, i64 (not bool)
bool is_signed(DType dtype);

// The result type of a binary arithmetic op on `a` and `b`:
//  - equal types give that type;
//  - bool with anything gives the other type;
//  - two integers give the wider one; u8 with i8 gives i32 (the smallest holding both);
//  - an integer with a float gives the float;
//  - two floats give the wider one; f16 with bf16 gives f32.
DType promote_types(DType a, DType b);

// IEEE binary16 storage. Arithmetic is done by converting to float. Both conversions are
// inline and branch-free (selects), so loops over half values vectorize.
struct half {
  uint16_t bits = 0;
  half() = default;
  // Round to nearest even; overflow past 65520 gives inf, a NaN the quiet NaN 0x7e00 (signed).
  half(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t mag = x & 0x7fffffffu;
    // Normal halves: round the mantissa at bit 13 (ties to even), then rebias the exponent.
    const uint32_t normal = (mag + 0xfffu + ((mag >> 13) & 1u) - 0x38000000u) >> 13;
    // Subnormal halves (and zero): the value in units of 2^-24 (exact), rounded to an integer
    // by adding and subtracting 2^23 (to nearest even). Larger magnitudes are clamped first so
    // the conversion stays in range.
    const uint32_t small_mag = mag < 0x38800000u ? mag : 0x38800000u;
    float scaled;
    std::memcpy(&scaled, &small_mag, 4);
    scaled *= 16777216.0f;
    const uint32_t subnormal = static_cast<uint32_t>((scaled + 8388608.0f) - 8388608.0f);
    uint32_t r = mag < 0x38800000u ? subnormal : normal;
    r = mag >= 0x477ff000u ? 0x7c00u : r;  // rounds to >= 65520: infinity
    r = mag > 0x7f800000u ? 0x7e00u : r;   // NaN
    bits = static_cast<uint16_t>(sign | r);
  }
  // Exact; inf and NaN keep their payload.
  operator float() const {
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    const uint32_t exp = (bits >> 10) & 0x1fu;
    const uint32_t man = bits & 0x3ffu;
    const float sub = static_cast<float>(man) * (1.0f / 16777216.0f);  // man * 2^-24, exact
    uint32_t sub_bits;
    std::memcpy(&sub_bits, &sub, 4);
    uint32_t r = sign | ((exp + 112) << 23) | (man << 13);
    r = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : r;
    r = exp == 0 ? (sign | sub_bits) : r;
    float f;
    std::memcpy(&f, &r, 4);
    return f;
  }
};

// bfloat16 storage: the upper 16 bits of an f32, rounded to nearest even.
struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  bfloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a quiet NaN
      bits = static_cast<uint16_t>((u >> 16) | 0x40);
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<uint16_t>(u >> 16);
  }
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

template <class T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = f32; };
template <> struct DTypeOf<double> { static constexpr DType value = f64; };
template <> struct DTypeOf<half> { static constexpr DType value = f16; };
template <> struct DTypeOf<bfloat16> { static constexpr DType value = bf16; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = i8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = u8; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = i32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = i64; };
template <> struct DTypeOf<bool> { static constexpr DType value = bool_; };
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace kiln
