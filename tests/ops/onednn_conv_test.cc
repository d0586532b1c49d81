// The oneDNN path of the f32 convolution kernels (ops/onednn_conv.h) against Kiln's own im2col +
// GEMM kernels on random shapes, forward and both gradients, and which path serves which case.
// Bound: both results are sums of the same K products in some order, each within
// gamma(K) * sum|terms| of the exact value (gamma(K) = K u / (1 - K u), u = 2^-24), so they differ
// by at most 2 gamma(K) sum|terms|; sum|terms| is the same convolution of |operands| in f64. A
// bf16 result is that f32 sum rounded once more, to within u8 = 2^-8 of it.
#include "ops/onednn_conv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "kiln/kiln.h"
#include "kiln/op_registry.h"
#include "tests/testing/conv.h"
#include "tests/testing/onednn.h"

namespace kiln {
namespace {

using testing::with_onednn;

// These compare oneDNN with Kiln's im2col GEMM: the direct kernels, which would serve the cases
// with few input channels before either, are off (tests/ops/conv_direct_test.cc checks them).
class OnednnConv : public ::testing::Test {
  testing::DirectConvOff direct_off_;
};

#define SKIP_WITHOUT_ONEDNN() \
  if (!ops::onednn::built()) GTEST_SKIP() << "Kiln is built without oneDNN"

// A random convolution: 1-d or 2-d, batch 1..4, groups, odd sizes, strides, dilation, and
// VALID, SAME or arbitrary padding.
struct Case {
  Shape in, kernel;
  ConvOptions options;
  std::string str() const {
    return "input " + shape_str(in) + ", kernel " + shape_str(kernel) + ", strides " +
           shape_str(options.strides) + ", padding " + shape_str(options.padding_low) + "/" +
           shape_str(options.padding_high) + ", dilation " + shape_str(options.dilation) +
           ", groups " + std::to_string(options.groups);
  }
};

Case random_case(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const size_t d = pick(0, 4) == 0 ? 1 : 2;
  Case c;
  c.options.groups = std::vector<int>{1, 1, 1, 2, 3}[pick(0, 4)];
  const int64_t cg_in = pick(1, 5), cg_out = pick(1, 5);
  c.in = {pick(1, 4)};
  const int mode = pick(0, 2);  // 0 VALID, 1 SAME, 2 arbitrary
  for (size_t i = 0; i < d; ++i) {
    const int64_t k = pick(1, 4), stride = pick(1, 3), dilation = pick(0, 2) == 0 ? 2 : 1;
    const int64_t span = (k - 1) * dilation + 1;
    int64_t low = mode == 2 ? pick(0, 2) : 0, high = mode == 2 ? pick(0, 2) : 0;
    const int64_t n = std::max<int64_t>(1, span - low - high) + pick(0, 9);
    if (mode == 1) {
      const int64_t out = (n + stride - 1) / stride;
      const int64_t total = std::max<int64_t>(0, (out - 1) * stride + span - n);
      low = total / 2;
      high = total - low;
    }
    c.in.push_back(n);
    c.kernel.push_back(k);
    c.options.strides.push_back(stride);
    c.options.dilation.push_back(dilation);
    c.options.padding_low.push_back(low);
    c.options.padding_high.push_back(high);
  }
  c.in.push_back(cg_in * c.options.groups);
  c.kernel.push_back(cg_in);
  c.kernel.push_back(cg_out * c.options.groups);
  return c;
}

Attrs attrs_of(const ConvOptions& o) { return testing::conv_attrs_of(o); }

void expect_within(const Tensor& got, const Tensor& want, const Tensor& terms, int64_t k,
                   const std::string& what, double round = 0) {
  testing::expect_within_sum_bound(got, want, terms, k, what, round);
}

TEST_F(OnednnConv, AgreesWithKilnsKernelsOnRandomShapesForwardAndBothGradients) {
  SKIP_WITHOUT_ONEDNN();
  std::mt19937 rng(12);
  for (int i = 0; i < 60; ++i) {
    const Case c = random_case(rng);
    SCOPED_TRACE(c.str());
    const size_t d = c.kernel.size() - 2;
    const Tensor x = random_uniform(c.in, 10 + i, -1, 1);
    const Tensor w = random_uniform(c.kernel, 20 + i, -1, 1);
    const ops::onednn::Counts before = ops::onednn::counts();
    const Tensor y = with_onednn(true, [&] { return conv(x, w, c.options); });
    const Tensor y_ref = with_onednn(false, [&] { return conv(x, w, c.options); });
    const Tensor x64 = abs(x.to(f64)), w64 = abs(w.to(f64));
    int64_t taps = 1;
    for (size_t j = 0; j < d; ++j) taps *= c.kernel[j];
    const int64_t cg_in = c.kernel[d], cg_out = c.kernel[d + 1] / c.options.groups;
    expect_within(y, y_ref, conv(x64, w64, c.options), taps * cg_in, "forward");

    const Tensor dy = random_uniform(y.shape(), 30 + i, -1, 1);
    Attrs ai = attrs_of(c.options), ak = ai;
    ai.set("input_spatial", Axes(c.in.begin() + 1, c.in.end() - 1));
    ak.set("kernel_spatial", Axes(c.kernel.begin(), c.kernel.end() - 2));
    auto input_grad = [&](const Tensor& g, const Tensor& k) {
      return call_op("convolution_input_grad", {g, k}, ai)[0];
    };
    auto kernel_grad = [&](const Tensor& a, const Tensor& g) {
      return call_op("convolution_kernel_grad", {a, g}, ak)[0];
    };
    const Tensor dy64 = abs(dy.to(f64));
    expect_within(with_onednn(true, [&] { return input_grad(dy, w); }),
                  with_onednn(false, [&] { return input_grad(dy, w); }), input_grad(dy64, w64),
                  taps * cg_out, "input gradient");
    const int64_t positions = num_elements(y.shape()) / y.shape().back();
    expect_within(with_onednn(true, [&] { return kernel_grad(x, dy); }),
                  with_onednn(false, [&] { return kernel_grad(x, dy); }), kernel_grad(x64, dy64),
                  positions, "kernel gradient");

    const ops::onednn::Counts after = ops::onednn::counts();
    EXPECT_EQ(after.forward, before.forward + 1) << "the forward did not run on oneDNN";
    EXPECT_EQ(after.input_grad, before.input_grad + 1) << "the input gradient did not";
    EXPECT_EQ(after.kernel_grad, before.kernel_grad + 1) << "the kernel gradient did not";
  }
}

// bf16 operands run on oneDNN's bf16 kernels (vdpbf16ps where the CPU has AVX512-BF16), compared
// with Kiln's f32 kernel on the same values widened.
TEST_F(OnednnConv, Bf16AgreesWithF32WithinOneBf16Rounding) {
  SKIP_WITHOUT_ONEDNN();
  const double u8 = std::ldexp(1.0, -8);
  std::mt19937 rng(16);
  for (int i = 0; i < 30; ++i) {
    const Case c = random_case(rng);
    SCOPED_TRACE(c.str());
    const size_t d = c.kernel.size() - 2;
    const Tensor x = random_uniform(c.in, 10 + i, -1, 1).to(bf16);
    const Tensor w = random_uniform(c.kernel, 20 + i, -1, 1).to(bf16);
    const Tensor xf = x.to(f32), wf = w.to(f32);
    const ops::onednn::Counts before = ops::onednn::counts();
    const Tensor y = with_onednn(true, [&] { return conv(x, w, c.options); });
    ASSERT_EQ(y.dtype(), bf16);
    const Tensor x64 = abs(x.to(f64)), w64 = abs(w.to(f64));
    int64_t taps = 1;
    for (size_t j = 0; j < d; ++j) taps *= c.kernel[j];
    const int64_t cg_in = c.kernel[d], cg_out = c.kernel[d + 1] / c.options.groups;
    expect_within(y.to(f32), with_onednn(false, [&] { return conv(xf, wf, c.options); }),
                  conv(x64, w64, c.options), taps * cg_in, "forward", u8);

    const Tensor dy = random_uniform(y.shape(), 30 + i, -1, 1).to(bf16);
    Attrs ai = attrs_of(c.options), ak = ai;
    ai.set("input_spatial", Axes(c.in.begin() + 1, c.in.end() - 1));
    ak.set("kernel_spatial", Axes(c.kernel.begin(), c.kernel.end() - 2));
    auto input_grad = [&](const Tensor& g, const Tensor& k) {
      return call_op("convolution_input_grad", {g, k}, ai)[0];
    };
    auto kernel_grad = [&](const Tensor& a, const Tensor& g) {
      return call_op("convolution_kernel_grad", {a, g}, ak)[0];
    };
    const Tensor dyf = dy.to(f32), dy64 = abs(dy.to(f64));
    expect_within(with_onednn(true, [&] { return input_grad(dy, w); }).to(f32),
                  with_onednn(false, [&] { return input_grad(dyf, wf); }), input_grad(dy64, w64),
                  taps * cg_out, "input gradient", u8);
    const int64_t positions = num_elements(y.shape()) / y.shape().back();
    expect_within(with_onednn(true, [&] { return kernel_grad(x, dy); }).to(f32),
                  with_onednn(false, [&] { return kernel_grad(xf, dyf); }), kernel_grad(x64, dy64),
                  positions, "kernel gradient", u8);

    const ops::onednn::Counts after = ops::onednn::counts();
    EXPECT_EQ(after.forward, before.forward + 1) << "the bf16 forward did not run on oneDNN";
    EXPECT_EQ(after.input_grad, before.input_grad + 1) << "the input gradient did not";
    EXPECT_EQ(after.kernel_grad, before.kernel_grad + 1) << "the kernel gradient did not";
  }
}

// The CNN trainer's second convolution at batch 128: many chunks, and a last shorter one.
TEST_F(OnednnConv, AgreesOnTheTrainersShapeCutIntoChunks) {
  SKIP_WITHOUT_ONEDNN();
  const Tensor x = random_uniform({131, 13, 13, 32}, 1, -1, 1);
  const Tensor w = random_uniform({3, 3, 32, 64}, 2, -1, 1);
  const Tensor y = with_onednn(true, [&] { return conv2d(x, w); });
  const Tensor y_ref = with_onednn(false, [&] { return conv2d(x, w); });
  expect_within(y, y_ref, conv2d(abs(x.to(f64)), abs(w.to(f64))), 3 * 3 * 32, "forward");
  const Tensor dy = random_uniform(y.shape(), 3, -1, 1);
  Attrs ak = attrs_of(
      {.strides = {1, 1}, .padding_low = {0, 0}, .padding_high = {0, 0}, .dilation = {1, 1}});
  ak.set("kernel_spatial", Axes{3, 3});
  auto kernel_grad = [&](const Tensor& a, const Tensor& g) {
    return call_op("convolution_kernel_grad", {a, g}, ak)[0];
  };
  expect_within(with_onednn(true, [&] { return kernel_grad(x, dy); }),
                with_onednn(false, [&] { return kernel_grad(x, dy); }),
                kernel_grad(abs(x.to(f64)), abs(dy.to(f64))), 131 * 11 * 11, "kernel gradient");
}

TEST_F(OnednnConv, SaysWhichPathServedAConvolution) {
  SKIP_WITHOUT_ONEDNN();
  const Tensor x = random_uniform({2, 6, 6, 3}, 1, -1, 1);
  const Tensor w = random_uniform({3, 3, 3, 4}, 2, -1, 1);
  auto forwards = [] { return ops::onednn::counts().forward; };
  int64_t n = forwards();
  (void)with_onednn(true, [&] { return conv2d(x, w); }).raw_data();
  EXPECT_EQ(forwards(), n + 1) << "f32 2-d: oneDNN";
  n = forwards();
  (void)with_onednn(false, [&] { return conv2d(x, w); }).raw_data();
  EXPECT_EQ(forwards(), n) << "switched off: Kiln's kernel";
  (void)with_onednn(true, [&] { return conv2d(x.to(f64), w.to(f64)); }).raw_data();
  EXPECT_EQ(forwards(), n) << "f64: Kiln's kernel";
  ConvOptions holes{.lhs_dilation = {2, 2}};
  (void)with_onednn(true, [&] { return conv(x, w, holes); }).raw_data();
  EXPECT_EQ(forwards(), n) << "input dilation: Kiln's kernel";
  const Tensor x3 = random_uniform({1, 4, 4, 4, 2}, 3), w3 = random_uniform({2, 2, 2, 2, 2}, 4);
  (void)with_onednn(true, [&] { return conv(x3, w3); }).raw_data();
  EXPECT_EQ(forwards(), n) << "3-d: Kiln's kernel";
}

// Kiln's kernels multiply the padding's zeros (0 * inf = NaN); oneDNN skips them. A padded
// convolution whose kernel (forward) or output gradient (kernel gradient) holds an inf or NaN
// therefore runs Kiln's kernel; an unpadded one stays on oneDNN, where every product is formed.
TEST_F(OnednnConv, PaddingMeetingInfOrNaNGoesToKilnsKernel) {
  SKIP_WITHOUT_ONEDNN();
  const Tensor x = random_uniform({2, 5, 5, 3}, 1, -1, 1);
  Tensor w = random_uniform({3, 3, 3, 4}, 2, -1, 1);
  w.mutable_data<float>()[0] = INFINITY;
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    const auto u = a.to_vector<float>(), v = b.to_vector<float>();
    return u.size() == v.size() && std::memcmp(u.data(), v.data(), u.size() * 4) == 0;
  };
  auto classes = [](const Tensor& t) {
    std::vector<int> c;
    for (float v : t.to_vector<float>()) c.push_back(std::isnan(v) ? 2 : std::isinf(v) ? 1 : 0);
    return c;
  };
  const ops::onednn::Counts before = ops::onednn::counts();
  const Tensor same = with_onednn(true, [&] { return conv2d(x, w, {1, 1}, "same"); });
  EXPECT_EQ(ops::onednn::counts().forward, before.forward) << "padded with an inf: Kiln's kernel";
  EXPECT_TRUE(same_bits(same, with_onednn(false, [&] { return conv2d(x, w, {1, 1}, "same"); })));
  const Tensor valid = with_onednn(true, [&] { return conv2d(x, w); });
  EXPECT_EQ(ops::onednn::counts().forward, before.forward + 1) << "unpadded: oneDNN";
  EXPECT_EQ(classes(valid), classes(with_onednn(false, [&] { return conv2d(x, w); })));

  Tensor dy = random_uniform(same.shape(), 3, -1, 1);
  dy.mutable_data<float>()[7] = std::nanf("");
  Attrs ak = attrs_of(
      {.strides = {1, 1}, .padding_low = {1, 1}, .padding_high = {1, 1}, .dilation = {1, 1}});
  ak.set("kernel_spatial", Axes{3, 3});
  auto kernel_grad = [&] { return call_op("convolution_kernel_grad", {x, dy}, ak)[0]; };
  const Tensor dw = with_onednn(true, kernel_grad);
  EXPECT_EQ(ops::onednn::counts().kernel_grad, before.kernel_grad) << "padded with a NaN";
  EXPECT_TRUE(same_bits(dw, with_onednn(false, kernel_grad)));
}

// fused_conv applies Kiln's epilogue to each chunk oneDNN wrote (not oneDNN's relu post-op,
// which turns NaN into 0): the bits of convolution -> add -> relu, NaN kept.
TEST_F(OnednnConv, FusedConvAppliesKilnsEpilogueToEveryChunk) {
  SKIP_WITHOUT_ONEDNN();
  Tensor x = random_uniform({37, 26, 26, 4}, 1, -1, 1);
  x.mutable_data<float>()[5 * 26 * 26 * 4 + 7] = std::nanf("");
  const Tensor w = random_uniform({3, 3, 4, 8}, 2, -1, 1);
  const Tensor b = random_uniform({8}, 3, -1, 1);
  const Attrs a = attrs_of(
      {.strides = {1, 1}, .padding_low = {1, 1}, .padding_high = {1, 1}, .dilation = {1, 1}});
  Attrs fa = a;
  fa.set("activation", std::string("relu"));
  const auto counted = ops::onednn::counts().forward;
  const Tensor fused = with_onednn(true, [&] { return call_op("fused_conv", {x, w, b}, fa)[0]; });
  const Tensor apart = with_onednn(true, [&] {
    return relu(call_op("convolution", {x, w}, a)[0] + b);
  });
  EXPECT_EQ(ops::onednn::counts().forward, counted + 2);
  const auto f = fused.to_vector<float>(), s = apart.to_vector<float>();
  ASSERT_EQ(f.size(), s.size());
  int nans = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    nans += std::isnan(f[i]);
    ASSERT_TRUE(std::memcmp(&f[i], &s[i], sizeof(float)) == 0)
        << "element " << i << ": fused " << f[i] << ", apart " << s[i];
  }
  EXPECT_GT(nans, 0) << "relu kept the NaN";
}

}  // namespace
}  // namespace kiln
