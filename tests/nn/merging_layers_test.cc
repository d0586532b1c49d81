// Merging layers: values, shapes, gradients, compiled models, summary rows, configs, errors,
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

using test_values::expect_values;
using test_values::values;
using ::testing::HasSubstr;

// ---- Concatenate ------------------------------------------------------------------------------

TEST(Concatenate, JoinsAlongTheLastAxisByDefault) {
  Concatenate concat;
  Tensor a = values({2, 2}, {1, 2, 3, 4}), b = values({2, 1}, {5, 6});
  expect_values(concat({a, b}), {2, 3}, {1, 2, 5, 3, 4, 6});
}

TEST(Concatenate, JoinsAlongAGivenAxis) {
  Concatenate concat(1);
  Tensor a = values({1, 2, 2}, {1, 2, 3, 4}), b = values({1, 1, 2}, {5, 6});
  expect_values(concat({a, b}), {1, 3, 2}, {1, 2, 3, 4, 5, 6});
  // Negative axes count from the end: -3 is the batch.
  expect_values(Concatenate(-3)({a, a}), {2, 2, 2}, {1, 2, 3, 4, 1, 2, 3, 4});
}

TEST(Concatenate, SymbolicShapesKeepTheUnknownBatch) {
  Tensor out = Concatenate()({Input({2, 3}), Input({2, 5})});
  EXPECT_EQ(out.shape(), (Shape{kUnknownDim, 2, 8}));
  EXPECT_EQ(Concatenate(1)({Input({2, 3}), Input({4, 3})}).shape(), (Shape{kUnknownDim, 6, 3}));
}

TEST(Concatenate, GradientsMatchFiniteDifferences) {
  Concatenate concat(1);
  expect_gradients_match_finite_differences(
      concat, {random_normal({2, 3}, 1, 0, 1, f64), random_normal({2, 2}, 2, 0, 1, f64)});
}

TEST(Concatenate, ModelCompiledMatchesInterpretedAndTheLayers) {
  Tensor in = Input({3});
  Dense left = seeded_dense(2, "left", 1), right = seeded_dense(4, "right", 2);
  Model model(in, Concatenate()({left(in), right(in)}));
  Tensor x = random_normal({5, 3}, 3);
  Tensor got = expect_compiled_matches_interpreted(model, x);
  EXPECT_TRUE(allclose(got, concatenate({left(x), right(x)}, 1), 1e-5, 1e-6));
  EXPECT_THAT(summary_row(model, "concatenate", "Concatenate"), HasSubstr("(None, 6)"));
}

TEST(Concatenate, ConfigRebuildsIt) {
  Concatenate concat(-2);
  EXPECT_EQ(concat.config().get_int("axis"), -2);
  expect_config_rebuilds(concat, {random_normal({2, 3, 2}, 1), random_normal({2, 1, 2}, 2)});
}

TEST(Concatenate, MismatchedShapesAndBadAxesNameTheLayerAndShapes) {
  expect_call_error(Concatenate(), {zeros({2, 3}), zeros({3, 3})},
                    "Concatenate 'concatenate': inputs must have one rank and equal sizes except "
                    "on the concatenation axis -1, got [2,3], [3,3]");
  expect_call_error(Concatenate(), {zeros({2, 3}), zeros({2, 3, 1})}, "got [2,3], [2,3,1]");
  expect_call_error(Concatenate(2), {zeros({2, 3}), zeros({2, 3})},
                    "axis 2 is out of range for inputs [2,3], [2,3]");
  // Symbolic inputs are checked when the layer is called on them.
  expect_call_error(Concatenate(1), {Input({2, 3}), Input({4, 5})}, "got [?,2,3], [?,4,5]");
}

// ---- Multiply, Subtract, Average, Maximum, Minimum ---------------------------------------------

struct MergeCase {
  std::string type, name;
  std::function<LayerPtr()> make;
  std::vector<double> of_two;    // for kA and kB
  std::vector<double> of_three;  // for kA, kB and kC; empty: takes two inputs only
};

const std::vector<double> kA = {1, -2, 3, 0.5}, kB = {2, 1, -1, 4}, kC = {0, 5, 2, -1};

std::vector<MergeCase> merge_cases() {
  return {
      {"Multiply",
       "multiply",
       [] { return std::make_shared<Multiply>(); },
       {2, -2, -3, 2},
       {0, -10, -6, -2}},
      {"Subtract", "subtract", [] { return std::make_shared<Subtract>(); }, {-1, -3, 4, -3.5}, {}},
      {"Average",
       "average",
       [] { return std::make_shared<Average>(); },
       {1.5, -0.5, 1, 2.25},
       {1, 4.0 / 3, 4.0 / 3, 3.5 / 3}},
      {"Maximum",
       "maximum",
       [] { return std::make_shared<Maximum>(); },
       {2, 1, 3, 4},
       {2, 5, 3, 4}},
      {"Minimum",
       "minimum",
       [] { return std::make_shared<Minimum>(); },
       {1, -2, -1, 0.5},
       {0, -2, -1, -1}},
  };
}

TEST(MergeLayers, ComputeTheirElementwiseOpOverTwoAndThreeInputs) {
  Tensor a = values({2, 2}, kA), b = values({2, 2}, kB), c = values({2, 2}, kC);
  for (const MergeCase& m : merge_cases()) {
    SCOPED_TRACE(m.type);
    LayerPtr layer = m.make();
    EXPECT_EQ(layer->type_name(), m.type);
    EXPECT_EQ(layer->name(), m.name);
    expect_values((*layer)({a, b}), {2, 2}, m.of_two);
    if (!m.of_three.empty()) expect_values((*layer)({a, b, c}), {2, 2}, m.of_three);
  }
}

TEST(MergeLayers, BroadcastSizeOneDimensionsAsKeras) {
  Tensor a = values({2, 2}, {1, 2, 3, 4}), column = values({2, 1}, {10, 100});
  expect_values(Multiply()({a, column}), {2, 2}, {10, 20, 300, 400});
  expect_values(Subtract()({column, a}), {2, 2}, {9, 8, 97, 96});
  EXPECT_EQ(Maximum()({Input({1, 3}), Input({4, 1})}).shape(), (Shape{kUnknownDim, 4, 3}));
}

TEST(MergeLayers, SymbolicShapesKeepTheUnknownBatch) {
  for (const MergeCase& m : merge_cases()) {
    SCOPED_TRACE(m.type);
    EXPECT_EQ((*m.make())({Input({2, 3}), Input({2, 3})}).shape(), (Shape{kUnknownDim, 2, 3}));
  }
}

TEST(MergeLayers, GradientsMatchFiniteDifferences) {
  for (const MergeCase& m : merge_cases()) {
    SCOPED_TRACE(m.type);
    LayerPtr layer = m.make();
    std::vector<Tensor> xs = {random_normal({2, 3}, 1, 0, 1, f64),
                              random_normal({2, 3}, 2, 0, 1, f64)};
    if (!m.of_three.empty()) xs.push_back(random_normal({2, 3}, 3, 0, 1, f64));
    expect_gradients_match_finite_differences(*layer, xs);
  }
}

TEST(MergeLayers, ModelsCompiledMatchInterpretedAndTheLayers) {
  for (const MergeCase& m : merge_cases()) {
    SCOPED_TRACE(m.type);
    Tensor in = Input({3});
    Dense left = seeded_dense(4, "left", 1), right = seeded_dense(4, "right", 2);
    LayerPtr merge = m.make();
    Model model(in, (*merge)({left(in), right(in)}));
    Tensor x = random_normal({6, 3}, 3);
    Tensor got = expect_compiled_matches_interpreted(model, x);
    EXPECT_TRUE(allclose(got, (*merge)({left(x), right(x)}), 1e-5, 1e-6));
    EXPECT_THAT(summary_row(model, m.name, m.type), HasSubstr("(None, 4)"));
  }
}

TEST(MergeLayers, ConfigRebuildsThem) {
  for (const MergeCase& m : merge_cases()) {
    SCOPED_TRACE(m.type);
    LayerPtr layer = m.make();
    EXPECT_TRUE(layer->config().values().empty());
    expect_config_rebuilds(*layer, {random_normal({2, 3}, 1), random_normal({2, 3}, 2)});
  }
}

TEST(MergeLayers, WrongInputCountsAndShapesNameTheLayer) {
  expect_call_error(Subtract(), {zeros({2}), zeros({2}), zeros({2})},
                    "Subtract 'subtract' takes exactly 2 inputs, got 3 ([2], [2], [2])");
  expect_call_error(Multiply(), {zeros({2, 3})},
                    "Multiply 'multiply' takes at least 2 inputs, got 1");
  expect_call_error(Average(), {zeros({2, 3}), zeros({2, 4})},
                    "Average 'average': inputs have incompatible shapes [2,3], [2,4]: dimension 1 "
                    "is 3 in one input and 4 in another");
  Tensor in = Input({3});
  expect_call_error(Maximum(), {Dense(3)(in), Dense(4)(in)},
                    "Maximum 'maximum': inputs have incompatible shapes [?,3], [?,4]");
}

// ---- the layer zoo: two Dense branches of one input, merged, then a Dense head ----------------

std::function<std::unique_ptr<Model>()> merged_branches(std::function<LayerPtr()> make_merge) {
  return [make_merge] {
    Tensor in = Input({5});
    LayerPtr merge = make_merge();
    Tensor merged =
        (*merge)({seeded_dense(4, "left", 1, "tanh")(in), seeded_dense(4, "right", 2, "tanh")(in)});
    return std::make_unique<Model>(in, seeded_dense(2, "head", 3)(merged));
  };
}

std::pair<Tensor, Tensor> linear_targets() {
  Tensor x = random_normal({64, 5}, 11);
  return {x, matmul(x, random_normal({5, 2}, 12))};
}

KILN_ZOO_CASE("concatenate", merged_branches([] { return std::make_shared<Concatenate>(); }),
              linear_targets);
KILN_ZOO_CASE("multiply", merged_branches([] { return std::make_shared<Multiply>(); }),
              linear_targets);
KILN_ZOO_CASE("subtract", merged_branches([] { return std::make_shared<Subtract>(); }),
              linear_targets);
KILN_ZOO_CASE("average", merged_branches([] { return std::make_shared<Average>(); }),
              linear_targets);
KILN_ZOO_CASE("maximum", merged_branches([] { return std::make_shared<Maximum>(); }),
              linear_targets);
KILN_ZOO_CASE("minimum", merged_branches([] { return std::make_shared<Minimum>(); }),
              linear_targets);

}  // namespace
}  // namespace kiln::nn::testing
