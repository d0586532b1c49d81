// GroupNormalization: values against loops over each group in double, any number of axes
// between batch and channels (known or not), gradients, compiled against interpreted models,
// summary rows, config round trips and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/nn/layer_zoo.h"
#include "tests/nn/trainable_layer_checks.h"
#include "tests/testing/values.h"

namespace kiln::nn {
namespace {

using test_values::expect_error;
using ::testing::HasSubstr;
using trainable_testing::doubles;

// Group normalization of x [batch, ..., channels] by loops: for each example and group, the
// mean and (population) variance of all its values, over every position and its channels.
std::vector<double> reference(const Tensor& x, int64_t groups, double epsilon,
                              const std::vector<double>& gamma, const std::vector<double>& beta) {
  const std::vector<double> v = doubles(x);
  const int64_t batch = x.dim(0), channels = x.dim(-1), per_group = channels / groups;
  const int64_t positions = x.size() / batch / channels;
  std::vector<double> out(v.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t g = 0; g < groups; ++g) {
      auto at = [&](int64_t p, int64_t c) { return (b * positions + p) * channels + c; };
      double total = 0, squares = 0;
      const double n = static_cast<double>(positions * per_group);
      for (int64_t p = 0; p < positions; ++p)
        for (int64_t c = g * per_group; c < (g + 1) * per_group; ++c) total += v[at(p, c)];
      const double mean = total / n;
      for (int64_t p = 0; p < positions; ++p)
        for (int64_t c = g * per_group; c < (g + 1) * per_group; ++c)
          squares += (v[at(p, c)] - mean) * (v[at(p, c)] - mean);
      const double scale = 1 / std::sqrt(squares / n + epsilon);
      for (int64_t p = 0; p < positions; ++p)
        for (int64_t c = g * per_group; c < (g + 1) * per_group; ++c)
          out[at(p, c)] = (v[at(p, c)] - mean) * scale * gamma[c] + beta[c];
    }
  return out;
}

// Builds the layer on x and gives gamma and beta random values.
void randomize(Layer& layer, const Tensor& x, uint64_t seed) {
  layer(x);
  for (Variable v : layer.weights()) v.assign(random_normal(v.shape(), seed++));
}

TEST(GroupNormalization, NormalisesEachGroupOverItsChannelsAndPositions) {
  struct Case {
    Shape shape;
    int64_t groups;
  };
  for (const Case& c : std::vector<Case>{{{2, 3, 4, 6}, 3},  // images, 2 channels per group
                                         {{4, 8}, 4},        // no axes between
                                         {{2, 5, 4}, 1},     // one group: all of an example
                                         {{2, 5, 4}, 4}}) {  // a group per channel
    SCOPED_TRACE(shape_str(c.shape) + " groups " + std::to_string(c.groups));
    GroupNormalization layer(c.groups);
    Tensor x = random_normal(c.shape, 3, 1.5, 2, f64);
    randomize(layer, x, 10);
    ASSERT_EQ(layer.weights().size(), 2u);  // gamma, beta
    std::vector<double> gamma = doubles(layer.weights()[0].value());
    std::vector<double> beta = doubles(layer.weights()[1].value());
    test_values::expect_values(layer(x), c.shape, reference(x, c.groups, 1e-3, gamma, beta), 1e-10);
  }
}

TEST(GroupNormalization, CenterAndScaleAreOptional) {
  GroupNormalization plain(2, /*epsilon=*/0, /*center=*/false, /*scale=*/false);
  Tensor x = random_normal({3, 4, 6}, 4, 0, 1, f64);
  EXPECT_TRUE(plain(x).shape() == x.shape());
  EXPECT_TRUE(plain.weights().empty());
  test_values::expect_values(
      plain(x), x.shape(), reference(x, 2, 0, std::vector<double>(6, 1), std::vector<double>(6, 0)),
      1e-10);
  GroupNormalization scale_only(2, 1e-3, /*center=*/false);
  scale_only(x);
  ASSERT_EQ(scale_only.weights().size(), 1u);
  EXPECT_EQ(scale_only.weights()[0].name(), "group_normalization/gamma");
}

TEST(GroupNormalization, OutputShapesThroughInputIncludingUnknownSteps) {
  EXPECT_EQ(GroupNormalization(3)(Input({5, 6})).shape(), (Shape{-1, 5, 6}));
  EXPECT_EQ(GroupNormalization(2)(Input({kUnknownDim, kUnknownDim, 4})).shape(),
            (Shape{-1, -1, -1, 4}));
  // Sequences of any length through one model (built for them: predict alone would trace its
  // step for the first x's length).
  Tensor in = Input({kUnknownDim, 6});
  Model model(in, GroupNormalization(3)(in));
  model.build({kUnknownDim, 6});
  for (int64_t steps : {2, 5}) {
    Tensor x = random_normal({3, steps, 6}, 5, 0, 1);
    Tensor y = trainable_testing::expect_modes_agree(model, x);
    test_values::expect_values(
        y, x.shape(), reference(x, 3, 1e-3, std::vector<double>(6, 1), std::vector<double>(6, 0)),
        1e-4);
  }
}

TEST(GroupNormalization, GradientsMatchCentralDifferences) {
  GroupNormalization layer(2);
  Tensor x = random_normal({2, 3, 4}, 6, 0, 1, f64);
  randomize(layer, x, 20);
  trainable_testing::expect_gradients_match(layer, x);
}

TEST(GroupNormalization, CompiledModelMatchesInterpreted) {
  Sequential model({Dense(8), GroupNormalization(4), Dense(2)});
  trainable_testing::expect_modes_agree(model, random_normal({6, 5}, 8));
  Sequential images({GroupNormalization(2), Flatten(), Dense(2)});
  trainable_testing::expect_modes_agree(images, random_normal({3, 4, 4, 6}, 9));
}

TEST(GroupNormalization, SummaryRowAndParameterCount) {
  Sequential model({GroupNormalization(4), GroupNormalization(2, 1e-3, /*center=*/false)});
  model.build({5, 8});
  std::string row = trainable_testing::row_of(model, "group_normalization", "GroupNormalization");
  EXPECT_THAT(row, HasSubstr("(None, 5, 8)"));
  EXPECT_THAT(row, HasSubstr(" 16"));  // gamma 8 + beta 8
  row = trainable_testing::row_of(model, "group_normalization_1", "GroupNormalization");
  EXPECT_THAT(row, HasSubstr(" 8"));  // gamma only
}

TEST(GroupNormalization, ConfigRebuildsIt) {
  GroupNormalization layer(3, 1e-5, /*center=*/true, /*scale=*/false);
  Tensor x = random_normal({2, 4, 6}, 9);
  randomize(layer, x, 11);
  trainable_testing::expect_rebuilt_from_config(layer, x);
  EXPECT_EQ(layer.config().get_int("groups"), 3);
  EXPECT_EQ(layer.config().get_float("epsilon"), 1e-5);
}

TEST(GroupNormalization, BadArgumentsAreErrorsNamingThem) {
  expect_error([] { GroupNormalization(0); }, ErrorCode::kInvalidArgument,
               "GroupNormalization: groups must be positive, got 0");
  expect_error([] { GroupNormalization(2, -1); }, ErrorCode::kInvalidArgument,
               "GroupNormalization: epsilon must be finite and >= 0, got -1");
  expect_error([] { GroupNormalization(2, std::nan("")); }, ErrorCode::kInvalidArgument,
               "epsilon must be finite");
  expect_error(
      [] {
        GroupNormalization(4)(Input({5, 6}));
      },
      ErrorCode::kInvalidArgument,
      "GroupNormalization 'group_normalization': the 6 channels of input [?,5,6] do "
      "not split into groups=4");
  // The Keras default of 32 groups needs at least 32 channels.
  expect_error(
      [] {
        GroupNormalization()(zeros({2, 16}));
      },
      ErrorCode::kInvalidArgument, "the 16 channels of input [2,16] do not split into groups=32");
  expect_error([] { GroupNormalization(1)(zeros({4})); }, ErrorCode::kInvalidArgument,
               "expects one input [batch, ..., channels] with known channels, got [4]");
}

KILN_ZOO_CASE(
    "group_normalization",
    [] {
      return std::make_unique<Sequential>(
          std::vector<LayerRef>{Dense(6, "tanh"), GroupNormalization(3), Flatten(), Dense(1)});
    },
    [] {
      Tensor x = random_normal({32, 4, 3}, 31);
      Tensor flat = reshape(x, {32, 12});
      return std::pair{x, matmul(flat * flat, random_normal({12, 1}, 32, 0, 0.3))};
    });

}  // namespace
}  // namespace kiln::nn
