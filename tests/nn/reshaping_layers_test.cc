// Reshaping layers: values, shapes, gradients, compiled models, summary rows, configs, errors,
// and their layer zoo cases.
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
using test_values::expect_error;
using test_values::expect_values;
using test_values::values;
using ::testing::HasSubstr;

// ---- values ---------------------------------------------------------------------------------

TEST(Reshape, KeepsTheBatchAndInfersOneDimension) {
  Reshape reshape({3, 2});
  EXPECT_EQ(reshape.name(), "reshape");
  expect_values(reshape(counting({2, 6})), {2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  EXPECT_EQ(Reshape({-1, 2})(counting({2, 2, 3})).shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(Reshape({4, -1})(Input({2, 6})).shape(), (Shape{kUnknownDim, 4, 3}));
}

TEST(Permute, ReordersTheDimensionsAfterTheBatch) {
  Permute permute({2, 1});
  EXPECT_EQ(permute.name(), "permute");
  expect_values(permute(counting({1, 2, 3})), {1, 3, 2}, {1, 4, 2, 5, 3, 6});
  EXPECT_EQ(Permute({3, 1, 2})(zeros({1, 2, 3, 4})).shape(), (Shape{1, 4, 2, 3}));
  EXPECT_EQ(Permute({2, 1})(Input({5, 3})).shape(), (Shape{kUnknownDim, 3, 5}));
}

TEST(RepeatVector, RepeatsEachExampleNTimes) {
  RepeatVector repeat(3);
  EXPECT_EQ(repeat.name(), "repeat_vector");
  expect_values(repeat(counting({2, 2})), {2, 3, 2}, {1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4});
  EXPECT_EQ(repeat(Input({5})).shape(), (Shape{kUnknownDim, 3, 5}));
}

TEST(UpSampling2D, RepeatsRowsAndColumns) {
  UpSampling2D up({2, 3});
  EXPECT_EQ(up.name(), "up_sampling2d");
  expect_values(up(counting({1, 2, 2, 1})), {1, 4, 6, 1},
                {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4});
  EXPECT_EQ(UpSampling2D()(Input({3, 4, 2})).shape(), (Shape{kUnknownDim, 6, 8, 2}));
}

TEST(ZeroPadding2D, AddsZerosAtEachEdge) {
  ZeroPadding2D pad({{1, 0}, {0, 2}});
  EXPECT_EQ(pad.name(), "zero_padding2d");
  expect_values(pad(counting({1, 2, 2, 1})), {1, 3, 4, 1}, {0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0});
  EXPECT_EQ(ZeroPadding2D()(zeros({1, 2, 2, 3})).shape(), (Shape{1, 4, 4, 3}));
  // {h, w}: h rows at the top and at the bottom, w columns at the left and at the right.
  EXPECT_EQ(ZeroPadding2D({1, 2})(Input({2, 2, 3})).shape(), (Shape{kUnknownDim, 4, 6, 3}));
}

TEST(Cropping2D, RemovesRowsAndColumnsAtEachEdge) {
  Cropping2D crop({{1, 0}, {0, 1}});
  EXPECT_EQ(crop.name(), "cropping2d");
  // 1 2 3 / 4 5 6 / 7 8 9 without the top row and the right column.
  expect_values(crop(counting({1, 3, 3, 1})), {1, 2, 2, 1}, {4, 5, 7, 8});
  expect_values(Cropping2D(1)(counting({1, 3, 3, 1})), {1, 1, 1, 1}, {5});
  expect_values(Cropping2D({1, 0})(counting({1, 3, 3, 1})), {1, 1, 3, 1}, {4, 5, 6});
  EXPECT_EQ(Cropping2D({{1, 2}, {0, 3}})(Input({5, 6, 2})).shape(), (Shape{kUnknownDim, 2, 3, 2}));
}

// ---- every layer: gradients, a compiled model, its summary row, config ----------------------

struct Case {
  LayerRef layer;
  Shape input;                // without the batch
  std::string summary_shape;  // of the layer's output in a model: Dense(4) over the input first
};

std::vector<Case> cases() {
  return {
      {Reshape({-1, 2}), {2, 6}, "(None, 4, 2)"},
      {Permute({2, 1}), {5, 3}, "(None, 4, 5)"},
      {RepeatVector(3), {3}, "(None, 3, 4)"},
      {UpSampling2D({2, 1}), {3, 2, 2}, "(None, 6, 2, 4)"},
      {ZeroPadding2D({{1, 0}, {2, 1}}), {3, 2, 2}, "(None, 4, 5, 4)"},
      {Cropping2D({{1, 0}, {0, 1}}), {3, 3, 2}, "(None, 2, 2, 4)"},
  };
}

Shape with_batch(int64_t batch, const Shape& shape) {
  Shape out = {batch};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

TEST(ReshapingLayers, GradientsMatchFiniteDifferences) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.layer->type_name());
    expect_gradients_match_finite_differences(
        *c.layer, {random_normal(with_batch(2, c.input), 1, 0, 1, f64)});
  }
}

// While a model traces its steps the batch is unknown: Cropping2D then gathers instead of
// slicing, and the other layers keep the batch in their ops.
TEST(ReshapingLayers, ModelsCompiledMatchInterpretedAndTheLayers) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.layer->type_name());
    Tensor in = Input(c.input);
    Dense dense = seeded_dense(4, "dense", 1);
    Model model(in, (*c.layer)(dense(in)));
    Tensor x = random_normal(with_batch(3, c.input), 2);
    Tensor got = expect_compiled_matches_interpreted(model, x);
    EXPECT_TRUE(allclose(got, (*c.layer)(dense(x)), 1e-5, 1e-6));
    EXPECT_THAT(summary_row(model, c.layer->name(), c.layer->type_name()),
                HasSubstr(c.summary_shape));
  }
}

TEST(ReshapingLayers, ConfigRebuildsThem) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.layer->type_name());
    expect_config_rebuilds(*c.layer, {random_normal(with_batch(2, c.input), 1)});
  }
  EXPECT_EQ(Reshape({-1, 2}).config().get_ints("target_shape"), (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(Permute({2, 1}).config().get_ints("dims"), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(RepeatVector(3).config().get_int("n"), 3);
  EXPECT_EQ(UpSampling2D({2, 1}).config().get_ints("size"), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(ZeroPadding2D({{1, 0}, {2, 3}}).config().get_ints("padding"),
            (std::vector<int64_t>{1, 0, 2, 3}));
  EXPECT_EQ(Cropping2D({1, 2}).config().get_ints("cropping"), (std::vector<int64_t>{1, 1, 2, 2}));
}

// ---- errors ---------------------------------------------------------------------------------

TEST(ReshapingLayers, BadArgumentsNameTheLayerAndValue) {
  expect_error(
      [] {
        Reshape({-1, -1});
      },
      ErrorCode::kInvalidArgument,
      "Reshape: target_shape [-1,-1] must hold positive sizes and at most one -1");
  expect_error([] { Reshape({0, 2}); }, ErrorCode::kInvalidArgument, "target_shape [0,2]");
  expect_error(
      [] {
        Permute({1, 1});
      },
      ErrorCode::kInvalidArgument,
      "Permute: dims must be a permutation of 1..2 (1-based, without the batch "
      "dimension), got [1,1]");
  expect_error([] { Permute({0, 1}); }, ErrorCode::kInvalidArgument, "got [0,1]");
  expect_error([] { RepeatVector(0); }, ErrorCode::kInvalidArgument,
               "RepeatVector: n must be positive, got 0");
  expect_error([] { UpSampling2D({2}); }, ErrorCode::kInvalidArgument,
               "UpSampling2D: size must be two positive values {rows, cols}, got [2]");
  expect_error([] { UpSampling2D({2, 0}); }, ErrorCode::kInvalidArgument, "got [2,0]");
  expect_error([] { ZeroPadding2D(-1); }, ErrorCode::kInvalidArgument,
               "ZeroPadding2D: padding must not be negative, got {{-1,-1},{-1,-1}}");
  expect_error(
      [] {
        Cropping2D({{0, 0}, {1, -2}});
      },
      ErrorCode::kInvalidArgument, "Cropping2D: cropping must not be negative, got {{0,0},{1,-2}}");
  expect_error(
      [] {
        layer_from_config("ZeroPadding2D", {{"padding", Axes{1, 2}}}, "pad");
      },
      ErrorCode::kInvalidArgument,
      "layer 'pad' (ZeroPadding2D): 'padding' must hold 4 values (top, bottom, left, "
      "right), got [1,2]");
}

TEST(ReshapingLayers, InputsThatDoNotFitNameTheLayerAndShapes) {
  expect_call_error(Reshape({4}), {zeros({2, 6})},
                    "Reshape 'reshape': cannot reshape input [2,6] to target_shape [4]: 6 values "
                    "per example, the target holds 4");
  expect_call_error(Reshape({-1, 4}), {zeros({2, 6})},
                    "6 values per example are not a multiple of 4");
  expect_call_error(Reshape({-1, 2}), {Input({kUnknownDim, 2})},
                    "the -1 needs the input's dimensions after the batch to be known");
  expect_call_error(Permute({2, 1}), {zeros({1, 2, 3, 4})},
                    "Permute 'permute' with dims [2,1] expects input of rank 3 (with the batch), "
                    "got [1,2,3,4]");
  expect_call_error(RepeatVector(2), {zeros({1, 2, 3})},
                    "RepeatVector 'repeat_vector' expects input [batch, features], got [1,2,3]");
  expect_call_error(UpSampling2D(), {Input({kUnknownDim, 4, 2})},
                    "UpSampling2D 'up_sampling2d' needs a known height and width, got input "
                    "[?,?,4,2]");
  expect_call_error(ZeroPadding2D(), {zeros({2, 3})},
                    "ZeroPadding2D 'zero_padding2d' expects input [batch, h, w, channels], got "
                    "[2,3]");
  expect_call_error(Cropping2D({{2, 1}, {0, 0}}), {zeros({1, 3, 3, 1})},
                    "Cropping2D 'cropping2d': cropping {{2,1},{0,0}} leaves no rows of input "
                    "[1,3,3,1]");
  expect_call_error(Cropping2D({0, 2}), {zeros({1, 3, 4, 1})}, "leaves no columns");
}

// ---- the layer zoo --------------------------------------------------------------------------

// x [64, shape...]; y [64, 2] a linear function of x.
std::function<std::pair<Tensor, Tensor>()> linear_targets(Shape shape) {
  return [shape] {
    Tensor x = random_normal(with_batch(64, shape), 31);
    return std::pair{x, matmul(flatten(x, 1), random_normal({num_elements(shape), 2}, 32))};
  };
}

std::function<std::unique_ptr<Model>()> sequential(std::function<std::vector<LayerRef>()> make) {
  return [make] { return std::make_unique<Sequential>(make()); };
}

KILN_ZOO_CASE("reshape", sequential([] {
                return std::vector<LayerRef>{Dense(8, "tanh"), Reshape({4, -1}), Dense(3, "tanh"),
                                             Flatten(), Dense(2)};
              }),
              linear_targets({6}));
KILN_ZOO_CASE(
    "permute", sequential([] {
      return std::vector<LayerRef>{Permute({2, 1}), Dense(3, "tanh"), Flatten(), Dense(2)};
    }),
    linear_targets({4, 3}));
KILN_ZOO_CASE("repeat_vector", sequential([] {
                return std::vector<LayerRef>{Dense(4, "tanh"), RepeatVector(3), Dense(2, "tanh"),
                                             Flatten(), Dense(2)};
              }),
              linear_targets({5}));
KILN_ZOO_CASE("up_sampling2d", sequential([] {
                return std::vector<LayerRef>{UpSampling2D(), Dense(3, "tanh"), Flatten(), Dense(2)};
              }),
              linear_targets({3, 3, 2}));
KILN_ZOO_CASE(
    "zero_padding2d", sequential([] {
      return std::vector<LayerRef>{Dense(3, "tanh"), ZeroPadding2D({1, 2}), Flatten(), Dense(2)};
    }),
    linear_targets({3, 3, 2}));
KILN_ZOO_CASE("cropping2d", sequential([] {
                return std::vector<LayerRef>{Dense(3, "tanh"), Cropping2D({{1, 0}, {0, 1}}),
                                             Flatten(), Dense(2)};
              }),
              linear_targets({4, 4, 2}));

}  // namespace
}  // namespace kiln::nn::testing
