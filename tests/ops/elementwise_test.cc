// Elementwise ops (ops/elementwise.cc): values computed by hand or from closed forms, over
// several dtypes; broadcasting, scalars, zero-sized dims, integer division, NaN handling,
// dtype promotion, operators, and the same ops recorded in a graph.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "src/core/type_switch.h"
#include "tests/testing/values.h"

namespace kiln {
namespace {

using test_values::thrown_error;

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kPi = 3.14159265358979323846;
constexpr double kE = 2.71828182845904523536;

// A tensor of element type T from values given as doubles.
template <class T>
Tensor make(const std::vector<double>& values, Shape shape = {kUnknownDim}) {
  std::vector<T> v;
  for (double x : values) v.push_back(static_cast<T>(static_cast<ComputeType<T>>(x)));
  return Tensor::from_vector(v, std::move(shape));
}

// The elements as doubles, read straight from memory (no Kiln op involved).
std::vector<double> values(const Tensor& t) {
  return visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<double> out;
    for (const T& x : t.data<T>())
      out.push_back(static_cast<double>(static_cast<ComputeType<T>>(x)));
    return out;
  });
}

// Checks dtype, shape and values; NaN matches NaN; `tol` is relative (absolute near zero).
::testing::AssertionResult is_tensor(const Tensor& t, DType dtype, const Shape& shape,
                                     const std::vector<double>& want, double tol = 0) {
  if (t.dtype() != dtype) {
    return ::testing::AssertionFailure()
           << "dtype is " << dtype_name(t.dtype()) << ", expected " << dtype_name(dtype);
  }
  if (t.shape() != shape) {
    return ::testing::AssertionFailure()
           << "shape is " << shape_str(t.shape()) << ", expected " << shape_str(shape);
  }
  std::vector<double> got = values(t);
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " values, expected " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    bool ok = std::isnan(want[i]) ? std::isnan(got[i])
              : std::isinf(want[i])
                  ? got[i] == want[i]
                  : std::fabs(got[i] - want[i]) <= tol * std::max(1.0, std::fabs(want[i]));
    if (!ok) {
      return ::testing::AssertionFailure()
             << "element " << i << " is " << got[i] << ", expected " << want[i] << " in " << t;
    }
  }
  return ::testing::AssertionSuccess();
}

// ---- unary float math ---------------------------------------------------------------------

template <class T>
class FloatUnary : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double, half, bfloat16>;
TYPED_TEST_SUITE(FloatUnary, FloatTypes);

template <class T>
double float_tol() {
  if constexpr (std::is_same_v<T, double>) return 1e-14;
  if constexpr (std::is_same_v<T, float>) return 1e-6;
  if constexpr (std::is_same_v<T, half>) return 1e-3;  // 10 mantissa bits
  return 8e-3;                                         // bfloat16: 7 mantissa bits
}

TYPED_TEST(FloatUnary, ClosedFormValues) {
  using T = TypeParam;
  const DType d = dtype_of<T>;
  const double tol = float_tol<T>();
  auto x = [](std::vector<double> v) { return make<T>(v); };
  // Inputs are exact in every float type, or rounded the same way the op sees them.
  EXPECT_TRUE(is_tensor(exp(x({0, 1, -1})), d, {3}, {1, kE, 1 / kE}, tol));
  EXPECT_TRUE(is_tensor(log(x({1, 0, -1, 4})), d, {4}, {0, -kInf, kNaN, 2 * std::log(2.0)}, tol));
  EXPECT_TRUE(is_tensor(log1p(x({0, 1})), d, {2}, {0, std::log(2.0)}, tol));
  EXPECT_TRUE(is_tensor(expm1(x({0, 1})), d, {2}, {0, kE - 1}, tol));
  EXPECT_TRUE(is_tensor(sqrt(x({0, 4, 2.25, -1})), d, {4}, {0, 2, 1.5, kNaN}, tol));
  EXPECT_TRUE(is_tensor(rsqrt(x({4, 0.25, 0})), d, {3}, {0.5, 2, kInf}, tol));
  EXPECT_TRUE(is_tensor(tanh(x({0, 20, -20, 0.5})), d, {4}, {0, 1, -1, 0.46211715726000974}, tol));
  // logistic is computed stably: no NaN or overflow at the extremes.
  EXPECT_TRUE(is_tensor(logistic(x({0, 60, -60, 2})), d, {4},
                        {0.5, 1, 8.75651076269652e-27, 0.8807970779778823}, tol));
  EXPECT_TRUE(
      is_tensor(sin(x({0, 0.5, -2})), d, {3}, {0, 0.479425538604203, -0.9092974268256817}, tol));
  EXPECT_TRUE(
      is_tensor(cos(x({0, 0.5, -2})), d, {3}, {1, 0.8775825618903728, -0.4161468365471424}, tol));
  EXPECT_TRUE(is_tensor(erf(x({0, 0.5, -1, 8})), d, {4},
                        {0, 0.5204998778130465, -0.8427007929497149, 1}, tol));
  EXPECT_TRUE(is_tensor(floor(x({-1.5, -0.5, 0.5, 2})), d, {4}, {-2, -1, 0, 2}));
  EXPECT_TRUE(is_tensor(ceil(x({-1.5, -0.5, 0.5, 2})), d, {4}, {-1, 0, 1, 2}));
  // round: halves go to the even neighbour.
  EXPECT_TRUE(is_tensor(round(x({-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.25})), d, {7},
                        {-2, -2, 0, 0, 2, 2, 2}));
  EXPECT_TRUE(is_tensor(is_finite(x({1, kInf, -kInf, kNaN})), bool_, {4}, {1, 0, 0, 0}));
}

TYPED_TEST(FloatUnary, NegAbsSignSquare) {
  using T = TypeParam;
  const DType d = dtype_of<T>;
  Tensor x = make<T>({-2, 0, 3, kNaN});
  EXPECT_TRUE(is_tensor(neg(x), d, {4}, {2, 0, -3, kNaN}));
  EXPECT_TRUE(is_tensor(abs(x), d, {4}, {2, 0, 3, kNaN}));
  EXPECT_TRUE(is_tensor(sign(x), d, {4}, {-1, 0, 1, kNaN}));
  EXPECT_TRUE(is_tensor(square(x), d, {4}, {4, 0, 9, kNaN}));
}

TEST(Elementwise, TrigOfPiMultiples) {
  Tensor x = Tensor::from_list<double>({kPi / 2, kPi, -kPi / 2});
  EXPECT_TRUE(is_tensor(sin(x), f64, {3}, {1, 0, -1}, 1e-15));
  EXPECT_TRUE(is_tensor(cos(x), f64, {3}, {0, -1, 0}, 1e-15));
}

TEST(Elementwise, FloatMathOnIntegersAndBoolsComputesInF32) {
  EXPECT_TRUE(is_tensor(sqrt(Tensor::from_list<int64_t>({4, 9})), f32, {2}, {2, 3}));
  EXPECT_TRUE(is_tensor(exp(Tensor::from_list<int32_t>({0})), f32, {1}, {1}));
  EXPECT_TRUE(is_tensor(log(Tensor::from_list<uint8_t>({1})), f32, {1}, {0}));
  EXPECT_TRUE(is_tensor(tanh(Tensor::from_list<bool>({false})), f32, {1}, {0}));
}

TEST(Elementwise, RoundingOpsLeaveIntegersAlone) {
  Tensor x = Tensor::from_list<int32_t>({-3, 4});
  EXPECT_TRUE(is_tensor(floor(x), i32, {2}, {-3, 4}));
  EXPECT_TRUE(is_tensor(ceil(x), i32, {2}, {-3, 4}));
  EXPECT_TRUE(is_tensor(round(x), i32, {2}, {-3, 4}));
}

TEST(Elementwise, IntegerNegAbsSign) {
  EXPECT_TRUE(is_tensor(neg(Tensor::from_list<int32_t>({1, -2, 0})), i32, {3}, {-1, 2, 0}));
  EXPECT_TRUE(is_tensor(neg(Tensor::from_list<int8_t>({-128, 127})), i8, {2}, {-128, -127}));
  EXPECT_TRUE(is_tensor(neg(Tensor::from_list<uint8_t>({1, 0})), u8, {2}, {255, 0}));
  EXPECT_TRUE(is_tensor(abs(Tensor::from_list<int64_t>({-3, 3, 0})), i64, {3}, {3, 3, 0}));
  EXPECT_TRUE(is_tensor(abs(Tensor::from_list<uint8_t>({200})), u8, {1}, {200}));
  EXPECT_TRUE(is_tensor(sign(Tensor::from_list<int32_t>({-5, 0, 7})), i32, {3}, {-1, 0, 1}));
  EXPECT_TRUE(is_tensor(sign(Tensor::from_list<uint8_t>({0, 9})), u8, {2}, {0, 1}));
  EXPECT_TRUE(is_tensor(square(Tensor::from_list<int32_t>({-3, 4})), i32, {2}, {9, 16}));
}

TEST(Elementwise, NumericOpsRejectBool) {
  Tensor b = Tensor::from_list<bool>({true});
  Error e = thrown_error([&] { neg(b); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("neg"), HasSubstr("numeric"), HasSubstr("bool[1]")));
  EXPECT_THROW(sign(b), Error);
}

TEST(Elementwise, IsFiniteOfIntegersIsAllTrue) {
  EXPECT_TRUE(is_tensor(is_finite(Tensor::from_list<int32_t>({1, -7})), bool_, {2}, {1, 1}));
}

// ---- logical ------------------------------------------------------------------------------

TEST(Elementwise, LogicalOpsTruthTables) {
  Tensor a = Tensor::from_list<bool>({false, false, true, true});
  Tensor b = Tensor::from_list<bool>({false, true, false, true});
  EXPECT_TRUE(is_tensor(logical_and(a, b), bool_, {4}, {0, 0, 0, 1}));
  EXPECT_TRUE(is_tensor(logical_or(a, b), bool_, {4}, {0, 1, 1, 1}));
  EXPECT_TRUE(is_tensor(logical_not(a), bool_, {4}, {1, 1, 0, 0}));
  EXPECT_TRUE(is_tensor(a && b, bool_, {4}, {0, 0, 0, 1}));
  EXPECT_TRUE(is_tensor(a || b, bool_, {4}, {0, 1, 1, 1}));
  EXPECT_TRUE(is_tensor(!b, bool_, {4}, {1, 0, 1, 0}));
  // Broadcasting a bool scalar.
  EXPECT_TRUE(is_tensor(a && Tensor::scalar(true), bool_, {4}, {0, 0, 1, 1}));
}

TEST(Elementwise, LogicalOpsRejectNonBool) {
  Tensor f = Tensor::from_list<float>({1, 0});
  Error e = thrown_error([&] { logical_and(f, f); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("logical_and"), HasSubstr("bool"), HasSubstr("f32[2]")));
}

// ---- binary arithmetic over every numeric dtype -------------------------------------------

template <class T>
class Arithmetic : public ::testing::Test {};
using NumericTypes =
    ::testing::Types<int8_t, uint8_t, int32_t, int64_t, half, bfloat16, float, double>;
TYPED_TEST_SUITE(Arithmetic, NumericTypes);

TYPED_TEST(Arithmetic, HandComputedValues) {
  using T = TypeParam;
  const DType d = dtype_of<T>;
  Tensor a = make<T>({6, 9, 12, 10});
  Tensor b = make<T>({3, 2, 4, 8});
  EXPECT_TRUE(is_tensor(add(a, b), d, {4}, {9, 11, 16, 18}));
  EXPECT_TRUE(is_tensor(sub(a, b), d, {4}, {3, 7, 8, 2}));
  EXPECT_TRUE(is_tensor(mul(a, b), d, {4}, {18, 18, 48, 80}));
  if constexpr (kIsFloat<T>) {
    EXPECT_TRUE(is_tensor(div(a, b), d, {4}, {2, 4.5, 3, 1.25}));
  } else {
    EXPECT_TRUE(is_tensor(div(a, b), d, {4}, {2, 4, 3, 1}));  // truncates
  }
  EXPECT_TRUE(is_tensor(rem(a, b), d, {4}, {0, 1, 0, 2}));
  EXPECT_TRUE(is_tensor(maximum(a, b), d, {4}, {6, 9, 12, 10}));
  EXPECT_TRUE(is_tensor(minimum(a, b), d, {4}, {3, 2, 4, 8}));
  EXPECT_TRUE(is_tensor(pow(make<T>({2, 3, 1, 5}), make<T>({6, 2, 7, 0})), d, {4}, {64, 9, 1, 1}));
  EXPECT_TRUE(is_tensor(clamp(a, 7, 11), d, {4}, {7, 9, 11, 10}));
  EXPECT_TRUE(is_tensor(a + b * a - b, d, {4}, {21, 25, 56, 82}));
}

TYPED_TEST(Arithmetic, ComparisonsGiveBool) {
  using T = TypeParam;
  Tensor a = make<T>({1, 2, 3});
  Tensor b = make<T>({2, 2, 2});
  EXPECT_TRUE(is_tensor(equal(a, b), bool_, {3}, {0, 1, 0}));
  EXPECT_TRUE(is_tensor(not_equal(a, b), bool_, {3}, {1, 0, 1}));
  EXPECT_TRUE(is_tensor(less(a, b), bool_, {3}, {1, 0, 0}));
  EXPECT_TRUE(is_tensor(less_equal(a, b), bool_, {3}, {1, 1, 0}));
  EXPECT_TRUE(is_tensor(greater(a, b), bool_, {3}, {0, 0, 1}));
  EXPECT_TRUE(is_tensor(greater_equal(a, b), bool_, {3}, {0, 1, 1}));
  EXPECT_TRUE(is_tensor(a == b, bool_, {3}, {0, 1, 0}));
  EXPECT_TRUE(is_tensor(a != b, bool_, {3}, {1, 0, 1}));
  EXPECT_TRUE(is_tensor(a < b, bool_, {3}, {1, 0, 0}));
  EXPECT_TRUE(is_tensor(a <= b, bool_, {3}, {1, 1, 0}));
  EXPECT_TRUE(is_tensor(a > b, bool_, {3}, {0, 0, 1}));
  EXPECT_TRUE(is_tensor(a >= b, bool_, {3}, {0, 1, 1}));
}

TEST(Elementwise, ComparisonsOfBools) {
  Tensor a = Tensor::from_list<bool>({false, true});
  Tensor b = Tensor::from_list<bool>({true, true});
  EXPECT_TRUE(is_tensor(a == b, bool_, {2}, {0, 1}));
  EXPECT_TRUE(is_tensor(a < b, bool_, {2}, {1, 0}));
}

TEST(Elementwise, NaNComparesUnequalToEverything) {
  Tensor a = Tensor::from_list<float>({NAN, NAN, 1});
  Tensor b = Tensor::from_list<float>({NAN, 1, NAN});
  EXPECT_TRUE(is_tensor(a == b, bool_, {3}, {0, 0, 0}));
  EXPECT_TRUE(is_tensor(a != b, bool_, {3}, {1, 1, 1}));
  EXPECT_TRUE(is_tensor(a < b, bool_, {3}, {0, 0, 0}));
  EXPECT_TRUE(is_tensor(a >= b, bool_, {3}, {0, 0, 0}));
}

TEST(Elementwise, MaxAndMinPropagateNaN) {
  Tensor a = Tensor::from_list<float>({NAN, 1, 2, -0.5f});
  Tensor b = Tensor::from_list<float>({1, NAN, 3, -1});
  EXPECT_TRUE(is_tensor(maximum(a, b), f32, {4}, {kNaN, kNaN, 3, -0.5}));
  EXPECT_TRUE(is_tensor(minimum(a, b), f32, {4}, {kNaN, kNaN, 2, -1}));
  EXPECT_TRUE(is_tensor(clamp(Tensor::from_list<double>({kNaN, 5}), 0, 1), f64, {2}, {kNaN, 1}));
  Tensor h = make<half>({kNaN, 1});
  EXPECT_TRUE(is_tensor(maximum(h, make<half>({0, kNaN})), f16, {2}, {kNaN, kNaN}));
}

TEST(Elementwise, IntegerDivisionTruncatesTowardZero) {
  Tensor a = Tensor::from_list<int32_t>({7, -7, 7, -7});
  Tensor b = Tensor::from_list<int32_t>({2, 2, -2, -2});
  EXPECT_TRUE(is_tensor(a / b, i32, {4}, {3, -3, -3, 3}));
  // The remainder has the sign of the dividend (C fmod semantics).
  EXPECT_TRUE(is_tensor(rem(a, b), i32, {4}, {1, -1, 1, -1}));
  EXPECT_TRUE(is_tensor(rem(Tensor::from_list<float>({5.5f, -5.5f}), Tensor::scalar(2.0f)), f32,
                        {2}, {1.5, -1.5}));
}

TEST(Elementwise, IntegerDivisionByZeroDoesNotTrap) {
  // x / 0 is -1 (all bits set for unsigned), x % 0 is x, and MIN / -1 wraps to MIN.
  Tensor a = Tensor::from_list<int32_t>({5, -5, 0});
  Tensor zero = Tensor::scalar<int32_t>(0);
  EXPECT_TRUE(is_tensor(a / zero, i32, {3}, {-1, -1, -1}));
  EXPECT_TRUE(is_tensor(rem(a, zero), i32, {3}, {5, -5, 0}));
  Tensor u = Tensor::from_list<uint8_t>({5});
  EXPECT_TRUE(is_tensor(u / Tensor::scalar<uint8_t>(0), u8, {1}, {255}));
  EXPECT_TRUE(is_tensor(rem(u, Tensor::scalar<uint8_t>(0)), u8, {1}, {5}));

  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  Tensor min32 = Tensor::from_list<int32_t>({kMin32});
  Tensor minus_one = Tensor::scalar<int32_t>(-1);
  EXPECT_TRUE(is_tensor(min32 / minus_one, i32, {1}, {static_cast<double>(kMin32)}));
  EXPECT_TRUE(is_tensor(rem(min32, minus_one), i32, {1}, {0}));
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  Tensor min64 = Tensor::from_list<int64_t>({kMin64});
  EXPECT_EQ((min64 / Tensor::scalar<int64_t>(-1)).data<int64_t>()[0], kMin64);
  EXPECT_EQ((min64 / Tensor::scalar<int64_t>(0)).data<int64_t>()[0], -1);
  Tensor min8 = Tensor::from_list<int8_t>({-128});
  EXPECT_TRUE(is_tensor(min8 / Tensor::scalar<int8_t>(-1), i8, {1}, {-128}));
}

TEST(Elementwise, FloatDivisionByZeroFollowsIEEE) {
  Tensor a = Tensor::from_list<float>({1, -1, 0});
  EXPECT_TRUE(is_tensor(a / Tensor::scalar(0.0f), f32, {3}, {kInf, -kInf, kNaN}));
}

TEST(Elementwise, IntegerPower) {
  Tensor a = Tensor::from_list<int32_t>({2, 3, -2, 5, 7});
  Tensor b = Tensor::from_list<int32_t>({10, 0, 3, 1, 2});
  EXPECT_TRUE(is_tensor(pow(a, b), i32, {5}, {1024, 1, -8, 5, 49}));
  // Overflow wraps like unsigned arithmetic.
  EXPECT_TRUE(is_tensor(pow(Tensor::from_list<uint8_t>({2}), Tensor::from_list<uint8_t>({8})), u8,
                        {1}, {0}));
  EXPECT_TRUE(is_tensor(pow(Tensor::from_list<int8_t>({2}), Tensor::from_list<int8_t>({7})), i8,
                        {1}, {-128}));
}

// NumPy's rule: an integer raised to a negative integer power is an error, not 0 or 1. The
// kernel refuses it in every mode (integer pow is never fused, so compiled code runs it too).
TEST(Elementwise, IntegerPowerRefusesNegativeExponents) {
  Tensor base = Tensor::from_list<int32_t>({1, -1, 2, 3});
  Tensor exps = Tensor::from_list<int32_t>({2, 3, -1, 0});
  auto says = [](const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_THAT(std::string(e.what()),
                AllOf(HasSubstr("pow"), HasSubstr("i32"), HasSubstr("negative exponent -1"),
                      HasSubstr("base 2")));
  };
  says(thrown_error([&] { pow(base, exps); }));

  Graph g("g");
  Tensor pb = g.placeholder(i32, {4}, "base");
  Tensor pe = g.placeholder(i32, {4}, "exps");
  Tensor y = pow(pb, pe) + pb;  // + pb: an elementwise consumer the compiler could fuse with
  FeedList feeds = {{pb, base}, {pe, exps}};
  says(thrown_error([&] { g.run(feeds, {y}); }));
  compiler::Executable exe = compiler::compile(g, {y}, feeds);
  says(thrown_error([&] { exe.run(feeds); }));
  // Non-negative exponents still run in all three modes, with the same values.
  FeedList ok = {{pb, base}, {pe, abs(exps)}};
  EXPECT_TRUE(is_tensor(g.run(ok, y), i32, {4}, {2, -2, 4, 4}));
  EXPECT_TRUE(is_tensor(exe.run(ok)[0], i32, {4}, {2, -2, 4, 4}));
  // Unsigned exponents cannot be negative; float powers keep IEEE pow.
  EXPECT_TRUE(is_tensor(pow(Tensor::from_list<float>({2}), Tensor::from_list<float>({-1})), f32,
                        {1}, {0.5}));
}

TEST(Elementwise, FloatPower) {
  Tensor a = Tensor::from_list<float>({2, 4, 2, -8, 0});
  Tensor b = Tensor::from_list<float>({3, 0.5, -1, 1.0f / 3, 0});
  EXPECT_TRUE(is_tensor(pow(a, b), f32, {5}, {8, 2, 0.5, kNaN, 1}));
}

TEST(Elementwise, Atan2Quadrants) {
  Tensor y = Tensor::from_list<double>({1, 1, -1, 0, 0});
  Tensor x = Tensor::from_list<double>({1, -1, -1, -1, 1});
  EXPECT_TRUE(
      is_tensor(atan2(y, x), f64, {5}, {kPi / 4, 3 * kPi / 4, -3 * kPi / 4, kPi, 0}, 1e-15));
  // Integers compute in f32.
  EXPECT_TRUE(is_tensor(atan2(Tensor::from_list<int32_t>({1}), Tensor::from_list<int32_t>({0})),
                        f32, {1}, {kPi / 2}, 1e-6));
}

// ---- select and clamp ---------------------------------------------------------------------

TEST(Elementwise, WhereBroadcastsAndPromotes) {
  Tensor cond = Tensor::from_list<bool>({true, false, true});
  Tensor a = Tensor::scalar<int32_t>(7);
  Tensor b = Tensor::from_list<float>({0.5, 1.5, 2.5});
  EXPECT_TRUE(is_tensor(where(cond, a, b), f32, {3}, {7, 1.5, 7}));

  Tensor column = Tensor::from_list<bool>({true, false}, {2, 1});
  Tensor row = Tensor::from_list<int64_t>({1, 2, 3});
  Tensor other = Tensor::from_list<int64_t>({-1, -2, -3});
  EXPECT_TRUE(is_tensor(where(column, row, other), i64, {2, 3}, {1, 2, 3, -1, -2, -3}));
}

TEST(Elementwise, ClampWithTensorBounds) {
  Tensor x = Tensor::from_list<int32_t>({-5, 5, 50, 3});
  EXPECT_TRUE(is_tensor(clamp(x, 0, 10), i32, {4}, {0, 5, 10, 3}));
  Tensor low = Tensor::from_list<int32_t>({0, 6, 0, 4});
  EXPECT_TRUE(is_tensor(clamp(x, low, Tensor::scalar<int32_t>(20)), i32, {4}, {0, 6, 20, 4}));
  // Bounds of a wider type promote x.
  EXPECT_TRUE(
      is_tensor(clamp(x, Tensor::scalar(0.5), Tensor::scalar(4.5)), f64, {4}, {0.5, 4.5, 4.5, 3}));
}

// ---- convert ------------------------------------------------------------------------------

TEST(Elementwise, ConvertFloatToIntegerTruncatesAndSaturates) {
  Tensor x = Tensor::from_list<float>({1.9f, -1.9f, NAN, 1e10f, -1e10f});
  EXPECT_TRUE(is_tensor(convert(x, i32), i32, {5},
                        {1, -1, 0, std::numeric_limits<int32_t>::max(),
                         static_cast<double>(std::numeric_limits<int32_t>::min())}));
  EXPECT_TRUE(
      is_tensor(convert(Tensor::from_list<double>({-1, 300, 254.9}), u8), u8, {3}, {0, 255, 254}));
}

TEST(Elementwise, ConvertToBoolTestsNonZero) {
  Tensor x = Tensor::from_list<float>({0, -0.0f, 2, NAN, -0.5f});
  EXPECT_TRUE(is_tensor(convert(x, bool_), bool_, {5}, {0, 0, 1, 1, 1}));
  EXPECT_TRUE(is_tensor(Tensor::from_list<int32_t>({0, 7}).to(bool_), bool_, {2}, {0, 1}));
  EXPECT_TRUE(is_tensor(convert(Tensor::from_list<bool>({true, false}), f32), f32, {2}, {1, 0}));
}

TEST(Elementwise, ConvertBetweenIntegersWraps) {
  EXPECT_TRUE(is_tensor(convert(Tensor::from_list<int32_t>({300, -1}), i8), i8, {2}, {44, -1}));
  EXPECT_TRUE(is_tensor(convert(Tensor::from_list<int32_t>({-1}), u8), u8, {1}, {255}));
  EXPECT_TRUE(is_tensor(convert(Tensor::from_list<uint8_t>({200}), i64), i64, {1}, {200}));
}

TEST(Elementwise, ConvertTo16BitFloatsRoundsToNearestEven) {
  const double ulp_f16 = 1.0 / 1024, ulp_bf16 = 1.0 / 128;  // at 1.0
  Tensor x = Tensor::from_list<float>({1 + 1.0f / 1024, 1 + 1.0f / 2048, 65520, 1e-8f});
  EXPECT_TRUE(is_tensor(convert(x, f16), f16, {4}, {1 + ulp_f16, 1, kInf, 0}));
  Tensor y = Tensor::from_list<float>({1 + 1.0f / 256, 1 + 3.0f / 256, -2});
  EXPECT_TRUE(is_tensor(convert(y, bf16), bf16, {3}, {1, 1 + 2 * ulp_bf16, -2}));
  EXPECT_TRUE(is_tensor(convert(make<half>({0.5, -3}), bf16), bf16, {2}, {0.5, -3}));
}

TEST(Elementwise, ConvertToTheSameDtypeIsFree) {
  Tensor x = Tensor::from_list<float>({1, 2});
  EXPECT_EQ(convert(x, f32).impl(), x.impl());
}

// ---- broadcasting -------------------------------------------------------------------------

TEST(Elementwise, BroadcastRowAndColumn) {
  Tensor m = Tensor::from_list<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(is_tensor(m + Tensor::from_list<int32_t>({10, 20, 30}), i32, {2, 3},
                        {11, 22, 33, 14, 25, 36}));
  Tensor col = Tensor::from_list<int32_t>({100, 200}, {2, 1});
  Tensor row = Tensor::from_list<int32_t>({1, 2, 3}, {1, 3});
  EXPECT_TRUE(is_tensor(col + row, i32, {2, 3}, {101, 102, 103, 201, 202, 203}));
  EXPECT_TRUE(is_tensor(row - col, i32, {2, 3}, {-99, -98, -97, -199, -198, -197}));
}

TEST(Elementwise, BroadcastAcrossRanks) {
  Tensor a = Tensor::from_list<int64_t>({0, 1, 10, 11}, {2, 1, 2});
  Tensor b = Tensor::from_list<int64_t>({100, 200, 300}, {3, 1});
  EXPECT_TRUE(is_tensor(a + b, i64, {2, 3, 2},
                        {100, 101, 200, 201, 300, 301, 110, 111, 210, 211, 310, 311}));
}

TEST(Elementwise, Scalars) {
  Tensor s = Tensor::scalar(2.5f);
  EXPECT_TRUE(is_tensor(s * s, f32, {}, {6.25}));
  Tensor m = Tensor::from_list<float>({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(is_tensor(m * s, f32, {2, 2}, {2.5, 5, 7.5, 10}));
  EXPECT_TRUE(is_tensor(s - m, f32, {2, 2}, {1.5, 0.5, -0.5, -1.5}));
  EXPECT_TRUE(is_tensor(exp(Tensor::scalar(0.0)), f64, {}, {1}));
}

TEST(Elementwise, ZeroSizedDims) {
  Tensor empty = Tensor::empty(f32, {0, 3});
  EXPECT_TRUE(is_tensor(empty + Tensor::from_list<float>({1, 2, 3}), f32, {0, 3}, {}));
  EXPECT_TRUE(is_tensor(empty * Tensor::scalar(2.0f), f32, {0, 3}, {}));
  EXPECT_TRUE(is_tensor(exp(empty), f32, {0, 3}, {}));
  EXPECT_TRUE(is_tensor(Tensor::empty(i32, {2, 0}) + Tensor::empty(i32, {2, 1}), i32, {2, 0}, {}));
  EXPECT_TRUE(is_tensor(Tensor::empty(f32, {0}) < Tensor::scalar(1.0f), bool_, {0}, {}));
  EXPECT_TRUE(
      is_tensor(where(Tensor::empty(bool_, {0, 1}), Tensor::scalar(1.0f), Tensor::empty(f32, {3})),
                f32, {0, 3}, {}));
  // Zero only broadcasts with one.
  Error e = thrown_error([] { Tensor::empty(f32, {0}) + Tensor::empty(f32, {2}); });
  EXPECT_THAT(e.what(), AllOf(HasSubstr("add"), HasSubstr("[0]"), HasSubstr("[2]")));
}

TEST(Elementwise, LargeBroadcastsSplitAcrossThreadsCorrectly) {
  // Big enough to be split into several ranges by parallel_for, with broadcast inputs
  // whose offsets must be recomputed at each range's start.
  const int64_t rows = 301, cols = 103;
  std::vector<int32_t> a(rows * cols), b(rows);
  for (int64_t i = 0; i < rows * cols; ++i) a[i] = static_cast<int32_t>(i);
  for (int64_t r = 0; r < rows; ++r) b[r] = static_cast<int32_t>(1000000 * r);
  Tensor out = Tensor::from_vector(a, {rows, cols}) + Tensor::from_vector(b, {rows, 1});
  auto d = out.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(d[r * cols + c], r * cols + c + 1000000 * r) << r << "," << c;
    }
  }

  // A broadcast in the middle dimension: [I, J, K] * [I, 1, K].
  const int64_t I = 41, J = 31, K = 21;
  std::vector<float> x(I * J * K, 1.0f), y(I * K);
  for (int64_t i = 0; i < I * K; ++i) y[i] = static_cast<float>(i);
  Tensor z = Tensor::from_vector(x, {I, J, K}) * Tensor::from_vector(y, {I, 1, K});
  auto zd = z.data<float>();
  for (int64_t i = 0; i < I; ++i)
    for (int64_t j = 0; j < J; ++j)
      for (int64_t k = 0; k < K; ++k)
        ASSERT_EQ(zd[(i * J + j) * K + k], static_cast<float>(i * K + k))
            << i << "," << j << "," << k;
}

// ---- dtype promotion and scalars ----------------------------------------------------------

TEST(Elementwise, MixedDtypesPromote) {
  Tensor i = Tensor::from_list<int32_t>({1, 2});
  Tensor f = Tensor::from_list<float>({0.5, 0.25});
  EXPECT_TRUE(is_tensor(i + f, f32, {2}, {1.5, 2.25}));
  EXPECT_TRUE(is_tensor(f * i, f32, {2}, {0.5, 0.5}));
  EXPECT_TRUE(is_tensor(i + Tensor::from_list<int64_t>({10, 20}), i64, {2}, {11, 22}));
  EXPECT_TRUE(is_tensor(Tensor::from_list<uint8_t>({200}) + Tensor::from_list<int8_t>({-100}), i32,
                        {1}, {100}));
  EXPECT_TRUE(is_tensor(Tensor::from_list<bool>({true, false}) + i, i32, {2}, {2, 2}));
  EXPECT_TRUE(is_tensor(make<half>({1.5}) + make<bfloat16>({2}), f32, {1}, {3.5}));
  EXPECT_TRUE(is_tensor(make<half>({1.5}) * Tensor::scalar(2.0f), f32, {1}, {3}));
  EXPECT_TRUE(is_tensor(Tensor::from_list<int64_t>({3}) / make<half>({2}), f16, {1}, {1.5}));
  EXPECT_TRUE(is_tensor(f + Tensor::from_list<double>({1, 1}), f64, {2}, {1.5, 1.25}));
  EXPECT_TRUE(is_tensor(i == f, bool_, {2}, {0, 0}));
  EXPECT_TRUE(is_tensor(Tensor::from_list<int32_t>({1}) == Tensor::from_list<double>({1.0}), bool_,
                        {1}, {1}));
}

TEST(Elementwise, OperatorsWithNumbersKeepTheTensorsDtype) {
  Tensor f = Tensor::from_list<float>({2, 4});
  EXPECT_TRUE(is_tensor(f + 1.0, f32, {2}, {3, 5}));
  EXPECT_TRUE(is_tensor(f - 1.0, f32, {2}, {1, 3}));
  EXPECT_TRUE(is_tensor(f * 0.5, f32, {2}, {1, 2}));
  EXPECT_TRUE(is_tensor(f / 4.0, f32, {2}, {0.5, 1}));
  EXPECT_TRUE(is_tensor(1.0 + f, f32, {2}, {3, 5}));
  EXPECT_TRUE(is_tensor(10.0 - f, f32, {2}, {8, 6}));
  EXPECT_TRUE(is_tensor(3.0 * f, f32, {2}, {6, 12}));
  EXPECT_TRUE(is_tensor(1.0 / f, f32, {2}, {0.5, 0.25}));
  EXPECT_TRUE(is_tensor(-f, f32, {2}, {-2, -4}));
  // The number takes the tensor's dtype.
  Tensor i = Tensor::from_list<int32_t>({1, 2});
  EXPECT_TRUE(is_tensor(i + 2.0, i32, {2}, {3, 4}));
  EXPECT_TRUE(is_tensor(i * 3.0, i32, {2}, {3, 6}));
  EXPECT_TRUE(is_tensor(make<bfloat16>({1}) * 2.0, bf16, {1}, {2}));
  EXPECT_TRUE(is_tensor(scalar_like(2.0, make<half>({1})), f16, {}, {2}));
}

// A number the tensor's integer dtype cannot hold exactly is refused, not saturated or
// truncated (u8[250] + 300 used to give 249: 300 became 255). JAX raises for it too.
TEST(Elementwise, NumbersAnIntegerDtypeCannotHoldAreRefused) {
  Tensor u = Tensor::from_list<uint8_t>({250});
  Graph g("g");
  Tensor p = g.placeholder(u8, {1}, "u");
  for (const Tensor& t : {u, p}) {
    SCOPED_TRACE(t.is_symbolic() ? "recorded" : "eager");
    test_values::expect_error([&] { t + 300.0; }, ErrorCode::kInvalidArgument,
                              "add: the number 300 does not fit u8");
    test_values::expect_error([&] { 300.0 - t; }, ErrorCode::kInvalidArgument,
                              "sub: the number 300 does not fit u8");
    test_values::expect_error([&] { t * -1.0; }, ErrorCode::kInvalidArgument,
                              "mul: the number -1 does not fit u8");
    test_values::expect_error([&] { t / 2.5; }, ErrorCode::kInvalidArgument,
                              "div: the number 2.5 does not fit u8");
    test_values::expect_error([&] { clamp(t, 0, 256); }, ErrorCode::kInvalidArgument,
                              "clamp: the number 256 does not fit u8");
  }
  Tensor i = Tensor::from_list<int32_t>({1});
  test_values::expect_error([&] { i + 1.5; }, ErrorCode::kInvalidArgument,
                            "the number 1.5 does not fit i32");
  test_values::expect_error([&] { i + 3e9; }, ErrorCode::kInvalidArgument,
                            "the number 3000000000 does not fit i32");
  test_values::expect_error([&] { i + std::nan(""); }, ErrorCode::kInvalidArgument,
                            "does not fit i32");
  // The extremes of the dtype are fine, and so is anything on a float tensor.
  EXPECT_TRUE(is_tensor(u + 5.0, u8, {1}, {255}));
  EXPECT_TRUE(is_tensor((u - 250.0) + 0.0, u8, {1}, {0}));
  EXPECT_TRUE(is_tensor(i * -2147483648.0, i32, {1}, {-2147483648.0}));
  EXPECT_TRUE(is_tensor(Tensor::from_list<int64_t>({0}) + 9007199254740992.0, i64, {1},
                        {9007199254740992.0}));
  EXPECT_TRUE(is_tensor(Tensor::from_list<float>({1}) + 1.5, f32, {1}, {2.5}));
}

// ---- the same ops in a graph --------------------------------------------------------------

TEST(Elementwise, RecordedOpsMatchEagerOps) {
  auto model = [](const Tensor& x, const Tensor& y, const Tensor& c) {
    Tensor t = tanh(x) * 2.0 + exp(-abs(y)) - sqrt(square(x) + 1.0);
    Tensor u = where(x > y, maximum(x, y), minimum(x, y) / 2.0);
    Tensor v = clamp(pow(abs(x) + 0.5, y), 0, 4) + convert(c, f32) + logistic(sign(x));
    return std::vector<Tensor>{t, u, v, (x >= y) || !(c == c), rem(c, c + 3), floor(y / 0.3)};
  };
  Tensor x = Tensor::from_list<float>({-1.5f, 0, 0.25f, 2, 3, -0.75f}, {2, 3});
  Tensor y = Tensor::from_list<float>({0.5f, -1, 2});
  Tensor c = Tensor::from_list<int32_t>({4, -7}, {2, 1});
  std::vector<Tensor> eager = model(x, y, c);

  Graph g("g");
  Tensor px = g.placeholder(f32, {kUnknownDim, 3}, "x");
  Tensor py = g.placeholder(f32, {3}, "y");
  Tensor pc = g.placeholder(i32, {kUnknownDim, 1}, "c");
  std::vector<Tensor> recorded = model(px, py, pc);
  for (const Tensor& t : recorded) EXPECT_TRUE(t.is_symbolic());
  std::vector<Tensor> ran = g.run({{px, x}, {py, y}, {pc, c}}, recorded);
  ASSERT_EQ(ran.size(), eager.size());
  for (size_t i = 0; i < ran.size(); ++i) {
    EXPECT_EQ(ran[i].shape(), eager[i].shape()) << i;
    EXPECT_EQ(values(ran[i]), values(eager[i])) << i;
  }
  // Spot checks by hand: u[0,0] = min(-1.5, 0.5) / 2; rem(4, 7) = 4, rem(-7, -4) = -3;
  // floor(2 / 0.3) = 6.
  EXPECT_EQ(values(ran[1])[0], -0.75);
  EXPECT_TRUE(is_tensor(ran[4], i32, {2, 1}, {4, -3}));
  EXPECT_EQ(values(ran[5])[2], 6);
}

}  // namespace
}  // namespace kiln
