// Model::compile with a MirroredStrategy: fit on 2 and 4 in-process replicas reaches the weights
// of one process within a derived float-reassociation bound (uneven last batches included),
// replicas end bit-identical, evaluate and predict split across replicas, bad setups are errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kiln/distribute/mirrored_strategy.h"
#include "kiln/distribute/ops.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/model.h"
#include "kiln/profiler.h"
#include "tests/distribute/linear_regression.h"

namespace kiln::nn {
namespace {

using distribute::MirroredStrategy;

using namespace testing_util;  // NOLINT: the shared linear-regression setup

TEST(DistributedFit, MirroredReplicasReachTheWeightsOfOneProcessWithinTheReassociationBound) {
  Tensor x = uniform({kRows, kK}, 11);
  Tensor y = uniform({kRows, kM}, 12);
  // 98 rows in batches of 24: the last batch has 2 rows, fewer than 4 replicas; 24 splits
  // evenly, the 2 rows over 4 replicas leave two of them without rows.
  for (int64_t batch : {24, 10}) {
    const FitOptions options = {.epochs = 2, .batch_size = batch, .shuffle = false, .verbose = 0};
    auto single = linear_model(nullptr);
    const std::vector<double> theta0 = parameters(*single);
    single->fit(x, y, options);
    const std::vector<double> want = parameters(*single);
    const std::vector<double> bound = equivalence_bound(values(x), values(y), theta0, batch, 2);
    for (int n : {2, 4}) {
      auto strategy = std::make_shared<MirroredStrategy>(n);
      auto replicated = linear_model(strategy);
      ASSERT_EQ(parameters(*replicated), theta0) << "the same initial weights";
      replicated->fit(x, y, options);
      const std::vector<double> got = parameters(*replicated);
      double worst = 0;
      for (size_t p = 0; p < got.size(); ++p) {
        EXPECT_LE(std::abs(got[p] - want[p]), bound[p])
            << n << " replicas, batch " << batch << ", parameter " << p << ": " << got[p] << " vs "
            << want[p];
        worst = std::max(worst, std::abs(got[p] - want[p]) / bound[p]);
      }
      // The weights moved (a step that did nothing would also be "within the bound").
      EXPECT_GT(std::abs(got[0] - theta0[0]), 100 * bound[0]);
      std::printf("%d replicas, batch %lld: largest difference %.3g of the bound\n", n,
                  static_cast<long long>(batch), worst);
    }
  }
}

TEST(DistributedFit, ReplicasLogTheLossesAndMetricsOfTheGlobalBatch) {
  Tensor x = uniform({kRows, kK}, 21), y = uniform({kRows, kM}, 22);
  const FitOptions options = {.epochs = 2, .batch_size = 10, .shuffle = false, .verbose = 0};
  auto single = linear_model(nullptr);
  History want = single->fit(x, y, options);
  auto replicated = linear_model(std::make_shared<MirroredStrategy>(4));
  History got = replicated->fit(x, y, options);
  for (const std::string key : {"loss", "mse"}) {
    ASSERT_EQ(got.history[key].size(), 2u) << key;
    for (size_t e = 0; e < 2; ++e)
      EXPECT_NEAR(got.history[key][e], want.history[key][e], 1e-5 * want.history[key][e]) << key;
  }
}

// Batch norm (moving statistics assigned by the step, averaged over the replicas), dropout
// (masks differ per replica) and Adam (slots): every replica's copy of every weight has the
// same bits after fit, with an uneven split and a last batch shorter than the replicas.
TEST(DistributedFit, EveryReplicasVariablesAreBitIdenticalAfterFit) {
  Tensor x = uniform({kRows, kK}, 31);
  std::vector<int32_t> labels(kRows);
  for (int64_t i = 0; i < kRows; ++i) labels[i] = static_cast<int32_t>(i % 3);
  Tensor y = Tensor::from_vector<int32_t>(labels, {kRows});
  const int n = 4;
  auto strategy = std::make_shared<MirroredStrategy>(n);
  Sequential model({Dense(16, "relu"), BatchNormalization(), Dropout(0.25), Dense(3)});
  model.set_seed(3);
  model.build({kK});
  model.compile(optim::Adam(0.01), SparseCategoricalCrossentropy(true), {"accuracy"},
                {.strategy = strategy});
  const std::vector<Tensor> before = model.replica_weights(0);
  ASSERT_EQ(before.size(), model.weights().size());
  model.fit(x, y, {.epochs = 2, .batch_size = 25, .seed = 5, .verbose = 0});
  const std::vector<Tensor> chief = model.replica_weights(0);
  ASSERT_EQ(chief.size(), model.weights().size());
  size_t moved = 0;
  for (size_t w = 0; w < chief.size(); ++w) moved += floats(chief[w]) != floats(before[w]);
  EXPECT_EQ(moved, chief.size()) << "every weight, the moving statistics included, trained";
  for (int r = 1; r < n; ++r) {
    const std::vector<Tensor> mine = model.replica_weights(r);
    for (size_t w = 0; w < chief.size(); ++w) {
      EXPECT_EQ(floats(mine[w]), floats(chief[w]))
          << "replica " << r << ", " << model.weights()[w].name();
    }
  }
}

// MirroredStrategy's replicas block on each bucket's all_reduce (overlaps_communication() is
// false: the replica threads already fill the cores); the compiled step holds no
// all_reduce_start. Read off the step's thunks with kiln::profiler.
TEST(DistributedFit, MirroredStepsBlockOnTheirAllReduces) {
  Tensor x = uniform({kRows, kK}, 41);
  Tensor y = uniform({kRows, kM}, 42);
  auto strategy = std::make_shared<MirroredStrategy>(2);
  EXPECT_FALSE(strategy->overlaps_communication());
  strategy->set_bucket_bytes(64);  // several buckets
  Sequential model({Dense(8, "relu"), Dense(kM)});
  model.compile(optim::SGD(0.01), MeanSquaredError(), {}, {.strategy = strategy});
  profiler::start();
  model.fit(x, y, {.epochs = 1, .batch_size = 24, .shuffle = false, .verbose = 0});
  int blocking = 0, started = 0;
  for (const profiler::ProgramProfile& p : profiler::stop()) {
    for (const profiler::ThunkTime& t : p.thunks) {
      blocking += t.description == "kernel all_reduce";
      started += t.description == "kernel all_reduce_start";
    }
  }
  EXPECT_GT(blocking, 2);
  EXPECT_EQ(started, 0);
}

TEST(DistributedFit, EvaluateAndPredictSplitTheirBatchesAcrossReplicas) {
  Tensor x = uniform({kRows, kK}, 41), y = uniform({kRows, kM}, 42);
  auto replicated = linear_model(std::make_shared<MirroredStrategy>(4));
  replicated->fit(x, y, {.epochs = 1, .batch_size = 16, .verbose = 0});
  auto single = linear_model(nullptr);
  single->load_state(replicated->state());
  // Batches of 7 rows split 1/2/2/2 over 4 replicas; the last batch (98 = 14 * 7) too.
  for (int64_t batch : {7, 32, 1000}) {
    auto want = single->evaluate(x, y, batch);
    auto got = replicated->evaluate(x, y, batch);
    for (const std::string key : {"loss", "mse"})
      EXPECT_NEAR(got.at(key), want.at(key), 1e-6 * want.at(key)) << key << ", batch " << batch;
    std::vector<float> p_want = floats(single->predict(x, batch));
    std::vector<float> p_got = floats(replicated->predict(x, batch));
    ASSERT_EQ(p_got.size(), p_want.size());
    for (size_t i = 0; i < p_got.size(); ++i)
      ASSERT_NEAR(p_got[i], p_want[i], 1e-5 * (1 + std::abs(p_want[i]))) << i;
  }
  // Fewer rows than replicas: the replicas without rows sit out.
  Tensor three = uniform({3, kK}, 43);
  EXPECT_EQ(replicated->predict(three).shape(), (Shape{3, kM}));
}

TEST(DistributedFit, BadSetupsAreErrorsNamingTheProblem) {
  try {
    MirroredStrategy strategy(0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("num_replicas must be at least 1, got 0"),
              std::string::npos)
        << e.what();
  }

  // fit run by each replica of a custom loop, on a model compiled without the strategy.
  Tensor x = uniform({8, kK}, 51), y = uniform({8, kM}, 52);
  auto model = linear_model(nullptr);
  MirroredStrategy strategy(2);
  try {
    strategy.run(
        [&](const std::vector<Tensor>&) {
          model->fit(x, y, {.verbose = 0});
          return std::vector<Tensor>{};
        },
        {{}, {}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition) << e.what();
    EXPECT_NE(std::string(e.what()).find("compile the model with {.strategy = ...}"),
              std::string::npos)
        << e.what();
  }

  auto replicated = linear_model(std::make_shared<MirroredStrategy>(2));
  try {
    replicated->replica_weights(2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("replica 2 is not one of the 2 local replica(s)"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("MirroredStrategy(2 replicas)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::nn
