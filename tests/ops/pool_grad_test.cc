// Pooling gradients by hand: max pooling routes each window's gradient to its maximum (ties,
// overlapping windows, padding, NaN), sum and average pooling spread it over the window; the
// gradient ops' second-order partner, dtypes, graphs with an unknown batch, and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "tests/testing/values.h"

namespace kiln {
namespace {

using testing::HasSubstr;
using test_values::values;
using test_values::error_of;

// This file's tolerance is tighter than the shared default.
void expect_values(const Tensor& t, const Shape& shape, const std::vector<double>& want,
                   double tol = 1e-6) {
  test_values::expect_values(t, shape, want, tol);
}

// The gradient of <dy, f(x)> with respect to x.
Tensor grad_of(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, const Tensor& dy) {
  return grad([&](const std::vector<Tensor>& a) { return f(a[0]); }, {x}, dy)[0];
}

Tensor max_pool(const Tensor& x) { return max_pool2d(x, {2, 2}); }

// ---- max pooling -------------------------------------------------------------------------

TEST(MaxPoolGrad, EachWindowsGradientGoesToItsMaximum) {
  // Windows {1,5,3,4}, {2,0,8,6}, {7,0,2,9}, {1,1,3,4}: maxima at (0,1), (1,2), (3,1), (3,3).
  Tensor x = values({1, 4, 4, 1}, {1, 5, 2, 0, 3, 4, 8, 6, 7, 0, 1, 1, 2, 9, 3, 4});
  Tensor dy = values({1, 2, 2, 1}, {1, 2, 3, 4});
  expect_values(grad_of(max_pool, x, dy), {1, 4, 4, 1},
                {0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 3, 0, 4});
}

TEST(MaxPoolGrad, TiesGoToTheFirstMaximumInRowMajorOrder) {
  // Window 0 is all 5s: its top-left gets dy. Window 1 is {3,7,7,7}: the first 7 (row 0).
  Tensor x = values({1, 2, 4, 1}, {5, 5, 3, 7, 5, 5, 7, 7});
  Tensor dy = values({1, 1, 2, 1}, {10, 20});
  expect_values(grad_of(max_pool, x, dy), {1, 2, 4, 1}, {10, 0, 0, 20, 0, 0, 0, 0});
}

TEST(MaxPoolGrad, OverlappingWindowsAddUpAtASharedMaximum) {
  // Window 2, stride 1 over [1,3,2,5,4]: maxima at 1, 1, 3, 3.
  Tensor x = values({1, 1, 5, 1}, {1, 3, 2, 5, 4});
  Tensor dy = values({1, 1, 4, 1}, {1, 10, 100, 1000});
  auto pool = [](const Tensor& t) { return max_pool2d(t, {1, 2}, {1, 1}); };
  expect_values(grad_of(pool, x, dy), {1, 1, 5, 1}, {0, 11, 0, 1100, 0});
}

TEST(MaxPoolGrad, OverlappingPaddedWindowsInTwoDimensions) {
  // 3x3 windows, stride 1, "same" over x counting 1..9: each window's maximum is its
  // bottom-right element inside x, so (2,2) is the maximum of 4 windows, (1,2) and (2,1) of
  // 2 each, (1,1) of 1.
  Tensor x = values({1, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor dy = values({1, 3, 3, 1}, std::vector<double>(9, 1));
  auto pool = [](const Tensor& t) { return max_pool2d(t, {3, 3}, {1, 1}, "same"); };
  expect_values(grad_of(pool, x, dy), {1, 3, 3, 1}, {0, 0, 0, 0, 1, 2, 0, 2, 4});
}

TEST(MaxPoolGrad, StridedOverlappingWindows) {
  // Window 3, stride 2 over [4,1,6,2,3,9,0]: windows {4,1,6} {6,2,3} {3,9,0}; maxima at 2, 2, 5.
  Tensor x = values({7}, {4, 1, 6, 2, 3, 9, 0});
  Tensor dy = values({3}, {1, 10, 100});
  auto pool = [](const Tensor& t) { return reduce_window_max(t, {{3}, {2}, {0}, {0}}); };
  expect_values(grad_of(pool, x, dy), {7}, {0, 0, 11, 0, 0, 100, 0});
}

TEST(MaxPoolGrad, NegativeValuesBeatThePadding) {
  // "same" with 3x3 -> 2x2 pads one row and column after the input; x is all negative.
  Tensor x = values({1, 3, 3, 1}, {-20, -19, -18, -17, -16, -15, -14, -13, -12});
  Tensor dy = values({1, 2, 2, 1}, {1, 2, 3, 4});
  auto pool = [](const Tensor& t) { return max_pool2d(t, {2, 2}, {2, 2}, "same"); };
  expect_values(grad_of(pool, x, dy), {1, 3, 3, 1}, {0, 0, 0, 0, 1, 2, 0, 3, 4});
}

TEST(MaxPoolGrad, AWindowOnlyOnPaddingPassesNoGradient) {
  // Padding 2 before [1,2,3], window 2, stride 2: window 0 sees only padding, window 1 sees
  // 1 and 2.
  Tensor x = values({3}, {1, 2, 3});
  Tensor dy = values({2}, {5, 7});
  auto pool = [](const Tensor& t) { return reduce_window_max(t, {{2}, {2}, {2}, {0}}); };
  expect_values(grad_of(pool, x, dy), {3}, {0, 7, 0});
}

TEST(MaxPoolGrad, AnEmptyOperandUnderPaddedWindowsHasAnEmptyGradient) {
  Attrs w{{"window", Axes{1, 2}}, {"padding_low", Axes{0, 1}}, {"padding_high", Axes{0, 1}}};
  Tensor x = Tensor::empty(f32, {2, 0});
  Tensor dy = values({2, 1}, {1, 2});
  EXPECT_EQ(call_op("reduce_window_max_grad", {x, dy}, w)[0].shape(), (Shape{2, 0}));
  expect_values(call_op("reduce_window_max_select", {x, x}, w)[0], {2, 1}, {0, 0});
}

TEST(MaxPoolGrad, NaNIsTheMaximumAndMinusInfinityStillWins) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto pool = [](const Tensor& t) { return reduce_window_max(t, {{3}, {3}, {0}, {0}}); };
  // Window {1, NaN, NaN}: the first NaN. Window {-inf, -inf, -inf}: the first element.
  Tensor x = values({6}, {1, nan, nan, -inf, -inf, -inf});
  expect_values(grad_of(pool, x, values({2}, {5, 7})), {6}, {0, 5, 0, 7, 0, 0});
}

TEST(MaxPoolGrad, OtherDtypes) {
  Tensor x = values({1, 2, 2, 1}, {1, 4, 3, 2});
  for (DType dtype : {f64, f16, bf16}) {
    Tensor g = grad_of(max_pool, x.to(dtype), values({1, 1, 1, 1}, {3}, dtype));
    EXPECT_EQ(g.dtype(), dtype);
    expect_values(g, {1, 2, 2, 1}, {0, 3, 0, 0});
  }
}

TEST(MaxPoolGrad, SelectGathersAtEachWindowsMaximum) {
  // reduce_window_max_select(x, v) is the adjoint of reduce_window_max_grad(x, .).
  Attrs w{{"window", Axes{2}}, {"strides", Axes{2}}};
  Tensor x = values({4}, {1, 3, 4, 2});
  expect_values(call_op("reduce_window_max_select", {x, values({4}, {10, 20, 30, 40})}, w)[0], {2},
                {20, 30});
  expect_values(call_op("reduce_window_max_grad", {x, values({2}, {5, 6})}, w)[0], {4},
                {0, 5, 6, 0});
}

TEST(MaxPoolGrad, SecondDerivativeOfTheGradientWithRespectToDy) {
  // d/d(dy) <u, max_grad(x, dy)> = select(x, u): u at each window's maximum.
  Tensor x = values({1, 2, 4, 1}, {1, 9, 2, 3, 4, 5, 8, 6});
  Tensor u = values({1, 2, 4, 1}, {1, 2, 3, 4, 5, 6, 7, 8});
  Attrs w{{"window", Axes{1, 2, 2, 1}}, {"strides", Axes{1, 2, 2, 1}}};
  Tensor g = grad(
      [&](const std::vector<Tensor>& a) {
        return call_op("reduce_window_max_grad", {x, a[0]}, w)[0];
      },
      {values({1, 1, 2, 1}, {0, 0})}, u)[0];
  expect_values(g, {1, 1, 2, 1}, {2, 7});
}

TEST(MaxPoolGrad, RecordedWithAnUnknownBatch) {
  Graph g("max_pool_grad");
  Tensor x = g.placeholder(f32, {kUnknownDim, 2, 2, 1}, "x");
  Tensor dy = g.placeholder(f32, {kUnknownDim, 1, 1, 1}, "dy");
  Tensor y;
  {
    auto recording = g.as_default();
    y = max_pool(x);
  }
  Tensor dx = gradients(y, {x}, dy)[0];
  EXPECT_EQ(dx.shape(), (Shape{kUnknownDim, 2, 2, 1}));
  Tensor out = g.run(
      {{x, values({2, 2, 2, 1}, {1, 4, 3, 2, 8, 5, 6, 7})}, {dy, values({2, 1, 1, 1}, {10, 20})}},
      dx);
  expect_values(out, {2, 2, 2, 1}, {0, 10, 0, 0, 20, 0, 0, 0});
}

TEST(MaxPoolGrad, GradientOpsCheckTheirOperands) {
  Attrs w{{"window", Axes{1, 2, 2, 1}}, {"strides", Axes{1, 2, 2, 1}}};
  Tensor x = Tensor::empty(f32, {1, 4, 4, 1});
  EXPECT_THAT(error_of([&] {
                call_op("reduce_window_max_grad", {x, Tensor::empty(f32, {1, 3, 3, 1})}, w);
              }),
              HasSubstr("reduce_window_max_grad: expects the second operand to be f32[1,2,2,1] "
                        "(input 0 is f32[1,4,4,1], input 1 is f32[1,3,3,1])"));
  EXPECT_THAT(error_of([&] {
                call_op("reduce_window_max_grad", {x, Tensor::empty(f64, {1, 2, 2, 1})}, w);
              }),
              HasSubstr("expects the second operand to be f32[1,2,2,1]"));
  EXPECT_THAT(error_of([&] {
                call_op("reduce_window_max_grad",
                        {Tensor::empty(i32, {1, 4, 4, 1}), Tensor::empty(i32, {1, 2, 2, 1})}, w);
              }),
              HasSubstr("reduce_window_max_grad"));
  EXPECT_THAT(error_of([&] {
                call_op("reduce_window_max_select", {x, Tensor::empty(f32, {1, 4, 4, 2})}, w);
              }),
              HasSubstr("reduce_window_max_select: expects the second operand to be f32[1,4,4,1]"));
}

// ---- sum and average pooling --------------------------------------------------------------

TEST(SumPoolGrad, EachElementGetsTheGradientsOfTheWindowsCoveringIt) {
  // Window 3, stride 2, padding 1 on both sides over 5 elements: windows cover {0,1}, {1,2,3},
  // {3,4}.
  Tensor x = values({5}, {1, 2, 3, 4, 5});
  Tensor dy = values({3}, {1, 10, 100});
  auto pool = [](const Tensor& t) { return reduce_window_sum(t, {{3}, {2}, {1}, {1}}); };
  expect_values(grad_of(pool, x, dy), {5}, {1, 11, 10, 110, 100});
}

TEST(SumPoolGrad, StridesLargerThanTheWindowLeaveGaps) {
  // Window 1x2, stride 1x3 over a 2x6 operand: columns 2 and 5 are in no window.
  Tensor x = values({2, 6}, std::vector<double>(12, 1));
  Tensor dy = values({2, 2}, {1, 2, 3, 4});
  auto pool = [](const Tensor& t) {
    return reduce_window_sum(t, {{1, 2}, {1, 3}, {0, 0}, {0, 0}});
  };
  expect_values(grad_of(pool, x, dy), {2, 6}, {1, 1, 0, 2, 2, 0, 3, 3, 0, 4, 4, 0});
}

TEST(SumPoolGrad, AveragePoolingDividesByTheWindow) {
  // 2x2 windows, stride 1 over 3x3: corners are in 1 window, edges in 2, the centre in 4.
  Tensor x = values({1, 3, 3, 1}, std::vector<double>(9, 0));
  Tensor dy = values({1, 2, 2, 1}, {1, 1, 1, 1});
  auto pool = [](const Tensor& t) { return avg_pool2d(t, {2, 2}, {1, 1}); };
  expect_values(grad_of(pool, x, dy), {1, 3, 3, 1},
                {0.25, 0.5, 0.25, 0.5, 1, 0.5, 0.25, 0.5, 0.25});
}

TEST(SumPoolGrad, GradientOfTheGradientIsTheSum) {
  Attrs w{{"window", Axes{3}},
          {"strides", Axes{2}},
          {"padding_low", Axes{1}},
          {"padding_high", Axes{1}},
          {"operand_shape", Axes{5}}};
  expect_values(call_op("reduce_window_sum_grad", {values({3}, {1, 10, 100})}, w)[0], {5},
                {1, 11, 10, 110, 100});
  // d/d(dy) <u, sum_grad(dy)> = reduce_window_sum(u).
  Tensor g =
      grad([&](const std::vector<Tensor>& a) { return call_op("reduce_window_sum_grad", a, w)[0]; },
           {values({3}, {0, 0, 0})}, values({5}, {1, 2, 3, 4, 5}))[0];
  expect_values(g, {3}, {3, 9, 9});
}

TEST(SumPoolGrad, RecordedWithAnUnknownBatch) {
  Graph g("sum_pool_grad");
  Tensor x = g.placeholder(f32, {kUnknownDim, 2, 2, 1}, "x");
  Tensor y;
  {
    auto recording = g.as_default();
    y = reduce_window_sum(x, {{1, 2, 2, 1}, {1, 2, 2, 1}, {}, {}});
  }
  Tensor dx = gradients(y, {x}, g.placeholder(f32, {kUnknownDim, 1, 1, 1}, "dy"))[0];
  EXPECT_EQ(dx.shape(), (Shape{kUnknownDim, 2, 2, 1}));
}

TEST(SumPoolGrad, AnUnknownSizeUnderTheWindowIsAnErrorWhenDifferentiating) {
  Graph g("sum_pool_grad");
  Tensor x = g.placeholder(f32, {1, kUnknownDim, 4, 1}, "x");
  Tensor y;
  {
    auto recording = g.as_default();
    y = reduce_window_sum(x, {{1, 2, 2, 1}, {1, 2, 2, 1}, {}, {}});
  }
  Tensor dy = g.placeholder(f32, {1, kUnknownDim, 2, 1}, "dy");
  EXPECT_THAT(error_of([&] { gradients(y, {x}, dy); }),
              HasSubstr("reduce_window_sum_grad: operand_shape [1,-1,4,1] must be known in "
                        "dimension 1"));
}

TEST(SumPoolGrad, GradientOpChecksItsOperand) {
  Attrs w{{"window", Axes{2}}, {"strides", Axes{2}}, {"operand_shape", Axes{6}}};
  EXPECT_THAT(error_of([&] {
                call_op("reduce_window_sum_grad", {values({2}, {1, 2})}, w);
              }),
              HasSubstr("reduce_window_sum_grad: output_grad is f32[2], but the windows over an "
                        "operand f32[6] give f32[3]"));
  Attrs rank{{"window", Axes{2}}, {"operand_shape", Axes{6, 1}}};
  EXPECT_THAT(error_of([&] {
                call_op("reduce_window_sum_grad", {values({3}, {1, 2, 3})}, rank);
              }),
              HasSubstr("operand_shape [6,1] must have the rank of output_grad f32[3]"));
}

}  // namespace
}  // namespace kiln
