// Conv1D, Conv2DTranspose, DepthwiseConv2D and SeparableConv2D: values against direct loops in
// double, output shapes (also symbolic, through nn::Input), gradients for the input and every
// weight, compiled against interpreted models, summary rows, config round trips and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

// A row-major array of doubles for the reference loops.
struct Array {
  Shape shape;
  std::vector<double> v;
  explicit Array(Shape s) : shape(std::move(s)), v(num_elements(shape), 0.0) {}
  explicit Array(const Tensor& t) : shape(t.shape()), v(doubles(t)) {}
  double& operator()(std::initializer_list<int64_t> index) {
    int64_t flat = 0;
    size_t d = 0;
    for (int64_t i : index) flat = flat * shape[d++] + i;
    return v[flat];
  }
  // Whether index i lies inside dimension d.
  bool inside(size_t d, int64_t i) const { return i >= 0 && i < shape[d]; }
};

// Builds the layer on x and gives each weight random values (biases too), returned in order.
std::vector<Array> randomize(Layer& layer, const Tensor& x, uint64_t seed) {
  layer(x);
  std::vector<Array> out;
  for (Variable v : layer.weights()) {
    v.assign(random_normal(v.shape(), seed++));
    out.emplace_back(v.value());
  }
  return out;
}

// ---- Conv1D ---------------------------------------------------------------------------------

struct Conv1DCase {
  std::string padding;
  int64_t strides, dilation, steps, kernel;
  int64_t out_steps, pad_low;  // worked out by hand from Keras' rules
};

TEST(Conv1D, MatchesADirectLoopForEachPadding) {
  const std::vector<Conv1DCase> cases = {
      {"valid", 1, 1, 7, 3, 5, 0}, {"same", 1, 1, 7, 3, 7, 1},   {"same", 2, 1, 7, 4, 4, 1},
      {"same", 1, 2, 7, 3, 7, 2},  {"causal", 1, 2, 7, 3, 7, 4}, {"causal", 2, 1, 7, 3, 4, 2},
      {"valid", 2, 2, 9, 3, 3, 0},
  };
  for (const Conv1DCase& c : cases) {
    SCOPED_TRACE(c.padding + " strides " + std::to_string(c.strides) + " dilation " +
                 std::to_string(c.dilation));
    Conv1D layer(3, c.kernel, "", c.strides, c.padding, c.dilation);
    Tensor x = random_normal({2, c.steps, 2}, 5, 0, 1, f64);
    std::vector<Array> w = randomize(layer, x, 40);
    ASSERT_EQ(w.size(), 2u);
    Array in(x), kernel = w[0], bias = w[1], want({2, c.out_steps, 3});
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t o = 0; o < c.out_steps; ++o)
        for (int64_t f = 0; f < 3; ++f) {
          double total = bias({f});
          for (int64_t t = 0; t < c.kernel; ++t) {
            int64_t at = o * c.strides - c.pad_low + t * c.dilation;
            if (!in.inside(1, at)) continue;
            for (int64_t ch = 0; ch < 2; ++ch) total += in({b, at, ch}) * kernel({t, ch, f});
          }
          want({b, o, f}) = total;
        }
    test_values::expect_values(layer(x), want.shape, want.v, 1e-12);
  }
}

TEST(Conv1D, CausalOutputsDoNotSeeLaterSteps) {
  Conv1D layer(2, 3, "", 1, "causal", 2);
  Tensor x = random_normal({1, 8, 2}, 1);
  Tensor changed = concatenate({slice(x, {0, 0, 0}, {1, 5, 2}), zeros({1, 3, 2})}, 1);
  std::vector<double> a = doubles(layer(x)), b = doubles(layer(changed));
  for (size_t i = 0; i < 5 * 2; ++i) EXPECT_EQ(a[i], b[i]) << "step " << i / 2;
  EXPECT_NE(a[5 * 2], b[5 * 2]);
}

TEST(Conv1D, OutputShapesThroughInput) {
  EXPECT_EQ(Conv1D(4, 3, "", 2, "same")(Input({10, 3})).shape(), (Shape{-1, 5, 4}));
  EXPECT_EQ(Conv1D(4, 3)(Input({10, 3})).shape(), (Shape{-1, 8, 4}));
  EXPECT_EQ(Conv1D(4, 3, "", 1, "causal", 2)(Input({kUnknownDim, 3})).shape(), (Shape{-1, -1, 4}));
  EXPECT_EQ(Conv1D(4, 3, "", 1, "same")(Input({kUnknownDim, 3})).shape(), (Shape{-1, -1, 4}));
}

TEST(Conv1D, GradientsMatchCentralDifferences) {
  Conv1D strided(3, 3, "tanh", 2, "same");
  trainable_testing::expect_gradients_match(strided, random_normal({2, 7, 2}, 3, 0, 1, f64));
  Conv1D causal(2, 2, "", 1, "causal", 3, /*use_bias=*/false);
  trainable_testing::expect_gradients_match(causal, random_normal({1, 6, 3}, 4, 0, 1, f64));
  EXPECT_EQ(causal.weights().size(), 1u);
}

TEST(Conv1D, CompiledModelMatchesInterpreted) {
  Sequential model({Conv1D(4, 3, "relu", 1, "causal", 2), Flatten(), Dense(2)});
  trainable_testing::expect_modes_agree(model, random_normal({5, 9, 3}, 8));
}

TEST(Conv1D, SummaryRowAndParameterCount) {
  Sequential model({Conv1D(8, 3, "relu", 1, "same")});
  model.build({10, 4});
  std::string row = trainable_testing::row_of(model, "conv1d", "Conv1D");
  EXPECT_THAT(row, HasSubstr("(None, 10, 8)"));
  EXPECT_THAT(row, HasSubstr(" 104"));  // kernel 3*4*8 + bias 8
  EXPECT_EQ(model.layers()[0]->count_params(), 104);
}

TEST(Conv1D, ConfigRebuildsIt) {
  Conv1D layer(3, 2, "tanh", 2, "causal", 1, true, he_normal(), constant_init(0.5));
  layer.set_name("c1");
  Tensor x = random_normal({2, 6, 3}, 9);
  randomize(layer, x, 10);
  trainable_testing::expect_rebuilt_from_config(layer, x);
  EXPECT_EQ(layer.config().get_string("kernel_initializer"), "he_normal");
}

TEST(Conv1D, BadArgumentsAreErrorsNamingThem) {
  expect_error([] { Conv1D(0, 3); }, ErrorCode::kInvalidArgument,
               "Conv1D: filters must be positive, got 0");
  expect_error([] { Conv1D(2, 0); }, ErrorCode::kInvalidArgument,
               "kernel_size must be positive, got 0");
  expect_error([] { Conv1D(2, 3, "", -1); }, ErrorCode::kInvalidArgument,
               "strides must be positive, got -1");
  expect_error([] { Conv1D(2, 3, "", 1, "valid", 0); }, ErrorCode::kInvalidArgument,
               "dilation_rate must be positive, got 0");
  expect_error([] { Conv1D(2, 3, "", 1, "full"); }, ErrorCode::kInvalidArgument,
               "padding must be \"valid\", \"same\" or \"causal\", got \"full\"");
  expect_error([] { Conv1D(2, 3, "relux"); }, ErrorCode::kInvalidArgument, "relux");
  expect_error(
      [] {
        Conv1D(2, 3)(zeros({2, 5, 5, 1}));
      },
      ErrorCode::kInvalidArgument,
      "Conv1D 'conv1d' expects one input [batch, steps, channels] with known channels, "
      "got [2,5,5,1]");
  expect_error(
      [] {
        Conv1D(2, 3, "", 2, "same")(Input({kUnknownDim, 4}));
      },
      ErrorCode::kInvalidArgument,
      "Conv1D 'conv1d': \"same\" padding with strides [2] needs known spatial sizes, got "
      "input [?,?,4]");
  // Longer kernel than input: the convolution op names the sizes.
  expect_error(
      [] {
        Conv1D(2, 5)(zeros({1, 3, 2}));
      },
      ErrorCode::kInvalidArgument, "larger than the padded input");
}

// ---- Conv2DTranspose ------------------------------------------------------------------------

struct TransposeCase {
  std::string padding;
  std::vector<int64_t> kernel, strides;
  Shape in;                   // [h, w]
  Shape out;                  // [h, w], Keras' output size
  std::vector<int64_t> crop;  // of the full scatter's low side: (max(k - s, 0) / 2 for "same")
};

TEST(Conv2DTranspose, MatchesAScatterLoop) {
  const std::vector<TransposeCase> cases = {
      {"valid", {3, 3}, {2, 2}, {3, 4}, {7, 9}, {0, 0}},
      {"same", {3, 3}, {2, 2}, {3, 4}, {6, 8}, {0, 0}},
      {"same", {4, 4}, {2, 2}, {3, 4}, {6, 8}, {1, 1}},
      {"valid", {2, 2}, {3, 3}, {3, 2}, {9, 6}, {0, 0}},  // k < s: Keras' size has zero rows
      {"same", {5, 3}, {1, 2}, {3, 4}, {3, 8}, {2, 0}},
      {"valid", {2, 3}, {1, 1}, {3, 4}, {4, 6}, {0, 0}},
  };
  for (const TransposeCase& c : cases) {
    SCOPED_TRACE(c.padding + " kernel " + shape_str(c.kernel) + " strides " + shape_str(c.strides));
    Conv2DTranspose layer(3, c.kernel, "", c.strides, c.padding);
    Tensor x = random_normal({2, c.in[0], c.in[1], 2}, 6, 0, 1, f64);
    std::vector<Array> w = randomize(layer, x, 50);
    ASSERT_EQ(w.size(), 2u);
    Array in(x), kernel = w[0], bias = w[1], want({2, c.out[0], c.out[1], 3});
    ASSERT_EQ(kernel.shape, (Shape{c.kernel[0], c.kernel[1], 3, 2}));  // [kh, kw, filters, in]
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < c.out[0]; ++i)
        for (int64_t j = 0; j < c.out[1]; ++j)
          for (int64_t f = 0; f < 3; ++f) want({b, i, j, f}) = bias({f});
    // Each input pixel adds kernel-weighted copies of itself onto its output window.
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < c.in[0]; ++i)
        for (int64_t j = 0; j < c.in[1]; ++j)
          for (int64_t t = 0; t < c.kernel[0]; ++t)
            for (int64_t u = 0; u < c.kernel[1]; ++u) {
              int64_t oi = i * c.strides[0] + t - c.crop[0], oj = j * c.strides[1] + u - c.crop[1];
              if (!want.inside(1, oi) || !want.inside(2, oj)) continue;
              for (int64_t f = 0; f < 3; ++f)
                for (int64_t ch = 0; ch < 2; ++ch)
                  want({b, oi, oj, f}) += in({b, i, j, ch}) * kernel({t, u, f, ch});
            }
    test_values::expect_values(layer(x), want.shape, want.v, 1e-12);
  }
}

// With the same kernel, Conv2DTranspose is the adjoint of the Conv2D from `filters` channels to
// the input's: <conv(a), b> == <a, transpose(b)>.
TEST(Conv2DTranspose, IsTheAdjointOfConv2DWithTheSameKernel) {
  for (std::string padding : {"valid", "same"}) {
    SCOPED_TRACE(padding);
    Conv2DTranspose up(4, {3, 3}, "", {2, 2}, padding, /*use_bias=*/false);
    Conv2D down(3, {3, 3}, "", {2, 2}, padding, /*use_bias=*/false);
    Tensor b = random_normal({2, 3, 4, 3}, 1, 0, 1, f64);
    Tensor up_b = up(b);
    Tensor a = random_normal(up_b.shape(), 2, 0, 1, f64);
    down(a);
    Variable(down.weights()[0]).assign(up.weights()[0].value());
    Tensor down_a = down(a);
    ASSERT_EQ(down_a.shape(), b.shape());
    EXPECT_NEAR(sum(down_a * b).item<double>(), sum(a * up_b).item<double>(), 1e-10);
  }
}

TEST(Conv2DTranspose, OutputShapesThroughInput) {
  EXPECT_EQ(Conv2DTranspose(4, {3, 3}, "", {2, 2})(Input({5, 6, 3})).shape(),
            (Shape{-1, 11, 13, 4}));
  EXPECT_EQ(Conv2DTranspose(4, {3, 3}, "", {2, 2}, "same")(Input({5, 6, 3})).shape(),
            (Shape{-1, 10, 12, 4}));
  EXPECT_EQ(Conv2DTranspose(4, {2, 2}, "", {3, 3})(Input({5, 6, 3})).shape(),
            (Shape{-1, 15, 18, 4}));
  EXPECT_EQ(Conv2DTranspose(2, {3, 3}, "", {2, 2}, "same")(Input({kUnknownDim, 4, 3})).shape(),
            (Shape{-1, -1, 8, 2}));
}

TEST(Conv2DTranspose, GradientsMatchCentralDifferences) {
  Conv2DTranspose same(2, {3, 3}, "tanh", {2, 2}, "same");
  trainable_testing::expect_gradients_match(same, random_normal({1, 2, 3, 2}, 3, 0, 1, f64));
  Conv2DTranspose valid(2, {2, 3}, "", {3, 1}, "valid");
  trainable_testing::expect_gradients_match(valid, random_normal({2, 2, 2, 1}, 4, 0, 1, f64));
}

TEST(Conv2DTranspose, CompiledModelMatchesInterpreted) {
  Sequential model({Conv2DTranspose(3, {3, 3}, "relu", {2, 2}, "same"), Flatten(), Dense(2)});
  trainable_testing::expect_modes_agree(model, random_normal({4, 3, 3, 2}, 8));
}

TEST(Conv2DTranspose, SummaryRowAndParameterCount) {
  Sequential model({Conv2DTranspose(4, {3, 3}, "", {2, 2}, "same")});
  model.build({5, 5, 3});
  std::string row = trainable_testing::row_of(model, "conv2d_transpose", "Conv2DTranspose");
  EXPECT_THAT(row, HasSubstr("(None, 10, 10, 4)"));
  EXPECT_THAT(row, HasSubstr(" 112"));  // kernel 3*3*4*3 + bias 4
}

TEST(Conv2DTranspose, ConfigRebuildsIt) {
  Conv2DTranspose layer(2, {2, 3}, "relu", {2, 1}, "same", true, glorot_normal());
  Tensor x = random_normal({2, 3, 3, 2}, 9);
  randomize(layer, x, 11);
  trainable_testing::expect_rebuilt_from_config(layer, x);
}

TEST(Conv2DTranspose, BadArgumentsAreErrorsNamingThem) {
  expect_error(
      [] {
        Conv2DTranspose(0, {3, 3});
      },
      ErrorCode::kInvalidArgument, "Conv2DTranspose: filters must be positive, got 0");
  expect_error([] { Conv2DTranspose(2, {3}); }, ErrorCode::kInvalidArgument,
               "Conv2DTranspose: kernel_size must be 2 positive integers, got [3]");
  expect_error(
      [] {
        Conv2DTranspose(2, {3, 3}, "", {0, 1});
      },
      ErrorCode::kInvalidArgument, "strides must be 2 positive integers, got [0,1]");
  expect_error(
      [] {
        Conv2DTranspose(2, {3, 3}, "", {1, 1}, "causal");
      },
      ErrorCode::kInvalidArgument, "got \"causal\"");
  expect_error(
      [] {
        Conv2DTranspose(2, {3, 3})(zeros({2, 5, 3}));
      },
      ErrorCode::kInvalidArgument,
      "Conv2DTranspose 'conv2d_transpose' expects one input [batch, h, w, channels]");
}

// ---- DepthwiseConv2D ------------------------------------------------------------------------

struct DepthwiseCase {
  std::string padding;
  std::vector<int64_t> kernel, strides;
  int64_t multiplier;
  Shape out;  // [h, w] from a 5x6 input
  std::vector<int64_t> pad_low;
};

// y[b, i, j, c * m + k] = bias + sum over taps of x[b, i * s - pad + t, j * s - pad + u, c] *
// kernel[t, u, c, k]: each channel on its own.
Array depthwise_reference(Array& in, Array& kernel, const Shape& out,
                          const std::vector<int64_t>& strides,
                          const std::vector<int64_t>& pad_low) {
  const int64_t batch = in.shape[0], channels = in.shape[3], m = kernel.shape[3];
  Array want({batch, out[0], out[1], channels * m});
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < out[0]; ++i)
      for (int64_t j = 0; j < out[1]; ++j)
        for (int64_t c = 0; c < channels; ++c)
          for (int64_t k = 0; k < m; ++k) {
            double total = 0;
            for (int64_t t = 0; t < kernel.shape[0]; ++t)
              for (int64_t u = 0; u < kernel.shape[1]; ++u) {
                int64_t xi = i * strides[0] - pad_low[0] + t, xj = j * strides[1] - pad_low[1] + u;
                if (in.inside(1, xi) && in.inside(2, xj)) {
                  total += in({b, xi, xj, c}) * kernel({t, u, c, k});
                }
              }
            want({b, i, j, c * m + k}) = total;
          }
  return want;
}

const std::vector<DepthwiseCase>& depthwise_cases() {
  static const std::vector<DepthwiseCase> cases = {
      {"valid", {3, 3}, {1, 1}, 1, {3, 4}, {0, 0}},
      {"same", {3, 3}, {2, 2}, 2, {3, 3}, {1, 0}},  // h: total 2 -> 1; w: total 1 -> 0
      {"valid", {2, 3}, {2, 1}, 3, {2, 4}, {0, 0}},
  };
  return cases;
}

TEST(DepthwiseConv2D, MatchesPerChannelLoops) {
  for (const DepthwiseCase& c : depthwise_cases()) {
    SCOPED_TRACE(c.padding + " multiplier " + std::to_string(c.multiplier));
    DepthwiseConv2D layer(c.kernel, "", c.strides, c.padding, c.multiplier);
    Tensor x = random_normal({2, 5, 6, 3}, 7, 0, 1, f64);
    std::vector<Array> w = randomize(layer, x, 60);
    ASSERT_EQ(w.size(), 2u);
    ASSERT_EQ(w[0].shape, (Shape{c.kernel[0], c.kernel[1], 3, c.multiplier}));
    Array in(x);
    Array want = depthwise_reference(in, w[0], c.out, c.strides, c.pad_low);
    for (size_t i = 0; i < want.v.size(); ++i) want.v[i] += w[1].v[i % (3 * c.multiplier)];
    test_values::expect_values(layer(x), want.shape, want.v, 1e-12);
  }
}

TEST(DepthwiseConv2D, OutputShapesThroughInput) {
  EXPECT_EQ(DepthwiseConv2D({3, 3}, "", {2, 2}, "same", 2)(Input({8, 8, 3})).shape(),
            (Shape{-1, 4, 4, 6}));
  EXPECT_EQ(DepthwiseConv2D({3, 3})(Input({8, 7, 3})).shape(), (Shape{-1, 6, 5, 3}));
}

TEST(DepthwiseConv2D, GradientsMatchCentralDifferences) {
  DepthwiseConv2D layer({2, 2}, "tanh", {2, 1}, "same", 2);
  trainable_testing::expect_gradients_match(layer, random_normal({2, 3, 3, 2}, 3, 0, 1, f64));
}

TEST(DepthwiseConv2D, CompiledModelMatchesInterpreted) {
  Sequential model({DepthwiseConv2D({3, 3}, "relu", {1, 1}, "same", 2), Flatten(), Dense(2)});
  trainable_testing::expect_modes_agree(model, random_normal({4, 5, 5, 3}, 8));
}

TEST(DepthwiseConv2D, SummaryRowAndParameterCount) {
  Sequential model({DepthwiseConv2D({3, 3}, "", {1, 1}, "valid", 2)});
  model.build({6, 6, 3});
  std::string row = trainable_testing::row_of(model, "depthwise_conv2d", "DepthwiseConv2D");
  EXPECT_THAT(row, HasSubstr("(None, 4, 4, 6)"));
  EXPECT_THAT(row, HasSubstr(" 60"));  // kernel 3*3*3*2 + bias 6
}

TEST(DepthwiseConv2D, ConfigRebuildsIt) {
  DepthwiseConv2D layer({3, 2}, "relu", {1, 2}, "same", 2, true, random_normal_init(0, 0.3));
  Tensor x = random_normal({2, 4, 4, 2}, 9);
  randomize(layer, x, 12);
  trainable_testing::expect_rebuilt_from_config(layer, x);
}

TEST(DepthwiseConv2D, BadArgumentsAreErrorsNamingThem) {
  expect_error(
      [] {
        DepthwiseConv2D({3, 3}, "", {1, 1}, "valid", 0);
      },
      ErrorCode::kInvalidArgument, "DepthwiseConv2D: depth_multiplier must be positive, got 0");
  expect_error(
      [] {
        DepthwiseConv2D({3, 3, 3});
      },
      ErrorCode::kInvalidArgument, "kernel_size must be 2 positive integers, got [3,3,3]");
  expect_error(
      [] {
        DepthwiseConv2D({3, 3}, "", {1, 1}, "full");
      },
      ErrorCode::kInvalidArgument,
      "DepthwiseConv2D: padding must be \"valid\" or \"same\", got \"full\"");
  expect_error(
      [] {
        DepthwiseConv2D({3, 3})(zeros({1, 4, 4}));
      },
      ErrorCode::kInvalidArgument, "got [1,4,4]");
}

// ---- SeparableConv2D ------------------------------------------------------------------------

TEST(SeparableConv2D, IsADepthwiseLoopThenAPointwiseOne) {
  for (const DepthwiseCase& c : depthwise_cases()) {
    SCOPED_TRACE(c.padding + " multiplier " + std::to_string(c.multiplier));
    SeparableConv2D layer(4, c.kernel, "", c.strides, c.padding, c.multiplier);
    Tensor x = random_normal({2, 5, 6, 3}, 7, 0, 1, f64);
    std::vector<Array> w = randomize(layer, x, 70);
    ASSERT_EQ(w.size(), 3u);
    ASSERT_EQ(w[1].shape, (Shape{1, 1, 3 * c.multiplier, 4}));
    Array in(x);
    Array depthwise = depthwise_reference(in, w[0], c.out, c.strides, c.pad_low);
    Array want({2, c.out[0], c.out[1], 4});
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < c.out[0]; ++i)
        for (int64_t j = 0; j < c.out[1]; ++j)
          for (int64_t f = 0; f < 4; ++f) {
            double total = w[2]({f});
            for (int64_t q = 0; q < 3 * c.multiplier; ++q)
              total += depthwise({b, i, j, q}) * w[1]({0, 0, q, f});
            want({b, i, j, f}) = total;
          }
    test_values::expect_values(layer(x), want.shape, want.v, 1e-12);
  }
}

TEST(SeparableConv2D, OutputShapesThroughInput) {
  EXPECT_EQ(SeparableConv2D(5, {3, 3}, "", {2, 2}, "same", 2)(Input({8, 7, 3})).shape(),
            (Shape{-1, 4, 4, 5}));
  EXPECT_EQ(SeparableConv2D(5, {3, 3})(Input({8, 7, 3})).shape(), (Shape{-1, 6, 5, 5}));
}

TEST(SeparableConv2D, GradientsMatchCentralDifferences) {
  SeparableConv2D layer(2, {2, 2}, "tanh", {1, 2}, "same", 2);
  trainable_testing::expect_gradients_match(layer, random_normal({1, 3, 4, 2}, 3, 0, 1, f64));
}

TEST(SeparableConv2D, CompiledModelMatchesInterpreted) {
  Sequential model({SeparableConv2D(4, {3, 3}, "relu", {2, 2}, "same"), Flatten(), Dense(2)});
  trainable_testing::expect_modes_agree(model, random_normal({4, 6, 6, 3}, 8));
}

TEST(SeparableConv2D, SummaryRowAndParameterCount) {
  Sequential model({SeparableConv2D(5, {3, 3}, "", {1, 1}, "same", 2),
                    SeparableConv2D(2, {1, 1}, "", {1, 1}, "valid", 1, /*use_bias=*/false)});
  model.build({6, 6, 3});
  std::string row = trainable_testing::row_of(model, "separable_conv2d", "SeparableConv2D");
  EXPECT_THAT(row, HasSubstr("(None, 6, 6, 5)"));
  EXPECT_THAT(row, HasSubstr(" 89"));  // depthwise 3*3*3*2 + pointwise 6*5 + bias 5
  row = trainable_testing::row_of(model, "separable_conv2d_1", "SeparableConv2D");
  EXPECT_THAT(row, HasSubstr(" 15"));  // depthwise 1*1*5 + pointwise 5*2, no bias
}

TEST(SeparableConv2D, ConfigRebuildsIt) {
  SeparableConv2D layer(3, {3, 3}, "tanh", {2, 2}, "same", 2, true, he_uniform(),
                        random_uniform_init(-0.1, 0.1));
  Tensor x = random_normal({2, 5, 5, 2}, 9);
  randomize(layer, x, 13);
  trainable_testing::expect_rebuilt_from_config(layer, x);
  EXPECT_EQ(layer.config().get_string("pointwise_initializer"), "random_uniform");
}

TEST(SeparableConv2D, BadArgumentsAreErrorsNamingThem) {
  expect_error(
      [] {
        SeparableConv2D(-2, {3, 3});
      },
      ErrorCode::kInvalidArgument, "SeparableConv2D: filters must be positive, got -2");
  expect_error(
      [] {
        SeparableConv2D(2, {3, 3}, "", {1, 1}, "valid", -1);
      },
      ErrorCode::kInvalidArgument, "depth_multiplier must be positive, got -1");
  expect_error(
      [] {
        SeparableConv2D(2, {3, 3})(zeros({1, 2, 2, 3}));
      },
      ErrorCode::kInvalidArgument, "larger than the padded input");
}

// ---- the layer zoo ----------------------------------------------------------------------------

// y: a fixed linear function of x's features, one value per example.
Tensor linear_target(const Tensor& x, uint64_t seed) {
  Tensor flat = flatten(x, 1, -1);
  return matmul(flat, random_normal({flat.dim(1), 1}, seed, 0, 0.3));
}

KILN_ZOO_CASE(
    "conv1d",
    [] {
      return std::make_unique<Sequential>(
          std::vector<LayerRef>{Conv1D(4, 3, "relu", 1, "causal", 2), Flatten(), Dense(1)});
    },
    [] {
      Tensor x = random_normal({32, 8, 2}, 21);
      return std::pair{x, linear_target(x, 22)};
    });

KILN_ZOO_CASE(
    "conv2d_transpose",
    [] {
      return std::make_unique<Sequential>(std::vector<LayerRef>{
          Conv2DTranspose(2, {3, 3}, "relu", {2, 2}, "same"), Flatten(), Dense(1)});
    },
    [] {
      Tensor x = random_normal({32, 3, 3, 2}, 23);
      return std::pair{x, linear_target(x, 24)};
    });

KILN_ZOO_CASE(
    "depthwise_conv2d",
    [] {
      return std::make_unique<Sequential>(std::vector<LayerRef>{
          DepthwiseConv2D({3, 3}, "relu", {1, 1}, "same", 2), Flatten(), Dense(1)});
    },
    [] {
      Tensor x = random_normal({32, 4, 4, 2}, 25);
      return std::pair{x, linear_target(x, 26)};
    });

KILN_ZOO_CASE(
    "separable_conv2d",
    [] {
      return std::make_unique<Sequential>(
          std::vector<LayerRef>{SeparableConv2D(4, {3, 3}, "relu"), Flatten(), Dense(1)});
    },
    [] {
      Tensor x = random_normal({32, 5, 5, 2}, 27);
      return std::pair{x, linear_target(x, 28)};
    });

}  // namespace
}  // namespace kiln::nn
