// Checks every layer test runs: gradients against central differences in f64, a model's
// compiled predictions against the interpreter's, its summary row, and a rebuild from config().
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/testing/values.h"

namespace kiln::nn::testing {

// A Dense layer with a name and initial weights of its own: the layers of a functional model
// are not seeded by the model, so two branches would otherwise start equal.
inline Dense seeded_dense(int64_t units, const std::string& name, uint64_t seed,
                          const std::string& activation = "") {
  Dense d(units, activation);
  d.set_name(name);
  d.set_seed(seed);
  return d;
}

// The gradient of sum(layer(xs) * w), w fixed random weights of the output's shape, with
// respect to each input (f64), from kiln's autodiff, matches central differences.
inline void expect_gradients_match_finite_differences(Layer& layer, std::vector<Tensor> xs) {
  CallContext eager;
  const Tensor w = random_normal(layer(xs, eager).shape(), 20240611, 0, 1, f64);
  auto weighted = [&](const std::vector<Tensor>& args) {
    CallContext ctx;
    return sum(layer(args, ctx) * w);
  };
  const std::vector<Tensor> grads = grad(weighted, xs);
  ASSERT_EQ(grads.size(), xs.size());
  constexpr double kStep = 1e-6;
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(grads[i].shape(), xs[i].shape()) << "input " << i;
    const std::vector<double> analytic = grads[i].to_vector<double>();
    std::vector<double> values = xs[i].to_vector<double>();
    for (size_t j = 0; j < values.size(); ++j) {
      auto value_at = [&](double v) {
        std::vector<double> moved = values;
        moved[j] = v;
        std::vector<Tensor> args = xs;
        args[i] = Tensor::from_vector(moved, xs[i].shape());
        return weighted(args).item<double>();
      };
      const double numeric =
          (value_at(values[j] + kStep) - value_at(values[j] - kStep)) / (2 * kStep);
      EXPECT_NEAR(analytic[j], numeric, 1e-6 * (1 + std::abs(numeric)))
          << "input " << i << ", element " << j;
    }
  }
}

// The model's prediction for x, compiled and interpreted (they agree within 1e-6).
inline Tensor expect_compiled_matches_interpreted(Model& model, const Tensor& x) {
  model.set_execution_mode(ExecutionMode::kInterpreted);
  const Tensor interpreted = model.predict(x);
  model.set_execution_mode(ExecutionMode::kCompiled);
  const Tensor compiled = model.predict(x);
  EXPECT_GE(model.compile_stats().compiles, 1) << "the compiled prediction compiled nothing";
  EXPECT_EQ(compiled.shape(), interpreted.shape());
  EXPECT_TRUE(allclose(compiled, interpreted, 0, 1e-6))
      << "compiled " << compiled.str() << "\ninterpreted " << interpreted.str();
  return compiled;
}

// The line of model.summary() showing "<layer> (<type>)", or "" when there is none.
inline std::string summary_row(const Model& model, const std::string& layer,
                               const std::string& type) {
  std::istringstream lines(model.summary());
  const std::string label = " " + layer + " (" + type + ") ";
  for (std::string line; std::getline(lines, line);)
    if (line.find(label) != std::string::npos) return line;
  return "";
}

// layer_from_config(type_name, config, name) rebuilds a layer of the same class, name and
// config that computes the same output for xs.
inline void expect_config_rebuilds(Layer& layer, const std::vector<Tensor>& xs) {
  LayerPtr rebuilt = layer_from_config(layer.type_name(), layer.config(), layer.name());
  EXPECT_EQ(rebuilt->type_name(), layer.type_name());
  EXPECT_EQ(rebuilt->name(), layer.name());
  EXPECT_TRUE(rebuilt->config() == layer.config()) << layer.config().str();
  CallContext ctx;
  const Tensor want = layer(xs, ctx), got = (*rebuilt)(xs, ctx);
  EXPECT_EQ(got.shape(), want.shape());
  EXPECT_TRUE(allclose(got, want, 0, 0)) << got.str() << "\n" << want.str();
}

// Calling (a copy of) `layer` on xs throws kInvalidArgument saying `says`.
inline void expect_call_error(LayerRef layer, const std::vector<Tensor>& xs,
                              const std::string& says) {
  test_values::expect_error([&] { (*layer)(xs); }, ErrorCode::kInvalidArgument, says);
}

}  // namespace kiln::nn::testing
