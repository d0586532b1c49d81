// Checks for layers with weights (tests/nn/conv_layers_test.cc and its neighbours): gradients
// with respect to the input and every weight against central differences in f64, compiled
// against interpreted predictions, summary rows, and a rebuild from config() that computes the
// same output given the same weights.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace kiln::nn::trainable_testing {

// x's elements as doubles (any floating dtype).
inline std::vector<double> doubles(const Tensor& x) { return x.to(f64).to_vector<double>(); }

// The layer, called on x in a graph where x and every weight are f64 placeholders, gives
// sum(layer(x) * w) for fixed random w; its gradients with respect to x and each weight, from
// kiln's autodiff, must match central differences. `training` with a fixed seed keeps random
// layers' masks fixed. The layer is built by an eager call first.
inline void expect_gradients_match(Layer& layer, const Tensor& x, bool training = false) {
  CallContext eager;
  const Shape out_shape = layer(x, eager).shape();
  const std::vector<Variable> weights = layer.weights();
  const Tensor w = random_normal(out_shape, 20240611, 0, 1, f64);

  // The values of x and each weight, perturbed one element at a time below.
  std::vector<std::vector<double>> values = {doubles(x)};
  std::vector<Shape> shapes = {x.shape()};
  for (const Variable& v : weights) {
    values.push_back(doubles(v.value()));
    shapes.push_back(v.shape());
  }

  Graph g("layer_gradcheck");
  auto guard = g.as_default();  // from here on, ops record into g
  std::vector<Tensor> params = {g.placeholder(f64, x.shape(), "x")};
  std::map<const void*, Tensor> placeholder_of;
  for (const Variable& v : weights) {
    params.push_back(g.placeholder(f64, v.shape(), v.name()));
    placeholder_of[v.id()] = params.back();
  }
  CallContext ctx(training, Tensor::scalar<int64_t>(7),
                  [&](const Variable& v) { return placeholder_of.at(v.id()); });
  const Tensor y = layer(params[0], ctx);
  ASSERT_EQ(y.shape(), out_shape);
  const Tensor loss = sum(y * w);
  const std::vector<Tensor> grads = gradients(loss, params);

  auto feeds_with = [&](size_t i, size_t j, double delta) {
    FeedList feeds;
    for (size_t k = 0; k < params.size(); ++k) {
      std::vector<double> v = values[k];
      if (k == i) v[j] += delta;
      feeds.emplace_back(params[k], Tensor::from_vector(v, shapes[k]));
    }
    return feeds;
  };
  const std::vector<Tensor> analytic = g.run(feeds_with(0, 0, 0), grads);
  constexpr double kStep = 1e-6;
  for (size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE(i == 0 ? std::string("input") : "weight " + weights[i - 1].name());
    const std::vector<double> rule = analytic[i].to_vector<double>();
    ASSERT_EQ(rule.size(), values[i].size());
    int wrong = 0;
    for (size_t j = 0; j < values[i].size(); ++j) {
      const double numeric = (g.run(feeds_with(i, j, kStep), loss).item<double>() -
                              g.run(feeds_with(i, j, -kStep), loss).item<double>()) /
                             (2 * kStep);
      if (std::abs(rule[j] - numeric) <= 1e-6 * (1 + std::abs(numeric))) continue;
      if (++wrong <= 4) {
        ADD_FAILURE() << "element " << j << ": autodiff " << rule[j] << ", central differences "
                      << numeric;
      }
    }
    EXPECT_EQ(wrong, 0) << "elements where autodiff and central differences differ";
  }
}

// The model's predictions for x compiled and interpreted agree within 1e-5; returns them.
inline Tensor expect_modes_agree(Model& model, const Tensor& x) {
  model.set_execution_mode(ExecutionMode::kInterpreted);
  const Tensor interpreted = model.predict(x);
  model.set_execution_mode(ExecutionMode::kCompiled);
  const Tensor compiled = model.predict(x);
  EXPECT_EQ(compiled.shape(), interpreted.shape());
  EXPECT_TRUE(allclose(compiled, interpreted, 1e-5, 1e-5))
      << "compiled " << compiled.str() << "\ninterpreted " << interpreted.str();
  return compiled;
}

// The line of model.summary() showing "<layer> (<type>)", or "" when there is none.
inline std::string row_of(const Model& model, const std::string& layer, const std::string& type) {
  std::istringstream lines(model.summary());
  const std::string label = " " + layer + " (" + type + ") ";
  for (std::string line; std::getline(lines, line);)
    if (line.find(label) != std::string::npos) return line;
  return "";
}

// layer_from_config(type_name, config, name) rebuilds a layer of the same class, name, config
// and weight names and shapes which, given the original's weight values, computes the same
// output for x. `layer` must be built.
inline void expect_rebuilt_from_config(Layer& layer, const Tensor& x) {
  LayerPtr rebuilt = layer_from_config(layer.type_name(), layer.config(), layer.name());
  EXPECT_EQ(rebuilt->type_name(), layer.type_name());
  EXPECT_EQ(rebuilt->name(), layer.name());
  EXPECT_TRUE(rebuilt->config() == layer.config()) << rebuilt->config().str() << "\n"
                                                   << layer.config().str();
  CallContext ctx;
  (*rebuilt)(x, ctx);  // builds
  const std::vector<Variable>& mine = layer.weights();
  const std::vector<Variable>& theirs = rebuilt->weights();
  ASSERT_EQ(theirs.size(), mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_EQ(theirs[i].name(), mine[i].name());
    Variable(theirs[i]).assign(mine[i].value());
  }
  const Tensor want = layer(x, ctx);
  const Tensor got = (*rebuilt)(x, ctx);
  EXPECT_EQ(got.shape(), want.shape());
  EXPECT_TRUE(allclose(got, want, 0, 0)) << got.str() << "\n" << want.str();
}

}  // namespace kiln::nn::trainable_testing
