// The MLP training step as model.cc traces it (Dense-relu, Dropout(0.5), Dense, sparse
// cross-entropy, gradients, Adam), built from the same public pieces with random feeds: the
// graph the compiler tests and benchmarks optimise and compile.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"

namespace kiln::test_models {

struct MlpStep {
  Graph graph{"step"};
  std::vector<Tensor> fetches;  // loss, then each parameter's new value and Adam slots
  FeedList feeds;
};

inline Tensor random_normal_tensor(Shape shape, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0, scale);
  std::vector<float> v(num_elements(shape));
  for (float& x : v) x = normal(rng);
  return Tensor::from_vector(v, shape);
}

// A tensor of N(0, 1) values from its own seed, in dtype t.
inline Tensor random_tensor(Shape shape, uint32_t seed, DType t = f32) {
  std::mt19937 rng(seed);
  return random_normal_tensor(std::move(shape), rng, 1).to(t);
}

inline MlpStep make_mlp_step(int64_t in, int64_t hidden_units, int64_t classes, int64_t batch) {
  MlpStep s;
  Graph& g = s.graph;
  Tensor x = g.placeholder(f32, {kUnknownDim, in}, "x");
  Tensor y = g.placeholder(i64, {kUnknownDim}, "y");
  Tensor seed = g.placeholder(i64, {}, "seed");
  Tensor lr = g.placeholder(f32, {}, "learning_rate");
  Tensor iteration = g.placeholder(f32, {}, "iteration");
  std::vector<Shape> shapes = {
      {in, hidden_units}, {hidden_units}, {hidden_units, classes}, {classes}};
  std::vector<Tensor> params, m, v;
  for (size_t i = 0; i < shapes.size(); ++i) {
    params.push_back(g.placeholder(f32, shapes[i], "param" + std::to_string(i)));
    m.push_back(g.placeholder(f32, shapes[i], "param" + std::to_string(i) + "/Adam/m"));
    v.push_back(g.placeholder(f32, shapes[i], "param" + std::to_string(i) + "/Adam/v"));
  }
  Tensor hidden = relu(matmul(x, params[0]) + params[1]);
  Tensor keep = random_bernoulli_like(hidden, seed + Tensor::scalar<int64_t>(1), 0.5, bool_);
  Tensor dropped = where(keep, hidden * (1.0 / 0.5), zeros_like(hidden));
  Tensor logits = matmul(dropped, params[2]) + params[3];
  Tensor loss = nn::SparseCategoricalCrossentropy(/*from_logits=*/true)(y, logits);
  std::vector<Tensor> grads = gradients(loss, params);
  optim::Adam adam(1e-3);
  s.fetches = {loss};
  for (size_t i = 0; i < params.size(); ++i) {
    auto [value, slots] = adam.apply(params[i], grads[i], {m[i], v[i]}, lr, iteration);
    s.fetches.push_back(value);
    for (const Tensor& slot : slots) s.fetches.push_back(slot);
  }

  std::mt19937 rng(42);
  s.feeds = {{x, random_normal_tensor({batch, in}, rng, 1)},
             {seed, Tensor::scalar<int64_t>(1234)},
             {lr, Tensor::scalar<float>(1e-3f)},
             {iteration, Tensor::scalar<float>(3)}};
  std::vector<int64_t> labels(batch);
  for (int64_t& l : labels) l = static_cast<int64_t>(rng() % classes);
  s.feeds.push_back({y, Tensor::from_vector(labels)});
  for (size_t i = 0; i < params.size(); ++i) {
    s.feeds.push_back({params[i], random_normal_tensor(shapes[i], rng, 0.1f)});
    s.feeds.push_back({m[i], random_normal_tensor(shapes[i], rng, 0.01f)});
    s.feeds.push_back({v[i], abs(random_normal_tensor(shapes[i], rng, 0.01f))});
  }
  return s;
}

}  // namespace kiln::test_models
