// Gradient buckets: all_reduce_in_buckets makes ceil(bytes / bucket) all_reduces of at most a
// bucket each, counted by a Collective that records the calls it passes on; training with any
// bucket size ends with the weights of one all_reduce per step, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include "compiler/executable.h"
#include "kiln/autodiff.h"
#include "kiln/distribute/multi_worker_mirrored_strategy.h"
#include "kiln/distribute/ops.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/nn/layers.h"
#include "kiln/ops.h"
#include "tests/distribute/linear_regression.h"
#include "tests/testing/forwarding_collective.h"

namespace kiln::distribute {
namespace {

using namespace testing_util;  // NOLINT: the shared data helpers

// Records the size in bytes of each all_reduce it passes on.
class CountingCollective : public testing::ForwardingCollective {
 public:
  using ForwardingCollective::ForwardingCollective;
  std::vector<int64_t> all_reduce_bytes;

 protected:
  Tensor all_reduce_through(const Tensor& x, ReduceOp op) override {
    all_reduce_bytes.push_back(x.nbytes());
    return ForwardingCollective::all_reduce_through(x, op);
  }
};

// Runs work(w, comm) for workers w = 0..n-1 of an in-process group on threads of their own;
// each worker's communicator counts its all_reduces. Fails the test on a worker's error.
void run_workers(int n, const std::function<void(int, std::unique_ptr<CountingCollective>)>& work) {
  std::vector<std::unique_ptr<Collective>> group =
      make_in_process_group(n, {.timeout = Seconds(60)});
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) {
    auto comm = std::make_unique<CountingCollective>(std::move(group[w]));
    threads.emplace_back([&, w, c = comm.release()]() mutable {
      try {
        work(w, std::unique_ptr<CountingCollective>(c));
      } catch (const std::exception& e) {
        errors[w] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int w = 0; w < n; ++w) ASSERT_EQ(errors[w], "") << "worker " << w;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(GradientBuckets, CeilOfBytesOverBucketAllReducesEachAtMostABucketSummingAsOneWould) {
  // 10 + 7 + 1 f32 elements and 5 f64 ones: every value travels as f64, 23 * 8 = 184 bytes.
  auto values_of = [](int w) {
    return std::vector<Tensor>{uniform({2, 5}, 10 + w), uniform({7}, 20 + w), uniform({}, 30 + w),
                               convert(uniform({5}, 40 + w), DType::f64)};
  };
  const int64_t total = 23 * 8;
  for (int64_t bucket : {0, 8, 24, 64, 100, 184, 1000}) {
    std::vector<std::vector<Tensor>> got(2), one(2);
    std::vector<std::vector<int64_t>> calls(2);
    run_workers(2, [&](int w, std::unique_ptr<CountingCollective> comm) {
      CollectiveScope scope(*comm);
      got[w] = all_reduce_in_buckets(values_of(w), bucket);
      calls[w] = comm->all_reduce_bytes;
      one[w] = all_reduce_in_buckets(values_of(w), 0);
    });
    const int64_t want_calls = bucket == 0 ? 1 : ceil_div(total, bucket);
    for (int w = 0; w < 2; ++w) {
      ASSERT_EQ(static_cast<int64_t>(calls[w].size()), want_calls) << "bucket " << bucket;
      int64_t sum = 0;
      for (int64_t bytes : calls[w]) {
        if (bucket > 0) EXPECT_LE(bytes, bucket) << "bucket " << bucket;
        sum += bytes;
      }
      EXPECT_EQ(sum, total) << "bucket " << bucket;
      ASSERT_EQ(got[w].size(), 4u);
      for (size_t i = 0; i < 4; ++i) {
        const Tensor want = values_of(0)[i] + values_of(1)[i];
        ASSERT_EQ(got[w][i].dtype(), want.dtype()) << "value " << i;
        ASSERT_EQ(got[w][i].shape(), want.shape()) << "value " << i;
        // Summed in f64 and rounded back: as one all_reduce of everything does it.
        EXPECT_EQ(std::memcmp(got[w][i].raw_data(), one[w][i].raw_data(), want.nbytes()), 0)
            << "bucket " << bucket << ", value " << i;
      }
    }
  }
}

TEST(GradientBuckets, ANegativeBucketSizeIsAnErrorNamingIt) {
  EXPECT_THROW(
      {
        try {
          all_reduce_in_buckets({uniform({2}, 1)}, -1);
        } catch (const Error& e) {
          EXPECT_NE(
              std::string(e.what()).find("bucket_bytes must be 0 (one bucket) or more, got -1"),
              std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  MultiWorkerMirroredStrategy strategy(std::move(make_in_process_group(1)[0]));
  EXPECT_EQ(strategy.bucket_bytes(), Strategy::kDefaultBucketBytes);
  EXPECT_THROW(strategy.set_bucket_bytes(-5), Error);
}

// Recorded: the last value's bucket first, each bucket an all_reduce_start and an
// all_reduce_done, each later bucket's start taking the previous one's token as its second
// (ordering) input, so no schedule can start them in another order.
TEST(GradientBuckets, EachBucketAfterTheFirstTakesThePreviousOneAsItsOrderingInput) {
  Graph g("step");
  auto guard = g.as_default();
  const Tensor a = g.placeholder(DType::f32, {3}, "a"), b = g.placeholder(DType::f32, {2, 2}, "b");
  all_reduce_in_buckets({a, b}, 12);  // 7 floats in buckets of 3: b[0:3]; b[3], a[0:2]; a[2]
  std::istringstream text(g.to_text());
  std::vector<std::string> starts, dones;  // "%id = ... all_reduce_start(%x, %y)" lines
  for (std::string line; std::getline(text, line);) {
    if (line.find(" = all_reduce_start(") != std::string::npos) starts.push_back(line);
    if (line.find(" = all_reduce_done(") != std::string::npos) dones.push_back(line);
  }
  ASSERT_EQ(starts.size(), 3u) << g.to_text();
  ASSERT_EQ(dones.size(), 3u) << g.to_text();
  EXPECT_NE(dones[0].find("-> f32[3]"), std::string::npos) << dones[0];
  EXPECT_EQ(starts[0].find(", %"), std::string::npos) << starts[0];
  for (size_t k = 1; k < starts.size(); ++k) {
    const std::string& line = starts[k - 1];  // "  %4 = all_reduce_start = ..."
    const size_t id = line.find('%') + 1;
    const std::string previous = line.substr(id, line.find(' ', id) - id);
    EXPECT_NE(starts[k].find(", %" + previous + ")"), std::string::npos) << starts[k] << "\n"
                                                                         << g.to_text();
  }
}

// A 2-layer MLP's gradients in 64-byte buckets, compiled: the first bucket (the last layer's
// bias and part of its kernel) runs as soon as those exist, before the first layer's gradient
// (the step's last dot) is computed; it does not wait for the whole backward pass.
TEST(GradientBuckets, TheFirstBucketRunsBeforeTheFirstLayersGradientIsComputed) {
  Graph g("step");
  auto guard = g.as_default();
  const Tensor x = g.placeholder(DType::f32, {8, 20}, "x");
  const Tensor w1 = g.placeholder(DType::f32, {20, 16}, "w1");
  const Tensor w2 = g.placeholder(DType::f32, {16, 4}, "w2"),
               b2 = g.placeholder(DType::f32, {4}, "b2");
  const Tensor y = matmul(relu(matmul(x, w1)), w2) + b2;
  std::vector<Tensor> grads = gradients(sum(y * y), {w1, w2, b2});
  std::vector<Tensor> updated;
  const std::vector<Tensor> params = {w1, w2, b2};
  const std::vector<Tensor> summed = all_reduce_in_buckets(grads, 64);
  for (size_t i = 0; i < params.size(); ++i) updated.push_back(params[i] - summed[i]);
  compiler::Executable exe = compiler::compile(
      g, updated,
      {{x, zeros({8, 20})}, {w1, zeros({20, 16})}, {w2, zeros({16, 4})}, {b2, zeros({4})}});
  const std::vector<std::string> thunks = exe.thunk_descriptions();
  std::string listing;
  int first_all_reduce = -1, last_dot = -1;
  for (int k = 0; k < static_cast<int>(thunks.size()); ++k) {
    listing += std::to_string(k) + " " + thunks[k] + "\n";
    if (thunks[k].find("all_reduce") != std::string::npos && first_all_reduce < 0)
      first_all_reduce = k;
    if (thunks[k].find("dot") != std::string::npos) last_dot = k;
  }
  ASSERT_GE(first_all_reduce, 0) << listing;
  EXPECT_LT(first_all_reduce, last_dot) << listing;
}

// An MLP (6 -> 16 -> 3, 163 parameters) trained by 2 workers: each step's all_reduces are the
// ceil(bytes / bucket) the option asks for, and the weights equal those of one all_reduce per
// step bit for bit (the bound is 0: every element is summed over the same replicas in the same
// rank order, whatever bucket carries it).
TEST(GradientBuckets, TrainingWithAnyBucketSizeEndsWithTheWeightsOfOneAllReducePerStep) {
  const Tensor x = uniform({kRows, kK}, 51), y = uniform({kRows, kM}, 52);
  const nn::FitOptions options = {.epochs = 2, .batch_size = 10, .shuffle = false, .verbose = 0};
  const int64_t steps = 2 * ceil_div(kRows, 10);
  struct Run {
    std::vector<float> weights;
    std::vector<int64_t> calls;  // the all_reduces of fit, after its start-up
  };
  auto train = [&](int64_t bucket) {
    std::vector<Run> runs(2);
    run_workers(2, [&](int w, std::unique_ptr<CountingCollective> comm) {
      CountingCollective* counter = comm.get();
      auto strategy = std::make_shared<MultiWorkerMirroredStrategy>(std::move(comm));
      if (bucket >= 0) strategy->set_bucket_bytes(bucket);
      nn::Sequential model({nn::Dense(16, "relu"), nn::Dense(kM)});
      model.set_seed(3);
      model.build({kK});
      model.compile(optim::SGD(kLr), MeanSquaredError(), {"mse"}, {.strategy = strategy});
      model.fit(x, y, options);
      runs[w].calls = counter->all_reduce_bytes;
      for (const Variable& v : model.weights()) {
        std::vector<float> part = floats(v.value());
        runs[w].weights.insert(runs[w].weights.end(), part.begin(), part.end());
      }
    });
    EXPECT_EQ(runs[0].weights, runs[1].weights) << "bucket " << bucket;
    return runs[0];
  };
  const Run one = train(0);
  ASSERT_EQ(static_cast<int64_t>(one.calls.size()), steps);
  const int64_t bytes = one.calls[0];  // rows, loss, mse statistics and 163 gradients, as f32
  EXPECT_GE(bytes, 163 * 4);
  // The default (4 MB) holds the whole step: one all_reduce per step.
  EXPECT_EQ(train(-1).calls, one.calls);
  for (int64_t bucket : {64, 256, 400, 4096}) {
    const Run run = train(bucket);
    EXPECT_EQ(static_cast<int64_t>(run.calls.size()), steps * ceil_div(bytes, bucket))
        << "bucket " << bucket << ", " << bytes << " bytes a step";
    for (int64_t b : run.calls) EXPECT_LE(b, bucket);
    EXPECT_EQ(run.weights, one.weights) << "bucket " << bucket;
  }
}

}  // namespace
}  // namespace kiln::distribute
