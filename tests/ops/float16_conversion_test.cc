// Every way a double or an integer becomes an f16 or bf16 element (convert, full, arange, a
// plain number mixed with a tensor, item) rounds once, eagerly, interpreted and compiled.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/function.h"
#include "kiln/ops.h"
#include "src/core/float16_rounding.h"

namespace kiln {
namespace {

// The cases of issue #17: each rounded through f32 lands on a tie or boundary and goes wrong.
const double kNearMaxHalf = 65519.999999999;                                // f16 65504, not inf
const double kAboveTie = 2049.0000001;                                      // f16 2050, not 2048
const double kAboveTinyTie = std::ldexp(1.0, -25) + std::ldexp(1.0, -60);   // f16 2^-24, not 0
const int64_t kAboveBf16Tie = (int64_t{1} << 30) + (int64_t{1} << 22) + 1;  // bf16 2^30 + 2^23

std::vector<uint16_t> bits(const Tensor& t) {
  std::vector<uint16_t> out(t.size());
  std::memcpy(out.data(), t.raw_data(), out.size() * 2);
  return out;
}
uint16_t bits1(const Tensor& t) { return bits(t).at(0); }

const uint16_t kHalf65504 = half_from(65504.0).bits, kHalf2050 = half_from(2050.0).bits;
const uint16_t kHalfTiny = 0x0001;  // 2^-24
const uint16_t kBf16Up = bfloat16_from(std::ldexp(1.0, 30) + std::ldexp(1.0, 23)).bits;

TEST(Float16Conversion, ConvertRoundsDoublesAndIntegersOnce) {
  Tensor d = Tensor::from_vector<double>({kNearMaxHalf, kAboveTie, kAboveTinyTie});
  EXPECT_EQ(bits(convert(d, f16)), (std::vector<uint16_t>{kHalf65504, kHalf2050, kHalfTiny}));
  EXPECT_EQ(bits1(convert(Tensor::scalar(static_cast<double>(kAboveBf16Tie)), bf16)), kBf16Up);
  EXPECT_EQ(bits1(convert(Tensor::scalar(kAboveBf16Tie), bf16)), kBf16Up);
  EXPECT_EQ(bits1(convert(Tensor::scalar(static_cast<int32_t>(kAboveBf16Tie)), bf16)), kBf16Up);
}

TEST(Float16Conversion, FullArangeAndItemRoundOnce) {
  EXPECT_EQ(bits(full({2}, kNearMaxHalf, f16)), (std::vector<uint16_t>{kHalf65504, kHalf65504}));
  EXPECT_EQ(bits1(full({}, kAboveTie, f16)), kHalf2050);
  EXPECT_EQ(bits1(full({}, kAboveTinyTie, f16)), kHalfTiny);
  EXPECT_EQ(bits1(full({}, static_cast<double>(kAboveBf16Tie), bf16)), kBf16Up);
  EXPECT_EQ(bits(arange(kAboveTie, kAboveTie + 1, 1, f16)), (std::vector<uint16_t>{kHalf2050}));
  EXPECT_EQ(Tensor::scalar(kNearMaxHalf).item<half>().bits, kHalf65504);
  EXPECT_EQ(Tensor::scalar(kAboveBf16Tie).item<bfloat16>().bits, kBf16Up);
}

TEST(Float16Conversion, PlainNumbersOnHalfTensorsRoundOnce) {
  Tensor h = zeros({1}, f16);
  EXPECT_EQ(bits1(h + kAboveTie), kHalf2050);
  EXPECT_EQ(bits1(h + kNearMaxHalf), kHalf65504);
  EXPECT_EQ(bits1(kAboveTinyTie + h), kHalfTiny);
  EXPECT_EQ(bits1(zeros({1}, bf16) + static_cast<double>(kAboveBf16Tie)), kBf16Up);
}

// Doubles at and around every f16 midpoint, and integers around the bf16 ties near each 2^k.
Tensor boundary_doubles() {
  std::vector<double> v;
  for (uint16_t b = 0; b < 0x7c00; ++b) {
    half lo, hi;
    lo.bits = b;
    hi.bits = static_cast<uint16_t>(b + 1);
    const double mid = b == 0x7bff ? 65520.0 : (double{float(lo)} + double{float(hi)}) / 2;
    for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, HUGE_VAL)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  v.push_back(std::nan(""));
  v.push_back(HUGE_VAL);
  return Tensor::from_vector(v);
}

Tensor boundary_integers() {
  std::vector<int64_t> v;
  for (int k = 8; k < 63; ++k) {
    const int64_t tie = (int64_t{1} << k) + (int64_t{1} << (k - 8));
    for (int64_t d = -1; d <= 1; ++d) {
      v.push_back(tie + d);
      v.push_back(-(tie + d));
    }
  }
  return Tensor::from_vector(v);
}

TEST(Float16Conversion, EagerInterpretedAndCompiledAgree) {
  Tensor d = boundary_doubles(), n = boundary_integers();
  // The expected bits, from the rounding routines directly.
  std::vector<uint16_t> want_h, want_b, want_nb;
  for (double x : d.data<double>()) {
    want_h.push_back(half_from(x).bits);
    want_b.push_back(bfloat16_from(x).bits);
  }
  for (int64_t x : n.data<int64_t>()) want_nb.push_back(bfloat16_from(x).bits);

  auto body = [](const Tensor& x, const Tensor& i) {
    Tensor h = zeros({1}, f16);
    return std::vector<Tensor>{convert(x, f16),  convert(x, bf16),
                               convert(i, bf16), convert(x * 1.0 + 0.0, f16),
                               h + kAboveTie,    full({1}, kNearMaxHalf, f16)};
  };
  std::vector<Tensor> eager = body(d, n);
  EXPECT_EQ(bits(eager[0]), want_h);
  EXPECT_EQ(bits(eager[1]), want_b);
  EXPECT_EQ(bits(eager[2]), want_nb);
  for (ExecutionMode mode : {ExecutionMode::kInterpreted, ExecutionMode::kCompiled}) {
    SCOPED_TRACE(execution_mode_name(mode));
    std::vector<Tensor> got = function(body, {.mode = mode})(d, n);
    ASSERT_EQ(got.size(), eager.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(bits(got[i]), bits(eager[i])) << i;
  }
}

}  // namespace
}  // namespace kiln
