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

namespace kiln::nn {
namespace {

using distribute::MirroredStrategy;

constexpr int64_t kRows = 98, kK = 6, kM = 3;  // examples, features, outputs
constexpr double kLr = 0.1;

Tensor uniform(Shape shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(num_elements(shape));
  for (float& x : v) x = dist(gen);
  return Tensor::from_vector<float>(v, shape);
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  for (float v : t.data<float>()) out.push_back(v);
  return out;
}

std::vector<float> floats(const Tensor& t) {
  auto d = t.data<float>();
  return {d.begin(), d.end()};
}

// A linear regression model, its weights from `seed`; with `strategy` when given.
std::unique_ptr<Sequential> linear_model(std::shared_ptr<distribute::Strategy> strategy) {
  auto model = std::make_unique<Sequential>(std::vector<LayerRef>{Dense(kM)});
  model->set_seed(7);
  model->build({kK});
  CompileOptions options;
  if (strategy) options.strategy = strategy;
  model->compile(optim::SGD(kLr), MeanSquaredError(), {"mse"}, options);
  return model;
}

// The bound on |theta_replicated - theta_single| after fit, per parameter (kernel [K,M] row
// major, then bias [M]), to first order in u = 2^-24.
//
// One step of either run computes theta' = fl(theta - lr * g^(theta)), where the computed
// gradient g^ of mean((x.W + b - y)^2) over a batch of B rows differs from the exact g by at most
// half of beta = 2u sum_i |x~_ik| (B |de_im| + (K + 2) E_im 2/(BM)) per component (the bound
// tests/distribute/mirrored_strategy_test.cc derives: x~ = [x, 1], de_im = 2 e_im/(BM),
// E_im = sum_k |x_ik w_km| + |b_m| + |y_im|). That derivation holds for the replicated gradient
// too, which sums each replica's row-weighted mean in another order: weighting by b_r and
// dividing by B are two more roundings of relative size u on terms the B u sum_i |x de| term
// already bounds for B >= 2. Two runs whose parameters differ by e_k then compute gradients
// that differ by at most |H| e_k + beta_k (H, the loss' Hessian, is constant for linear
// regression: H_(k,m),(k',m) = 2/(BM) sum_i x~_ik x~_ik'), and the update's own roundings (the
// product lr*g and the difference) add u (|theta'| + lr |g|) on each side:
//   e_(k+1) <= (I + lr |H_k|) e_k + lr beta_k + 2u (|theta_(k+1)| + lr |g_k|),  e_0 = 0,
// all evaluated along the exact (f64) trajectory, which the first-order bound allows.
std::vector<double> equivalence_bound(const std::vector<double>& x, const std::vector<double>& y,
                                      std::vector<double> theta, int64_t batch, int epochs) {
  const double u = std::ldexp(1.0, -24);
  const int64_t P = (kK + 1) * kM;
  auto param = [](int64_t k, int64_t m) { return k < kK ? k * kM + m : kK * kM + m; };
  std::vector<double> e(P, 0.0);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t begin = 0; begin < kRows; begin += batch) {
      const int64_t end = std::min(kRows, begin + batch), B = end - begin;
      const double scale = 2.0 / (B * kM);
      std::vector<double> g(P, 0.0), beta(P, 0.0);
      for (int64_t i = begin; i < end; ++i) {
        for (int64_t m = 0; m < kM; ++m) {
          double z = theta[param(kK, m)];
          double big = std::abs(theta[param(kK, m)]) + std::abs(y[i * kM + m]);
          for (int64_t k = 0; k < kK; ++k) {
            z += x[i * kK + k] * theta[param(k, m)];
            big += std::abs(x[i * kK + k] * theta[param(k, m)]);
          }
          const double de = scale * (z - y[i * kM + m]);
          const double de_err = (kK + 2) * big * scale;
          for (int64_t k = 0; k <= kK; ++k) {
            const double xk = k < kK ? x[i * kK + k] : 1.0;
            g[param(k, m)] += xk * de;
            beta[param(k, m)] += 2 * u * std::abs(xk) * (B * std::abs(de) + de_err);
          }
        }
      }
      // (I + lr |H|) e: H couples the parameters of one output m.
      std::vector<double> next = e;
      for (int64_t m = 0; m < kM; ++m) {
        for (int64_t k = 0; k <= kK; ++k) {
          for (int64_t k2 = 0; k2 <= kK; ++k2) {
            double h = 0;
            for (int64_t i = begin; i < end; ++i)
              h += (k < kK ? x[i * kK + k] : 1.0) * (k2 < kK ? x[i * kK + k2] : 1.0);
            next[param(k, m)] += kLr * scale * std::abs(h) * e[param(k2, m)];
          }
        }
      }
      for (int64_t p = 0; p < P; ++p) {
        theta[p] -= kLr * g[p];
        e[p] = next[p] + kLr * beta[p] + 2 * u * (std::abs(theta[p]) + kLr * std::abs(g[p]));
      }
    }
  }
  return e;
}

std::vector<double> parameters(const Model& model) {
  std::vector<double> out;
  for (const Variable& v : model.weights()) {
    std::vector<double> part = values(v.value());
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

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
            << n << " replicas, batch " << batch << ", parameter " << p << ": " << got[p]
            << " vs " << want[p];
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
