// Windowed reductions and pooling: hand-computed cases (including SAME padding), dtypes,
// zero-sized and scalar operands, errors, and recording in a Graph.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "tests/testing/values.h"

namespace kiln {
namespace {

using testing::HasSubstr;
using test_values::counting;
using test_values::error_of;

// This file's tolerance is tighter than the shared default.
void expect_values(const Tensor& t, const Shape& shape, const std::vector<double>& want,
                   double tol = 1e-6) {
  test_values::expect_values(t, shape, want, tol);
}

// ---- reduce_window ----------------------------------------------------------------------

TEST(ReduceWindow, TwoByTwoWindowsWithStrideTwo) {
  // x[i][j] = 4i + j + 1.
  Tensor x = counting({1, 4, 4, 1});
  WindowOptions w{{1, 2, 2, 1}, {1, 2, 2, 1}, {}, {}};
  expect_values(reduce_window_max(x, w), {1, 2, 2, 1}, {6, 8, 14, 16});
  expect_values(reduce_window_sum(x, w), {1, 2, 2, 1}, {14, 22, 46, 54});
}

TEST(ReduceWindow, OverlappingWindowsAndPaddingOnAVector) {
  Tensor x = Tensor::from_list<float>({1, 5, 2, 8, 3});
  expect_values(reduce_window_max(x, {{2}, {}, {}, {}}), {4}, {5, 5, 8, 8});
  expect_values(reduce_window_sum(x, {{2}, {}, {}, {}}), {4}, {6, 7, 10, 11});
  WindowOptions padded{{2}, {1}, {1}, {1}};
  expect_values(reduce_window_max(x, padded), {6}, {1, 5, 5, 8, 8, 3});
  expect_values(reduce_window_sum(x, padded), {6}, {1, 6, 7, 10, 11, 3});
  expect_values(reduce_window_sum(x, {{3}, {2}, {}, {}}), {2}, {8, 13});
}

TEST(ReduceWindow, WindowsSpanEveryDimension) {
  // A window over the batch and channel dimensions too: [2,2,2] -> one element.
  Tensor x = counting({2, 2, 2});
  expect_values(reduce_window_sum(x, {{2, 2, 2}, {}, {}, {}}), {1, 1, 1}, {36});
  expect_values(reduce_window_max(x, {{2, 1, 2}, {}, {}, {}}), {1, 2, 1}, {6, 8});
}

TEST(ReduceWindow, PaddingIsMinusInfinityForMaxAndZeroForSum) {
  Tensor x = Tensor::from_list<float>({-3, -1, -2});
  WindowOptions w{{2}, {1}, {1}, {1}};
  expect_values(reduce_window_max(x, w), {4}, {-3, -1, -1, -2});
  expect_values(reduce_window_sum(x, w), {4}, {-3, -4, -3, -2});
  // A window that sees only padding.
  WindowOptions only_pad{{1}, {1}, {1}, {0}};
  Tensor m = reduce_window_max(x, only_pad);
  EXPECT_EQ(m.to_vector<float>()[0], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(reduce_window_max(x.to(i32), only_pad).to_vector<int32_t>()[0],
            std::numeric_limits<int32_t>::lowest());
}

TEST(ReduceWindow, MaxPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_list<float>({1, nan, 3, 4});
  expect_values(reduce_window_max(x, {{2}, {}, {}, {}}), {3}, {nan, nan, 4});
}

TEST(ReduceWindow, IntegerAndHalfDtypes) {
  for (DType t : {i8, u8, i32, i64, f16, bf16, f64}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor x = counting({1, 4, 4, 1}, 1, t);
    WindowOptions w{{1, 2, 2, 1}, {1, 2, 2, 1}, {}, {}};
    Tensor m = reduce_window_max(x, w);
    EXPECT_EQ(m.dtype(), t);
    expect_values(m, {1, 2, 2, 1}, {6, 8, 14, 16});
    expect_values(reduce_window_sum(x, w), {1, 2, 2, 1}, {14, 22, 46, 54});
  }
  // Integer sums wrap like C unsigned arithmetic instead of overflowing.
  Tensor bytes = Tensor::from_list<uint8_t>({200, 100});
  EXPECT_EQ(reduce_window_sum(bytes, {{2}, {}, {}, {}}).to_vector<int>()[0], 44);
  Tensor big = Tensor::from_list<int32_t>({std::numeric_limits<int32_t>::max(), 1});
  EXPECT_EQ(reduce_window_sum(big, {{2}, {}, {}, {}}).to_vector<int32_t>()[0],
            std::numeric_limits<int32_t>::min());
}

TEST(ReduceWindow, HalfSumsAccumulateInFloat) {
  // 2048 + 1 + 1 is 2050 in f16, but 2048 + 1 rounds back to 2048 if rounded at every step.
  Tensor x = Tensor::from_list<float>({2048, 1, 1}).to(f16);
  EXPECT_EQ(reduce_window_sum(x, {{3}, {}, {}, {}}).to_vector<float>()[0], 2050.0f);
}

TEST(ReduceWindow, ScalarsAndIdentityWindows) {
  expect_values(reduce_window_max(Tensor::scalar(2.5f), {{}, {}, {}, {}}), {}, {2.5});
  Tensor x = counting({2, 3});
  expect_values(reduce_window_sum(x, {{1, 1}, {}, {}, {}}), {2, 3}, {1, 2, 3, 4, 5, 6});
}

TEST(ReduceWindow, ZeroSizedOperands) {
  Tensor x = Tensor::empty(f32, {0, 4, 4, 1});
  EXPECT_EQ(reduce_window_max(x, {{1, 2, 2, 1}, {1, 2, 2, 1}, {}, {}}).shape(),
            (Shape{0, 2, 2, 1}));
  EXPECT_EQ(reduce_window_sum(Tensor::empty(f32, {3, 0}), {{2, 2}, {}, {}, {}}).shape(),
            (Shape{2, 0}));
  // An empty dimension with padding: every window sees only padding.
  Tensor e = Tensor::empty(f32, {0});
  expect_values(reduce_window_sum(e, {{1}, {1}, {1}, {1}}), {2}, {0, 0});
}

TEST(ReduceWindow, Errors) {
  Tensor x = counting({1, 4, 4, 1});
  std::string msg = error_of([&] { reduce_window_max(x, {{1, 5, 5, 1}, {}, {}, {}}); });
  EXPECT_THAT(msg, HasSubstr("reduce_window_max: the window [1,5,5,1] is larger than the padded "
                             "operand in dimension 1"));
  EXPECT_THAT(msg, HasSubstr("f32[1,4,4,1]"));
  EXPECT_THAT(error_of([&] {
                reduce_window_sum(x, {{2, 2}, {}, {}, {}});
              }),
              HasSubstr("reduce_window_sum: window [2,2] must have one value per dimension"));
  EXPECT_THAT(error_of([&] {
                reduce_window_sum(x, {{1, 0, 1, 1}, {}, {}, {}});
              }),
              HasSubstr("window [1,0,1,1] must hold values in [1,"));
  EXPECT_THAT(error_of([&] {
                reduce_window_sum(x, {{1, 2, 2, 1}, {1, 0, 1, 1}, {}, {}});
              }),
              HasSubstr("strides [1,0,1,1]"));
  EXPECT_THAT(error_of([&] {
                reduce_window_sum(x, {{1, 2, 2, 1}, {}, {0, -1, 0, 0}, {}});
              }),
              HasSubstr("padding_low [0,-1,0,0]"));
  EXPECT_THAT(error_of([&] {
                reduce_window_max(x.to(bool_), {{1, 2, 2, 1}, {}, {}, {}});
              }),
              HasSubstr("expects a numeric input"));
}

// ---- pooling ----------------------------------------------------------------------------

TEST(Pool, MaxPoolValidAndSame) {
  Tensor x4 = counting({1, 4, 4, 1});
  expect_values(max_pool2d(x4), {1, 2, 2, 1}, {6, 8, 14, 16});
  // 5x5, pool 2, stride 2, "same": out 3, padding low 0, high 1 (x[i][j] = 5i + j + 1).
  Tensor x5 = counting({1, 5, 5, 1});
  expect_values(max_pool2d(x5, {2, 2}, {}, "same"), {1, 3, 3, 1},
                {7, 9, 10, 17, 19, 20, 22, 24, 25});
  expect_values(max_pool2d(x5, {2, 2}, {}, "valid"), {1, 2, 2, 1}, {7, 9, 17, 19});
  // Pool 3, stride 1, "same" pads one on each side.
  expect_values(max_pool2d(counting({1, 3, 3, 1}), {3, 3}, {1, 1}, "same"), {1, 3, 3, 1},
                {5, 6, 6, 8, 9, 9, 8, 9, 9});
}

TEST(Pool, MaxPoolNeverPicksThePadding) {
  Tensor x = counting({1, 3, 3, 1}, -20);  // all negative
  expect_values(max_pool2d(x, {2, 2}, {2, 2}, "same"), {1, 2, 2, 1}, {-16, -15, -13, -12});
}

TEST(Pool, PoolsEachChannelAndImageSeparately) {
  // Channel c of image n holds 100n + 10c + (position).
  std::vector<float> v;
  for (int n = 0; n < 2; ++n)
    for (int p = 0; p < 4; ++p)
      for (int c = 0; c < 3; ++c) v.push_back(100.0f * n + 10.0f * c + p);
  Tensor x = Tensor::from_vector(v, {2, 2, 2, 3});
  expect_values(max_pool2d(x), {2, 1, 1, 3}, {3, 13, 23, 103, 113, 123});
  expect_values(avg_pool2d(x), {2, 1, 1, 3}, {1.5, 11.5, 21.5, 101.5, 111.5, 121.5});
}

TEST(Pool, AvgPoolValid) {
  expect_values(avg_pool2d(counting({1, 4, 4, 1})), {1, 2, 2, 1}, {3.5, 5.5, 11.5, 13.5});
  expect_values(avg_pool2d(counting({1, 4, 4, 1}), {2, 2}, {1, 2}), {1, 3, 2, 1},
                {3.5, 5.5, 7.5, 9.5, 11.5, 13.5});
}

TEST(Pool, AvgPoolSameAveragesOnlyTheInputElements) {
  // 5x5, pool 2, stride 2: the last row and column of windows hang over the padding.
  Tensor x5 = counting({1, 5, 5, 1});
  expect_values(avg_pool2d(x5, {2, 2}, {}, "same"), {1, 3, 3, 1},
                {4, 6, 7.5, 14, 16, 17.5, 21.5, 23.5, 25});
  // 3x3, pool 3, stride 1: corners average 4 elements, edges 6, the centre 9.
  expect_values(avg_pool2d(counting({1, 3, 3, 1}), {3, 3}, {1, 1}, "same"), {1, 3, 3, 1},
                {3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7});
}

TEST(Pool, AvgPoolOfIntegersIsFloat) {
  Tensor y = avg_pool2d(counting({1, 2, 2, 1}, 1, i32));
  EXPECT_EQ(y.dtype(), f32);
  expect_values(y, {1, 1, 1, 1}, {2.5});
  Tensor h = avg_pool2d(counting({1, 2, 2, 1}, 1, f16), {2, 2}, {}, "same");
  EXPECT_EQ(h.dtype(), f16);
  expect_values(h, {1, 1, 1, 1}, {2.5});
}

TEST(Pool, ZeroSizedBatch) {
  Tensor x = Tensor::empty(f32, {0, 4, 4, 2});
  EXPECT_EQ(max_pool2d(x).shape(), (Shape{0, 2, 2, 2}));
  EXPECT_EQ(avg_pool2d(x, {2, 2}, {}, "same").shape(), (Shape{0, 2, 2, 2}));
  // An empty image stays empty under "same" padding.
  EXPECT_EQ(max_pool2d(Tensor::empty(f32, {1, 0, 4, 1}), {3, 3}, {1, 1}, "same").shape(),
            (Shape{1, 0, 4, 1}));
}

TEST(Pool, Errors) {
  Tensor x = counting({1, 4, 4, 1});
  std::string msg = error_of([&] { max_pool2d(x, {5, 5}); });
  EXPECT_THAT(msg, HasSubstr("reduce_window_max: the window [1,5,5,1] is larger"));
  EXPECT_THAT(msg, HasSubstr("f32[1,4,4,1]"));
  EXPECT_THAT(error_of([&] { avg_pool2d(x, {5, 5}); }), HasSubstr("reduce_window_sum"));
  EXPECT_EQ(error_of([&] {
              max_pool2d(x, {2, 2}, {}, "SAME");
            }),
            "max_pool2d: padding must be \"same\" or \"valid\", got \"SAME\"");
  EXPECT_EQ(error_of([&] {
              avg_pool2d(counting({4, 4, 1}));
            }),
            "avg_pool2d: expects a 4-d NHWC input (input f32[4,4,1])");
  EXPECT_THAT(error_of([&] {
                max_pool2d(x, {2, 2, 2});
              }),
              HasSubstr("max_pool2d: pool and strides must have 2 values"));
  EXPECT_THAT(error_of([&] {
                max_pool2d(x, {2, 2}, {0, 2}, "same");
              }),
              HasSubstr("strides must be in [1, 16777216], got [0,"));
}

// ---- graphs -----------------------------------------------------------------------------

TEST(Pool, RecordsInAGraphAndRuns) {
  Graph g("pool");
  Tensor x = g.placeholder(f32, {kUnknownDim, 5, 5, 1}, "x");
  Tensor m = max_pool2d(x, {2, 2}, {}, "same");
  Tensor a = avg_pool2d(x, {2, 2}, {}, "same");
  EXPECT_EQ(m.shape(), (Shape{kUnknownDim, 3, 3, 1}));
  EXPECT_EQ(a.shape(), (Shape{kUnknownDim, 3, 3, 1}));
  std::vector<Tensor> out = g.run({{x, counting({1, 5, 5, 1})}}, {m, a});
  expect_values(out[0], {1, 3, 3, 1}, {7, 9, 10, 17, 19, 20, 22, 24, 25});
  expect_values(out[1], {1, 3, 3, 1}, {4, 6, 7.5, 14, 16, 17.5, 21.5, 23.5, 25});
}

TEST(Pool, AvgPoolWithUnknownSpatialSizeCountsAtRunTime) {
  Graph g;
  Tensor x = g.placeholder(f32, {1, kUnknownDim, kUnknownDim, 1}, "x");
  Tensor a = avg_pool2d(x, {3, 3}, {1, 1}, "same");
  expect_values(g.run({{x, counting({1, 3, 3, 1})}}, a), {1, 3, 3, 1},
                {3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7});
}

}  // namespace
}  // namespace kiln
