// allclose: tolerances, shapes, NaN and infinity handling, mixed dtypes, symbolic inputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "kiln/kiln.h"

namespace kiln {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor f64s(std::vector<double> v) { return Tensor::from_vector(v); }

TEST(Allclose, WithinAbsoluteAndRelativeTolerance) {
  EXPECT_TRUE(allclose(f64s({1, 2, 3}), f64s({1, 2, 3})));
  EXPECT_TRUE(allclose(f64s({100.0005}), f64s({100}), 1e-5, 0));  // 5e-4 <= 1e-5 * 100
  EXPECT_FALSE(allclose(f64s({100.002}), f64s({100}), 1e-5, 0));
  EXPECT_TRUE(allclose(f64s({1e-9}), f64s({0})));  // 1e-9 <= atol 1e-8
  EXPECT_FALSE(allclose(f64s({1e-7}), f64s({0})));
}

TEST(Allclose, ShapesMustMatchWithoutBroadcasting) {
  EXPECT_FALSE(allclose(f64s({1, 1}), Tensor::scalar(1.0)));
  EXPECT_FALSE(allclose(Tensor::from_list<double>({1, 2}, {2, 1}), f64s({1, 2})));
  EXPECT_TRUE(allclose(Tensor::empty(f32, {0, 3}), Tensor::empty(f64, {0, 3})));
}

TEST(Allclose, NaNEqualsNaNAndInfinitiesMustMatch) {
  EXPECT_TRUE(allclose(f64s({kNaN, 1}), f64s({kNaN, 1})));
  EXPECT_FALSE(allclose(f64s({kNaN}), f64s({1})));
  EXPECT_FALSE(allclose(f64s({1}), f64s({kNaN})));
  EXPECT_TRUE(allclose(f64s({kInf, -kInf}), f64s({kInf, -kInf})));
  EXPECT_FALSE(allclose(f64s({kInf}), f64s({-kInf})));
  EXPECT_FALSE(allclose(f64s({1e308}), f64s({kInf})));  // rtol * inf must not excuse it
}

TEST(Allclose, ComparesAcrossDtypesInF64) {
  EXPECT_TRUE(allclose(Tensor::from_list<int32_t>({1, 2}), f64s({1, 2})));
  EXPECT_TRUE(allclose(Tensor::from_list<float>({0.1f}), f64s({0.1}), 1e-6));
  EXPECT_FALSE(allclose(Tensor::from_list<float>({0.1f}), f64s({0.1}), 1e-9, 0));
  EXPECT_TRUE(allclose(Tensor::from_list<bool>({true, false}), f64s({1, 0})));
  EXPECT_TRUE(allclose(Tensor::from_list<float>({1.5f}).to(bf16), f64s({1.5})));
}

TEST(Allclose, SymbolicInputsThrow) {
  Graph g;
  Tensor x = g.placeholder(f32, {2}, "x");
  try {
    allclose(x, Tensor::from_list<float>({1, 2}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("allclose: a must be a concrete tensor"));
  }
}

}  // namespace
}  // namespace kiln
