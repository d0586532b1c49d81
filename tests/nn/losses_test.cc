// Losses against values worked out by hand: cross-entropies from logits and probabilities,
// label smoothing, stable binary cross-entropy, mean squared error and Huber's two branches.
#include "kiln/nn/losses.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"

namespace kiln::nn {
namespace {

using ::testing::HasSubstr;

Tensor mat(std::vector<float> v, Shape shape) { return Tensor::from_vector(v, shape); }

void expect_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-5) {
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), expected.size()) << t.str();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "at " << i;
}

// log(e + e^2 + e^3) - 3: cross-entropy of logits [1, 2, 3] for class 2.
const double kCe123 = 0.40760596444438013;

TEST(SparseCategoricalCrossentropy, FromLogits) {
  SparseCategoricalCrossentropy loss(/*from_logits=*/true);
  Tensor logits = mat({1, 2, 3, 1, 1, 1}, {2, 3});
  Tensor per = loss.per_example(Tensor::from_list<int32_t>({2, 0}), logits);
  EXPECT_EQ(per.shape(), (Shape{2}));
  expect_values(per, {kCe123, std::log(3.0)});
  Tensor mean = loss(Tensor::from_list<int32_t>({2, 0}), logits);
  EXPECT_EQ(mean.shape(), Shape{});
  EXPECT_EQ(mean.dtype(), f32);
  EXPECT_NEAR(mean.item<double>(), (kCe123 + std::log(3.0)) / 2, 1e-6);
}

TEST(SparseCategoricalCrossentropy, LabelDTypesAndShapes) {
  SparseCategoricalCrossentropy loss(true);
  Tensor logits = mat({1, 2, 3}, {1, 3});
  expect_values(loss.per_example(Tensor::from_list<int64_t>({2}), logits), {kCe123});
  expect_values(loss.per_example(Tensor::from_list<float>({2}), logits), {kCe123});
  expect_values(loss.per_example(Tensor::from_list<int64_t>({2}, {1, 1}), logits), {kCe123});
}

TEST(SparseCategoricalCrossentropy, LargeLogitsStayFinite) {
  SparseCategoricalCrossentropy loss(true);
  expect_values(loss.per_example(Tensor::from_list<int32_t>({0}), mat({1000, 0}, {1, 2})), {0});
  expect_values(loss.per_example(Tensor::from_list<int32_t>({1}), mat({1000, 0}, {1, 2})), {1000},
                1e-3);
}

TEST(SparseCategoricalCrossentropy, FromProbabilitiesClips) {
  SparseCategoricalCrossentropy loss;
  Tensor probs = mat({0.1f, 0.2f, 0.7f, 0, 0.5f, 0.5f}, {2, 3});
  Tensor per = loss.per_example(Tensor::from_list<int32_t>({2, 0}), probs);
  // -log 0.7 and -log(1e-7): a zero probability is clipped, not infinite.
  expect_values(per, {-std::log(0.7), -std::log(1e-7)}, 1e-4);
}

TEST(SparseCategoricalCrossentropy, F64Predictions) {
  SparseCategoricalCrossentropy loss(true);
  Tensor logits = Tensor::from_vector<double>({1, 2, 3}, {1, 3});
  Tensor per = loss.per_example(Tensor::from_list<int32_t>({2}), logits);
  EXPECT_EQ(per.dtype(), f64);
  EXPECT_NEAR(per.item<double>(), kCe123, 1e-12);
}

TEST(SparseCategoricalCrossentropy, OutOfRangeLabelThrows) {
  SparseCategoricalCrossentropy loss(true);
  try {
    loss.per_example(Tensor::from_list<int32_t>({0, 3}), mat({1, 2, 3, 4, 5, 6}, {2, 3}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("sparse_categorical_crossentropy"));
    EXPECT_THAT(e.what(), HasSubstr("label 3 at index 1"));
    EXPECT_THAT(e.what(), HasSubstr("[2,3]"));
  }
  EXPECT_THROW(loss.per_example(Tensor::from_list<int32_t>({-1}), mat({1, 2}, {1, 2})), Error);
}

TEST(SparseCategoricalCrossentropy, MismatchedBatchThrows) {
  SparseCategoricalCrossentropy loss(true);
  try {
    loss.per_example(Tensor::from_list<int32_t>({0, 1, 2}), mat({1, 2, 3, 4, 5, 6}, {2, 3}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("y_true [3], y_pred [2,3]"));
  }
}

TEST(SparseCategoricalCrossentropy, RecordsIntoAGraphWithUnknownBatch) {
  SparseCategoricalCrossentropy loss(true);
  Graph g;
  Tensor labels = g.placeholder(i64, {kUnknownDim}, "labels");
  Tensor logits = g.placeholder(f32, {kUnknownDim, 3}, "logits");
  Tensor value = loss(labels, logits);
  EXPECT_TRUE(value.is_symbolic());
  Tensor out = g.run(
      {{labels, Tensor::from_list<int64_t>({2, 0})}, {logits, mat({1, 2, 3, 1, 1, 1}, {2, 3})}},
      value);
  EXPECT_NEAR(out.item<double>(), (kCe123 + std::log(3.0)) / 2, 1e-6);
}

TEST(CategoricalCrossentropy, FromLogitsAndProbabilities) {
  Tensor y = mat({0, 0, 1}, {1, 3});
  expect_values(CategoricalCrossentropy(true).per_example(y, mat({1, 2, 3}, {1, 3})), {kCe123});
  expect_values(CategoricalCrossentropy().per_example(mat({0, 1, 0}, {1, 3}),
                                                      mat({0.2f, 0.3f, 0.5f}, {1, 3})),
                {-std::log(0.3)});
}

TEST(CategoricalCrossentropy, LabelSmoothing) {
  // With smoothing 0.3 over 3 classes the target is [0.1, 0.1, 0.8]; log-softmax of [1, 2, 3]
  // is [1, 2, 3] - 3.40760596, so the loss is 0.1*2.40760596 + 0.1*1.40760596 + 0.8*0.40760596.
  CategoricalCrossentropy loss(true, 0.3);
  expect_values(loss.per_example(mat({0, 0, 1}, {1, 3}), mat({1, 2, 3}, {1, 3})), {0.70760596});
  EXPECT_THROW(CategoricalCrossentropy(true, 1.5).per_example(mat({1}, {1, 1}), mat({1}, {1, 1})),
               Error);
}

TEST(CategoricalCrossentropy, ShapeMismatchThrows) {
  try {
    CategoricalCrossentropy().per_example(mat({0, 1}, {1, 2}), mat({0.2f, 0.3f, 0.5f}, {1, 3}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("categorical_crossentropy"));
    EXPECT_THAT(e.what(), HasSubstr("y_true [1,2], y_pred [1,3]"));
  }
}

TEST(BinaryCrossentropy, FromLogitsIsStableAtLargeMagnitudes) {
  BinaryCrossentropy loss(true);
  Tensor z = mat({1, 1, 0, 0, 1}, {5, 1});
  Tensor x = mat({100, -100, 100, -100, 0}, {5, 1});
  Tensor per = loss.per_example(z, x);
  EXPECT_EQ(per.shape(), (Shape{5}));
  expect_values(per, {0, 100, 100, 0, std::log(2.0)}, 1e-4);
}

TEST(BinaryCrossentropy, FromProbabilities) {
  BinaryCrossentropy loss;
  // Labels [batch] against predictions [batch, 1] are aligned like Keras.
  Tensor per = loss.per_example(Tensor::from_list<float>({1, 0, 1}), mat({0.8f, 0.8f, 0}, {3, 1}));
  expect_values(per, {-std::log(0.8), -std::log(0.2), -std::log(1e-7)}, 1e-4);
  // Several outputs per example: averaged over the last axis.
  expect_values(loss.per_example(mat({1, 0}, {1, 2}), mat({0.8f, 0.4f}, {1, 2})),
                {(-std::log(0.8) - std::log(0.6)) / 2});
}

TEST(MeanSquaredError, MeanOverLastAxis) {
  MeanSquaredError loss;
  Tensor per = loss.per_example(mat({1, 1, 1, 1}, {2, 2}), mat({1, 2, 3, 4}, {2, 2}));
  expect_values(per, {0.5, 6.5});
  EXPECT_NEAR(loss(mat({1, 1, 1, 1}, {2, 2}), mat({1, 2, 3, 4}, {2, 2})).item<double>(), 3.5, 1e-6);
  // Rank 1: one value per example.
  expect_values(
      loss.per_example(Tensor::from_list<float>({0, 0}), Tensor::from_list<float>({2, 3})), {4, 9});
}

TEST(MeanSquaredError, IntegerLabelsArePromoted) {
  expect_values(MeanSquaredError().per_example(Tensor::from_list<int32_t>({1, 2}, {1, 2}),
                                               mat({2, 2}, {1, 2})),
                {0.5});
}

TEST(MeanSquaredError, ShapeMismatchThrows) {
  try {
    MeanSquaredError().per_example(mat({1, 2, 3}, {1, 3}), mat({1, 2}, {1, 2}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("mean_squared_error"));
    EXPECT_THAT(e.what(), HasSubstr("y_true [1,3], y_pred [1,2]"));
  }
}

TEST(Huber, QuadraticInsideDeltaLinearOutside) {
  // Errors 0.5 (0.5 * 0.25 = 0.125) and 2 (1 * 2 - 0.5 = 1.5), averaged per example.
  Huber loss;
  expect_values(loss.per_example(mat({0, 0}, {1, 2}), mat({0.5f, -2}, {1, 2})), {0.8125});
  // delta 2, error 3: 2 * 3 - 0.5 * 4 = 4; error 1: 0.5.
  expect_values(
      Huber(2.0).per_example(Tensor::from_list<float>({0, 0}), Tensor::from_list<float>({3, 1})),
      {4, 0.5});
}

TEST(Losses, RecordIntoAGraph) {
  Graph g;
  Tensor y = g.placeholder(f32, {kUnknownDim, 2}, "y");
  Tensor p = g.placeholder(f32, {kUnknownDim, 2}, "p");
  std::vector<Tensor> outs = g.run({{y, mat({0, 1, 1, 0}, {2, 2})}, {p, mat({1, 1, 0, 3}, {2, 2})}},
                                   {MeanSquaredError()(y, p), Huber().per_example(y, p),
                                    BinaryCrossentropy(true).per_example(y, p),
                                    CategoricalCrossentropy(true).per_example(y, p)});
  EXPECT_NEAR(outs[0].item<double>(), (0.5 + 5.0) / 2, 1e-6);  // [1+0]/2, [1+9]/2
  expect_values(outs[1], {0.25, (0.5 + 2.5) / 2});
  // CCE of logits [1, 1] for class 1 is log 2; of [0, 3] for class 0 is log(1 + e^3).
  expect_values(outs[3], {std::log(2.0), std::log(1 + std::exp(3.0))});
  EXPECT_EQ(outs[2].shape(), (Shape{2}));
}

}  // namespace
}  // namespace kiln::nn
