// Linear regression trained with SGD for the distribution tests: data, the model, and the bound
// on how far replicated training may end from one process's (float reassociation), derived
// below. Shared by tests/nn/distributed_fit_test.cc and the MPI worker.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kiln/distribute/strategy.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/model.h"

namespace kiln::testing_util {

using nn::CompileOptions;
using nn::Dense;
using nn::LayerRef;
using nn::MeanSquaredError;
using nn::Model;
using nn::Sequential;

inline constexpr int64_t kRows = 98, kK = 6, kM = 3;  // examples, features, outputs
inline constexpr double kLr = 0.1;

inline Tensor uniform(Shape shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(num_elements(shape));
  for (float& x : v) x = dist(gen);
  return Tensor::from_vector<float>(v, shape);
}

inline std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  for (float v : t.data<float>()) out.push_back(v);
  return out;
}

inline std::vector<float> floats(const Tensor& t) {
  auto d = t.data<float>();
  return {d.begin(), d.end()};
}

// A linear regression model, its weights from `seed`; with `strategy` when given.
inline std::unique_ptr<Sequential> linear_model(std::shared_ptr<distribute::Strategy> strategy) {
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
inline std::vector<double> equivalence_bound(const std::vector<double>& x,
                                             const std::vector<double>& y,
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

inline std::vector<double> parameters(const Model& model) {
  std::vector<double> out;
  for (const Variable& v : model.weights()) {
    std::vector<double> part = values(v.value());
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

}  // namespace kiln::testing_util
