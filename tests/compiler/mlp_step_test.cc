// Optimizing a real training step: the graph model.cc traces for Sequential
// [Dense(128, relu), Dropout(0.5), Dense(10)] with sparse categorical cross-entropy and Adam.
// Model does not expose its step graph, so this traces the same computation from the same
// public pieces (the layers' formulas, the loss, kiln::gradients, Adam::apply).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "kiln/nn.h"
#include "kiln/optim.h"
#include "tests/compiler/compiler_test_util.h"

namespace kiln::compiler {
namespace {

using testing::expect_bitwise_equal;

Tensor random_tensor(Shape shape, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0, scale);
  std::vector<float> v(num_elements(shape));
  for (float& x : v) x = normal(rng);
  return Tensor::from_vector(v, shape);
}

TEST(MlpStepTest, OptimizingTheTrainingStepRemovesNodesAndKeepsEveryBit) {
  constexpr int64_t kIn = 64, kHidden = 128, kClasses = 10, kBatch = 16;
  Graph g{"step"};
  Tensor x = g.placeholder(f32, {kUnknownDim, kIn}, "x");
  Tensor y = g.placeholder(i64, {kUnknownDim}, "y");
  Tensor seed = g.placeholder(i64, {}, "seed");
  Tensor lr = g.placeholder(f32, {}, "learning_rate");
  Tensor iteration = g.placeholder(f32, {}, "iteration");
  std::vector<Shape> shapes = {{kIn, kHidden}, {kHidden}, {kHidden, kClasses}, {kClasses}};
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
  std::vector<Tensor> fetches = {loss};
  for (size_t i = 0; i < params.size(); ++i) {
    auto [value, slots] = adam.apply(params[i], grads[i], {m[i], v[i]}, lr, iteration);
    fetches.push_back(value);
    for (const Tensor& s : slots) fetches.push_back(s);
  }

  std::mt19937 rng(42);
  FeedList feeds = {{x, random_tensor({kBatch, kIn}, rng, 1)},
                    {seed, Tensor::scalar<int64_t>(1234)},
                    {lr, Tensor::scalar<float>(1e-3f)},
                    {iteration, Tensor::scalar<float>(3)}};
  std::vector<int64_t> labels(kBatch);
  for (int64_t& l : labels) l = static_cast<int64_t>(rng() % kClasses);
  feeds.push_back({y, Tensor::from_vector(labels)});
  for (size_t i = 0; i < params.size(); ++i) {
    feeds.push_back({params[i], random_tensor(shapes[i], rng, 0.1f)});
    feeds.push_back({m[i], random_tensor(shapes[i], rng, 0.01f)});
    feeds.push_back({v[i], abs(random_tensor(shapes[i], rng, 0.01f))});
  }

  CompiledGraph c = optimize(g, fetches);
  std::printf("[ mlp step ] %d nodes before, %d after optimize\n", c.nodes_before,
              c.graph.num_nodes());
  EXPECT_LT(c.graph.num_nodes(), c.nodes_before);
  expect_bitwise_equal(c.run(feeds), g.run(feeds, fetches));
}

}  // namespace
}  // namespace kiln::compiler
