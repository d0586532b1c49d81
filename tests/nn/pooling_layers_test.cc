// 1-d and global pooling layers: values, shapes, gradients, compiled models, summary rows,
// configs, errors, and their layer zoo cases.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/nn/layer_checks.h"
#include "tests/nn/layer_zoo.h"
#include "tests/testing/values.h"

namespace kiln::nn::testing {
namespace {

using test_values::counting;
using test_values::expect_values;
using test_values::values;
using ::testing::HasSubstr;

// [1, 5 steps, 2 channels]: channel 0 is 1, 3, 2, 5, 4 and channel 1 its negation.
Tensor steps() { return values({1, 5, 2}, {1, -1, 3, -3, 2, -2, 5, -5, 4, -4}); }

// ---- MaxPool1D, AveragePool1D ---------------------------------------------------------------

TEST(MaxPool1D, TakesTheMaximumOfEachWindowOfSteps) {
  MaxPool1D pool;
  EXPECT_EQ(pool.type_name(), "MaxPooling1D");
  EXPECT_EQ(pool.name(), "max_pooling1d");
  // Windows {1,3} and {2,5}; the fifth step is left over.
  expect_values(pool(steps()), {1, 2, 2}, {3, -1, 5, -2});
  expect_values(MaxPool1D(2, 1)(steps()), {1, 4, 2}, {3, -1, 3, -2, 5, -2, 5, -4});
  // "same": a third window holds the fifth step alone.
  expect_values(MaxPool1D(2, std::nullopt, "same")(steps()), {1, 3, 2}, {3, -1, 5, -2, 4, -4});
}

TEST(AveragePool1D, AveragesEachWindowCountingOnlyStepsInside) {
  AveragePool1D pool;
  EXPECT_EQ(pool.type_name(), "AveragePooling1D");
  EXPECT_EQ(pool.name(), "average_pooling1d");
  expect_values(pool(steps()), {1, 2, 2}, {2, -2, 3.5, -3.5});
  expect_values(AveragePool1D(3, 2)(steps()), {1, 2, 2}, {2, -2, 11.0 / 3, -11.0 / 3});
  expect_values(AveragePool1D(2, std::nullopt, "same")(steps()), {1, 3, 2},
                {2, -2, 3.5, -3.5, 4, -4});
}

TEST(Pool1D, SymbolicShapesKeepTheUnknownBatch) {
  EXPECT_EQ(MaxPool1D()(Input({5, 2})).shape(), (Shape{kUnknownDim, 2, 2}));
  EXPECT_EQ(MaxPool1D(2, 1, "same")(Input({5, 2})).shape(), (Shape{kUnknownDim, 5, 2}));
  EXPECT_EQ(AveragePool1D(3, 2)(Input({7, 4})).shape(), (Shape{kUnknownDim, 3, 4}));
}

TEST(Pool1D, GradientsMatchFiniteDifferences) {
  for (const std::string& padding : {"valid", "same"}) {
    SCOPED_TRACE(padding);
    MaxPool1D max_pool(3, 2, padding);
    expect_gradients_match_finite_differences(max_pool, {random_normal({2, 6, 3}, 1, 0, 1, f64)});
    AveragePool1D avg_pool(3, 2, padding);
    expect_gradients_match_finite_differences(avg_pool, {random_normal({2, 6, 3}, 2, 0, 1, f64)});
  }
}

TEST(Pool1D, ModelsCompiledMatchInterpretedAndTheLayers) {
  for (LayerRef pool : {LayerRef(MaxPool1D(2)), LayerRef(AveragePool1D(2, 1, "same"))}) {
    SCOPED_TRACE(pool->type_name());
    Tensor in = Input({6, 3});
    Dense dense = seeded_dense(4, "dense", 1);
    Model model(in, (*pool)(dense(in)));
    Tensor x = random_normal({5, 6, 3}, 2);
    Tensor got = expect_compiled_matches_interpreted(model, x);
    EXPECT_TRUE(allclose(got, (*pool)(dense(x)), 1e-5, 1e-6));
    EXPECT_THAT(summary_row(model, pool->name(), pool->type_name()),
                HasSubstr(pool->type_name() == "MaxPooling1D" ? "(None, 3, 4)" : "(None, 6, 4)"));
  }
}

TEST(Pool1D, ConfigRebuildsThem) {
  MaxPool1D max_pool(3, 1, "same");
  EXPECT_EQ(max_pool.config().get_int("pool_size"), 3);
  EXPECT_EQ(max_pool.config().get_int("strides"), 1);
  EXPECT_EQ(max_pool.config().get_string("padding"), "same");
  expect_config_rebuilds(max_pool, {random_normal({2, 7, 3}, 1)});
  AveragePool1D avg_pool(2, 2, "same");  // strides default to the pool size
  EXPECT_TRUE(avg_pool.config() == AveragePool1D(2, std::nullopt, "same").config());
  expect_config_rebuilds(avg_pool, {random_normal({2, 7, 3}, 1)});
}

TEST(Pool1D, BadArgumentsAndInputsNameTheLayerAndValues) {
  test_values::expect_error([] { MaxPool1D(0); }, ErrorCode::kInvalidArgument,
                            "MaxPooling1D: pool_size and strides must be positive, got 0 and 0");
  test_values::expect_error(
      [] { AveragePool1D(2, -1); }, ErrorCode::kInvalidArgument,
      "AveragePooling1D: pool_size and strides must be positive, got 2 and -1");
  test_values::expect_error([] { MaxPool1D(2, 2, "full"); }, ErrorCode::kInvalidArgument,
                            "MaxPooling1D: padding must be \"valid\" or \"same\", got \"full\"");
  expect_call_error(MaxPool1D(), {zeros({1, 4, 4, 2})},
                    "MaxPooling1D 'max_pooling1d' expects input [batch, steps, channels], got "
                    "[1,4,4,2]");
  expect_call_error(AveragePool1D(), {zeros({1, 4, 2}), zeros({1, 4, 2})},
                    "AveragePooling1D 'average_pooling1d' takes one input, got 2");
  // A window longer than the steps: the op's error, with the layer and input in front.
  expect_call_error(MaxPool1D(4), {zeros({1, 3, 2})},
                    "MaxPooling1D 'max_pooling1d' on input [1,3,2]: ");
}

// ---- global pooling -------------------------------------------------------------------------

TEST(GlobalPooling, ReducesOverStepsOrPositions) {
  // Example 0 has steps [1,2], [3,4], [5,6]; example 1 has [7,8], [9,10], [11,12].
  Tensor x1 = counting({2, 3, 2});
  expect_values(GlobalAveragePooling1D()(x1), {2, 2}, {3, 4, 9, 10});
  expect_values(GlobalMaxPooling1D()(x1), {2, 2}, {5, 6, 11, 12});
  expect_values(GlobalAveragePooling1D(true)(x1), {2, 1, 2}, {3, 4, 9, 10});
  // Positions [1,2], [3,4], [5,6], [7,8].
  Tensor x2 = counting({1, 2, 2, 2});
  expect_values(GlobalAveragePooling2D()(x2), {1, 2}, {4, 5});
  expect_values(GlobalMaxPooling2D()(x2), {1, 2}, {7, 8});
  expect_values(GlobalMaxPooling2D(true)(x2), {1, 1, 1, 2}, {7, 8});
}

TEST(GlobalPooling, NamesAndSymbolicShapesFollowKeras) {
  struct Case {
    LayerRef layer;
    std::string type, name;
    Shape input, output;
  };
  const std::vector<Case> cases = {
      {GlobalAveragePooling1D(),
       "GlobalAveragePooling1D",
       "global_average_pooling1d",
       {5, 3},
       {kUnknownDim, 3}},
      {GlobalMaxPooling1D(true),
       "GlobalMaxPooling1D",
       "global_max_pooling1d",
       {5, 3},
       {kUnknownDim, 1, 3}},
      {GlobalAveragePooling2D(true),
       "GlobalAveragePooling2D",
       "global_average_pooling2d",
       {4, 5, 3},
       {kUnknownDim, 1, 1, 3}},
      {GlobalMaxPooling2D(),
       "GlobalMaxPooling2D",
       "global_max_pooling2d",
       {4, 5, 3},
       {kUnknownDim, 3}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.type);
    EXPECT_EQ(c.layer->type_name(), c.type);
    EXPECT_EQ(c.layer->name(), c.name);
    EXPECT_EQ((*c.layer)(Input(c.input)).shape(), c.output);
  }
}

std::vector<LayerRef> global_pooling_layers() {
  return {GlobalAveragePooling1D(), GlobalMaxPooling1D(true), GlobalAveragePooling2D(true),
          GlobalMaxPooling2D()};
}

// An input for `layer`: [2, 4, 3] for the 1-d layers, [2, 3, 4, 2] for the 2-d ones.
Shape example_shape(const Layer& layer) {
  return layer.type_name().ends_with("1D") ? Shape{2, 4, 3} : Shape{2, 3, 4, 2};
}

TEST(GlobalPooling, GradientsMatchFiniteDifferences) {
  for (LayerRef layer : global_pooling_layers()) {
    SCOPED_TRACE(layer->type_name());
    expect_gradients_match_finite_differences(*layer,
                                              {random_normal(example_shape(*layer), 1, 0, 1, f64)});
  }
}

TEST(GlobalPooling, ModelsCompiledMatchInterpretedAndTheLayers) {
  for (LayerRef layer : global_pooling_layers()) {
    SCOPED_TRACE(layer->type_name());
    Shape shape = example_shape(*layer);
    Tensor in = Input(Shape(shape.begin() + 1, shape.end()));
    Dense dense = seeded_dense(5, "dense", 1);
    Model model(in, (*layer)(dense(in)));
    Tensor x = random_normal(shape, 2);
    Tensor got = expect_compiled_matches_interpreted(model, x);
    EXPECT_TRUE(allclose(got, (*layer)(dense(x)), 1e-5, 1e-6));
    const bool keepdims = layer->config().get_bool("keepdims");
    const std::string want = !keepdims           ? "(None, 5)"
                             : shape.size() == 3 ? "(None, 1, 5)"
                                                 : "(None, 1, 1, 5)";
    EXPECT_THAT(summary_row(model, layer->name(), layer->type_name()), HasSubstr(want));
  }
}

TEST(GlobalPooling, ConfigRebuildsThem) {
  for (LayerRef layer : global_pooling_layers()) {
    SCOPED_TRACE(layer->type_name());
    expect_config_rebuilds(*layer, {random_normal(example_shape(*layer), 1)});
  }
  EXPECT_TRUE(GlobalMaxPooling1D(true).config().get_bool("keepdims"));
  EXPECT_FALSE(GlobalMaxPooling1D().config().get_bool("keepdims"));
}

TEST(GlobalPooling, InputsOfTheWrongRankNameTheLayer) {
  expect_call_error(GlobalAveragePooling2D(), {zeros({2, 3, 4})},
                    "GlobalAveragePooling2D 'global_average_pooling2d' expects input [batch, h, w, "
                    "channels], got [2,3,4]");
  expect_call_error(GlobalMaxPooling1D(), {zeros({2, 3})},
                    "GlobalMaxPooling1D 'global_max_pooling1d' expects input [batch, steps, "
                    "channels], got [2,3]");
}

// ---- the layer zoo: Dense over each step or position, pooling, a Dense head -----------------

// x [64, steps..., 3]; y [64, 2] a linear function of x's mean over the steps.
std::function<std::pair<Tensor, Tensor>()> pooled_targets(Shape x_shape, Axes steps) {
  return [x_shape, steps] {
    Tensor x = random_normal(x_shape, 21);
    return std::pair{x, matmul(mean(x, steps), random_normal({3, 2}, 22))};
  };
}

KILN_ZOO_CASE(
    "max_pooling1d",
    [] {
      return std::make_unique<Sequential>(
          std::vector<LayerRef>{Dense(4, "tanh"), MaxPool1D(2), Flatten(), Dense(2)});
    },
    pooled_targets({64, 6, 3}, {1}));
KILN_ZOO_CASE(
    "average_pooling1d",
    [] {
      return std::make_unique<Sequential>(std::vector<LayerRef>{
          Dense(4, "tanh"), AveragePool1D(3, 2, "same"), Flatten(), Dense(2)});
    },
    pooled_targets({64, 6, 3}, {1}));
KILN_ZOO_CASE(
    "global_average_pooling1d",
    [] {
      return std::make_unique<Sequential>(
          std::vector<LayerRef>{Dense(4, "tanh"), GlobalAveragePooling1D(), Dense(2)});
    },
    pooled_targets({64, 6, 3}, {1}));
KILN_ZOO_CASE(
    "global_max_pooling1d",
    [] {
      return std::make_unique<Sequential>(
          std::vector<LayerRef>{Dense(4, "tanh"), GlobalMaxPooling1D(true), Flatten(), Dense(2)});
    },
    pooled_targets({64, 6, 3}, {1}));
KILN_ZOO_CASE(
    "global_average_pooling2d",
    [] {
      return std::make_unique<Sequential>(
          std::vector<LayerRef>{Dense(4, "tanh"), GlobalAveragePooling2D(), Dense(2)});
    },
    pooled_targets({64, 3, 4, 3}, {1, 2}));
KILN_ZOO_CASE(
    "global_max_pooling2d",
    [] {
      return std::make_unique<Sequential>(
          std::vector<LayerRef>{Dense(4, "tanh"), GlobalMaxPooling2D(true), Flatten(), Dense(2)});
    },
    pooled_targets({64, 3, 4, 3}, {1, 2}));

}  // namespace
}  // namespace kiln::nn::testing
