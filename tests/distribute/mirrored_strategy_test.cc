// MirroredStrategy on CPU replicas: gradients of half (a quarter) of a batch, all-reduced with
// mean inside one compiled kiln::function, equal to the whole batch's gradient in one process
// within the float-reassociation bound derived below; reduce, split_batch, and a failing
// replica reported at once.
#include "kiln/distribute/mirrored_strategy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kiln/autodiff.h"
#include "kiln/distribute/ops.h"
#include "kiln/function.h"
#include "kiln/ops.h"

namespace kiln::distribute {
namespace {

constexpr int64_t kB = 64, kK = 12, kM = 5;  // batch, features, outputs

Tensor uniform(Shape shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(num_elements(shape));
  for (float& x : v) x = dist(gen);
  return Tensor::from_vector<float>(v, shape);
}

std::vector<double> values(const Tensor& t) {
  auto d = t.data<float>();
  return {d.begin(), d.end()};
}

// Linear regression: loss = mean((x.w + b - y)^2) over the batch and the outputs.
Tensor loss_of(const Tensor& x, const Tensor& y, const Tensor& w, const Tensor& b) {
  return mean(square(matmul(x, w) + b - y));
}

// The whole batch's gradient, and the bound on |split - whole| for each of dw and db.
//
// Bound (first order in u = 2^-24): with e_im = z_im - y_im, the exact dw_km is
// sum_i x_ik de_im with de_im = 2 e_im / (B M). Computing z_im (a dot of K products, + b, - y)
// errs by at most (K + 2) u E_im, E_im = sum_k |x_ik w_km| + |b_m| + |y_im|, so de_im by
// (K + 2) u E_im 2/(B M); summing the B products over the batch, in any order, adds at most
// B u sum_i |x_ik de_im|. Each of the two computations (whole batch; halves then the mean of
// replicas, where dividing by 2 or 4 is exact and the final add one more rounding, covered by
// B >= 2) is within that of the exact value, so they differ by at most twice it:
//   |dw_split - dw_whole| <= 2 u sum_i |x_ik| (B |de_im| + (K + 2) E_im 2/(B M))
// and for db the same with |x_ik| = 1. The same derivation bounds the loss.
struct Reference {
  std::vector<double> dw, db, dw_bound, db_bound;
  double loss = 0, loss_bound = 0;
};

Reference reference(const Tensor& xt, const Tensor& yt, const Tensor& wt, const Tensor& bt) {
  const double u = std::ldexp(1.0, -24);
  auto x = values(xt), y = values(yt), w = values(wt), b = values(bt);
  Reference ref;
  ref.dw.assign(kK * kM, 0), ref.dw_bound.assign(kK * kM, 0);
  ref.db.assign(kM, 0), ref.db_bound.assign(kM, 0);
  const double scale = 2.0 / (kB * kM);
  double loss_terms = 0;
  for (int64_t i = 0; i < kB; ++i) {
    for (int64_t m = 0; m < kM; ++m) {
      double z = b[m], e_bound = std::abs(b[m]) + std::abs(y[i * kM + m]);
      for (int64_t k = 0; k < kK; ++k) {
        z += x[i * kK + k] * w[k * kM + m];
        e_bound += std::abs(x[i * kK + k] * w[k * kM + m]);
      }
      double e = z - y[i * kM + m], de = scale * e;
      double de_err = (kK + 2) * e_bound * scale;  // / u
      ref.loss += e * e / (kB * kM);
      loss_terms += (kB * kM * e * e + 2 * (kK + 2) * std::abs(e) * e_bound) / (kB * kM);
      ref.db[m] += de;
      ref.db_bound[m] += 2 * u * (kB * std::abs(de) + de_err);
      for (int64_t k = 0; k < kK; ++k) {
        double xk = x[i * kK + k];
        ref.dw[k * kM + m] += xk * de;
        ref.dw_bound[k * kM + m] += 2 * u * std::abs(xk) * (kB * std::abs(de) + de_err);
      }
    }
  }
  ref.loss_bound = 2 * u * loss_terms;
  return ref;
}

void expect_within(const std::vector<double>& got, const std::vector<double>& want,
                   const std::vector<double>& bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t j = 0; j < got.size(); ++j) {
    EXPECT_LE(std::abs(got[j] - want[j]), bound[j])
        << what << " element " << j << ": " << got[j] << " vs " << want[j];
  }
}

TEST(MirroredStrategy, ReplicasAllReducingTheMeanOfPartBatchGradientsMatchTheWholeBatch) {
  Tensor x = uniform({kB, kK}, 1), y = uniform({kB, kM}, 2);
  Tensor w = uniform({kK, kM}, 3), b = uniform({kM}, 4);
  Reference ref = reference(x, y, w, b);
  std::vector<double> half_bound_dw = ref.dw_bound, half_bound_db = ref.db_bound;
  for (double& v : half_bound_dw) v /= 2;
  for (double& v : half_bound_db) v /= 2;

  auto whole_step = kiln::function(
      [](const Tensor& x, const Tensor& y, const Tensor& w, const Tensor& b) {
        Tensor loss = loss_of(x, y, w, b);
        std::vector<Tensor> g = gradients(loss, {w, b});
        return std::vector<Tensor>{loss, g[0], g[1]};
      },
      {.name = "whole_step", .mode = ExecutionMode::kCompiled});
  std::vector<Tensor> whole = whole_step(x, y, w, b);
  // The bound holds for one computation against the exact (f64) gradient: half of it.
  expect_within(values(whole[1]), ref.dw, half_bound_dw, "whole-batch dw vs f64");
  expect_within(values(whole[2]), ref.db, half_bound_db, "whole-batch db vs f64");

  auto replica_step = kiln::function(
      [](const Tensor& x, const Tensor& y, const Tensor& w, const Tensor& b) {
        Tensor loss = loss_of(x, y, w, b);
        std::vector<Tensor> g = gradients(loss, {w, b});
        return std::vector<Tensor>{loss, all_reduce(g[0], ReduceOp::kMean),
                                   all_reduce(g[1], ReduceOp::kMean)};
      },
      {.name = "replica_step", .mode = ExecutionMode::kCompiled});
  for (int n : {2, 4}) {
    MirroredStrategy strategy(n, {.timeout = Seconds(60)});
    auto out = strategy.run(
        [&](const std::vector<Tensor>& in) { return replica_step(in[0], in[1], w, b); },
        strategy.split_batch({x, y}));
    ASSERT_EQ(static_cast<int>(out.size()), n);
    const std::string where = std::to_string(n) + " replicas: ";
    for (int r = 0; r < n; ++r) {  // the same bits on every replica
      EXPECT_EQ(values(out[r][1]), values(out[0][1])) << where << "dw of replica " << r;
      EXPECT_EQ(values(out[r][2]), values(out[0][2])) << where << "db of replica " << r;
    }
    expect_within(values(out[0][1]), values(whole[1]), ref.dw_bound, where + "dw");
    expect_within(values(out[0][2]), values(whole[2]), ref.db_bound, where + "db");

    std::vector<Tensor> losses;
    for (int r = 0; r < n; ++r) losses.push_back(out[r][0]);
    double loss = strategy.reduce(ReduceOp::kMean, losses).item<float>();
    EXPECT_NEAR(loss, whole[0].item<float>(), ref.loss_bound) << where << "loss";
  }
}

TEST(MirroredStrategy, ReduceFoldsOneValuePerReplicaWithSumMeanMaxOrMin) {
  MirroredStrategy strategy(2);
  Tensor a = Tensor::from_vector<float>({1, 5, -2}, {3});
  Tensor b = Tensor::from_vector<float>({3, -1, 4}, {3});
  EXPECT_EQ(values(strategy.reduce(ReduceOp::kSum, {a, b})), (std::vector<double>{4, 4, 2}));
  EXPECT_EQ(values(strategy.reduce(ReduceOp::kMean, {a, b})), (std::vector<double>{2, 2, 1}));
  EXPECT_EQ(values(strategy.reduce(ReduceOp::kMax, {a, b})), (std::vector<double>{3, 5, 4}));
  EXPECT_EQ(values(strategy.reduce(ReduceOp::kMin, {a, b})), (std::vector<double>{1, -1, -2}));
}

TEST(MirroredStrategy, SplitBatchGivesEachReplicaConsecutiveRowsAndRefusesUnevenBatches) {
  MirroredStrategy strategy(2);
  auto parts = strategy.split_batch({Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2})});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(values(parts[0][0]), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(values(parts[1][0]), (std::vector<double>{5, 6, 7, 8}));
  EXPECT_EQ(parts[1][0].shape(), (Shape{2, 2}));
  try {
    strategy.split_batch({Tensor::from_vector<float>({1, 2, 3}, {3})});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("f32[3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("2 replicas"), std::string::npos) << e.what();
  }
}

// Replica 1 fails before the all_reduce that replica 0 waits in: run reports replica 1's error
// long before the 60 s deadline, and the next run works.
TEST(MirroredStrategy, AFailingReplicaIsReportedAtOnceAndTheStrategyStaysUsable) {
  MirroredStrategy strategy(2, {.timeout = Seconds(60)});
  auto step = [](const std::vector<Tensor>& in) {
    if (current_collective()->rank() == 1) {
      matmul(in[0], Tensor::from_vector<float>({1, 2, 3}, {3, 1}));  // [1,2] x [3,1]
    }
    return std::vector<Tensor>{all_reduce(in[0])};
  };
  std::vector<std::vector<Tensor>> inputs(2, {Tensor::from_vector<float>({1, 2}, {1, 2})});
  auto t0 = std::chrono::steady_clock::now();
  try {
    strategy.run(step, inputs);
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("replica 1 of 2: matmul", 0), 0u) << what;
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));

  auto ok = strategy.run(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{all_reduce(in[0])}; }, inputs);
  EXPECT_EQ(values(ok[1][0]), (std::vector<double>{2, 4}));
}

// The replicas other than the caller's run on threads the strategy keeps: over many runs, the
// same n - 1 threads (by kernel thread id, which the kernel does not hand out again soon, unlike
// std::thread::id) do the work, and replica 0 runs on the caller's thread.
TEST(MirroredStrategy, ReplicaThreadsAreStartedOnceAndKeptAcrossRuns) {
  constexpr int kReplicas = 3, kRuns = 20;
  MirroredStrategy strategy(kReplicas);
  std::mutex mu;
  std::set<pid_t> replica_threads;
  std::vector<std::vector<Tensor>> inputs(kReplicas, {Tensor::from_vector<float>({1}, {1})});
  for (int run = 0; run < kRuns; ++run) {
    auto out = strategy.run(
        [&](const std::vector<Tensor>& in) {
          const pid_t tid = gettid();
          if (current_collective()->rank() == 0) {
            EXPECT_EQ(tid, getpid()) << "replica 0 runs on the caller's (the main) thread";
          } else {
            std::lock_guard<std::mutex> lock(mu);
            replica_threads.insert(tid);
          }
          return std::vector<Tensor>{all_reduce(in[0])};
        },
        inputs);
    ASSERT_EQ(values(out[2][0]), (std::vector<double>{3})) << "run " << run;
  }
  EXPECT_EQ(replica_threads.size(), size_t{kReplicas - 1});
}

// More replicas than the machine could run (each is a thread with its own copy of the model)
// is kInvalidArgument naming the count and the bound, not std::bad_alloc or std::system_error
// when the threads or the group are made.
TEST(MirroredStrategy, TooManyReplicasIsAnErrorNamingTheCountAndTheBound) {
  const int bound = MirroredStrategy::max_replicas();
  EXPECT_GE(bound, 64);
  for (int n : {INT_MAX, 100000, bound + 1}) {
    try {
      MirroredStrategy strategy(n);
      FAIL() << n << " replicas: no error";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what;
      EXPECT_NE(what.find(std::to_string(n)), std::string::npos) << what;
      EXPECT_NE(what.find("at most " + std::to_string(bound)), std::string::npos) << what;
    }
  }
  // The bound itself works.
  MirroredStrategy strategy(bound);
  std::vector<std::vector<Tensor>> inputs(bound, {Tensor::from_vector<float>({1}, {1})});
  auto out = strategy.run(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{all_reduce(in[0])}; }, inputs);
  EXPECT_EQ(values(out[bound - 1][0]), (std::vector<double>{static_cast<double>(bound)}));
}

TEST(MirroredStrategy, NameCountsOneReplicaInTheSingular) {
  EXPECT_EQ(MirroredStrategy(1).name(), "MirroredStrategy(1 replica)");
  EXPECT_EQ(MirroredStrategy(3).name(), "MirroredStrategy(3 replicas)");
  try {
    MirroredStrategy(1).reduce(ReduceOp::kSum, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.substr(what.rfind(':')), ": 0 values for 1 replica") << what;
  }
}

// An exception of the step's own (not a kiln::Error) reaches the caller unchanged, from any
// replica, and the kept threads run the next step.
TEST(MirroredStrategy, AStepsOwnExceptionReachesTheCallerAndTheThreadsStayUsable) {
  MirroredStrategy strategy(2);
  std::vector<std::vector<Tensor>> inputs(2, {Tensor::from_vector<float>({1}, {1})});
  EXPECT_THROW(strategy.run(
                   [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
                     if (current_collective()->rank() == 1) throw std::out_of_range("mine");
                     return in;
                   },
                   inputs),
               std::out_of_range);
  auto out = strategy.run(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{all_reduce(in[0])}; }, inputs);
  EXPECT_EQ(values(out[1][0]), (std::vector<double>{2}));
}

// A run from inside one of the strategy's own replicas is refused (its threads are busy with the
// outer run), while runs from two threads at once take turns.
TEST(MirroredStrategy, RunsFromTwoThreadsTakeTurnsAndARunInsideAReplicaIsRefused) {
  MirroredStrategy strategy(2);
  std::vector<std::vector<Tensor>> inputs(2, {Tensor::from_vector<float>({1}, {1})});
  auto sum = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{all_reduce(in[0])}; };
  try {
    strategy.run([&](const std::vector<Tensor>& in) { return strategy.run(sum, inputs)[0]; },
                 inputs);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition) << e.what();
    EXPECT_NE(std::string(e.what()).find("inside"), std::string::npos) << e.what();
  }
  std::vector<double> got[2];
  std::thread other([&] { got[1] = values(strategy.run(sum, inputs)[1][0]); });
  got[0] = values(strategy.run(sum, inputs)[1][0]);
  other.join();
  EXPECT_EQ(got[0], (std::vector<double>{2}));
  EXPECT_EQ(got[1], (std::vector<double>{2}));
}

}  // namespace
}  // namespace kiln::distribute
