// MultiWorkerMirroredStrategy with one worker per thread, each with its own model and its own
// communicator of an in-process group, as mpirun's processes have (mpi_test.cc runs the same
// under mpirun): workers start from the chief's weights and reach one process's within the
// reassociation bound; workers started differently fail at start-up, each naming what differs;
// only the chief writes checkpoints.
#include <gtest/gtest.h>

#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/distribute/multi_worker_mirrored_strategy.h"
#include "kiln/nn/checkpoint_callbacks.h"
#include "kiln/ops.h"
#include "tests/distribute/linear_regression.h"

namespace kiln::distribute {
namespace {

using namespace testing_util;  // NOLINT: the shared linear-regression setup

// Runs work(w, strategy) for workers w = 0..n-1 on threads of their own; returns each worker's
// error message ("" when it finished).
std::vector<std::string> run_workers(
    int n, const std::function<void(int, std::shared_ptr<MultiWorkerMirroredStrategy>)>& work) {
  std::vector<std::unique_ptr<Collective>> group =
      make_in_process_group(n, {.timeout = Seconds(60)});
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) {
    auto strategy = std::make_shared<MultiWorkerMirroredStrategy>(std::move(group[w]));
    threads.emplace_back([&, w, strategy] {
      try {
        work(w, strategy);
      } catch (const std::exception& e) {
        errors[w] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

// A worker's own starting weights (the broadcast must replace them by the chief's).
void scramble(Model& model, int worker) {
  for (Variable v : model.weights()) v.assign(uniform(v.shape(), 100 + worker));
}

TEST(MultiWorkerMirroredStrategy, WorkersStartFromTheChiefsWeightsAndReachOneProcesssWeights) {
  Tensor x = uniform({kRows, kK}, 61), y = uniform({kRows, kM}, 62);
  const nn::FitOptions options = {.epochs = 2, .batch_size = 10, .shuffle = false, .verbose = 0};
  auto single = linear_model(nullptr);
  const std::vector<double> theta0 = parameters(*single);
  single->fit(x, y, options);
  const std::vector<double> want = parameters(*single);
  const std::vector<double> bound = equivalence_bound(values(x), values(y), theta0, 10, 2);
  for (int n : {2, 4}) {
    std::vector<std::vector<double>> got(n);
    std::vector<std::string> errors = run_workers(n, [&](int w, auto strategy) {
      auto model = linear_model(strategy);
      if (w > 0) scramble(*model, w);
      model->fit(x, y, options);
      got[w] = parameters(*model);
    });
    for (int w = 0; w < n; ++w) ASSERT_EQ(errors[w], "") << "worker " << w << " of " << n;
    for (int w = 1; w < n; ++w) EXPECT_EQ(got[w], got[0]) << "worker " << w << " of " << n;
    for (size_t p = 0; p < want.size(); ++p) {
      EXPECT_LE(std::abs(got[0][p] - want[p]), bound[p])
          << n << " workers, parameter " << p << ": " << got[0][p] << " vs " << want[p];
    }
  }
}

TEST(MultiWorkerMirroredStrategy, WorkersStartedDifferentlyFailAtStartUpEachNamingWhatDiffers) {
  Tensor x = uniform({kRows, kK}, 71), y = uniform({kRows, kM}, 72);
  std::vector<std::string> errors = run_workers(2, [&](int w, auto strategy) {
    auto model = linear_model(strategy);
    model->fit(x, y, {.batch_size = w == 0 ? 24 : 12, .shuffle = false, .verbose = 0});
  });
  for (int w = 0; w < 2; ++w) {
    EXPECT_NE(errors[w].find("the 2 workers were started with different settings"),
              std::string::npos)
        << errors[w];
    EXPECT_NE(errors[w].find("global batch: worker 0 has 24; worker 1 has 12"), std::string::npos)
        << errors[w];
    EXPECT_NE(errors[w].find("steps per epoch: worker 0 has 5; worker 1 has 9"), std::string::npos)
        << errors[w];
  }

  errors = run_workers(2, [&](int w, auto strategy) {
    nn::Sequential model(w == 0 ? std::vector<LayerRef>{Dense(kM)}
                                : std::vector<LayerRef>{Dense(4), Dense(kM)});
    model.compile(optim::SGD(kLr), MeanSquaredError(), {}, {.strategy = strategy});
    model.fit(x, y, {.verbose = 0});
  });
  for (int w = 0; w < 2; ++w) {
    EXPECT_NE(errors[w].find("layers: worker 0 has Dense; worker 1 has Dense Dense"),
              std::string::npos)
        << errors[w];
  }
}

// The other settings the workers must agree on: the dtype the model was built for, and the
// gradient bucket size (which sets the all_reduces every step makes).
TEST(MultiWorkerMirroredStrategy, WorkersWithAnotherDTypeOrBucketSizeFailAtStartUpNamingIt) {
  Tensor x = uniform({kRows, kK}, 73), y = uniform({kRows, kM}, 74);
  std::vector<std::string> errors = run_workers(2, [&](int w, auto strategy) {
    nn::Sequential model({Dense(kM)});
    model.build({kK}, w == 0 ? DType::f32 : DType::f64);
    model.compile(optim::SGD(kLr), MeanSquaredError(), {}, {.strategy = strategy});
    model.fit(w == 0 ? x : convert(x, DType::f64), y, {.verbose = 0});
  });
  for (int w = 0; w < 2; ++w) {
    EXPECT_NE(errors[w].find("the 2 workers were started with different settings"),
              std::string::npos)
        << errors[w];
    EXPECT_NE(errors[w].find("inputs: worker 0 has f32[?,6]; worker 1 has f64[?,6]"),
              std::string::npos)
        << errors[w];
  }

  errors = run_workers(2, [&](int w, auto strategy) {
    strategy->set_bucket_bytes(w == 0 ? 0 : 64);
    auto model = linear_model(strategy);
    model->fit(x, y, {.verbose = 0});
  });
  for (int w = 0; w < 2; ++w) {
    EXPECT_NE(errors[w].find("gradient bucket bytes: worker 0 has 0; worker 1 has 64"),
              std::string::npos)
        << errors[w];
  }
}

// Fitting a Dataset, the global batch compared is the rows the dataset's batches hold (not
// FitOptions::batch_size, which a Dataset does not use): workers batching at 16 and 8 over 96
// and 48 rows take 6 steps an epoch each and must still be refused; so must workers dividing
// the dataset differently.
TEST(MultiWorkerMirroredStrategy, WorkersFeedingDatasetsOfAnotherBatchOrDivisionFailAtStartUp) {
  Tensor x = uniform({kRows, kK}, 75), y = uniform({kRows, kM}, 76);
  auto rows = [&](int64_t n) {
    return data::Dataset::from_tensors({slice(x, {0, 0}, {n, kK}), slice(y, {0, 0}, {n, kM})});
  };
  std::vector<std::string> errors = run_workers(2, [&](int w, auto strategy) {
    auto model = linear_model(strategy);
    model->fit(w == 0 ? rows(96).batch(16) : rows(48).batch(8), {.verbose = 0});
  });
  for (int w = 0; w < 2; ++w) {
    EXPECT_NE(errors[w].find("the 2 workers were started with different settings"),
              std::string::npos)
        << errors[w];
    EXPECT_NE(errors[w].find("global batch: worker 0 has 16; worker 1 has 8"), std::string::npos)
        << errors[w];
    EXPECT_EQ(errors[w].find("steps per epoch"), std::string::npos) << errors[w];
  }

  errors = run_workers(2, [&](int w, auto strategy) {
    auto model = linear_model(strategy);
    data::Dataset d = rows(96).batch(16);
    if (w == 0)
      d = d.with_options({.distribute = {.auto_shard_policy = data::AutoShardPolicy::kOff}});
    model->fit(d, {.verbose = 0});
  });
  for (int w = 0; w < 2; ++w) {
    EXPECT_NE(errors[w].find("data divided: worker 0 has auto-shard policy OFF; worker 1 has "
                             "auto-shard policy DATA"),
              std::string::npos)
        << errors[w];
  }
}

// A layer's dtype policy is part of the model: float32 and mixed_bfloat16 workers (the same
// f32 variables and inputs) are refused.
TEST(MultiWorkerMirroredStrategy, WorkersWithAnotherDTypePolicyFailAtStartUpNamingIt) {
  Tensor x = uniform({kRows, kK}, 77), y = uniform({kRows, kM}, 78);
  std::vector<std::string> errors = run_workers(2, [&](int w, auto strategy) {
    nn::Sequential model(
        {nn::with_options(Dense(kM), {.dtype_policy = w == 0 ? "float32" : "mixed_bfloat16"})});
    model.build({kK});
    model.compile(optim::SGD(kLr), MeanSquaredError(), {}, {.strategy = strategy});
    model.fit(x, y, {.verbose = 0});
  });
  for (int w = 0; w < 2; ++w) {
    EXPECT_NE(errors[w].find("dtype policy: worker 0 has float32; worker 1 has mixed_bfloat16"),
              std::string::npos)
        << errors[w];
  }
}

TEST(MultiWorkerMirroredStrategy, OnlyTheChiefWritesCheckpoints) {
  Tensor x = uniform({kRows, kK}, 81), y = uniform({kRows, kM}, 82);
  const std::filesystem::path root =
      std::filesystem::path(::testing::TempDir()) / "multi_worker_checkpoints";
  std::filesystem::remove_all(root);
  std::vector<std::string> errors = run_workers(2, [&](int w, auto strategy) {
    auto model = linear_model(strategy);
    model->fit(x, y,
               nn::FitOptions{.batch_size = 24, .verbose = 0}.add_callback(
                   nn::ModelCheckpoint((root / ("worker" + std::to_string(w))).string())));
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_TRUE(std::filesystem::exists(root / "worker0"));
  EXPECT_FALSE(std::filesystem::exists(root / "worker1"));
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace kiln::distribute
