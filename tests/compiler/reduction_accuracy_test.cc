// Compiled f32 reductions fused after elementwise ops accumulate in f64 like the reference
// kernels: sums, means and products give the eager answer (bit for bit where the f64 sum is
// exact, within one f32 ulp otherwise), and so do softmax, log_softmax and logsumexp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kiln/function.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

using Body = std::function<Tensor(const std::vector<Tensor>&)>;

// `body` run interpreted and compiled, each compared with the eager result by `check`.
void expect_modes(const Body& body, const std::vector<Tensor>& args,
                  const std::function<void(const Tensor& got, const Tensor& eager)>& check) {
  Tensor eager = body(args);
  for (ExecutionMode mode : {ExecutionMode::kInterpreted, ExecutionMode::kCompiled}) {
    SCOPED_TRACE(execution_mode_name(mode));
    check(function(body, {.mode = mode}).call(args)[0], eager);
  }
}

void expect_same_bits(const Body& body, const std::vector<Tensor>& args) {
  expect_modes(body, args, [](const Tensor& got, const Tensor& eager) {
    std::vector<float> g = got.to_vector<float>(), e = eager.to_vector<float>();
    ASSERT_EQ(g.size(), e.size());
    int bad = 0;
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i] != e[i] && ++bad <= 5)
        ADD_FAILURE() << "element " << i << ": " << g[i] << " vs eager " << e[i];
    EXPECT_EQ(bad, 0);
  });
}

// Within `ulps` f32 ulps of the eager result, element by element.
void expect_within_ulps(const Body& body, const std::vector<Tensor>& args, int ulps) {
  expect_modes(body, args, [ulps](const Tensor& got, const Tensor& eager) {
    std::vector<float> g = got.to_vector<float>(), e = eager.to_vector<float>();
    ASSERT_EQ(g.size(), e.size());
    int bad = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const float ulp = std::nextafter(std::fabs(e[i]), INFINITY) - std::fabs(e[i]);
      if (!(std::fabs(g[i] - e[i]) <= ulps * ulp) && ++bad <= 5)
        ADD_FAILURE() << "element " << i << ": " << g[i] << " vs eager " << e[i];
    }
    EXPECT_EQ(bad, 0);
  });
}

Tensor filled_f32(int64_t n, float v) { return full({n}, v); }

TEST(ReductionAccuracy, SumOfMaximumOfTenthsIsTheEagerSum) {
  // 100,000 x 0.1f sums exactly in f64: 10000.000149... rounds to f32 10000. An f32 accumulator
  // (even in vector lanes) drifts by tens of ulps.
  Tensor x = filled_f32(100000, 0.1f);
  Body f = [](const std::vector<Tensor>& t) { return sum(maximum(t[0], t[0])); };
  expect_same_bits(f, {x});
  EXPECT_EQ(f({x}).item<float>(), static_cast<float>(100000 * static_cast<double>(0.1f)));
}

TEST(ReductionAccuracy, CancellingTermsKeepTheSmallOnes) {
  Tensor x = Tensor::from_vector<float>({1e8f, 1.0f, -1e8f, 1.0f});
  Body f = [](const std::vector<Tensor>& t) { return sum(maximum(t[0], t[0])); };
  expect_same_bits(f, {x});
  EXPECT_EQ(f({x}).item<float>(), 2.0f);
}

TEST(ReductionAccuracy, MeanOfIntegersIsTheEagerMean) {
  // 2^24 and 4,999 small values: an f32 accumulator holding 2^24 drops every 1 added to it
  // (a tie, rounded to even), so the lane that starts with it loses its share of them.
  std::vector<int32_t> v(5000);
  double exact = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = i == 0 ? 1 << 24 : 1 + static_cast<int32_t>(i % 3);
    exact += v[i];
  }
  Tensor x = Tensor::from_vector(v);
  Body f = [](const std::vector<Tensor>& t) { return mean(t[0]); };
  expect_same_bits(f, {x});
  // The mean's definition: the sum rounded to f32, divided in f32.
  EXPECT_EQ(f({x}).item<float>(), static_cast<float>(exact) / 5000.0f);
}

TEST(ReductionAccuracy, RowColumnAndSplitReductionsMatchEager) {
  // Tenths again (exact in f64), over rows and columns, short and long enough to be split into
  // chunks; a sum, a product of values near 1, and a multi-output fusion that also stores its
  // elementwise value.
  // [1003, 1500] over axis 0 leaves a remainder of reduced positions and a partial block of
  // columns; [40, 70, 30] over axis 0 has 2100 columns.
  for (Shape shape : {Shape{3, 1000}, Shape{3, 200000}, Shape{1000, 3}, Shape{200000, 3},
                      Shape{1003, 1500}, Shape{40, 70, 30}}) {
    const int64_t n = num_elements(shape);
    std::vector<float> tenths(n, 0.1f), near_one(n);
    for (int64_t i = 0; i < n; ++i) near_one[i] = 1.0f + static_cast<float>(i % 7) * 1e-7f;
    Tensor x = Tensor::from_vector(tenths, shape), y = Tensor::from_vector(near_one, shape);
    Tensor ones_x = ones(shape);
    for (int64_t axis : {int64_t{0}, static_cast<int64_t>(shape.size()) - 1}) {
      SCOPED_TRACE(shape_str(shape) + " over axis " + std::to_string(axis));
      expect_same_bits([axis](const std::vector<Tensor>& t) { return sum(t[0] * t[1], {axis}); },
                       {x, ones_x});
      expect_same_bits(
          [axis](const std::vector<Tensor>& t) {
            Tensor p = t[0] * t[1];
            return sum(p, {axis}) + sum(p * p, {axis});  // two reductions of one fusion
          },
          {x, ones_x});
      expect_within_ulps([axis](const std::vector<Tensor>& t) { return prod(t[0] * t[1], {axis}); },
                         {y, ones_x}, 1);
    }
  }
}

TEST(ReductionAccuracy, RandomWideRangeSumsWithinOneUlp) {
  // Terms of magnitudes 1e-8 to 1e8 and both signs: f64 sums in different orders agree to far
  // better than an f32 ulp, so at most one rounding boundary can separate the two results.
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> mant(-1, 1);
  std::uniform_int_distribution<int> exp10(-8, 8);
  std::vector<float> v(64 * 4096);
  for (float& e : v) e = mant(rng) * std::pow(10.0f, static_cast<float>(exp10(rng)));
  Tensor x = Tensor::from_vector(v, {64, 4096});
  Tensor o = ones({64, 4096});
  for (int64_t axis : {0, 1}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    expect_within_ulps([axis](const std::vector<Tensor>& t) { return sum(t[0] * t[1], {axis}); },
                       {x, o}, 1);
  }
}

// A row whose maximum is 0 and whose 2^20 other terms are each exp(-17.33) ~ 2^-25, below half
// an ulp of 1: summed in f32 after the 1 they all vanish, in f64 they add 1/32.
Tensor tiny_terms_row() {
  std::vector<float> v((1 << 20) + 1, -25.0f * std::log(2.0f));
  v[0] = 0.0f;
  return Tensor::from_vector(v, {1, static_cast<int64_t>(v.size())});
}

TEST(ReductionAccuracy, SoftmaxLogSoftmaxAndLogsumexpOfTinyTerms) {
  // The compiled exp approximation may differ from libm's by an ulp or two per term (issue
  // #17 item 3), so these compare within a few ulps; an f32 accumulator is ~3% off.
  Tensor x = tiny_terms_row();
  expect_within_ulps([](const std::vector<Tensor>& t) { return logsumexp(t[0], {1}); }, {x}, 4);
  expect_within_ulps(
      [](const std::vector<Tensor>& t) {
        return slice(softmax(t[0], 1), {0, 0}, {1, 4});
      },
      {x}, 4);
  expect_within_ulps(
      [](const std::vector<Tensor>& t) {
        return slice(log_softmax(t[0], 1), {0, 0}, {1, 4});
      },
      {x}, 4);
  EXPECT_NEAR(logsumexp(x, {1}).item<float>(), std::log(1.0 + 1.0 / 32), 1e-6);
}

}  // namespace
}  // namespace kiln
