// Neural-network functions: activations against closed-form values, and the stability of
// softmax, log_softmax and logsumexp for large and infinite inputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"

namespace kiln {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void expect_near(const Tensor& t, const std::vector<double>& want, double tol = 1e-12) {
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i]))
      EXPECT_EQ(got[i], want[i]) << "element " << i;
    else
      EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
  }
}

Tensor f64s(std::vector<double> v, Shape shape = {kUnknownDim}) {
  return Tensor::from_vector(v, std::move(shape));
}

// ---- activations ------------------------------------------------------------------------

TEST(Relu, ZeroesNegativesKeepsDtype) {
  Tensor y = relu(Tensor::from_list<float>({-2, -0.5f, 0, 3}));
  EXPECT_EQ(y.dtype(), f32);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 0, 0, 3}));
  Tensor yi = relu(Tensor::from_list<int32_t>({-7, 4}, {2, 1}));
  EXPECT_EQ(yi.dtype(), i32);
  EXPECT_EQ(yi.shape(), (Shape{2, 1}));
  EXPECT_EQ(yi.to_vector<int32_t>(), (std::vector<int32_t>{0, 4}));
}

// NaN passes through, -0 becomes +0, and the gradient at 0 is 0 (TensorFlow's, PyTorch's and
// JAX's convention), 1 above 0.
TEST(Relu, NanPassesGradientAtZeroIsZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y = relu(Tensor::from_list<float>({nan, -0.0f})).to_vector<float>();
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_FALSE(std::signbit(y[1]));
  Graph g("relu_grad");
  Tensor x = g.placeholder(f32, {4}, "x");
  Tensor dx = gradients(sum(relu(x), {0}), {x})[0];
  std::vector<Tensor> got =
      g.run({{x, Tensor::from_list<float>({-1, 0, -0.0f, 2})}}, std::vector<Tensor>{dx});
  EXPECT_EQ(got[0].to_vector<float>(), (std::vector<float>{0, 0, 0, 1}));
}

TEST(Gelu, ErfForm) {
  // 0.5 x (1 + erf(x / sqrt 2)) = x * Phi(x).
  expect_near(gelu(f64s({1.0, 0.0, -1.0})), {0.8413447460685429, 0.0, -0.15865525393145707});
  Tensor y = gelu(Tensor::scalar(1.0f));
  EXPECT_EQ(y.dtype(), f32);
  EXPECT_NEAR(y.item<double>(), 0.8413447460685429, 1e-6);
}

TEST(Gelu, TanhFormWhenApproximate) {
  // 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)) at x = 1.
  expect_near(gelu(f64s({1.0, 0.0}), /*approximate=*/true), {0.8411919906082768, 0.0});
}

TEST(Gelu, IntegerInputComputesInF32) {
  Tensor y = gelu(Tensor::from_list<int32_t>({1}));
  EXPECT_EQ(y.dtype(), f32);
  EXPECT_NEAR(y.item<double>(), 0.8413447460685429, 1e-6);
}

TEST(Sigmoid, Logistic) {
  expect_near(sigmoid(f64s({0.0, 1.0, -1000.0, 1000.0})), {0.5, 0.7310585786300049, 0.0, 1.0});
}

TEST(Softplus, StableForLargeMagnitudes) {
  expect_near(softplus(f64s({0.0, 1.0, 1000.0, -1000.0})),
              {std::log(2.0), 1.3132616875182228, 1000.0, 0.0});
  Tensor y = softplus(Tensor::from_list<float>({100.0f}));
  EXPECT_EQ(y.dtype(), f32);
  EXPECT_EQ(y.item<float>(), 100.0f);  // no overflow through exp(100)
}

TEST(Swish, XTimesSigmoid) {
  expect_near(swish(f64s({1.0, 0.0, -1.0})),
              {0.7310585786300049, 0.0, -1.0 * (1.0 - 0.7310585786300049)});
}

// ---- softmax family ---------------------------------------------------------------------

TEST(Softmax, KnownValues) {
  expect_near(softmax(f64s({1, 2, 3})),
              {0.09003057317038046, 0.24472847105479767, 0.6652409557748219});
  Tensor y = softmax(Tensor::from_list<float>({1, 2, 3}));
  EXPECT_EQ(y.dtype(), f32);
  expect_near(y, {0.09003057, 0.24472847, 0.66524096}, 1e-7);
}

TEST(Softmax, AlongAxis0AndDefaultLastAxis) {
  // [[1, 2], [3, 2]]: columns are [1,3] and [2,2].
  Tensor x = f64s({1, 2, 3, 2}, {2, 2});
  expect_near(softmax(x, 0), {0.11920292202211755, 0.5, 0.8807970779778823, 0.5});
  expect_near(softmax(x),
              {0.2689414213699951, 0.7310585786300049, 0.7310585786300049, 0.2689414213699951});
  expect_near(softmax(x, -1), softmax(x).to_vector<double>());
}

TEST(Softmax, StableForLargeInputs) {
  expect_near(softmax(f64s({1000, 1001, 1002})),
              {0.09003057317038046, 0.24472847105479767, 0.6652409557748219});
  expect_near(softmax(Tensor::from_list<float>({-1e30f, 0})), {0, 1}, 0);
}

TEST(LogSoftmax, StableForLargeGaps) {
  expect_near(log_softmax(f64s({1000, 0})), {0.0, -1000.0});
  expect_near(log_softmax(f64s({1, 2, 3})),
              {1 - 3.40760596444438, 2 - 3.40760596444438, 3 - 3.40760596444438});
  Tensor y = log_softmax(Tensor::from_list<float>({1000, 0}));
  EXPECT_EQ(y.dtype(), f32);
  expect_near(y, {0.0, -1000.0}, 0);
}

TEST(LogSoftmax, RowsOfAMatrix) {
  Tensor y = log_softmax(f64s({0, 0, 5, 5}, {2, 2}), 1);
  expect_near(y, {-std::log(2.0), -std::log(2.0), -std::log(2.0), -std::log(2.0)});
}

TEST(Logsumexp, AllAxesAndChosenAxes) {
  Tensor x = f64s({1, 2, 3});
  Tensor all = logsumexp(x);
  EXPECT_EQ(all.shape(), Shape{});
  expect_near(all, {3.40760596444438});
  Tensor kept = logsumexp(x, {}, /*keepdims=*/true);
  EXPECT_EQ(kept.shape(), Shape{1});
  expect_near(kept, {3.40760596444438});

  Tensor m = f64s({1, 2, 3, 1000, 1000, 1000}, {2, 3});
  Tensor rows = logsumexp(m, {-1});
  EXPECT_EQ(rows.shape(), Shape{2});
  expect_near(rows, {3.40760596444438, 1000 + std::log(3.0)});
  Tensor cols = logsumexp(m, {0}, /*keepdims=*/true);
  EXPECT_EQ(cols.shape(), (Shape{1, 3}));
  expect_near(cols, {1000.0, 1000.0, 1000.0});
}

TEST(Logsumexp, InfiniteRows) {
  Tensor x = f64s({-kInf, -kInf, kInf, 0, -kInf, 0}, {3, 2});
  expect_near(logsumexp(x, {1}), {-kInf, kInf, 0.0});
}

TEST(Logsumexp, ScalarInput) {
  Tensor y = logsumexp(Tensor::scalar(2.5));
  EXPECT_EQ(y.shape(), Shape{});
  EXPECT_DOUBLE_EQ(y.item<double>(), 2.5);
}

TEST(Softmax, InAGraph) {
  Graph g;
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "logits");
  Tensor p = softmax(x);
  Tensor lp = log_softmax(x);
  Tensor act = gelu(relu(x));
  std::vector<Tensor> out =
      g.run({{x, Tensor::from_list<float>({1, 2, 3, -1, 0, 1}, {2, 3})}}, {p, lp, act});
  expect_near(out[0], {0.09003057, 0.24472847, 0.66524096, 0.09003057, 0.24472847, 0.66524096},
              1e-7);
  expect_near(out[1],
              {-2.40760596, -1.40760596, -0.40760596, -2.40760596, -1.40760596, -0.40760596}, 1e-6);
  expect_near(out[2],
              {0.8413447460685429, 1.9544997361036416, 2.99595030590511, 0, 0, 0.8413447460685429},
              1e-6);
}

TEST(Softmax, BadAxisThrows) {
  try {
    softmax(f64s({1, 2}), 3);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("axis"));
  }
}

}  // namespace
}  // namespace kiln
