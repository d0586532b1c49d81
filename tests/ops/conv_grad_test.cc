// Convolution gradients: hand-computed input and kernel gradients of tiny convolutions, a naive
// direct-loop adjoint on random inputs (strides, padding, dilations, groups), dtypes, recording
// with an unknown batch, and the errors of the gradient ops.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/kiln.h"
#include "tests/testing/values.h"

namespace kiln {
namespace {

using testing::HasSubstr;
using test_values::values;
using test_values::expect_values;
using test_values::error_of;

// The gradients of <dy, conv(x, k)> with respect to x and k, through gradients() in a graph.
std::vector<Tensor> conv_grads(const Tensor& x, const Tensor& k, const Tensor& dy,
                               const ConvOptions& o = {}) {
  return grad([&](const std::vector<Tensor>& a) { return conv(a[0], a[1], o); }, {x, k}, dy);
}

// ---- hand-computed cases ----------------------------------------------------------------
// x counts 1..9 (x[i][j] = 3i + j + 1), k = [[1,2],[3,4]], dy = [[1,10],[100,1000]]:
// dx[i][j] = sum over outputs (a, b) of dy[a][b] k[i-a][j-b], dw[p][q] = sum dy[a][b] x[a+p][b+q].

TEST(ConvGrad, InputAndKernelGradientsOfATinyConvolution) {
  Tensor x = values({1, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor k = values({2, 2, 1, 1}, {1, 2, 3, 4});
  Tensor dy = values({1, 2, 2, 1}, {1, 10, 100, 1000});
  std::vector<Tensor> g = conv_grads(x, k, dy);
  expect_values(g[0], {1, 3, 3, 1}, {1, 12, 20, 103, 1234, 2040, 300, 3400, 4000});
  expect_values(g[1], {2, 2, 1, 1}, {5421, 6532, 8754, 9865});
}

TEST(ConvGrad, StridesTileTheInputGradient) {
  // Stride 2 with a 2x2 kernel: the windows tile the input, each gets dy[a][b] * k.
  Tensor x = values({1, 4, 4, 1}, std::vector<double>(16, 1));
  Tensor k = values({2, 2, 1, 1}, {1, 2, 3, 4});
  Tensor dy = values({1, 2, 2, 1}, {1, 2, 3, 4});
  ConvOptions o;
  o.strides = {2, 2};
  std::vector<Tensor> g = conv_grads(x, k, dy, o);
  expect_values(g[0], {1, 4, 4, 1}, {1, 2, 2, 4, 3, 4, 6, 8, 3, 6, 4, 8, 9, 12, 12, 16});
  expect_values(g[1], {2, 2, 1, 1}, {10, 10, 10, 10});  // x is all ones: sum(dy) each
}

TEST(ConvGrad, StridesLeaveUncoveredInputsWithZeroGradient) {
  // Length 5, kernel 2, stride 3: windows read 0-1 and 3-4; element 2 is never read.
  Tensor x = values({1, 5, 1}, {1, 2, 3, 4, 5});
  Tensor k = values({2, 1, 1}, {1, 10});
  Tensor dy = values({1, 2, 1}, {1, 2});
  ConvOptions o;
  o.strides = {3};
  std::vector<Tensor> g = conv_grads(x, k, dy, o);
  expect_values(g[0], {1, 5, 1}, {1, 10, 0, 2, 20});
  expect_values(g[1], {2, 1, 1}, {1 * 1 + 2 * 4, 1 * 2 + 2 * 5});
}

TEST(ConvGrad, SamePaddingDropsTheTapsOnPadding) {
  // 2x2 input, 3x3 kernel k[a][b] = 3a + b + 1, padding 1, dy all ones: dx[i][j] sums the taps
  // (a, b) = (i + 1 - oi, j + 1 - oj) over the four outputs.
  Tensor x = values({1, 2, 2, 1}, {1, 2, 3, 4});
  Tensor k = values({3, 3, 1, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor dy = values({1, 2, 2, 1}, {1, 1, 1, 1});
  std::vector<Tensor> g = grad(
      [](const std::vector<Tensor>& a) {
        return conv2d(a[0], a[1], {1, 1}, "same");
      },
      {x, k}, dy);
  expect_values(g[0], {1, 2, 2, 1}, {12, 16, 24, 28});
  // dw[a][b] sums x under tap (a, b) over the four outputs: tap row 0 reaches x's row 0 only
  // (from output row 1), tap row 1 both rows, tap row 2 row 1 only; likewise for columns.
  expect_values(g[1], {3, 3, 1, 1}, {1, 3, 2, 4, 10, 6, 3, 7, 4});
}

TEST(ConvGrad, KernelDilation) {
  // y[o] = x[o] + 10 x[o + 2]; dy = [1, 2, 3].
  Tensor x = values({1, 5, 1}, {1, 2, 3, 4, 5});
  Tensor k = values({2, 1, 1}, {1, 10});
  Tensor dy = values({1, 3, 1}, {1, 2, 3});
  ConvOptions o;
  o.dilation = {2};
  std::vector<Tensor> g = conv_grads(x, k, dy, o);
  expect_values(g[0], {1, 5, 1}, {1, 2, 13, 20, 30});
  expect_values(g[1], {2, 1, 1}, {14, 26});
}

TEST(ConvGrad, GroupsKeepChannelsApart) {
  // Two groups of two input channels: y0 = k00 x0 + k10 x1, y1 = k01 x2 + k11 x3.
  Tensor x = values({1, 1, 1, 4}, {1, 2, 3, 4});
  Tensor k = values({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor dy = values({1, 1, 1, 2}, {10, 100});
  ConvOptions o;
  o.groups = 2;
  std::vector<Tensor> g = conv_grads(x, k, dy, o);
  expect_values(g[0], {1, 1, 1, 4}, {10, 30, 200, 400});
  expect_values(g[1], {1, 1, 2, 2}, {10, 300, 20, 400});
}

TEST(ConvGrad, InputDilationIsTheTransposedConvolution) {
  // lhs_dilation 2 spreads x = [a, b] to [a, 0, b]; kernel [1, 10] gives y = [a, 10 b].
  Tensor x = values({1, 2, 1}, {3, 4});
  Tensor k = values({2, 1, 1}, {1, 10});
  Tensor dy = values({1, 2, 1}, {5, 7});
  ConvOptions o;
  o.lhs_dilation = {2};
  std::vector<Tensor> g = conv_grads(x, k, dy, o);
  expect_values(g[0], {1, 2, 1}, {5, 70});
  expect_values(g[1], {2, 1, 1}, {15, 28});
}

// ---- a naive adjoint on random inputs ----------------------------------------------------

struct Case {
  Shape x, k;
  ConvOptions o;
};

int64_t opt(const Axes& v, size_t i, int64_t fallback) { return v.empty() ? fallback : v[i]; }

// dx and dw of <dy, conv(x, w)> by visiting every (output, tap, channel) triple.
void naive_grads(const Case& c, const std::vector<double>& x, const std::vector<double>& w,
                 const Shape& y_shape, const std::vector<double>& dy, std::vector<double>& dx,
                 std::vector<double>& dw) {
  const size_t d = c.k.size() - 2;
  const int64_t groups = c.o.groups, c_in = c.x.back(), c_out = c.k.back();
  const int64_t cig = c_in / groups, cog = c_out / groups;
  dx.assign(x.size(), 0);
  dw.assign(w.size(), 0);
  Shape out_sp(y_shape.begin() + 1, y_shape.end() - 1), k_sp(c.k.begin(), c.k.end() - 2);
  int64_t n_out = num_elements(out_sp), n_taps = num_elements(k_sp);
  for (int64_t n = 0; n < c.x[0]; ++n) {
    for (int64_t o = 0; o < n_out; ++o) {
      for (int64_t t = 0; t < n_taps; ++t) {
        // Input spatial offset under tap t of output o, or -1.
        int64_t in_off = 0, rem_o = o, rem_t = t;
        bool hit = true;
        std::vector<int64_t> oi(d), ti(d);
        for (size_t i = d; i-- > 0;) {
          oi[i] = rem_o % out_sp[i];
          rem_o /= out_sp[i];
          ti[i] = rem_t % k_sp[i];
          rem_t /= k_sp[i];
        }
        for (size_t i = 0; i < d; ++i) {
          int64_t lhs = opt(c.o.lhs_dilation, i, 1);
          int64_t pos = oi[i] * opt(c.o.strides, i, 1) - opt(c.o.padding_low, i, 0) +
                        ti[i] * opt(c.o.dilation, i, 1);
          int64_t dilated = (c.x[i + 1] - 1) * lhs + 1;
          if (pos < 0 || pos >= dilated || pos % lhs != 0) hit = false;
          in_off = in_off * c.x[i + 1] + (hit ? pos / lhs : 0);
        }
        if (!hit) continue;
        for (int64_t g = 0; g < groups; ++g) {
          for (int64_t ci = 0; ci < cig; ++ci) {
            for (int64_t co = 0; co < cog; ++co) {
              int64_t xi = (n * (x.size() / c.x[0] / c_in) + in_off) * c_in + g * cig + ci;
              int64_t wi = (t * cig + ci) * c_out + g * cog + co;
              int64_t yi = (n * n_out + o) * c_out + g * cog + co;
              dx[xi] += dy[yi] * w[wi];
              dw[wi] += dy[yi] * x[xi];
            }
          }
        }
      }
    }
  }
}

Tensor random(const Shape& shape, std::mt19937_64& rng) {
  std::vector<double> v(num_elements(shape));
  for (double& e : v) e = std::uniform_real_distribution<double>(-1, 1)(rng);
  return Tensor::from_vector(v, shape);
}

TEST(ConvGrad, MatchesANaiveAdjointOnRandomInputs) {
  std::vector<Case> cases;
  auto add = [&](Shape x, Shape k, auto set) {
    Case c{x, k, {}};
    set(c.o);
    cases.push_back(c);
  };
  add({2, 7, 6, 4}, {3, 2, 2, 6}, [](ConvOptions& o) {
    o.strides = {2, 1};
    o.padding_low = {1, 0};
    o.padding_high = {2, 1};
    o.dilation = {1, 2};
    o.groups = 2;
  });
  add({1, 5, 5, 3}, {3, 3, 1, 3}, [](ConvOptions& o) {  // depthwise, "same", stride 2
    o.strides = {2, 2};
    o.padding_low = {1, 1};
    o.padding_high = {1, 1};
    o.groups = 3;
  });
  add({2, 4, 3, 2}, {3, 3, 2, 2}, [](ConvOptions& o) {  // transposed convolution
    o.lhs_dilation = {2, 3};
    o.padding_low = {2, 1};
    o.padding_high = {1, 2};
    o.strides = {1, 2};
  });
  add({3, 11, 2}, {3, 2, 4}, [](ConvOptions& o) {  // 1-d
    o.strides = {3};
    o.dilation = {2};
    o.padding_low = {2};
  });
  add({1, 4, 3, 5, 2}, {2, 2, 3, 2, 3}, [](ConvOptions& o) {  // 3-d
    o.strides = {1, 2, 2};
    o.padding_high = {1, 1, 0};
  });
  std::mt19937_64 rng(7);
  for (const Case& c : cases) {
    Tensor x = random(c.x, rng), w = random(c.k, rng);
    Shape y_shape = conv(x, w, c.o).shape();
    Tensor dy = random(y_shape, rng);
    std::vector<double> dx, dw;
    naive_grads(c, x.to_vector<double>(), w.to_vector<double>(), y_shape, dy.to_vector<double>(),
                dx, dw);
    std::vector<Tensor> g = conv_grads(x, w, dy, c.o);
    expect_values(g[0], c.x, dx, 1e-12);
    expect_values(g[1], c.k, dw, 1e-12);
  }
}

// ---- dtypes, graphs, sizes ----------------------------------------------------------------

TEST(ConvGrad, SixteenBitAndSinglePrecisionGradientsKeepTheirDtype) {
  std::mt19937_64 rng(3);
  Tensor x = random({2, 5, 5, 3}, rng), w = random({3, 3, 3, 4}, rng);
  ConvOptions o;
  o.strides = {2, 2};
  o.padding_low = {1, 1};
  o.padding_high = {1, 1};
  Tensor dy = random(conv(x, w, o).shape(), rng);
  std::vector<Tensor> exact = conv_grads(x, w, dy, o);
  for (auto [dtype, tol] : {std::pair{f32, 1e-5}, {f16, 2e-2}, {bf16, 1e-1}}) {
    std::vector<Tensor> g = conv_grads(x.to(dtype), w.to(dtype), dy.to(dtype), o);
    ASSERT_EQ(g[0].dtype(), dtype);
    ASSERT_EQ(g[1].dtype(), dtype);
    EXPECT_TRUE(allclose(g[0].to(f64), exact[0], tol, tol)) << dtype_name(dtype);
    EXPECT_TRUE(allclose(g[1].to(f64), exact[1], tol, tol)) << dtype_name(dtype);
  }
}

TEST(ConvGrad, RecordedWithAnUnknownBatch) {
  Graph g("conv_grad");
  Tensor x = g.placeholder(f32, {kUnknownDim, 3, 3, 1}, "x");
  Tensor k = g.placeholder(f32, {2, 2, 1, 1}, "k");
  Tensor dy = g.placeholder(f32, {kUnknownDim, 2, 2, 1}, "dy");
  Tensor y;
  {
    auto recording = g.as_default();
    y = conv(x, k);
  }
  std::vector<Tensor> grads = gradients(y, {x, k}, dy);
  EXPECT_EQ(grads[0].shape(), (Shape{kUnknownDim, 3, 3, 1}));
  EXPECT_EQ(grads[1].shape(), (Shape{2, 2, 1, 1}));
  // Two images: the hand-computed one and its double.
  Tensor xv = values({2, 3, 3, 1}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 2, 4, 6, 8, 10, 12, 14, 16, 18});
  Tensor dyv = values({2, 2, 2, 1}, {1, 10, 100, 1000, 0, 0, 0, 0});
  std::vector<Tensor> out =
      g.run({{x, xv}, {k, values({2, 2, 1, 1}, {1, 2, 3, 4})}, {dy, dyv}}, grads);
  expect_values(out[0], {2, 3, 3, 1},
                {1, 12, 20, 103, 1234, 2040, 300, 3400, 4000, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  expect_values(out[1], {2, 2, 1, 1}, {5421, 6532, 8754, 9865});
}

TEST(ConvGrad, EmptyBatchGivesEmptyAndZeroGradients) {
  Tensor x = Tensor::empty(f32, {0, 4, 4, 2});
  Tensor k = values({3, 3, 2, 1}, std::vector<double>(18, 1));
  Tensor dy = Tensor::empty(f32, {0, 2, 2, 1});
  std::vector<Tensor> g = conv_grads(x, k, dy);
  EXPECT_EQ(g[0].shape(), (Shape{0, 4, 4, 2}));
  expect_values(g[1], {3, 3, 2, 1}, std::vector<double>(18, 0));
}

TEST(ConvGrad, UnknownSpatialDimensionsAreAnErrorWhenDifferentiating) {
  Graph g("conv_grad");
  Tensor x = g.placeholder(f32, {1, kUnknownDim, 4, 1}, "x");
  Tensor k = g.placeholder(f32, {2, 2, 1, 1}, "k");
  Tensor y;
  {
    auto recording = g.as_default();
    y = conv(x, k);
  }
  Tensor dy = g.placeholder(f32, {1, kUnknownDim, 3, 1}, "dy");
  std::string message = error_of([&] { gradients(y, {k}, dy); });
  EXPECT_THAT(message, HasSubstr("convolution: the gradient needs the spatial dimensions of "
                                 "the input, but it is f32[1,?,4,1] when recorded"));
}

// ---- the gradient ops' own checks --------------------------------------------------------

TEST(ConvGrad, GradientOpsCheckTheirOperands) {
  Tensor dy = Tensor::empty(f32, {1, 3, 3, 2});
  Tensor k = Tensor::empty(f32, {2, 2, 1, 2});
  Tensor x = Tensor::empty(f32, {1, 4, 4, 1});
  Attrs input_spatial{{"input_spatial", Axes{5, 5}}};
  EXPECT_THAT(error_of([&] {
                call_op("convolution_input_grad", {dy, k}, input_spatial);
              }),
              HasSubstr("convolution_input_grad: output_grad is f32[1,3,3,2], but the "
                        "convolution of input f32[1,5,5,1] with kernel f32[2,2,1,2] gives "
                        "f32[1,4,4,2]"));
  EXPECT_THAT(error_of([&] {
                call_op("convolution_input_grad", {dy, k});
              }),
              HasSubstr("convolution_input_grad: needs the attribute input_spatial"));
  EXPECT_THAT(error_of([&] {
                call_op("convolution_kernel_grad", {x, dy}, {{"kernel_spatial", Axes{3}}});
              }),
              HasSubstr("kernel_spatial [3] must have one value per spatial dimension (2)"));
  EXPECT_THAT(
      error_of([&] {
        call_op("convolution_kernel_grad", {x, dy.to(f64)}, {{"kernel_spatial", Axes{2, 2}}});
      }),
      HasSubstr("convolution_kernel_grad: dtype mismatch"));
  // The shapes agree: [1,4,4,1] * [2,2,1,2] -> [1,3,3,2].
  EXPECT_EQ(call_op("convolution_kernel_grad", {x, Tensor::empty(f32, {1, 3, 3, 2})},
                    {{"kernel_spatial", Axes{2, 2}}})[0]
                .shape(),
            (Shape{2, 2, 1, 2}));
}

}  // namespace
}  // namespace kiln
