// SpatialDropout1D/2D (whole channels dropped in training, identity in inference) and
// TimeDistributed (a layer applied to every time step, its weights reported and named as the
// wrapper's): values, shapes, gradients, compiled against interpreted, summaries, configs, errors.
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

// ---- SpatialDropout -------------------------------------------------------------------------

// The fraction of (example, channel) pairs of y = dropout(ones) that are dropped; every value
// of a channel must be 0 or 1 / (1 - rate) together.
double dropped_channels(const Tensor& y, double rate) {
  const std::vector<double> v = doubles(y);
  const int64_t batch = y.dim(0), channels = y.dim(-1);
  const int64_t positions = y.size() / batch / channels;
  int64_t dropped = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c) {
      const double first = v[b * positions * channels + c];
      EXPECT_TRUE(first == 0 || std::abs(first - 1 / (1 - rate)) < 1e-6) << first;
      for (int64_t p = 1; p < positions; ++p) {
        EXPECT_EQ(v[(b * positions + p) * channels + c], first)
            << "example " << b << ", channel " << c << ", position " << p;
      }
      dropped += first == 0;
    }
  return static_cast<double>(dropped) / static_cast<double>(batch * channels);
}

TEST(SpatialDropout, DropsWholeChannelsAtAboutTheRateInTraining) {
  CallContext ctx(/*training=*/true, /*seed=*/3);
  SpatialDropout1D one(0.3);
  EXPECT_NEAR(dropped_channels(one(ones({50, 6, 40}), ctx), 0.3), 0.3, 0.04);
  SpatialDropout2D two(0.6);
  EXPECT_NEAR(dropped_channels(two(ones({40, 3, 4, 50}), ctx), 0.6), 0.6, 0.04);
}

TEST(SpatialDropout, TheSameSeedGivesTheSameMask) {
  SpatialDropout2D layer(0.5);
  Tensor x = random_normal({4, 3, 3, 8}, 1);
  CallContext a(true, 9), b(true, 9), c(true, 10);
  Tensor first = layer(x, a);
  EXPECT_TRUE(allclose(layer(x, b), first, 0, 0));
  EXPECT_FALSE(allclose(layer(x, c), first, 0, 0));
}

TEST(SpatialDropout, IsTheIdentityInInference) {
  Tensor x = random_normal({4, 3, 3, 8}, 1);
  EXPECT_TRUE(allclose(SpatialDropout2D(0.5)(x), x, 0, 0));
  CallContext inference(/*training=*/false, 3);
  Tensor steps = random_normal({4, 5, 8}, 2);
  EXPECT_TRUE(allclose(SpatialDropout1D(0.5)(steps, inference), steps, 0, 0));
}

TEST(SpatialDropout, GradientIsTheScaledMask) {
  SpatialDropout1D one(0.4);
  trainable_testing::expect_gradients_match(one, random_normal({3, 4, 5}, 3, 0, 1, f64),
                                            /*training=*/true);
  SpatialDropout2D two(0.5);
  trainable_testing::expect_gradients_match(two, random_normal({2, 2, 3, 4}, 4, 0, 1, f64),
                                            /*training=*/true);
}

// The training-mode mask is the same run eagerly, compiled and interpreted.
TEST(SpatialDropout, CompiledAndInterpretedDropTheSameChannels) {
  SpatialDropout2D layer(0.5);
  Tensor x = random_normal({4, 3, 3, 8}, 1);
  CallContext eager(true, 5);
  Tensor want = layer(x, eager);
  for (ExecutionMode mode : {ExecutionMode::kCompiled, ExecutionMode::kInterpreted}) {
    SCOPED_TRACE(execution_mode_name(mode));
    auto step = function(
        [&](const Tensor& input, const Tensor& seed) {
          CallContext ctx(true, seed, [](const Variable& v) { return v.value(); });
          return layer(input, ctx);
        },
        {.mode = mode});
    EXPECT_TRUE(allclose(step(x, Tensor::scalar<int64_t>(5)), want, 0, 0));
  }
  Sequential model({Conv1D(4, 3), SpatialDropout1D(0.5), Flatten(), Dense(2)});
  trainable_testing::expect_modes_agree(model, random_normal({5, 6, 3}, 2));
}

TEST(SpatialDropout, SummaryRowConfigAndShapes) {
  Sequential model({SpatialDropout2D(0.2), SpatialDropout2D(0.1)});
  model.build({4, 4, 3});
  std::string row = trainable_testing::row_of(model, "spatial_dropout2d", "SpatialDropout2D");
  EXPECT_THAT(row, HasSubstr("(None, 4, 4, 3)"));
  EXPECT_THAT(row, HasSubstr(" 0"));
  EXPECT_EQ(SpatialDropout1D(0.5)(Input({kUnknownDim, 7})).shape(), (Shape{-1, -1, 7}));
  for (LayerPtr layer : {LayerPtr(std::make_shared<SpatialDropout1D>(0.25)),
                         LayerPtr(std::make_shared<SpatialDropout2D>(0.75))}) {
    LayerPtr rebuilt = layer_from_config(layer->type_name(), layer->config(), "again");
    EXPECT_EQ(rebuilt->type_name(), layer->type_name());
    EXPECT_EQ(rebuilt->config().get_float("rate"), layer->config().get_float("rate"));
  }
  // Rebuilt with its rate: the same mask for the same seed.
  SpatialDropout1D layer(0.25);
  LayerPtr rebuilt = layer_from_config("SpatialDropout1D", layer.config(), "again");
  Tensor x = ones({8, 3, 16});
  CallContext a(true, 4), b(true, 4);
  EXPECT_TRUE(allclose((*rebuilt)(x, a), layer(x, b), 0, 0));
}

TEST(SpatialDropout, BadArgumentsAreErrorsNamingThem) {
  expect_error([] { SpatialDropout1D(1.0); }, ErrorCode::kInvalidArgument,
               "SpatialDropout1D: rate must be in [0, 1), got 1");
  expect_error([] { SpatialDropout2D(-0.5); }, ErrorCode::kInvalidArgument,
               "SpatialDropout2D: rate must be in [0, 1), got -0.5");
  expect_error(
      [] {
        SpatialDropout2D(0.5)(zeros({2, 3, 4}));
      },
      ErrorCode::kInvalidArgument,
      "SpatialDropout2D 'spatial_dropout2d' expects input [batch, h, w, channels], got "
      "[2,3,4]");
  expect_error(
      [] {
        SpatialDropout1D(0.5)(Input({3, 4, 5}));
      },
      ErrorCode::kInvalidArgument, "expects input [batch, steps, channels], got [?,3,4,5]");
}

// ---- TimeDistributed ------------------------------------------------------------------------

TEST(TimeDistributed, AppliesTheLayerToEveryStep) {
  TimeDistributed layer(Dense(3, "tanh"));
  Tensor x = random_normal({2, 4, 5}, 1, 0, 1, f64);
  layer(x);
  ASSERT_EQ(layer.weights().size(), 2u);
  Variable(layer.weights()[1]).assign(random_normal({3}, 2));
  std::vector<double> in = doubles(x), kernel = doubles(layer.weights()[0].value()),
                      bias = doubles(layer.weights()[1].value()), want(2 * 4 * 3);
  for (int64_t bt = 0; bt < 2 * 4; ++bt)
    for (int64_t u = 0; u < 3; ++u) {
      double total = bias[u];
      for (int64_t f = 0; f < 5; ++f) total += in[bt * 5 + f] * kernel[f * 3 + u];
      want[bt * 3 + u] = std::tanh(total);
    }
  test_values::expect_values(layer(x), {2, 4, 3}, want, 1e-12);
}

TEST(TimeDistributed, EachStepOfAnImageSequenceIsConvolvedAlone) {
  TimeDistributed layer(Conv2D(2, {2, 2}, "relu", {1, 1}, "same"));
  Tensor x = random_normal({2, 3, 4, 4, 1}, 1);
  Tensor y = layer(x);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4, 4, 2}));
  CallContext ctx;
  for (int64_t t = 0; t < 3; ++t) {
    Tensor step = reshape(slice(x, {0, t, 0, 0, 0}, {2, t + 1, 4, 4, 1}), {2, 4, 4, 1});
    Tensor alone = (*layer.layer())(step, ctx);
    Tensor got = reshape(slice(y, {0, t, 0, 0, 0}, {2, t + 1, 4, 4, 2}), {2, 4, 4, 2});
    EXPECT_TRUE(allclose(got, alone, 1e-6, 1e-6)) << "step " << t;
  }
}

TEST(TimeDistributed, OwnsTheWrappedLayersWeightsUnderItsName) {
  TimeDistributed layer(Dense(3));
  layer(zeros({1, 2, 5}));
  const LayerPtr& dense = layer.layer();
  ASSERT_EQ(layer.weights().size(), 2u);
  EXPECT_TRUE(layer.weights()[0] == dense->weights()[0]);
  EXPECT_EQ(layer.weights()[0].name(), "time_distributed/dense/kernel");
  EXPECT_EQ(layer.weights()[1].name(), "time_distributed/dense/bias");
  EXPECT_EQ(layer.count_params(), 5 * 3 + 3);
  EXPECT_EQ(layer.trainable_weights().size(), 2u);

  // In a model, every variable has its own name, also with two wrapped Dense layers.
  Sequential model({TimeDistributed(Dense(4)), TimeDistributed(Dense(2)), Flatten(), Dense(1)});
  model.build({3, 5});
  std::vector<std::string> names;
  for (const Variable& v : model.weights()) names.push_back(v.name());
  EXPECT_THAT(
      names, ::testing::ElementsAre("time_distributed/dense/kernel", "time_distributed/dense/bias",
                                    "time_distributed_1/dense/kernel",
                                    "time_distributed_1/dense/bias", "dense/kernel", "dense/bias"));
  std::map<std::string, Tensor> state = model.state();
  EXPECT_EQ(state.size(), 6u);
  EXPECT_EQ(state.at("time_distributed_1/dense/kernel").shape(), (Shape{4, 2}));
}

TEST(TimeDistributed, DifferentModelSeedsInitialiseTheWrappedLayerDifferently) {
  auto kernel = [](uint64_t seed) {
    Sequential model({TimeDistributed(Dense(4))});
    model.set_seed(seed);
    model.build({3, 5});
    return model.weights().empty() ? std::vector<double>{} : doubles(model.weights()[0].value());
  };
  EXPECT_EQ(kernel(1), kernel(1));
  EXPECT_NE(kernel(1), kernel(2));
}

TEST(TimeDistributed, OutputShapesThroughInputIncludingUnknownSteps) {
  EXPECT_EQ(TimeDistributed(Dense(3))(Input({4, 5})).shape(), (Shape{-1, 4, 3}));
  EXPECT_EQ(TimeDistributed(Conv2D(2, {3, 3}))(Input({6, 5, 5, 1})).shape(),
            (Shape{-1, 6, 3, 3, 2}));
  Tensor in = Input({kUnknownDim, 5});
  Tensor out = TimeDistributed(Dense(3, "tanh"))(in);
  EXPECT_EQ(out.shape(), (Shape{-1, -1, 3}));
  // One model for sequences of any length; each step's output depends on that step only.
  Model model(in, out);
  model.build({kUnknownDim, 5});  // batch and time unknown in the traced step
  Tensor short_x = random_normal({2, 2, 5}, 1), long_x = random_normal({2, 6, 5}, 2);
  Tensor short_y = trainable_testing::expect_modes_agree(model, short_x);
  Tensor long_y = trainable_testing::expect_modes_agree(model, long_x);
  EXPECT_EQ(long_y.shape(), (Shape{2, 6, 3}));
  Tensor spliced = concatenate({short_x, slice(long_x, {0, 2, 0}, {2, 6, 5})}, 1);
  Tensor spliced_y = model.predict(spliced);
  EXPECT_TRUE(allclose(slice(spliced_y, {0, 0, 0}, {2, 2, 3}), short_y, 1e-6, 1e-6));
  EXPECT_TRUE(allclose(slice(spliced_y, {0, 2, 0}, {2, 6, 3}), slice(long_y, {0, 2, 0}, {2, 6, 3}),
                       1e-6, 1e-6));
}

TEST(TimeDistributed, GradientsMatchCentralDifferences) {
  TimeDistributed dense(Dense(2, "tanh"));
  Tensor x = random_normal({2, 3, 4}, 3, 0, 1, f64);
  dense(x);
  ASSERT_EQ(dense.weights().size(), 2u);
  Variable(dense.weights()[1]).assign(random_normal({2}, 4));
  trainable_testing::expect_gradients_match(dense, x);
  TimeDistributed conv(Conv1D(2, 2, "", 1, "same"));
  trainable_testing::expect_gradients_match(conv, random_normal({1, 2, 3, 2}, 5, 0, 1, f64));
}

// With batch and time both unknown while recording, the output is shaped when the graph runs;
// gradients flow through that path as through the known one.
TEST(TimeDistributed, GradientsAreTheSameWithUnknownBatchAndTime) {
  TimeDistributed layer(Dense(2, "tanh"));
  Tensor x = random_normal({2, 3, 4}, 3);
  layer(x);
  auto input_gradient = [&](const Shape& recorded) {
    Graph g("unknown_steps");
    auto guard = g.as_default();
    Tensor p = g.placeholder(f32, recorded, "x");
    CallContext ctx(false, Tensor::scalar<int64_t>(0), [](const Variable& v) { return v.value(); });
    Tensor y = layer(p, ctx);
    return g.run({{p, x}}, gradients(sum(y * y), {p})[0]);
  };
  Tensor known = input_gradient({2, 3, 4});
  Tensor unknown = input_gradient({kUnknownDim, kUnknownDim, 4});
  EXPECT_EQ(unknown.shape(), x.shape());
  EXPECT_TRUE(allclose(unknown, known, 1e-6, 1e-6)) << unknown.str() << "\n" << known.str();
}

TEST(TimeDistributed, CompiledModelMatchesInterpreted) {
  Sequential model({TimeDistributed(Dense(4, "relu")), Flatten(), Dense(2)});
  trainable_testing::expect_modes_agree(model, random_normal({5, 3, 6}, 8));
}

TEST(TimeDistributed, SummaryRowShowsTheWrapperWithItsOutputAndParameters) {
  Sequential model({TimeDistributed(Dense(3)), Flatten(), Dense(1)});
  model.build({4, 5});
  std::string row = trainable_testing::row_of(model, "time_distributed", "TimeDistributed");
  EXPECT_THAT(row, HasSubstr("(None, 4, 3)"));
  EXPECT_THAT(row, HasSubstr(" 18"));                           // the wrapped Dense: 5*3 + 3
  EXPECT_THAT(model.summary(), HasSubstr("Total params: 31"));  // + 12*1 + 1
  EXPECT_EQ(trainable_testing::row_of(model, "time_distributed/dense", "Dense"), "");
}

TEST(TimeDistributed, ConfigHoldsTheWrappedLayerAndRebuildsIt) {
  TimeDistributed layer(Dense(3, "relu", true, he_uniform()));
  Attrs c = layer.config();
  EXPECT_EQ(c.get_string("layer"), "Dense");
  EXPECT_EQ(c.get_string("layer_name"), "dense");
  EXPECT_EQ(c.get_int("layer.units"), 3);
  EXPECT_EQ(c.get_string("layer.activation"), "relu");
  EXPECT_EQ(c.get_string("layer.kernel_initializer"), "he_uniform");
  Tensor x = random_normal({2, 3, 4}, 9);
  layer(x);
  ASSERT_EQ(layer.weights().size(), 2u);
  Variable(layer.weights()[1]).assign(random_normal({3}, 10));
  trainable_testing::expect_rebuilt_from_config(layer, x);
  EXPECT_TRUE(layer.config() == c);  // building does not change it

  // A wrapped layer that has a wrapped layer of its own.
  TimeDistributed nested(LayerRef(TimeDistributed(Conv1D(2, 2))));  // not a copy
  Tensor steps = random_normal({2, 3, 4, 5, 2}, 11);
  nested(steps);
  ASSERT_EQ(nested.weights().size(), 2u);
  EXPECT_EQ(nested.weights()[0].name(), "time_distributed/time_distributed/conv1d/kernel");
  trainable_testing::expect_rebuilt_from_config(nested, steps);
}

TEST(TimeDistributed, BadArgumentsAreErrorsNamingThem) {
  expect_error([] { TimeDistributed(LayerRef{}); }, ErrorCode::kInvalidArgument,
               "TimeDistributed: needs a layer to wrap, got none");
  expect_error(
      [] {
        TimeDistributed(Dense(2))(zeros({3, 4}));
      },
      ErrorCode::kInvalidArgument,
      "TimeDistributed 'time_distributed' expects one input [batch, time, ...] with "
      "known dimensions after time, got [3,4]");
  expect_error(
      [] {
        TimeDistributed(Dense(2))(Input({3, kUnknownDim}));
      },
      ErrorCode::kInvalidArgument, "got [?,3,?]");
  // The wrapped layer's own checks still apply, to one step's shape.
  expect_error(
      [] {
        TimeDistributed(Conv2D(2, {3, 3}))(zeros({1, 2, 5, 5}));
      },
      ErrorCode::kInvalidArgument, "expects NHWC input of rank 4, got [?,5,5]");
  expect_error(
      [] {
        layer_from_config("TimeDistributed",
                          {{"layer", std::string("NoSuchLayer")}, {"layer_name", std::string("x")}},
                          "td");
      },
      ErrorCode::kNotFound, "NoSuchLayer");
}

// ---- the layer zoo ----------------------------------------------------------------------------

// The targets are per-example means: learnable in the few epochs the zoo trains, through the
// noise of whole dropped channels.
KILN_ZOO_CASE(
    "spatial_dropout1d",
    [] {
      return std::make_unique<Sequential>(
          std::vector<LayerRef>{Conv1D(4, 3, "relu"), SpatialDropout1D(0.2), Flatten(), Dense(1)});
    },
    [] {
      Tensor x = random_normal({96, 6, 2}, 41);
      return std::pair{x, reshape(mean(x, {1, 2}), {96, 1}) * 3.0 + 1.0};
    });

KILN_ZOO_CASE(
    "spatial_dropout2d",
    [] {
      return std::make_unique<Sequential>(std::vector<LayerRef>{
          Conv2D(4, {3, 3}, "relu"), SpatialDropout2D(0.2), Flatten(), Dense(1)});
    },
    [] {
      Tensor x = random_normal({96, 5, 5, 1}, 43);
      return std::pair{x, reshape(mean(x, {1, 2, 3}), {96, 1}) * 3.0 + 1.0};
    });

// Functional, with the sequence length left unknown; the head is a Dense on the last axis.
KILN_ZOO_CASE(
    "time_distributed",
    [] {
      Tensor in = Input({kUnknownDim, 3});
      Tensor out = Dense(1)(TimeDistributed(Dense(4, "tanh"))(in));
      return std::make_unique<Model>(in, out, "time_distributed_zoo");
    },
    [] {
      Tensor x = random_normal({32, 5, 3}, 45);
      return std::pair{x, tanh(matmul(x, random_normal({3, 1}, 46)))};
    });

}  // namespace
}  // namespace kiln::nn
