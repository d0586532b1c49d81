// Creation: zeros, ones, full, the *_like forms, arange and the iota primitive.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "tests/testing/values.h"

namespace kiln {
namespace {

using testing::AllOf;
using testing::HasSubstr;

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// ---- zeros / ones / full ----------------------------------------------------------------

TEST(Zeros, EveryDTypeAndShape) {
  for (DType dtype : {f32, f64, f16, bf16, i8, u8, i32, i64, bool_}) {
    Tensor z = zeros({2, 3}, dtype);
    EXPECT_EQ(z.dtype(), dtype);
    EXPECT_EQ(z.shape(), (Shape{2, 3}));
    EXPECT_EQ(z.to_vector<double>(), std::vector<double>(6, 0.0)) << dtype_name(dtype);
    Tensor o = ones({3}, dtype);
    EXPECT_EQ(o.to_vector<double>(), std::vector<double>(3, 1.0)) << dtype_name(dtype);
  }
  EXPECT_EQ(zeros({}).shape(), Shape{});
  EXPECT_EQ(zeros({}).item<float>(), 0.0f);
  EXPECT_EQ(ones({0, 4}, i32).size(), 0);
  EXPECT_FALSE(zeros({2}).is_symbolic());
}

TEST(Full, ConvertsTheValueToTheDType) {
  EXPECT_EQ(full({2}, 2.5).to_vector<float>(), (std::vector<float>{2.5f, 2.5f}));
  EXPECT_EQ(full({1}, 2.75, i32).item<int32_t>(), 2);  // truncates toward zero
  EXPECT_EQ(full({1}, -2.75, i64).item<int64_t>(), -2);
  EXPECT_EQ(full({1}, 1e30, i8).item<int>(), 127);  // saturates
  EXPECT_EQ(full({1}, -3.5, u8).item<int>(), 0);
  EXPECT_EQ(full({1}, std::nan(""), i32).item<int32_t>(), 0);
  EXPECT_EQ(full({1}, 0.25, bool_).item<bool>(), true);
  EXPECT_EQ(full({1}, 1.5, f16).item<float>(), 1.5f);
  EXPECT_EQ(full({1}, -0.5, bf16).item<float>(), -0.5f);
  EXPECT_TRUE(std::isinf(full({1}, std::numeric_limits<double>::infinity()).item<float>()));
}

TEST(Full, LargeFillCoversEveryElement) {
  Tensor t = full({1000, 123}, 3, i32);
  for (int32_t v : t.data<int32_t>()) ASSERT_EQ(v, 3);
}

TEST(Full, NegativeDimensionThrows) {
  EXPECT_THAT(error_of([] { zeros({2, -1}); }), AllOf(HasSubstr("zeros"), HasSubstr("[2,-1]")));
  EXPECT_THAT(error_of([] { full({-3}, 1.0); }), AllOf(HasSubstr("full"), HasSubstr("[-3]")));
  EXPECT_THAT(error_of([] {
                ones({int64_t{1} << 40, int64_t{1} << 40});
              }),
              AllOf(HasSubstr("ones"), HasSubstr("too many elements")));
}

TEST(Full, InsideADefaultGraphIsConcreteAndCapturedWhenUsed) {
  Graph g("creation");
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor z, y;
  {
    auto guard = g.as_default();
    z = ones({2});
    y = x + z;
  }
  EXPECT_FALSE(z.is_symbolic());
  ASSERT_TRUE(y.is_symbolic());
  Tensor out = g.run({{x, Tensor::from_list<float>({1, 2})}}, y);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{2, 3}));
}

// ---- zeros_like / ones_like -------------------------------------------------------------

TEST(ZerosLike, FollowsDTypeAndShape) {
  Tensor x = Tensor::from_list<int8_t>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor z = zeros_like(x);
  EXPECT_EQ(z.dtype(), i8);
  EXPECT_EQ(z.shape(), (Shape{3, 2}));
  EXPECT_EQ(z.to_vector<int>(), std::vector<int>(6, 0));
  Tensor o = ones_like(Tensor::scalar(true));
  EXPECT_EQ(o.dtype(), bool_);
  EXPECT_EQ(o.item<bool>(), true);
}

TEST(ZerosLike, SymbolicInputsGiveNodesOfTheirGraph) {
  Graph g("like");
  Tensor known = g.placeholder(f64, {2, 2}, "known");
  Tensor unknown = g.placeholder(f32, {kUnknownDim, 2}, "unknown");
  Tensor a = ones_like(known);
  Tensor b = ones_like(unknown);
  Tensor c = zeros_like(unknown);
  ASSERT_TRUE(a.is_symbolic() && b.is_symbolic() && c.is_symbolic());
  EXPECT_EQ(a.shape(), (Shape{2, 2}));
  EXPECT_EQ(b.shape(), (Shape{kUnknownDim, 2}));
  EXPECT_EQ(b.dtype(), f32);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Tensor> out =
      g.run({{known, Tensor::from_list<double>({1, 2, 3, 4}, {2, 2})},
             {unknown, Tensor::from_list<float>({nan, 1, 2, 3, 4, 5}, {3, 2})}},
            {a, b, c});
  EXPECT_EQ(out[0].to_vector<double>(), std::vector<double>(4, 1.0));
  EXPECT_EQ(out[1].shape(), (Shape{3, 2}));
  EXPECT_EQ(out[1].to_vector<float>(), std::vector<float>(6, 1.0f));  // NaN inputs too
  EXPECT_EQ(out[2].to_vector<float>(), std::vector<float>(6, 0.0f));
}

// ---- arange -----------------------------------------------------------------------------

TEST(Arange, CountsLikeNumpy) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), i64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(1, 2, 0.25).to_vector<float>(), (std::vector<float>{1, 1.25f, 1.5f, 1.75f}));
  EXPECT_EQ(arange(5, 0, -2, i32).to_vector<int32_t>(), (std::vector<int32_t>{5, 3, 1}));
  EXPECT_EQ(arange(3, 1).shape(), (Shape{0}));
  EXPECT_EQ(arange(0, 1, 0.3, f64).shape(), (Shape{4}));  // ceil(1 / 0.3)
  EXPECT_EQ(arange(4, f16).to_vector<float>(), (std::vector<float>{0, 1, 2, 3}));
}

TEST(Arange, LargeRange) {
  Tensor a = arange(100000, i32);
  auto d = a.data<int32_t>();
  for (int32_t i = 0; i < 100000; i += 99) ASSERT_EQ(d[i], i);
}

TEST(Arange, BadArgumentsThrow) {
  EXPECT_THAT(error_of([] { arange(0, 1, 0); }), AllOf(HasSubstr("arange"), HasSubstr("zero")));
  EXPECT_THAT(error_of([] { arange(0, std::nan("")); }),
              AllOf(HasSubstr("arange"), HasSubstr("finite")));
  EXPECT_THAT(error_of([] { arange(0, 1e300, 1e-300); }), HasSubstr("too many"));
}

// NumPy's integer arange computes its values from a step cast to the dtype after the first
// element ([0, 1, 2, 3] for (0, 5, 1.5)); Kiln refuses a fractional start or step instead.
TEST(Arange, IntegerDtypesRefuseFractionalStartOrStep) {
  for (DType dtype : {i32, i64, u8, i8}) {
    SCOPED_TRACE(dtype_name(dtype));
    test_values::expect_error(
        [&] { arange(0, 5, 1.5, dtype); }, ErrorCode::kInvalidArgument,
        std::string("arange: step 1.5 is not a whole number; ") + dtype_name(dtype));
    test_values::expect_error([&] { arange(0.5, 5, 1, dtype); }, ErrorCode::kInvalidArgument,
                              "arange: start 0.5 is not a whole number");
  }
  // A fractional stop only sets the length, as in NumPy; float dtypes take any step.
  EXPECT_EQ(arange(0, 4.5, 2, i32).to_vector<int32_t>(), (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(arange(0, 5, 1.5, f32).to_vector<float>(), (std::vector<float>{0, 1.5f, 3, 4.5f}));
}

// ---- iota -------------------------------------------------------------------------------

TEST(Iota, CountsAlongOneDimension) {
  Tensor a = iota({2, 3}, 1);
  EXPECT_EQ(a.dtype(), i64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(iota({2, 3}, 0, i32).to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(iota({2, 2, 2}, -2, f32).to_vector<float>(),
            (std::vector<float>{0, 0, 1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(iota({3}, 0, bf16).to_vector<float>(), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(iota({0, 3}, 1).size(), 0);
}

TEST(Iota, LargeOutput) {
  Tensor a = iota({400, 300}, 0, i32);
  auto d = a.data<int32_t>();
  for (int32_t i = 0; i < 400; ++i) ASSERT_EQ(d[i * 300 + 299], i);
}

TEST(Iota, RecordsInADefaultGraph) {
  Graph g("iota");
  Tensor a;
  {
    auto guard = g.as_default();
    a = iota({2, 2}, 1, f64);
  }
  ASSERT_TRUE(a.is_symbolic());
  EXPECT_EQ(g.run({}, a).to_vector<double>(), (std::vector<double>{0, 1, 0, 1}));
}

TEST(Iota, BadArgumentsThrow) {
  EXPECT_THAT(error_of([] {
                iota({2, 3}, 2);
              }),
              AllOf(HasSubstr("iota"), HasSubstr("axis 2"), HasSubstr("[2,3]")));
  EXPECT_THAT(error_of([] { iota({2}, 0, bool_); }), AllOf(HasSubstr("iota"), HasSubstr("bool")));
  EXPECT_THAT(error_of([] { iota({}, 0); }), HasSubstr("iota"));
  EXPECT_THAT(error_of([] { iota({2, -1}, 0); }), AllOf(HasSubstr("iota"), HasSubstr("[2,-1]")));
}

}  // namespace
}  // namespace kiln
