// Reductions: sum, prod, max, min, any, all over axes; mean and variance; argmax and argmin.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "kiln/kiln.h"

namespace kiln {
namespace {

using testing::ElementsAre;
using testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

// 0, 1, 2, ... as a tensor of `shape`.
template <class T>
Tensor counting(Shape shape) {
  std::vector<T> v(num_elements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(i);
  return Tensor::from_vector(v, shape);
}

// The message of the kiln::Error that f throws ("" if it does not throw).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- sum ---------------------------------------------------------------------------------

TEST(Sum, NoAxesReducesEverything) {
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor s = sum(x);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.dtype(), f32);
  EXPECT_EQ(s.item<float>(), 21.0f);
}

TEST(Sum, OneAxisDropsIt) {
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_THAT(sum(x, {0}).to_vector<float>(), ElementsAre(5, 7, 9));
  EXPECT_THAT(sum(x, {1}).to_vector<float>(), ElementsAre(6, 15));
  EXPECT_THAT(sum(x, {-1}).to_vector<float>(), ElementsAre(6, 15));
  EXPECT_EQ(sum(x, {1}).shape(), Shape{2});
}

TEST(Sum, NonAdjacentAndMiddleAxes) {
  Tensor x = counting<float>({2, 3, 4});  // x[i,j,k] = 12i + 4j + k
  // sum over i and k of 12i + 4j + k = 48 + 32j + 12.
  EXPECT_THAT(sum(x, {0, 2}).to_vector<float>(), ElementsAre(60, 92, 124));
  EXPECT_THAT(sum(x, {2, 0}).to_vector<float>(), ElementsAre(60, 92, 124));
  // sum over j of 12i + 4j + k = 36i + 12 + 3k.
  Tensor m = sum(x, {1});
  EXPECT_EQ(m.shape(), (Shape{2, 4}));
  EXPECT_THAT(m.to_vector<float>(), ElementsAre(12, 15, 18, 21, 48, 51, 54, 57));
  EXPECT_THAT(sum(x, {0, 1}).to_vector<float>(), ElementsAre(60, 66, 72, 78));
}

TEST(Sum, SizeOneDimensionsAreHandled) {
  Tensor x = counting<float>({1, 3, 1, 2});
  EXPECT_THAT(sum(x, {1}).to_vector<float>(), ElementsAre(6, 9));
  EXPECT_EQ(sum(x, {1}).shape(), (Shape{1, 1, 2}));
  EXPECT_THAT(sum(x, {0, 2}).to_vector<float>(), ElementsAre(0, 1, 2, 3, 4, 5));
}

TEST(Sum, IntegerTypesKeepTheirDtypeAndWrap) {
  Tensor a = Tensor::from_list<int32_t>({1, -2, 3, 4}, {2, 2});
  EXPECT_EQ(sum(a, {1}).dtype(), i32);
  EXPECT_THAT(sum(a, {1}).to_vector<int32_t>(), ElementsAre(-1, 7));
  EXPECT_EQ(sum(Tensor::from_list<int8_t>({100, 100})).item<int32_t>(), -56);
  EXPECT_EQ(sum(Tensor::from_list<uint8_t>({200, 100})).item<int32_t>(), 44);
  EXPECT_EQ(
      sum(Tensor::from_list<int64_t>({std::numeric_limits<int64_t>::max(), 1})).item<int64_t>(),
      std::numeric_limits<int64_t>::min());
}

TEST(Sum, BoolCountsTrueValuesAsI64) {
  Tensor b = Tensor::from_vector(std::vector<bool>{true, false, true, true}, {2, 2});
  Tensor s = sum(b, {0});
  EXPECT_EQ(s.dtype(), i64);
  EXPECT_THAT(s.to_vector<int64_t>(), ElementsAre(2, 1));
}

TEST(Sum, HalfPrecisionAccumulatesInFloat) {
  // In f16 arithmetic 2048 + 1 rounds back to 2048; in bf16, 256 + 1 to 256.
  Tensor h = Tensor::from_vector(std::vector<half>(4096, half(1.0f)));
  EXPECT_EQ(sum(h).dtype(), f16);
  EXPECT_EQ(sum(h).item<float>(), 4096.0f);
  Tensor b = Tensor::from_vector(std::vector<bfloat16>(1000, bfloat16(1.0f)));
  EXPECT_EQ(sum(b).item<float>(), 1000.0f);
}

TEST(Sum, LongF32SumIsAccurate) {
  // Naive float accumulation of ten million 0.1f is off by about 9%.
  Tensor x = Tensor::from_vector(std::vector<float>(10'000'000, 0.1f));
  EXPECT_NEAR(sum(x).item<double>(), 1e6, 0.1);
  EXPECT_EQ(sum(x).item<float>(), sum(x).item<float>());  // deterministic
}

TEST(Sum, LongColumnsAndWideRows) {
  // 100000 rows of [1, 2, 3]: the reduction is split into chunks.
  std::vector<int32_t> v(300000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i % 3 + 1);
  EXPECT_THAT(sum(Tensor::from_vector(v, {100000, 3}), {0}).to_vector<int32_t>(),
              ElementsAre(100000, 200000, 300000));
  // 600 columns span several column blocks: column j sums 0 + 600 + 1200 + 3j.
  std::vector<float> cols = sum(counting<float>({3, 600}), {0}).to_vector<float>();
  ASSERT_EQ(cols.size(), 600u);
  for (int j = 0; j < 600; ++j) ASSERT_EQ(cols[j], 1800.0f + 3 * j) << j;
  // 300 rows of 1000: row i sums 1000 * (1000 i) + 999 * 1000 / 2.
  std::vector<double> rows = sum(counting<double>({300, 1000}), {1}).to_vector<double>();
  for (int i = 0; i < 300; ++i) ASSERT_EQ(rows[i], 1e6 * i + 499500.0) << i;
}

TEST(Sum, ScalarInputIsReturned) {
  EXPECT_EQ(sum(Tensor::scalar(2.5f)).item<float>(), 2.5f);
  EXPECT_EQ(sum(Tensor::scalar(2.5f)).shape(), Shape{});
}

TEST(Sum, KeepdimsLeavesSizeOneDimensions) {
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor r = sum(x, {1}, /*keepdims=*/true);
  EXPECT_EQ(r.shape(), (Shape{2, 1}));
  EXPECT_THAT(r.to_vector<float>(), ElementsAre(6, 15));
  EXPECT_EQ(sum(x, {}, true).shape(), (Shape{1, 1}));
  EXPECT_EQ(sum(counting<float>({2, 3, 4}), {-1, 0}, true).shape(), (Shape{1, 3, 1}));
}

// ---- empty reductions give the identity ----------------------------------------------------

TEST(Reduce, EmptyReductionsGiveTheIdentity) {
  Tensor e = Tensor::from_vector(std::vector<float>{});
  EXPECT_EQ(sum(e).item<float>(), 0.0f);
  EXPECT_EQ(prod(e).item<float>(), 1.0f);
  EXPECT_EQ(max(e).item<float>(), -kInf);
  EXPECT_EQ(min(e).item<float>(), kInf);
  Tensor ei = Tensor::from_vector(std::vector<int32_t>{});
  EXPECT_EQ(max(ei).item<int32_t>(), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(min(ei).item<int32_t>(), std::numeric_limits<int32_t>::max());
  Tensor eb = Tensor::from_vector(std::vector<bool>{});
  EXPECT_FALSE(any(eb).item<bool>());
  EXPECT_TRUE(all(eb).item<bool>());
}

TEST(Reduce, ZeroSizedDimensions) {
  Tensor x = Tensor::from_vector(std::vector<float>{}, {2, 0});
  EXPECT_EQ(sum(x, {1}).shape(), Shape{2});
  EXPECT_THAT(sum(x, {1}).to_vector<float>(), ElementsAre(0, 0));
  EXPECT_EQ(sum(x, {0}).shape(), Shape{0});
  EXPECT_EQ(max(x, {0}).size(), 0);
}

// ---- max, min, prod, any, all --------------------------------------------------------------

TEST(MaxMin, AlongAxesAndOverall) {
  Tensor x = Tensor::from_list<float>({3, -1, 7, -8, 2, 0}, {2, 3});
  EXPECT_EQ(max(x).item<float>(), 7.0f);
  EXPECT_EQ(min(x).item<float>(), -8.0f);
  EXPECT_THAT(max(x, {0}).to_vector<float>(), ElementsAre(3, 2, 7));
  EXPECT_THAT(min(x, {1}).to_vector<float>(), ElementsAre(-1, -8));
  Tensor xi = Tensor::from_list<int8_t>({-128, 127, 5}, {3});
  EXPECT_EQ(max(xi).item<int32_t>(), 127);
  EXPECT_EQ(min(xi).item<int32_t>(), -128);
  EXPECT_EQ(max(xi).dtype(), i8);
}

TEST(MaxMin, PropagateNaN) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_list<float>({1, nan, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(std::isnan(max(x).item<float>()));
  EXPECT_TRUE(std::isnan(min(x).item<float>()));
  std::vector<float> m = max(x, {1}).to_vector<float>();
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_EQ(m[1], 6.0f);
  std::vector<float> c = min(x, {0}).to_vector<float>();
  EXPECT_EQ(c[0], 1.0f);
  EXPECT_TRUE(std::isnan(c[1]));
}

TEST(MaxMin, HalfAndBoolInputs) {
  Tensor h = Tensor::from_vector(std::vector<half>{half(0.5f), half(-2.0f), half(1.5f)});
  EXPECT_EQ(max(h).dtype(), f16);
  EXPECT_EQ(max(h).item<float>(), 1.5f);
  EXPECT_EQ(min(h).item<float>(), -2.0f);
  Tensor b = Tensor::from_vector(std::vector<bool>{false, true, false});
  EXPECT_TRUE(max(b).item<bool>());
  EXPECT_FALSE(min(b).item<bool>());
}

TEST(Prod, MultipliesAndWraps) {
  Tensor x = Tensor::from_list<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(prod(x).item<double>(), 720.0);
  EXPECT_THAT(prod(x, {0}).to_vector<double>(), ElementsAre(4, 10, 18));
  EXPECT_EQ(prod(Tensor::from_list<int8_t>({16, 16})).item<int32_t>(), 0);  // 256 wraps
  EXPECT_EQ(prod(Tensor::from_list<int32_t>({-3, 5})).item<int32_t>(), -15);
}

TEST(AnyAll, LogicalReductions) {
  Tensor b = Tensor::from_vector(std::vector<bool>{true, false, false, false}, {2, 2});
  EXPECT_THAT(any(b, {1}).to_vector<bool>(), ElementsAre(true, false));
  EXPECT_THAT(all(b, {0}).to_vector<bool>(), ElementsAre(false, false));
  EXPECT_TRUE(any(b).item<bool>());
  EXPECT_FALSE(all(b).item<bool>());
  EXPECT_EQ(any(b).dtype(), bool_);
  Tensor t = Tensor::from_vector(std::vector<bool>{true, true});
  EXPECT_TRUE(all(t).item<bool>());
}

TEST(AnyAll, RequireBool) {
  std::string msg = error_of([] { any(Tensor::from_list<float>({1, 0})); });
  EXPECT_THAT(msg, HasSubstr("reduce_any"));
  EXPECT_THAT(msg, HasSubstr("f32[2]"));
}

// ---- axis errors ----------------------------------------------------------------------------

TEST(Reduce, AxisOutOfRangeNamesFunctionAndShape) {
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  std::string msg = error_of([&] { sum(x, {2}); });
  EXPECT_THAT(msg, HasSubstr("sum: axis 2 is out of range for f32[2,3]"));
  EXPECT_THAT(error_of([&] { max(x, {-3}); }), HasSubstr("max: axis -3 is out of range"));
  EXPECT_THAT(error_of([&] { mean(x, {5}); }), HasSubstr("mean: axis 5"));
  EXPECT_THAT(error_of([&] { argmax(x, 2); }),
              HasSubstr("argmax: axis 2 is out of range for f32[2,3]"));
  EXPECT_THAT(error_of([] { argmin(Tensor::scalar(1.0f), 0); }), HasSubstr("argmin: axis 0"));
}

TEST(Reduce, DuplicateAxisIsAnError) {
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  std::string msg = error_of([&] { sum(x, {1, -1}); });
  EXPECT_THAT(msg, HasSubstr("sum: duplicate axis 1"));
  EXPECT_THAT(msg, HasSubstr("f32[2,3]"));
}

TEST(Reduce, PrimitiveWantsSortedNonNegativeAxes) {
  Tensor x = counting<float>({2, 3});
  EXPECT_THAT(error_of([&] {
                call_op("reduce_sum", {x}, {{"axes", Axes{1, 0}}});
              }),
              HasSubstr("reduce_sum: axes [1,0] must be sorted and unique"));
  EXPECT_THAT(error_of([&] {
                call_op("reduce_max", {x}, {{"axes", Axes{-1}}});
              }),
              HasSubstr("reduce_max: axis -1 is out of range for f32[2,3]"));
  EXPECT_THAT(
      error_of([] {
        call_op("reduce_sum", {Tensor::from_vector(std::vector<bool>{true})}, {{"axes", Axes{0}}});
      }),
      HasSubstr("reduce_sum: expects a numeric input, got bool[1]"));
}

// ---- mean and variance -----------------------------------------------------------------------

TEST(Mean, FloatAndIntegerInputs) {
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_THAT(mean(x, {1}).to_vector<float>(), ElementsAre(2, 5));
  EXPECT_EQ(mean(x).item<float>(), 3.5f);
  Tensor xi = Tensor::from_list<int32_t>({1, 2, 4, 4}, {2, 2});
  EXPECT_EQ(mean(xi).dtype(), f32);
  EXPECT_THAT(mean(xi, {0}).to_vector<float>(), ElementsAre(2.5f, 3.0f));
  Tensor xd = Tensor::from_list<double>({1, 2});
  EXPECT_EQ(mean(xd).dtype(), f64);
  EXPECT_EQ(mean(xd).item<double>(), 1.5);
}

TEST(Mean, HalfComputesInFloat) {
  // The f16 sum 4096 * 16 = 65536 would overflow f16; the mean, 16, does not.
  Tensor h = Tensor::from_vector(std::vector<half>(4096, half(16.0f)));
  EXPECT_EQ(mean(h).dtype(), f16);
  EXPECT_EQ(mean(h).item<float>(), 16.0f);
}

TEST(Mean, EmptyReductionIsNaN) {
  EXPECT_TRUE(std::isnan(mean(Tensor::from_vector(std::vector<float>{})).item<float>()));
}

TEST(Mean, Keepdims) {
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor m = mean(x, {0}, true);
  EXPECT_EQ(m.shape(), (Shape{1, 3}));
  EXPECT_THAT(m.to_vector<float>(), ElementsAre(2.5f, 3.5f, 4.5f));
}

TEST(Variance, PopulationVarianceLikeNumpyVar) {
  EXPECT_EQ(variance(Tensor::from_list<float>({1, 2, 3, 4})).item<float>(), 1.25f);
  Tensor x = Tensor::from_list<double>({1, 2, 3, 5}, {2, 2});
  EXPECT_THAT(variance(x, {0}).to_vector<double>(), ElementsAre(1.0, 2.25));
  EXPECT_THAT(variance(x, {-1}).to_vector<double>(), ElementsAre(0.25, 1.0));
  Tensor v = variance(x, {1}, true);
  EXPECT_EQ(v.shape(), (Shape{2, 1}));
  Tensor xi = Tensor::from_list<int32_t>({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_EQ(variance(xi).dtype(), f32);
  EXPECT_EQ(variance(xi).item<float>(), 4.0f);
}

// ---- argmax / argmin -------------------------------------------------------------------------

TEST(ArgMax, FirstOccurrenceWins) {
  Tensor x = Tensor::from_list<float>({1, 3, 3, 5, 0, 5}, {2, 3});
  Tensor a = argmax(x, 1);
  EXPECT_EQ(a.dtype(), i64);
  EXPECT_THAT(a.to_vector<int64_t>(), ElementsAre(1, 0));
  EXPECT_THAT(argmax(x, 0).to_vector<int64_t>(), ElementsAre(1, 0, 1));
  EXPECT_THAT(argmax(x, -2).to_vector<int64_t>(), ElementsAre(1, 0, 1));
  EXPECT_THAT(argmin(x, 1).to_vector<int64_t>(), ElementsAre(0, 1));
  EXPECT_THAT(argmin(x, 0).to_vector<int64_t>(), ElementsAre(0, 1, 0));
}

TEST(ArgMax, NaNCountsAsTheExtremeLikeNumpy) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_list<float>({1, nan, 3, nan});
  EXPECT_EQ(argmax(x, 0).item<int64_t>(), 1);
  EXPECT_EQ(argmin(x, 0).item<int64_t>(), 1);
}

TEST(ArgMax, IntegerBoolAndHalfInputs) {
  EXPECT_EQ(argmax(Tensor::from_list<int32_t>({-5, 9, 9, -7}), 0).item<int64_t>(), 1);
  EXPECT_EQ(argmin(Tensor::from_list<int32_t>({-5, 9, 9, -7}), 0).item<int64_t>(), 3);
  EXPECT_EQ(argmax(Tensor::from_vector(std::vector<bool>{false, true, true}), 0).item<int64_t>(),
            1);
  Tensor h = Tensor::from_vector(std::vector<half>{half(0.5f), half(-2.0f), half(1.5f)});
  EXPECT_EQ(argmax(h, 0).item<int64_t>(), 2);
  EXPECT_EQ(argmin(h, 0).item<int64_t>(), 1);
}

TEST(ArgMax, ManyColumns) {
  // x[i, j] = 300 i + j, then row 1 set to 5000 and x[2, 7] to 9000.
  Tensor x = counting<float>({3, 300});
  std::vector<float> v = x.to_vector<float>();
  for (int j = 0; j < 300; ++j) v[300 + j] = 5000;  // row 1 is the max everywhere...
  v[2 * 300 + 7] = 9000;                            // ...except column 7
  std::vector<int64_t> a = argmax(Tensor::from_vector(v, {3, 300}), 0).to_vector<int64_t>();
  ASSERT_EQ(a.size(), 300u);
  for (int j = 0; j < 300; ++j) EXPECT_EQ(a[j], j == 7 ? 2 : 1) << j;
}

TEST(ArgMax, EmptyAxisIsAnError) {
  Tensor x = Tensor::from_vector(std::vector<float>{}, {2, 0});
  std::string msg = error_of([&] { argmax(x, 1); });
  EXPECT_THAT(msg, HasSubstr("argmax: cannot take argmax of an empty axis"));
  EXPECT_THAT(msg, HasSubstr("f32[2,0]"));
  EXPECT_EQ(argmax(x, 0).shape(), Shape{0});  // reducing a non-empty axis is fine
}

TEST(ArgMax, Keepdims) {
  Tensor x = Tensor::from_list<float>({1, 3, 3, 5, 0, 5}, {2, 3});
  Tensor a = argmin(x, 1, /*keepdims=*/true);
  EXPECT_EQ(a.shape(), (Shape{2, 1}));
  EXPECT_THAT(a.to_vector<int64_t>(), ElementsAre(0, 1));
}

// ---- inside a graph --------------------------------------------------------------------------

TEST(ReduceGraph, RecordsAndRuns) {
  Graph g("reduce");
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  Tensor s = sum(x, {1});
  Tensor m = max(x, {0});
  Tensor a = argmax(x, -1);
  Tensor p = prod(x);
  EXPECT_TRUE(s.is_symbolic());
  EXPECT_EQ(s.shape(), Shape{kUnknownDim});
  EXPECT_EQ(m.shape(), Shape{3});
  EXPECT_EQ(a.dtype(), i64);
  Tensor feed = Tensor::from_list<float>({1, 2, 3, 4, 5, -6}, {2, 3});
  std::vector<Tensor> out = g.run({{x, feed}}, {s, m, a, p});
  EXPECT_THAT(out[0].to_vector<float>(), ElementsAre(6, 3));
  EXPECT_THAT(out[1].to_vector<float>(), ElementsAre(4, 5, 3));
  EXPECT_THAT(out[2].to_vector<int64_t>(), ElementsAre(2, 1));
  EXPECT_EQ(out[3].item<float>(), -720.0f);
}

TEST(ReduceGraph, MeanAndVarianceOfKnownShapes) {
  Graph g("moments");
  Tensor x = g.placeholder(f32, {2, 2}, "x");
  Tensor m = mean(x, {0});
  Tensor v = variance(x, {0});
  std::vector<Tensor> out = g.run({{x, Tensor::from_list<float>({1, 2, 3, 5}, {2, 2})}}, {m, v});
  EXPECT_THAT(out[0].to_vector<float>(), ElementsAre(2, 3.5f));
  EXPECT_THAT(out[1].to_vector<float>(), ElementsAre(1, 2.25f));
}

TEST(ReduceGraph, EmptyAxisFailsAtRunTime) {
  Graph g("empty");
  Tensor x = g.placeholder(f32, {kUnknownDim}, "x");
  Tensor a = argmax(x, 0);
  std::string msg = error_of([&] { g.run({{x, Tensor::from_vector(std::vector<float>{})}}, a); });
  EXPECT_THAT(msg, HasSubstr("argmax: cannot take argmax of an empty axis"));
}

}  // namespace
}  // namespace kiln
