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

// softmax, log_softmax and logsumexp are compositions (ops/nn.cc): max, subtract, exp, an f64
// sum S of the exponentials rounded to f32, then divide by S, or log(S) added to the max or
// subtracted from the shifted row. Every step but the sum is the same IEEE operation, or the
// same ops/approximations.h function (exp, log), on every path, so it gives the same bits from
// the same operands. The paths differ only in the order of S's f64 additions, hence:
//  - where every partial sum is exact in f64 (below), S is the same in any order and so is
//    every result, bit for bit;
//  - otherwise each f64 sum is within n 2^-53 sum|x| of the exact one, far inside half an f32
//    ulp, so the f32 S of two paths are equal or adjacent: S and S' = S (1 + d) with
//    |d| <= 2^-23 (S >= 1: the maximum's term is exp(0) = 1). Then
//     * softmax e / S: the exact quotients differ by the factor 1 + d, under 2 ulps of the
//       quotient (an ulp is between 2^-24 and 2^-23 of a value), and rounding each to nearest
//       keeps them within 2 ulps (they are grid points less than 3 ulps apart);
//     * log(S): the exact logs differ by |log(1 + d)| <= 2^-23 absolute, and each computed log
//       is within log's 0.827 ulp of its exact value; the final add or subtract rounds once
//       more on each path: within 2^-23 + 2 ulp(log S) + ulp(result), absolute. A log of S
//       near 1 is small, so this is not a bound in ulps of the result.
TEST(ReductionAccuracy, SoftmaxLogSoftmaxAndLogsumexpOfTinyTerms) {
  // Each term exp(-25 ln 2) is an f32 in [2^-26, 2^-25): a multiple of 2^-49, as is every
  // partial sum, all below 2: exact in f64's 53 bits, in any order. An f32 accumulator is
  // ~3% off.
  Tensor x = tiny_terms_row();
  expect_same_bits([](const std::vector<Tensor>& t) { return logsumexp(t[0], {1}); }, {x});
  expect_same_bits(
      [](const std::vector<Tensor>& t) {
        return slice(softmax(t[0], 1), {0, 0}, {1, 4});
      },
      {x});
  expect_same_bits(
      [](const std::vector<Tensor>& t) {
        return slice(log_softmax(t[0], 1), {0, 0}, {1, 4});
      },
      {x});
  EXPECT_NEAR(logsumexp(x, {1}).item<float>(), std::log(1.0 + 1.0 / 32), 1e-6);
}

// Within `bound(eager value, log S)` of the eager result, element by element.
void expect_within(const Body& body, const std::vector<Tensor>& args,
                   const std::function<double(float eager, float log_s)>& bound,
                   const std::vector<float>& log_s) {
  expect_modes(body, args, [&](const Tensor& got, const Tensor& eager) {
    std::vector<float> g = got.to_vector<float>(), e = eager.to_vector<float>();
    ASSERT_EQ(g.size(), e.size());
    int bad = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const double b = bound(e[i], log_s[i % log_s.size()]);
      if (!(std::fabs(static_cast<double>(g[i]) - e[i]) <= b) && ++bad <= 5)
        ADD_FAILURE() << "element " << i << ": " << g[i] << " vs eager " << e[i] << ", bound " << b;
    }
    EXPECT_EQ(bad, 0);
  });
}

double ulp(float v) {
  const float a = std::fabs(v);
  return std::nextafter(a, INFINITY) - a;
}

TEST(ReductionAccuracy, SoftmaxFamilyWithinTheDerivedBounds) {
  // Rows of 4096 random terms of differing exponents: partial sums are not exact in f64, so S
  // may round differently per path (see the derivation above). With this seed every row's S
  // happens to round alike on every path (all results agree bit for bit today); the bounds are
  // what another order of the f64 additions may give, and what this test holds the paths to.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-12.0f, 3.0f);
  std::vector<float> v(64 * 4096);
  for (float& e : v) e = u(rng);
  Tensor x = Tensor::from_vector(v, {64, 4096});
  std::vector<float> log_s;  // per row, as every path computes it (up to the bound itself)
  for (float l : (logsumexp(x, {1}) - max(x, {1})).to_vector<float>()) log_s.push_back(l);
  auto log_bound = [](float eager, float ls) {
    return std::ldexp(1.0, -23) + 2 * ulp(ls) + ulp(eager);
  };
  expect_within_ulps([](const std::vector<Tensor>& t) { return softmax(t[0], 1); }, {x}, 2);
  expect_within([](const std::vector<Tensor>& t) { return logsumexp(t[0], {1}); }, {x}, log_bound,
                log_s);
  // log_softmax is [64, 4096]: row i's log S for element j is log_s[i]; expand it.
  std::vector<float> per_element;
  for (float l : log_s) per_element.insert(per_element.end(), 4096, l);
  expect_within([](const std::vector<Tensor>& t) { return log_softmax(t[0], 1); }, {x}, log_bound,
                per_element);
}

}  // namespace
}  // namespace kiln
