// Metrics: batch statistics, host accumulation and reset; AUC on small rankings worked out by
// hand; make_metric's name resolution; statistics recorded in a graph with an unknown batch.
#include "kiln/nn/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln::nn {
namespace {

using ::testing::HasSubstr;

Tensor mat(std::vector<float> v, Shape shape) { return Tensor::from_vector(v, shape); }
Tensor vec(std::vector<float> v) { return Tensor::from_vector(v); }

double evaluate(Metric& m, const Tensor& y_true, const Tensor& y_pred) {
  m.reset();
  m.update(m.batch_stats(y_true, y_pred));
  return m.result();
}

TEST(Mean, RunningMeanOfScalarsAndTensors) {
  Mean m("loss");
  EXPECT_EQ(m.name(), "loss");
  EXPECT_EQ(m.result(), 0);
  m.update(m.batch_stats(Tensor(), Tensor::scalar<float>(2)));
  m.update(m.batch_stats(Tensor(), Tensor::scalar<double>(4)));
  EXPECT_DOUBLE_EQ(m.result(), 3);
  m.update(m.batch_stats(Tensor(), vec({6, 6, 6})));  // (2 + 4 + 18) / 5
  EXPECT_DOUBLE_EQ(m.result(), 24.0 / 5);
  m.reset();
  EXPECT_EQ(m.result(), 0);
  EXPECT_THROW(m.update({Tensor::scalar<float>(1)}), Error);
}

TEST(SparseCategoricalAccuracy, CountsArgmaxMatches) {
  SparseCategoricalAccuracy acc;
  EXPECT_EQ(acc.name(), "sparse_categorical_accuracy");
  Tensor preds = mat({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f}, {3, 2});
  EXPECT_NEAR(evaluate(acc, Tensor::from_list<int32_t>({1, 1, 1}), preds), 2.0 / 3, 1e-12);
  // Float labels [batch, 1] work too; a second batch accumulates.
  acc.update(acc.batch_stats(mat({0}, {1, 1}), mat({0.6f, 0.4f}, {1, 2})));
  EXPECT_NEAR(acc.result(), 3.0 / 4, 1e-12);
  acc.reset();
  EXPECT_EQ(acc.result(), 0);
}

TEST(SparseCategoricalAccuracy, MismatchedShapesThrow) {
  SparseCategoricalAccuracy acc;
  try {
    acc.batch_stats(Tensor::from_list<int32_t>({1, 1}), mat({1, 2, 3}, {1, 3}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("sparse_categorical_accuracy"));
    EXPECT_THAT(e.what(), HasSubstr("y_true [2], y_pred [1,3]"));
  }
}

TEST(CategoricalAccuracy, ComparesArgmaxes) {
  CategoricalAccuracy acc;
  Tensor y = mat({0, 1, 0, 0, 0, 1}, {2, 3});
  Tensor p = mat({0.2f, 0.5f, 0.3f, 0.6f, 0.1f, 0.3f}, {2, 3});
  EXPECT_DOUBLE_EQ(evaluate(acc, y, p), 0.5);
  EXPECT_THROW(acc.batch_stats(mat({0, 1}, {1, 2}), p), Error);
}

TEST(BinaryAccuracy, ThresholdIsStrict) {
  BinaryAccuracy acc;
  // Predicted positive: 0.6 and 0.9 (0.5 is not above 0.5) -> [0, 1, 0, 1] vs [0, 1, 1, 0].
  EXPECT_DOUBLE_EQ(evaluate(acc, vec({0, 1, 1, 0}), mat({0.2f, 0.6f, 0.5f, 0.9f}, {4, 1})), 0.5);
  BinaryAccuracy low(0.1);
  EXPECT_DOUBLE_EQ(evaluate(low, vec({0, 1, 1, 0}), vec({0.2f, 0.6f, 0.5f, 0.9f})), 0.5);
  EXPECT_DOUBLE_EQ(evaluate(low, vec({1, 1, 1, 0}), vec({0.2f, 0.6f, 0.5f, 0.05f})), 1.0);
}

TEST(MeanSquaredErrorMetric, AveragesPerExampleErrors) {
  MeanSquaredErrorMetric mse;
  EXPECT_EQ(mse.name(), "mean_squared_error");
  mse.update(mse.batch_stats(mat({1, 1, 1, 1}, {2, 2}), mat({1, 2, 3, 4}, {2, 2})));  // 0.5, 6.5
  mse.update(mse.batch_stats(mat({0, 0}, {1, 2}), mat({1, 1}, {1, 2})));              // 1
  EXPECT_NEAR(mse.result(), 8.0 / 3, 1e-6);
}

TEST(AUC, PerfectRankingIsOne) {
  AUC auc;
  EXPECT_NEAR(evaluate(auc, vec({0, 0, 1, 1}), vec({0.1f, 0.2f, 0.8f, 0.9f})), 1.0, 1e-9);
}

TEST(AUC, ReversedRankingIsZero) {
  AUC auc;
  EXPECT_NEAR(evaluate(auc, vec({1, 1, 0, 0}), vec({0.1f, 0.2f, 0.8f, 0.9f})), 0.0, 1e-9);
}

TEST(AUC, MixedRankingCountsOrderedPairs) {
  // Positives 0.35 and 0.8, negatives 0.1 and 0.4: 0.35 beats 0.1 only, 0.8 beats both -> 3/4.
  // With 200 thresholds every pair of scores is separated, so the trapezoids are exact.
  AUC auc;
  EXPECT_NEAR(evaluate(auc, vec({0, 0, 1, 1}), vec({0.1f, 0.4f, 0.35f, 0.8f})), 0.75, 1e-6);
  // The same examples in two batches accumulate to the same result.
  auc.reset();
  auc.update(auc.batch_stats(vec({0, 1}), vec({0.1f, 0.35f})));
  auc.update(auc.batch_stats(mat({0, 1}, {2, 1}), mat({0.4f, 0.8f}, {2, 1})));
  EXPECT_NEAR(auc.result(), 0.75, 1e-6);
}

TEST(AUC, TiedScoresGetHalfCredit) {
  AUC auc;
  EXPECT_NEAR(evaluate(auc, vec({0, 1}), vec({0.5f, 0.5f})), 0.5, 1e-9);
}

TEST(AUC, CoarseThresholdsInterpolateTrapezoids) {
  AUC auc(3);
  ASSERT_EQ(auc.thresholds().size(), 3u);
  EXPECT_NEAR(auc.thresholds()[0], -1e-7, 1e-15);
  EXPECT_EQ(auc.thresholds()[1], 0.5);
  EXPECT_NEAR(auc.thresholds()[2], 1 + 1e-7, 1e-15);
  // Labels [1, 0, 1, 0], scores [0.1, 0.2, 0.6, 0.7]: the exact AUC is 1/4, but the curve is
  // only seen at (FPR, TPR) = (1, 1), (0.5, 0.5) at threshold 0.5, and (0, 0):
  // 0.5 * (1 + 0.5) / 2 + 0.5 * (0.5 + 0) / 2 = 0.5.
  EXPECT_NEAR(evaluate(auc, vec({1, 0, 1, 0}), vec({0.1f, 0.2f, 0.6f, 0.7f})), 0.5, 1e-9);
  EXPECT_THROW(AUC(1), Error);
}

TEST(AUC, NoUpdatesGiveZero) { EXPECT_EQ(AUC().result(), 0); }

TEST(AUC, MismatchedSizesThrow) {
  AUC auc;
  EXPECT_THROW(auc.batch_stats(vec({0, 1, 1}), vec({0.5f, 0.5f})), Error);
  EXPECT_THROW(auc.update({vec({1})}), Error);
}

TEST(MakeMetric, ResolvesAccuracyAgainstTheLoss) {
  SparseCategoricalCrossentropy scce;
  CategoricalCrossentropy cce;
  BinaryCrossentropy bce;
  auto a = make_metric("accuracy", &scce);
  EXPECT_EQ(a->name(), "accuracy");
  EXPECT_NE(dynamic_cast<SparseCategoricalAccuracy*>(a.get()), nullptr);
  EXPECT_NE(dynamic_cast<CategoricalAccuracy*>(make_metric("acc", &cce).get()), nullptr);
  EXPECT_EQ(make_metric("acc", &cce)->name(), "acc");
  EXPECT_NE(dynamic_cast<BinaryAccuracy*>(make_metric("accuracy", &bce).get()), nullptr);
}

TEST(MakeMetric, AccuracyWithoutLossFollowsShapes) {
  auto acc = make_metric("accuracy");
  Tensor probs = mat({0.1f, 0.9f, 0.8f, 0.2f}, {2, 2});
  EXPECT_DOUBLE_EQ(evaluate(*acc, Tensor::from_list<int32_t>({1, 1}), probs), 0.5);       // sparse
  EXPECT_DOUBLE_EQ(evaluate(*acc, mat({0, 1, 0, 1}, {2, 2}), probs), 0.5);                // one-hot
  EXPECT_DOUBLE_EQ(evaluate(*acc, mat({1, 0}, {2, 1}), mat({0.7f, 0.6f}, {2, 1})), 0.5);  // binary
}

TEST(MakeMetric, KnownNames) {
  EXPECT_EQ(make_metric("sparse_categorical_accuracy")->name(), "sparse_categorical_accuracy");
  EXPECT_EQ(make_metric("categorical_accuracy")->name(), "categorical_accuracy");
  EXPECT_EQ(make_metric("binary_accuracy")->name(), "binary_accuracy");
  EXPECT_NE(dynamic_cast<AUC*>(make_metric("auc").get()), nullptr);
  EXPECT_EQ(make_metric("mse")->name(), "mse");
  EXPECT_EQ(make_metric("mean_squared_error")->name(), "mean_squared_error");
}

TEST(MakeMetric, UnknownNameListsKnownOnes) {
  try {
    make_metric("precision");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("'precision'"));
    EXPECT_THAT(e.what(), HasSubstr("sparse_categorical_accuracy"));
    EXPECT_THAT(e.what(), HasSubstr("auc"));
  }
}

TEST(Metrics, BatchStatsRecordIntoAGraphWithUnknownBatch) {
  Graph g;
  Tensor labels = g.placeholder(i64, {kUnknownDim}, "labels");
  Tensor probs = g.placeholder(f32, {kUnknownDim, 2}, "probs");
  SparseCategoricalAccuracy acc;
  AUC auc;
  Mean mean("loss");
  std::vector<Tensor> acc_stats = acc.batch_stats(labels, probs);
  Tensor scores = g.placeholder(f32, {kUnknownDim, 1}, "scores");
  std::vector<Tensor> fetches = acc_stats;
  std::vector<Tensor> auc_stats = auc.batch_stats(labels, scores);
  fetches.insert(fetches.end(), auc_stats.begin(), auc_stats.end());
  std::vector<Tensor> mean_stats = mean.batch_stats(Tensor(), probs);
  fetches.insert(fetches.end(), mean_stats.begin(), mean_stats.end());
  for (const Tensor& t : fetches) EXPECT_TRUE(t.is_symbolic());

  std::vector<Tensor> out =
      g.run({{labels, Tensor::from_list<int64_t>({1, 0, 1, 0})},
             {probs, mat({0.2f, 0.8f, 0.6f, 0.4f, 0.7f, 0.3f, 0.9f, 0.1f}, {4, 2})},
             {scores, mat({0.8f, 0.4f, 0.3f, 0.1f}, {4, 1})}},
            fetches);
  acc.update({out[0], out[1]});
  auc.update({out[2], out[3], out[4], out[5]});
  mean.update({out[6], out[7]});
  // Argmax [1, 0, 0, 0] vs labels [1, 0, 1, 0]: 3 of 4.
  EXPECT_DOUBLE_EQ(acc.result(), 0.75);
  // Positive scores 0.8 and 0.3 against negatives 0.4 and 0.1: 0.8 beats both, 0.3 beats 0.1.
  EXPECT_NEAR(auc.result(), 0.75, 1e-6);
  EXPECT_NEAR(mean.result(), 0.5, 1e-6);  // each row sums to 1
}

}  // namespace
}  // namespace kiln::nn
