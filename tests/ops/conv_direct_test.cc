// The direct few-input-channel convolution (ops/conv_direct.h) through the ops that use it:
// convolution and convolution_kernel_grad give the documented sums bit for bit (a scalar f32
// replay of the same order, so a case that took another path shows), agree with Kiln's im2col
// GEMM within the rounding bound, and give the same bits at every ISA level; fused_conv_pool
// without its convolution output (pooled in registers) gives the full path's pool and taps bit
// for bit, and falls back where the kernels do not serve; conv_pool_kernel_grad on them equals
// the route through dz and convolution_kernel_grad.
// (Compiled with -ffp-contract=off: the replay multiplies and adds apart, as the kernels do.)
#include "ops/conv_direct.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/op_registry.h"
#include "src/core/cpu_isa.h"
#include "tests/testing/conv.h"
#include "tests/testing/onednn.h"

namespace kiln {
namespace {

using testing::DirectConvOff;
using testing::with_onednn;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// A 1-d or 2-d convolution with groups 1 and 1-4 input channels: the direct kernels' cases.
struct Case {
  Shape in, kernel;
  ConvOptions options;
  std::string str() const {
    return "input " + shape_str(in) + ", kernel " + shape_str(kernel) + ", strides " +
           shape_str(options.strides) + ", padding " + shape_str(options.padding_low) + "/" +
           shape_str(options.padding_high) + ", dilation " + shape_str(options.dilation);
  }
};

Case random_case(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const size_t d = pick(0, 4) == 0 ? 1 : 2;
  Case c;
  c.in = {pick(1, 5)};
  for (size_t i = 0; i < d; ++i) {
    const int64_t k = pick(1, 5), stride = pick(1, 3), dilation = pick(0, 3) == 0 ? 2 : 1;
    const int64_t low = pick(0, 2), high = pick(0, 2);
    const int64_t span = (k - 1) * dilation + 1;
    c.in.push_back(std::max<int64_t>(1, span - low - high) + pick(0, 12));
    c.kernel.push_back(k);
    c.options.strides.push_back(stride);
    c.options.dilation.push_back(dilation);
    c.options.padding_low.push_back(low);
    c.options.padding_high.push_back(high);
  }
  const std::vector<int64_t> widths = {1, 3, 7, 16, 17, 32, 40, 48, 64};
  c.in.push_back(pick(1, 4));
  c.kernel.push_back(c.in.back());
  c.kernel.push_back(widths[pick(0, static_cast<int>(widths.size()) - 1)]);
  return c;
}

Attrs attrs_of(const ConvOptions& o) { return testing::conv_attrs_of(o); }

// The sizes of a case as a 2-d convolution (a 1-d one has height 1).
struct Dims {
  int64_t batch, ih, iw, ci, oh, ow, co, kh, kw, sh, sw, ph, pw, dh, dw;
};

Dims dims_of(const Case& c, const Shape& out) {
  const bool two = c.kernel.size() == 4;
  const size_t w = two ? 1 : 0;
  Dims d{};
  d.batch = c.in[0];
  d.ci = c.in.back(), d.co = c.kernel.back();
  d.ih = two ? c.in[1] : 1, d.iw = c.in[1 + w];
  d.oh = two ? out[1] : 1, d.ow = out[1 + w];
  d.kh = two ? c.kernel[0] : 1, d.kw = c.kernel[w];
  d.sh = two ? c.options.strides[0] : 1, d.sw = c.options.strides[w];
  d.ph = two ? c.options.padding_low[0] : 0, d.pw = c.options.padding_low[w];
  d.dh = two ? c.options.dilation[0] : 1, d.dw = c.options.dilation[w];
  return d;
}

// The input under tap (i, j, ci) of output pixel (oy, ox) of image b, 0 on the padding.
float input_at(const std::vector<float>& x, const Dims& d, int64_t b, int64_t oy, int64_t ox,
               int64_t i, int64_t j, int64_t ci) {
  const int64_t r = oy * d.sh - d.ph + i * d.dh, col = ox * d.sw - d.pw + j * d.dw;
  if (r < 0 || r >= d.ih || col < 0 || col >= d.iw) return 0.0f;
  return x[((b * d.ih + r) * d.iw + col) * d.ci + ci];
}

// The forward as ops/conv_direct.h documents it: from +0, the taps in (row, column, channel)
// order, each product rounded, then added.
std::vector<float> forward_replay(const std::vector<float>& x, const std::vector<float>& w,
                                  const Dims& d) {
  std::vector<float> y(d.batch * d.oh * d.ow * d.co);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t oy = 0; oy < d.oh; ++oy)
      for (int64_t ox = 0; ox < d.ow; ++ox)
        for (int64_t co = 0; co < d.co; ++co) {
          float s = 0.0f;
          for (int64_t i = 0; i < d.kh; ++i)
            for (int64_t j = 0; j < d.kw; ++j)
              for (int64_t ci = 0; ci < d.ci; ++ci) {
                const float p = input_at(x, d, b, oy, ox, i, j, ci) *
                                w[((i * d.kw + j) * d.ci + ci) * d.co + co];
                s = s + p;
              }
          y[((b * d.oh + oy) * d.ow + ox) * d.co + co] = s;
        }
  return y;
}

// The kernel gradient as convolution_kernel_grad's direct path sums it: images in chunks of the
// batch (clamp(batch / 4, 1, 32) of them), each image's sum over its pixels from +0 added to its
// chunk's partial, the partials added in chunk order.
std::vector<float> kernel_grad_replay(const std::vector<float>& x, const std::vector<float>& dy,
                                      const Dims& d) {
  const int64_t n_w = d.kh * d.kw * d.ci * d.co;
  const int64_t chunks = std::clamp<int64_t>(d.batch / 4, 1, 32);
  std::vector<float> total(n_w, 0.0f);
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<float> partial(n_w, 0.0f);
    for (int64_t b = d.batch * c / chunks; b < d.batch * (c + 1) / chunks; ++b) {
      for (int64_t t = 0; t < d.kh * d.kw * d.ci; ++t) {
        const int64_t i = t / (d.kw * d.ci), j = t / d.ci % d.kw, ci = t % d.ci;
        for (int64_t co = 0; co < d.co; ++co) {
          float s = 0.0f;
          for (int64_t oy = 0; oy < d.oh; ++oy)
            for (int64_t ox = 0; ox < d.ow; ++ox) {
              const float p = input_at(x, d, b, oy, ox, i, j, ci) *
                              dy[((b * d.oh + oy) * d.ow + ox) * d.co + co];
              s = s + p;
            }
          partial[t * d.co + co] = partial[t * d.co + co] + s;
        }
      }
    }
    for (int64_t k = 0; k < n_w; ++k) total[k] = c == 0 ? partial[k] : total[k] + partial[k];
  }
  return total;
}

// Two sums of the same K products in different orders.
void expect_within(const Tensor& got, const Tensor& want, const Tensor& terms, int64_t k,
                   const std::string& what) {
  testing::expect_within_sum_bound(got, want, terms, k, what, 0, "the direct kernel",
                                   "the im2col GEMM");
}

TEST(ConvDirect, ConvolutionAndKernelGradientGiveTheDocumentedSumsAndMeetTheGemmsBound) {
  std::mt19937 rng(7);
  for (int n = 0; n < 60; ++n) {
    const Case c = random_case(rng);
    SCOPED_TRACE(c.str());
    const Tensor x = random_uniform(c.in, 100 + n, -1, 1);
    const Tensor w = random_uniform(c.kernel, 200 + n, -1, 1);
    const Tensor y = conv(x, w, c.options);
    const Dims d = dims_of(c, y.shape());
    EXPECT_EQ(y.to_vector<float>(), forward_replay(x.to_vector<float>(), w.to_vector<float>(), d))
        << "the forward is not the direct kernel's sum";
    const Tensor dy = random_uniform(y.shape(), 300 + n, -1, 1);
    Attrs ak = attrs_of(c.options);
    ak.set("kernel_spatial", Axes(c.kernel.begin(), c.kernel.end() - 2));
    auto kernel_grad = [&](const Tensor& a, const Tensor& g) {
      return call_op("convolution_kernel_grad", {a, g}, ak)[0];
    };
    const Tensor dw = kernel_grad(x, dy);
    EXPECT_EQ(dw.to_vector<float>(),
              kernel_grad_replay(x.to_vector<float>(), dy.to_vector<float>(), d))
        << "the kernel gradient is not the direct kernel's sum";

    // Against Kiln's im2col GEMM (the direct kernels and oneDNN off).
    DirectConvOff off;
    const Tensor x64 = abs(x.to(f64)), w64 = abs(w.to(f64)), dy64 = abs(dy.to(f64));
    const int64_t taps = d.kh * d.kw * d.ci, pixels = d.batch * d.oh * d.ow;
    expect_within(y, with_onednn(false, [&] { return conv(x, w, c.options); }),
                  conv(x64, w64, c.options), taps, "forward");
    expect_within(dw, with_onednn(false, [&] { return kernel_grad(x, dy); }),
                  kernel_grad(x64, dy64), pixels, "kernel gradient");
  }
}

TEST(ConvDirect, F16RunsOnTheWidenedOperandsRoundedOnce) {
  std::mt19937 rng(9);
  for (int n = 0; n < 10; ++n) {
    const Case c = random_case(rng);
    SCOPED_TRACE(c.str());
    const Tensor x = random_uniform(c.in, 400 + n, -1, 1).to(f16);
    const Tensor w = random_uniform(c.kernel, 500 + n, -1, 1).to(f16);
    EXPECT_TRUE(same_bits(conv(x, w, c.options),
                          conv(x.to(f32), w.to(f32), c.options).to(f16)));
  }
}

// The three ISA levels' copies multiply and add apart: the same bits.
TEST(ConvDirect, EveryIsaLevelGivesTheSameBits) {
  std::mt19937 rng(11);
  for (int n = 0; n < 8; ++n) {
    const Case c = random_case(rng);
    SCOPED_TRACE(c.str());
    const Tensor x = random_uniform(c.in, 600 + n, -1, 1);
    const Tensor w = random_uniform(c.kernel, 700 + n, -1, 1);
    Attrs ak = attrs_of(c.options);
    ak.set("kernel_spatial", Axes(c.kernel.begin(), c.kernel.end() - 2));
    std::vector<Tensor> first;
    for (cpu::Isa isa : {cpu::Isa::kX86_64, cpu::Isa::kX86_64V3, cpu::Isa::kX86_64V4}) {
      cpu::ScopedIsa level(isa);
      const Tensor y = conv(x, w, c.options);
      const Tensor dw = call_op("convolution_kernel_grad", {x, y}, ak)[0];
      if (first.empty()) {
        first = {y, dw};
        continue;
      }
      EXPECT_TRUE(same_bits(y, first[0])) << cpu::isa_name(level.isa()) << " forward";
      EXPECT_TRUE(same_bits(dw, first[1])) << cpu::isa_name(level.isa()) << " kernel gradient";
    }
  }
}

// ---- fused_conv_pool without its convolution output -----------------------------------------

// Small integers: many equal maxima and relu zeros in each pool window, and exact sums.
Tensor integers(Shape shape, int lo, int hi, uint32_t seed) {
  return testing::small_integers(std::move(shape), lo, hi, seed);
}

struct PoolCase {
  Shape in;
  int64_t c_out, stride, pad;
  std::string activation;
  int bias;  // 0 none, 1 scalar, 2 per channel
  int64_t dilation = 1;
  std::string str() const {
    return "input " + shape_str(in) + " -> " + std::to_string(c_out) + ", stride " +
           std::to_string(stride) + ", pad " + std::to_string(pad) + ", dilation " +
           std::to_string(dilation) + ", " + activation + ", bias " + std::to_string(bias);
  }
};

Attrs pool_attrs(const PoolCase& p, bool conv_output, std::vector<int64_t> pool = {2, 2}) {
  return Attrs{{"strides", Axes{p.stride, p.stride}},
               {"padding_low", Axes{p.pad, p.pad}},
               {"padding_high", Axes{p.pad, 0}},
               {"dilation", Axes{p.dilation, p.dilation}},
               {"lhs_dilation", Axes{1, 1}},
               {"groups", int64_t{1}},
               {"activation", p.activation},
               {"pool", pool},
               {"taps", true},
               {"conv_output", conv_output}};
}

std::vector<Tensor> pool_inputs(const PoolCase& p, DType dtype, uint32_t seed) {
  std::vector<Tensor> in = {integers(p.in, -2, 2, seed).to(dtype),
                            integers({3, 3, p.in[3], p.c_out}, -1, 1, seed + 1).to(dtype)};
  if (p.bias == 1) in.push_back(integers({1}, -1, 1, seed + 2).to(dtype));
  if (p.bias == 2) in.push_back(integers({p.c_out}, -1, 1, seed + 2).to(dtype));
  return in;
}

std::vector<PoolCase> pool_cases() {
  std::vector<PoolCase> cases;
  int n = 0;
  for (int64_t c_out : {1, 5, 16, 20, 32, 48, 64}) {
    for (const char* act : {"relu", "none"}) {
      cases.push_back({{3, 11 + n % 3, 10 + n % 2, 1 + n % 4}, c_out, 1 + n % 2,
                       n % 3 == 0 ? 1 : 0, act, n % 3, n % 5 == 4 ? 2 : 1});
      ++n;
    }
  }
  return cases;
}

TEST(ConvDirect, PooledForwardGivesTheFullPathsPoolAndTapsBitForBit) {
  for (const PoolCase& p : pool_cases()) {
    SCOPED_TRACE(p.str());
    std::vector<Tensor> in = pool_inputs(p, f32, 10 + p.c_out);
    // A NaN input: the windows whose pixels read it hold NaN maxima (the first NaN's tap).
    std::vector<float> xv = in[0].to_vector<float>();
    xv[xv.size() / 2] = std::numeric_limits<float>::quiet_NaN();
    in[0] = Tensor::from_vector(xv, p.in);
    const std::vector<Tensor> full = call_op("fused_conv_pool", in, pool_attrs(p, true));
    const int64_t before = ops::direct_conv::counts().forward_pool;
    const std::vector<Tensor> pooled = call_op("fused_conv_pool", in, pool_attrs(p, false));
    EXPECT_GT(ops::direct_conv::counts().forward_pool, before) << "not pooled in registers";
    ASSERT_EQ(pooled.size(), 3u);
    EXPECT_EQ(pooled[0].shape(), Shape{0});
    EXPECT_TRUE(same_bits(pooled[1], full[1])) << pooled[1] << " vs " << full[1];
    EXPECT_TRUE(same_bits(pooled[2], full[2])) << pooled[2] << " vs " << full[2];
    // The same bits at every ISA level.
    for (cpu::Isa isa : {cpu::Isa::kX86_64, cpu::Isa::kX86_64V3}) {
      cpu::ScopedIsa level(isa);
      const std::vector<Tensor> again = call_op("fused_conv_pool", in, pool_attrs(p, false));
      EXPECT_TRUE(same_bits(again[1], full[1]) && same_bits(again[2], full[2]))
          << cpu::isa_name(level.isa());
    }
  }
}

TEST(ConvDirect, PooledForwardFallsBackWhereTheKernelsDoNotServe) {
  const PoolCase base{{2, 9, 8, 2}, 6, 1, 0, "relu", 2};
  struct Variant {
    std::string what;
    PoolCase p;
    DType dtype;
    std::vector<int64_t> pool;
    bool enabled;  // the direct kernels switched on
  };
  PoolCase wide = base, tanh_act = base;
  wide.in[3] = 5;  // more input channels than the kernels take
  tanh_act.activation = "tanh";
  const std::vector<Variant> variants = {{"5 input channels", wide, f32, {2, 2}, true},
                                         {"tanh", tanh_act, f32, {2, 2}, true},
                                         {"a 3 x 3 pool", base, f32, {3, 3}, true},
                                         {"f64", base, f64, {2, 2}, true},
                                         {"switched off", base, f32, {2, 2}, false}};
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.what);
    std::optional<DirectConvOff> off;
    if (!v.enabled) off.emplace();
    const std::vector<Tensor> in = pool_inputs(v.p, v.dtype, 3);
    const std::vector<Tensor> full = call_op("fused_conv_pool", in, pool_attrs(v.p, true, v.pool));
    const int64_t before = ops::direct_conv::counts().forward_pool;
    const std::vector<Tensor> pooled =
        call_op("fused_conv_pool", in, pool_attrs(v.p, false, v.pool));
    EXPECT_EQ(ops::direct_conv::counts().forward_pool, before);
    EXPECT_EQ(pooled[0].shape(), Shape{0});
    EXPECT_TRUE(same_bits(pooled[1], full[1]));
    EXPECT_TRUE(same_bits(pooled[2], full[2]));
  }
}

// conv_pool_kernel_grad on the direct kernels (dz formed in registers) against the route through
// dz and convolution_kernel_grad (the direct kernels off: Kiln's or oneDNN's GEMM). Integer
// values: every sum is exact in any order, so the bits agree; rows and columns the pool drops
// (odd sizes) and both relu_mask settings included.
TEST(ConvDirect, PoolKernelGradientEqualsTheRouteThroughDz) {
  for (const PoolCase& p : pool_cases()) {
    for (bool relu_mask : {true, false}) {
      SCOPED_TRACE(p.str() + ", relu_mask " + std::to_string(relu_mask));
      const std::vector<Tensor> in = pool_inputs(p, f32, 30 + p.c_out);
      const std::vector<Tensor> fwd = call_op("fused_conv_pool", in, pool_attrs(p, false));
      const Tensor dp = integers(fwd[1].shape(), -3, 3, 40 + p.c_out);
      Attrs a = pool_attrs(p, false);
      a.set("kernel_spatial", Axes{3, 3});
      a.set("relu_mask", relu_mask);
      const int64_t before = ops::direct_conv::counts().pool_kernel_grad;
      const std::vector<Tensor> direct =
          call_op("conv_pool_kernel_grad", {in[0], fwd[2], dp}, a);
      EXPECT_GT(ops::direct_conv::counts().pool_kernel_grad, before);
      std::vector<Tensor> routed;
      {
        DirectConvOff off;
        routed = call_op("conv_pool_kernel_grad", {in[0], fwd[2], dp}, a);
      }
      EXPECT_TRUE(same_bits(direct[0], routed[0])) << direct[0] << " vs " << routed[0];
      EXPECT_TRUE(same_bits(direct[1], routed[1])) << direct[1] << " vs " << routed[1];
    }
  }
}

// Random values: the bias gradient sums window by window from db, as the route through dz does
// (the same bits); the kernel gradient's sums go in another order (within rounding).
TEST(ConvDirect, PoolGradientsOfRandomValuesMatchTheRouteThroughDz) {
  for (const PoolCase& p : pool_cases()) {
    SCOPED_TRACE(p.str());
    std::vector<Tensor> in = pool_inputs(p, f32, 50 + p.c_out);
    in[0] = random_uniform(p.in, 60 + p.c_out, -1, 1);
    in[1] = random_uniform(in[1].shape(), 70 + p.c_out, -1, 1);
    const std::vector<Tensor> fwd = call_op("fused_conv_pool", in, pool_attrs(p, false));
    const Tensor dp = random_uniform(fwd[1].shape(), 80 + p.c_out, -1, 1);
    Attrs a = pool_attrs(p, false);
    a.set("kernel_spatial", Axes{3, 3});
    a.set("relu_mask", true);
    const std::vector<Tensor> direct = call_op("conv_pool_kernel_grad", {in[0], fwd[2], dp}, a);
    std::vector<Tensor> routed;
    {
      DirectConvOff off;
      routed = call_op("conv_pool_kernel_grad", {in[0], fwd[2], dp}, a);
    }
    EXPECT_TRUE(same_bits(direct[1], routed[1])) << direct[1] << " vs " << routed[1];
    EXPECT_TRUE(allclose(direct[0], routed[0], 1e-5, 1e-5)) << direct[0] << " vs " << routed[0];
  }
}

// Where the kernel gradient would read an image's dy from memory once per block of taps (a 5 x 5
// x 3 kernel, 64 channels, a 56 x 56 output), or the padded copy would be mostly padding, the
// kernels decline: the ops give the bits of the path they fall back to.
TEST(ConvDirect, DeclinesImagesItWouldReadManyTimesOrMostlyPadding) {
  struct Declined {
    std::string what;
    Shape in, kernel;
    ConvOptions options;
  };
  const ConvOptions plain{.strides = {1, 1},
                          .padding_low = {0, 0},
                          .padding_high = {0, 0},
                          .dilation = {1, 1}};
  const ConvOptions far{.strides = {40, 40},
                        .padding_low = {40, 40},
                        .padding_high = {40, 40},
                        .dilation = {1, 1}};
  const std::vector<Declined> cases = {
      {"a 5 x 5 x 3 kernel over a 56 x 56 x 64 output", {2, 60, 60, 3}, {5, 5, 3, 64}, plain},
      {"padding 40, stride 40", {1, 4, 4, 1}, {3, 3, 1, 8}, far},
  };
  for (const Declined& c : cases) {
    SCOPED_TRACE(c.what);
    const Tensor x = random_uniform(c.in, 1, -1, 1), w = random_uniform(c.kernel, 2, -1, 1);
    const Tensor y = conv(x, w, c.options);
    Attrs ak = attrs_of(c.options);
    ak.set("kernel_spatial", Axes{c.kernel[0], c.kernel[1]});
    const Tensor dy = random_uniform(y.shape(), 3, -1, 1);
    const Tensor dw = call_op("convolution_kernel_grad", {x, dy}, ak)[0];
    DirectConvOff off;
    EXPECT_TRUE(same_bits(y, conv(x, w, c.options)));
    EXPECT_TRUE(same_bits(dw, call_op("convolution_kernel_grad", {x, dy}, ak)[0]));
  }
}

// An infinite input under a pixel the pool dropped multiplies that pixel's zero gradient: NaN in
// the kernel gradient, as the unfused gradient computes it.
TEST(ConvDirect, PoolKernelGradientKeepsTheDroppedPixelsProducts) {
  const PoolCase p{{1, 7, 6, 1}, 4, 1, 0, "relu", 0};  // a 5 x 4 output: its last row dropped
  std::vector<Tensor> in = pool_inputs(p, f32, 5);
  std::vector<float> xv = in[0].to_vector<float>();
  xv[6 * 6 + 2] = std::numeric_limits<float>::infinity();  // row 6: only output row 4 reads it
  in[0] = Tensor::from_vector(xv, p.in);
  const std::vector<Tensor> fwd = call_op("fused_conv_pool", in, pool_attrs(p, false));
  Attrs a = pool_attrs(p, false);
  a.set("kernel_spatial", Axes{3, 3});
  const Tensor dp = integers(fwd[1].shape(), 1, 3, 6);
  const std::vector<Tensor> direct = call_op("conv_pool_kernel_grad", {in[0], fwd[2], dp}, a);
  std::vector<Tensor> routed;
  {
    DirectConvOff off;
    routed = call_op("conv_pool_kernel_grad", {in[0], fwd[2], dp}, a);
  }
  const std::vector<float> got = direct[0].to_vector<float>(), want = routed[0].to_vector<float>();
  int nans = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(std::isnan(got[i]), std::isnan(want[i])) << "element " << i;
    if (!std::isnan(want[i])) EXPECT_EQ(got[i], want[i]) << "element " << i;
    nans += std::isnan(got[i]);
  }
  EXPECT_GT(nans, 0);
}

}  // namespace
}  // namespace kiln
