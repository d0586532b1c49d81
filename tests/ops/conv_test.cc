// Convolution: hand-computed cases, a naive direct-loop oracle on random inputs, dtypes,
// zero-sized dimensions, errors, and recording in a Graph.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/kiln.h"
#include "tests/testing/values.h"

namespace kiln {
namespace {

using testing::HasSubstr;
using test_values::counting;
using test_values::expect_values;
using test_values::error_of;

Tensor filled(Shape shape, std::vector<float> values) {
  return Tensor::from_vector(values, std::move(shape));
}

// ---- hand-computed cases ----------------------------------------------------------------
// The 4x4 input counts 1..16, so x[i][j] = 4i + j + 1; with the kernel [[1,2],[3,4]],
// out[i][j] = x[i][j] + 2x[i][j+1] + 3x[i+1][j] + 4x[i+1][j+1] = 40i + 10j + 44.

TEST(Conv, TwoByTwoKernelValid) {
  Tensor x = counting({1, 4, 4, 1});
  Tensor k = filled({2, 2, 1, 1}, {1, 2, 3, 4});
  expect_values(conv(x, k), {1, 3, 3, 1}, {44, 54, 64, 84, 94, 104, 124, 134, 144});
  expect_values(conv2d(x, k), {1, 3, 3, 1}, {44, 54, 64, 84, 94, 104, 124, 134, 144});
}

TEST(Conv, StridesSkipOutputPositions) {
  Tensor x = counting({1, 4, 4, 1});
  Tensor k = filled({2, 2, 1, 1}, {1, 2, 3, 4});
  expect_values(conv2d(x, k, {2, 2}), {1, 2, 2, 1}, {44, 64, 124, 144});
  ConvOptions o;
  o.strides = {1, 2};
  expect_values(conv(x, k, o), {1, 3, 2, 1}, {44, 64, 84, 104, 124, 144});
}

TEST(Conv, SamePaddingPadsTheHighSideForAnEvenKernel) {
  // Total padding 1 per dimension, all of it after the input: the last row and column see
  // zeros below and to the right.
  Tensor x = counting({1, 4, 4, 1});
  Tensor k = filled({2, 2, 1, 1}, {1, 2, 3, 4});
  expect_values(conv2d(x, k, {1, 1}, "same"), {1, 4, 4, 1},
                {44, 54, 64, 28, 84, 94, 104, 44, 124, 134, 144, 60, 41, 44, 47, 16});
}

TEST(Conv, SamePaddingWithStrideTwoSplitsLikeTensorFlow) {
  // 4 wide, kernel 3, stride 2: out 2, total padding 1 -> low 0, high 1.
  Tensor x = counting({1, 4, 4, 1});
  Tensor k = filled({3, 3, 1, 1}, std::vector<float>(9, 1));
  expect_values(conv2d(x, k, {2, 2}, "same"), {1, 2, 2, 1}, {54, 45, 72, 54});
  // 5 wide, kernel 3, stride 2: out 3, padding 1 on each side. x[i][j] = 5i + j + 1.
  Tensor x5 = counting({1, 5, 5, 1});
  expect_values(conv2d(x5, k, {2, 2}, "same"), {1, 3, 3, 1},
                {16, 33, 28, 69, 117, 87, 76, 123, 88});
}

TEST(Conv, ExplicitPaddingAddsZeros) {
  Tensor x = filled({1, 1, 1, 1}, {5});
  Tensor k = filled({2, 2, 1, 1}, {1, 2, 3, 4});
  ConvOptions o;
  o.padding_low = {1, 1};
  o.padding_high = {1, 1};
  // The single input value meets each kernel tap once, in reverse order of position.
  expect_values(conv(x, k, o), {1, 2, 2, 1}, {20, 15, 10, 5});
}

TEST(Conv, KernelDilationSpreadsTheTaps) {
  // x[i][j] = 5i + j + 1; taps at offsets 0 and 2: out = 20i + 4j + 28.
  Tensor x = counting({1, 5, 5, 1});
  Tensor k = filled({2, 2, 1, 1}, {1, 1, 1, 1});
  ConvOptions o;
  o.dilation = {2, 2};
  expect_values(conv(x, k, o), {1, 3, 3, 1}, {28, 32, 36, 48, 52, 56, 68, 72, 76});
}

TEST(Conv, GroupsConvolveChannelGroupsSeparately) {
  // Output channels 0,1 see input channels 0,1; output channels 2,3 see input channels 2,3.
  Tensor x = filled({1, 1, 1, 4}, {1, 2, 3, 4});
  Tensor k = filled({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  ConvOptions o;
  o.groups = 2;
  expect_values(conv(x, k, o), {1, 1, 1, 4},
                {1 * 1 + 2 * 5, 1 * 2 + 2 * 6, 3 * 3 + 4 * 7, 3 * 4 + 4 * 8});
}

TEST(Conv, DepthwiseIsOneGroupPerChannel) {
  Tensor x = filled({1, 1, 3, 2}, {1, 10, 2, 20, 3, 30});  // W=3, C=2
  Tensor k = filled({1, 2, 1, 2}, {1, -1, 1, 1});          // per channel: [1,1] and [-1,1]
  ConvOptions o;
  o.groups = 2;
  expect_values(conv(x, k, o), {1, 1, 2, 2}, {1 + 2, -10 + 20, 2 + 3, -20 + 30});
}

TEST(Conv, OneDimensional) {
  // x = 1..5, kernel [1,2,3]: out[i] = x[i] + 2x[i+1] + 3x[i+2] = 6i + 14.
  Tensor x = counting({1, 5, 1});
  Tensor k = filled({3, 1, 1}, {1, 2, 3});
  expect_values(conv(x, k), {1, 3, 1}, {14, 20, 26});
  ConvOptions o;
  o.padding_low = {1};
  o.padding_high = {1};
  expect_values(conv(x, k, o), {1, 5, 1}, {8, 14, 20, 26, 14});
}

TEST(Conv, ThreeDimensional) {
  // A 2x2x2 kernel over a 2x2x2 input: channel 0 sums the input (1..8 -> 36), channel 1
  // weights it by 1..8 (sum of squares -> 204).
  Tensor x = counting({1, 2, 2, 2, 1});
  std::vector<float> kv;
  for (int i = 0; i < 8; ++i) kv.insert(kv.end(), {1.0f, i + 1.0f});
  Tensor k = filled({2, 2, 2, 1, 2}, kv);
  expect_values(conv(x, k), {1, 1, 1, 1, 2}, {36, 204});
}

TEST(Conv, InputDilationInsertsHoles) {
  // [1,2,3] dilated by 2 is [1,0,2,0,3]; kernel [1,10].
  Tensor x = filled({1, 3, 1}, {1, 2, 3});
  Tensor k = filled({2, 1, 1}, {1, 10});
  ConvOptions o;
  o.lhs_dilation = {2};
  expect_values(conv(x, k, o), {1, 4, 1}, {1, 20, 2, 30});
  o.padding_low = {1};
  o.padding_high = {1};
  expect_values(conv(x, k, o), {1, 6, 1}, {10, 1, 20, 2, 30, 3});
}

TEST(Conv, BatchAndChannels) {
  // Two images, two input channels, a 1x1 kernel mixing them into three outputs.
  Tensor x = filled({2, 1, 1, 2}, {1, 2, 3, 4});
  Tensor k = filled({1, 1, 2, 3}, {1, 0, 1, 0, 1, 1});
  expect_values(conv(x, k), {2, 1, 1, 3}, {1, 2, 3, 3, 4, 7});
}

// ---- dtypes -----------------------------------------------------------------------------

TEST(Conv, ComputesInEveryFloatType) {
  for (DType t : {f32, f64, f16, bf16}) {
    Tensor x = counting({1, 4, 4, 1}, 1, t);
    Tensor k = filled({2, 2, 1, 1}, {1, 2, 3, 4}).to(t);
    Tensor y = conv(x, k);
    EXPECT_EQ(y.dtype(), t);
    expect_values(y, {1, 3, 3, 1}, {44, 54, 64, 84, 94, 104, 124, 134, 144});
  }
}

TEST(Conv, PromotesMixedInputs) {
  Tensor x = counting({1, 4, 4, 1}, 1, i32);
  Tensor k = filled({2, 2, 1, 1}, {1, 2, 3, 4});
  Tensor y = conv(x, k);
  EXPECT_EQ(y.dtype(), f32);
  expect_values(y, {1, 3, 3, 1}, {44, 54, 64, 84, 94, 104, 124, 134, 144});
  EXPECT_EQ(conv(x.to(f16), k.to(f64)).dtype(), f64);
}

TEST(Conv, RejectsIntegerConvolution) {
  Tensor x = counting({1, 2, 2, 1}, 1, i32);
  Tensor k = counting({1, 1, 1, 1}, 1, i32);
  std::string msg = error_of([&] { conv(x, k); });
  EXPECT_THAT(msg, HasSubstr("convolution: expects floating-point"));
  EXPECT_THAT(msg, HasSubstr("i32[1,2,2,1]"));
}

// ---- zero-sized dimensions ----------------------------------------------------------------

TEST(Conv, ZeroSizedDimensions) {
  Tensor k = counting({3, 3, 2, 4});
  EXPECT_EQ(conv(Tensor::empty(f32, {0, 5, 5, 2}), k).shape(), (Shape{0, 3, 3, 4}));
  EXPECT_EQ(conv(counting({1, 5, 5, 2}), Tensor::empty(f32, {3, 3, 2, 0})).shape(),
            (Shape{1, 3, 3, 0}));
  // An empty spatial dimension stays empty.
  EXPECT_EQ(conv(Tensor::empty(f32, {1, 0, 5, 2}), k).shape(), (Shape{1, 0, 3, 4}));
  // No input channels: every output is an empty sum.
  Tensor y = conv(Tensor::empty(f32, {1, 3, 3, 0}), Tensor::empty(f32, {2, 2, 0, 2}));
  expect_values(y, {1, 2, 2, 2}, std::vector<double>(8, 0));
}

// ---- errors -----------------------------------------------------------------------------

TEST(Conv, ChannelMismatchNamesShapes) {
  std::string msg = error_of([] { conv(counting({1, 5, 5, 3}), counting({3, 3, 4, 8})); });
  EXPECT_EQ(msg,
            "convolution: input has 3 channels but the kernel expects 4 (input f32[1,5,5,3], "
            "kernel f32[3,3,4,8])");
  ConvOptions o;
  o.groups = 2;
  msg = error_of([&] { conv(counting({1, 5, 5, 6}), counting({3, 3, 2, 8}), o); });
  EXPECT_THAT(msg, HasSubstr("input has 6 channels but the kernel expects 4"));
}

TEST(Conv, KernelLargerThanInput) {
  std::string msg = error_of([] { conv(counting({1, 2, 2, 1}), counting({3, 3, 1, 1})); });
  EXPECT_THAT(msg, HasSubstr("convolution:"));
  EXPECT_THAT(msg, HasSubstr("larger than the padded input"));
  EXPECT_THAT(msg, HasSubstr("f32[1,2,2,1]"));
  EXPECT_THAT(msg, HasSubstr("f32[3,3,1,1]"));
}

TEST(Conv, BadRanksAndAttributes) {
  Tensor x = counting({1, 5, 5, 2});
  Tensor k = counting({3, 3, 2, 4});
  EXPECT_THAT(error_of([&] {
                conv(counting({5, 5, 2}), k);
              }),
              HasSubstr("as many spatial dimensions as the kernel"));
  EXPECT_THAT(error_of([&] { conv(x, counting({4})); }), HasSubstr("the kernel must be"));
  ConvOptions o;
  o.strides = {1, 1, 1};
  EXPECT_THAT(error_of([&] { conv(x, k, o); }),
              HasSubstr("strides [1,1,1] must have one value per spatial dimension (2)"));
  o = {};
  o.strides = {0, 1};
  EXPECT_THAT(error_of([&] { conv(x, k, o); }), HasSubstr("strides [0,1] must hold values"));
  o = {};
  o.padding_low = {-1, 0};
  EXPECT_THAT(error_of([&] { conv(x, k, o); }), HasSubstr("padding_low [-1,0]"));
  o = {};
  o.groups = 0;
  EXPECT_THAT(error_of([&] { conv(x, k, o); }), HasSubstr("groups must be >= 1"));
  o.groups = 2;  // 2 input channels = 1 per group x 2, but the kernel has 2 per group
  EXPECT_THAT(error_of([&] { conv(x, k, o); }), HasSubstr("kernel expects 4"));
  o.groups = 3;
  EXPECT_THAT(error_of([&] {
                conv(counting({1, 5, 5, 3}), counting({3, 3, 1, 4}), o);
              }),
              HasSubstr("output channels (4) are not divisible by groups (3)"));
  EXPECT_THAT(error_of([&] {
                conv(x, counting({0, 3, 2, 4}));
              }),
              HasSubstr("kernel spatial dimension 0 is 0"));
}

TEST(Conv, Conv2dErrors) {
  Tensor x = counting({1, 5, 5, 2});
  Tensor k = counting({3, 3, 2, 4});
  EXPECT_EQ(error_of([&] {
              conv2d(x, k, {1, 1}, "full");
            }),
            "conv2d: padding must be \"same\" or \"valid\", got \"full\"");
  EXPECT_THAT(error_of([&] {
                conv2d(counting({5, 5, 2}), k);
              }),
              HasSubstr("conv2d: expects a 4-d NHWC input and a 4-d HWIO kernel (input "
                        "f32[5,5,2], kernel f32[3,3,2,4])"));
  EXPECT_THAT(error_of([&] { conv2d(x, k, {1}); }), HasSubstr("strides must have 2 values"));
  EXPECT_THAT(error_of([&] {
                conv2d(x, k, {0, 1}, "same");
              }),
              HasSubstr("strides must be in [1, 16777216], got [0,"));
}

// ---- against a naive direct convolution -------------------------------------------------

struct Config {
  Shape in;      // N, spatial..., C
  Shape kernel;  // spatial..., C/groups, C_out
  ConvOptions options;
};

// Plain nested loops over output positions, kernel taps and channels, straight from the
// definition: input position = out * stride - pad_low + tap * dilation, in the input dilated
// by lhs_dilation (positions that fall between input elements read zero).
std::vector<double> naive_conv(const std::vector<double>& x, const Shape& xs,
                               const std::vector<double>& w, const Shape& ws, const ConvOptions& o,
                               Shape& out_shape) {
  const size_t d = ws.size() - 2;
  auto opt = [&](const Axes& v, size_t i, int64_t def) { return v.empty() ? def : v[i]; };
  const int64_t n_batch = xs[0], c_in = xs[d + 1], c_out = ws[d + 1];
  const int64_t cg_in = c_in / o.groups, cg_out = c_out / o.groups;
  Shape out_sp(d);
  for (size_t i = 0; i < d; ++i) {
    int64_t dilated_in = (xs[i + 1] - 1) * opt(o.lhs_dilation, i, 1) + 1;
    int64_t padded = dilated_in + opt(o.padding_low, i, 0) + opt(o.padding_high, i, 0);
    int64_t dilated_k = (ws[i] - 1) * opt(o.dilation, i, 1) + 1;
    out_sp[i] = (padded - dilated_k) / opt(o.strides, i, 1) + 1;
  }
  out_shape = {n_batch};
  out_shape.insert(out_shape.end(), out_sp.begin(), out_sp.end());
  out_shape.push_back(c_out);
  Shape k_sp(ws.begin(), ws.begin() + d);
  int64_t n_out_pos = num_elements(out_sp), n_taps = num_elements(k_sp);
  std::vector<double> y(num_elements(out_shape), 0.0);
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t op = 0; op < n_out_pos; ++op) {
      // Unflatten the output position and the tap by hand.
      std::vector<int64_t> o_idx(d);
      for (int64_t r = op, i = d - 1; i >= 0; --i) o_idx[i] = r % out_sp[i], r /= out_sp[i];
      for (int64_t co = 0; co < c_out; ++co) {
        const int64_t g = co / cg_out;
        double acc = 0;
        for (int64_t tp = 0; tp < n_taps; ++tp) {
          std::vector<int64_t> k_idx(d);
          for (int64_t r = tp, i = d - 1; i >= 0; --i) k_idx[i] = r % k_sp[i], r /= k_sp[i];
          int64_t x_off = n;
          bool inside = true;
          for (size_t i = 0; i < d; ++i) {
            int64_t pos = o_idx[i] * opt(o.strides, i, 1) - opt(o.padding_low, i, 0) +
                          k_idx[i] * opt(o.dilation, i, 1);
            int64_t lhs = opt(o.lhs_dilation, i, 1);
            if (pos < 0 || pos % lhs != 0 || pos / lhs >= xs[i + 1]) inside = false;
            x_off = x_off * xs[i + 1] + (inside ? pos / lhs : 0);
          }
          if (!inside) continue;
          for (int64_t ci = 0; ci < cg_in; ++ci) {
            double xv = x[x_off * c_in + g * cg_in + ci];
            double wv = w[(tp * cg_in + ci) * c_out + co];
            acc += xv * wv;
          }
        }
        y[(n * n_out_pos + op) * c_out + co] = acc;
      }
    }
  }
  return y;
}

std::vector<double> random_values(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (double& e : v) e = u(rng);
  return v;
}

void check_against_naive(const Config& c, DType dtype, double tol) {
  std::mt19937 rng(42);
  std::vector<double> x = random_values(num_elements(c.in), rng);
  std::vector<double> w = random_values(num_elements(c.kernel), rng);
  Shape want_shape;
  std::vector<double> want = naive_conv(x, c.in, w, c.kernel, c.options, want_shape);
  Tensor y = conv(Tensor::from_vector(x, c.in).to(dtype),
                  Tensor::from_vector(w, c.kernel).to(dtype), c.options);
  EXPECT_EQ(y.dtype(), dtype);
  expect_values(y, want_shape, want, tol);
}

TEST(Conv, MatchesNaiveConvolutionOnRandomInputs) {
  std::vector<Config> configs = {
      // 2-d with strides, asymmetric padding and kernel dilation.
      {{2, 7, 6, 3}, {3, 2, 3, 4}, {{2, 1}, {1, 0}, {2, 1}, {1, 2}, {}, 1}},
      // Groups with input dilation (a transposed convolution).
      {{2, 5, 4, 6}, {2, 3, 2, 6}, {{1, 2}, {0, 2}, {1, 1}, {1, 1}, {2, 1}, 3}},
      // 1-d: stride 3, dilation 2, padding.
      {{3, 10, 2}, {4, 2, 3}, {{3}, {2}, {1}, {2}, {}, 1}},
      // 3-d with input dilation in one dimension.
      {{1, 4, 5, 3, 2}, {2, 3, 2, 2, 3}, {{1, 2, 1}, {1, 0, 0}, {0, 1, 1}, {}, {1, 1, 2}, 1}},
      // Large enough for several row blocks on several threads.
      {{4, 20, 20, 16}, {3, 3, 16, 8}, {{}, {1, 1}, {1, 1}, {}, {}, 1}},
      // A deep patch (1152 columns): the row-block floor.
      {{2, 8, 8, 128}, {3, 3, 128, 5}, {}},
      // Depthwise with stride 2 and "same"-style padding.
      {{2, 9, 9, 4}, {3, 3, 1, 8}, {{2, 2}, {1, 1}, {1, 1}, {}, {}, 4}},
  };
  for (size_t i = 0; i < configs.size(); ++i) {
    SCOPED_TRACE("config " + std::to_string(i));
    check_against_naive(configs[i], f32, 1e-4);
    check_against_naive(configs[i], f64, 1e-10);
  }
  SCOPED_TRACE("bf16");
  check_against_naive(configs[0], bf16, 5e-2);
}

// ---- graphs -----------------------------------------------------------------------------

TEST(Conv, RecordsInAGraphAndRuns) {
  Graph g("conv");
  Tensor x = g.placeholder(f32, {kUnknownDim, 5, 5, 2}, "x");
  Tensor k = counting({3, 3, 2, 4}, -10);
  Tensor y = conv2d(x, k, {2, 2}, "same");
  EXPECT_TRUE(y.is_symbolic());
  EXPECT_EQ(y.shape(), (Shape{kUnknownDim, 3, 3, 4}));
  Tensor xv = counting({2, 5, 5, 2}, -20);
  Tensor got = g.run({{x, xv}}, y);
  Tensor want = conv2d(xv, k, {2, 2}, "same");
  expect_values(got, want.shape(), want.to_vector<double>());
}

TEST(Conv, RecordsWithUnknownSpatialDimensions) {
  Graph g;
  Tensor x = g.placeholder(f32, {1, kUnknownDim, kUnknownDim, 1}, "x");
  Tensor k = filled({2, 2, 1, 1}, {1, 2, 3, 4});
  Tensor y = conv2d(x, k, {1, 1}, "same");  // stride 1: padding does not depend on the size
  EXPECT_EQ(y.shape(), (Shape{1, kUnknownDim, kUnknownDim, 1}));
  expect_values(g.run({{x, counting({1, 4, 4, 1})}}, y), {1, 4, 4, 1},
                {44, 54, 64, 28, 84, 94, 104, 44, 124, 134, 144, 60, 41, 44, 47, 16});
  EXPECT_THAT(error_of([&] {
                conv2d(x, k, {2, 2}, "same");
              }),
              HasSubstr("\"same\" padding with stride 2 needs a known size"));
}

TEST(Conv, ShapeErrorsAreRaisedWhileRecording) {
  Graph g;
  Tensor x = g.placeholder(f32, {kUnknownDim, 5, 5, 3}, "x");
  std::string msg = error_of([&] { conv(x, counting({3, 3, 4, 8})); });
  EXPECT_THAT(msg, HasSubstr("input has 3 channels but the kernel expects 4"));
  EXPECT_THAT(msg, HasSubstr("f32[?,5,5,3]"));
}

}  // namespace
}  // namespace kiln
