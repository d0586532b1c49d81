// half_from / bfloat16_from (src/core/float16_rounding.h) against exact references: every
// 16-bit pattern, each midpoint between neighbours and the doubles either side of it; integers
// near every power of two.
#include "src/core/float16_rounding.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace kiln {
namespace {

// A 16-bit float format described independently of the code under test.
struct Format {
  const char* name;
  int mantissa_bits;  // stored
  int bias;
  uint16_t infinity;
};
constexpr Format kHalfFormat{"f16", 10, 15, 0x7c00};
constexpr Format kBFloat16Format{"bf16", 7, 127, 0x7f80};

// The exact value of a finite non-negative pattern.
double value_of(const Format& f, uint16_t bits) {
  const int exp = bits >> f.mantissa_bits;
  const int man = bits & ((1 << f.mantissa_bits) - 1);
  const int scale = 1 - f.bias - f.mantissa_bits;  // the exponent of one subnormal step
  if (exp == 0) return std::ldexp(man, scale);
  return std::ldexp(man + (1 << f.mantissa_bits), scale + exp - 1);
}

uint16_t bits_of(half h) { return h.bits; }
uint16_t bits_of(bfloat16 b) { return b.bits; }

// For every non-negative finite pattern b and its successor b + 1 (the last one's successor is
// infinity, which as a rounding target sits where the next binade would start): b itself, the
// midpoint, and the doubles (and floats) just below and just above the midpoint, with both
// signs, must round to the neighbour on their side, ties to the even pattern.
template <class T, class Round>
void check_every_pattern_and_midpoint(const Format& f, Round round) {
  int failures = 0;
  auto expect = [&](double x, uint16_t want, const char* what, uint16_t b) {
    for (double s : {1.0, -1.0}) {
      const uint16_t sign = s < 0 ? 0x8000 : 0;
      const uint16_t got = bits_of(round(s * x));
      const uint16_t got_from_float = bits_of(T(static_cast<float>(s * x)));
      const bool float_exact = static_cast<double>(static_cast<float>(x)) == x;
      if (got != (want | sign) || (float_exact && got_from_float != (want | sign))) {
        if (++failures <= 10)
          ADD_FAILURE() << f.name << " pattern 0x" << std::hex << b << ", " << what << " "
                        << std::hexfloat << s * x << ": got 0x" << got << " (from float 0x"
                        << got_from_float << "), want 0x" << (want | sign);
      }
    }
  };
  for (uint16_t b = 0; b < f.infinity; ++b) {
    const uint16_t next = static_cast<uint16_t>(b + 1);
    const double lo = value_of(f, b);
    const double hi =
        next == f.infinity ? 2 * value_of(f, b) - value_of(f, b - 1) : value_of(f, next);
    const double mid = (lo + hi) / 2;  // exact: one more bit than the format has
    expect(lo, b, "the value", b);
    expect(mid, (b & 1) ? next : b, "the midpoint", b);
    expect(std::nextafter(mid, 0.0), b, "just below the midpoint", b);
    expect(std::nextafter(mid, HUGE_VAL), next, "just above the midpoint", b);
    // The floats either side of the midpoint exercise T(float) as well.
    expect(std::nextafter(static_cast<float>(mid), 0.0f), b, "the float below the midpoint", b);
    expect(std::nextafter(static_cast<float>(mid), HUGE_VALF), next, "the float above the midpoint",
           b);
  }
  EXPECT_EQ(failures, 0);
}

TEST(Float16Rounding, EveryHalfValueAndMidpointRoundsToTheNearestEven) {
  check_every_pattern_and_midpoint<half>(kHalfFormat, [](double x) { return half_from(x); });
}

TEST(Float16Rounding, EveryBFloat16ValueAndMidpointRoundsToTheNearestEven) {
  check_every_pattern_and_midpoint<bfloat16>(kBFloat16Format,
                                             [](double x) { return bfloat16_from(x); });
}

TEST(Float16Rounding, DoublesThatRoundedTwiceThroughFloat) {
  // Each rounds to f32 first onto an f16/bf16 tie or boundary, then the wrong way.
  EXPECT_EQ(half_from(65519.999999999).bits, 0x7bff);  // 65504, not inf
  EXPECT_EQ(static_cast<float>(half_from(2049.0000001)), 2050.0f);
  EXPECT_EQ(static_cast<float>(half_from(std::ldexp(1.0, -25) + std::ldexp(1.0, -60))),
            std::ldexp(1.0f, -24));
  EXPECT_EQ(static_cast<float>(bfloat16_from(std::ldexp(1.0, 30) + std::ldexp(1.0, 22) + 1)),
            std::ldexp(1.0f, 30) + std::ldexp(1.0f, 23));
  // The same from the integer.
  const int64_t k = (int64_t{1} << 30) + (int64_t{1} << 22) + 1;
  EXPECT_EQ(static_cast<float>(bfloat16_from(k)), std::ldexp(1.0f, 30) + std::ldexp(1.0f, 23));
}

TEST(Float16Rounding, SpecialValues) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(half_from(0.0).bits, 0x0000);
  EXPECT_EQ(half_from(-0.0).bits, 0x8000);
  EXPECT_EQ(half_from(inf).bits, 0x7c00);
  EXPECT_EQ(half_from(-inf).bits, 0xfc00);
  EXPECT_EQ(half_from(1e300).bits, 0x7c00);
  EXPECT_EQ(half_from(-1e-300).bits, 0x8000);
  EXPECT_EQ(half_from(std::numeric_limits<double>::denorm_min()).bits, 0x0000);
  EXPECT_EQ(half_from(nan).bits, 0x7e00);
  EXPECT_EQ(half_from(-nan).bits, 0xfe00);
  EXPECT_EQ(bfloat16_from(-0.0).bits, 0x8000);
  EXPECT_EQ(bfloat16_from(inf).bits, 0x7f80);
  EXPECT_EQ(bfloat16_from(-1e300).bits, 0xff80);
  EXPECT_EQ(bfloat16_from(std::numeric_limits<double>::max()).bits, 0x7f80);
  // A NaN keeps its sign and is quiet, as bfloat16(float) makes it.
  EXPECT_EQ(bfloat16_from(nan).bits, bfloat16(std::numeric_limits<float>::quiet_NaN()).bits);
  EXPECT_EQ(bfloat16_from(-nan).bits & 0xffc0, 0xffc0);
  // Double subnormals are far below bf16's range too.
  EXPECT_EQ(bfloat16_from(-std::numeric_limits<double>::denorm_min()).bits, 0x8000);
}

// The bf16 nearest to the integer v, ties to even, by integer arithmetic alone.
double nearest_bfloat16(int64_t v) {
  const bool negative = v < 0;
  const uint64_t m = negative ? uint64_t{0} - static_cast<uint64_t>(v) : v;
  const int width = std::bit_width(m);
  if (width <= 8) return static_cast<double>(v);
  const int shift = width - 8;  // bits below the 8-bit significand
  uint64_t kept = m >> shift;
  const uint64_t rest = m & ((uint64_t{1} << shift) - 1), halfway = uint64_t{1} << (shift - 1);
  if (rest > halfway || (rest == halfway && (kept & 1))) ++kept;
  const double r = std::ldexp(static_cast<double>(kept), shift);  // kept <= 256: exact
  return negative ? -r : r;
}

TEST(Float16Rounding, Int64ToBFloat16NearEveryPowerOfTwo) {
  std::vector<int64_t> values = {std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max(),
                                 std::numeric_limits<int64_t>::min() + 1};
  for (int k = 0; k < 63; ++k) {
    const uint64_t p = uint64_t{1} << k;
    const uint64_t step = k >= 8 ? p >> 8 : 1;  // half a bf16 quantum in this binade
    // Both ends of the binade and the first and last ties in it, each with +-1, +-2.
    for (uint64_t base : {p, p + step, p + 3 * step, 2 * p - step, 2 * p - 3 * step})
      for (int64_t d = -2; d <= 2; ++d) {
        const uint64_t u = base + static_cast<uint64_t>(d);
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) continue;
        values.push_back(static_cast<int64_t>(u));
        values.push_back(-static_cast<int64_t>(u));
      }
  }
  for (int64_t v : values)
    ASSERT_EQ(static_cast<double>(static_cast<float>(bfloat16_from(v))), nearest_bfloat16(v))
        << "i64 " << v;
}

TEST(Float16Rounding, IntegersToHalfMatchTheirExactDoubles) {
  // Every integer up to past the overflow boundary (65520) is exact in double.
  for (int64_t v = -70000; v <= 70000; ++v)
    ASSERT_EQ(half_from(v).bits, half_from(static_cast<double>(v)).bits) << v;
  EXPECT_EQ(half_from(int64_t{65519}).bits, 0x7bff);
  EXPECT_EQ(half_from(int64_t{65520}).bits, 0x7c00);
  EXPECT_EQ(half_from(std::numeric_limits<int64_t>::min()).bits, 0xfc00);
  EXPECT_EQ(half_from(int64_t{0}).bits, 0x0000);  // +0, never -0
}

}  // namespace
}  // namespace kiln
