// The lite Interpreter on models built by hand: what each op computes, in float and int8, with
// buffers shared or kept, on one thread or two; and every kind of bad file refused at load with
// an error naming the offset or the op.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "kiln/lite.h"
#include "lite/builder.h"
#include "lite/format.h"
#include "lite/kernels.h"

namespace kiln::lite {
namespace {

using format::OpCode;
using kernels::Activation;

TensorInfo activation(const std::string& name, std::vector<int64_t> shape,
                      DType dtype = DType::kFloat32, float scale = 0.f, int32_t zp = 0) {
  TensorInfo t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.scale = scale;
  t.zero_point = zp;
  return t;
}

template <class T>
int constant(ModelBuilder& b, const std::string& name, DType dtype, std::vector<int64_t> shape,
             const std::vector<T>& values) {
  TensorInfo t = activation(name, std::move(shape), dtype);
  return b.add_constant(t, values.data(), values.size() * sizeof(T));
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// x [?,3] -> FullyConnected(2, relu) -> softmax.
std::string float_dense_model(const std::vector<float>& w, const std::vector<float>& bias) {
  ModelBuilder b;
  const int x = b.add_tensor(activation("x", {-1, 3}));
  const int wt = constant(b, "dense/weights", DType::kFloat32, {2, 3}, w);
  const int bt = constant(b, "dense/bias", DType::kFloat32, {2}, bias);
  const int h = b.add_tensor(activation("dense/out", {-1, 2}));
  const int y = b.add_tensor(activation("softmax/out", {-1, 2}));
  b.add_op(OpCode::kFullyConnected, "dense", {x, wt, bt}, h, Activation::kRelu);
  b.add_op(OpCode::kSoftmax, "softmax", {h}, y);
  b.set_input(x);
  b.set_output(y);
  return b.serialize();
}

TEST(LiteInterpreterTest, FloatDenseReluSoftmaxComputesWhatItSays) {
  const std::vector<float> w{1, 2, 3, -1, 0.5f, 0}, bias{0.5f, -0.25f};
  const std::string file = float_dense_model(w, bias);
  auto interp = Interpreter::from_buffer(file.data(), file.size());
  EXPECT_EQ(interp->input_size(), 3);
  EXPECT_EQ(interp->output_size(), 2);
  const std::vector<float> x{0.1f, -0.2f, 0.3f, 1.f, 1.f, -4.f};
  const std::vector<float> y = interp->run(x.data(), 2);
  for (int n = 0; n < 2; ++n) {
    float h[2];
    for (int j = 0; j < 2; ++j) {
      h[j] = bias[j];
      for (int k = 0; k < 3; ++k) h[j] += x[n * 3 + k] * w[j * 3 + k];
      h[j] = std::max(h[j], 0.f);
    }
    const float e0 = std::exp(h[0]), e1 = std::exp(h[1]);
    EXPECT_NEAR(y[n * 2], e0 / (e0 + e1), 1e-6) << n;
    EXPECT_NEAR(y[n * 2 + 1], e1 / (e0 + e1), 1e-6) << n;
  }
}

// x [?, 2, 3] -> ChannelAffine(scale, shift) over the last dimension.
std::string affine_model(std::vector<int64_t> scale_shape) {
  ModelBuilder b;
  const int x = b.add_tensor(activation("x", {-1, 2, 3}));
  std::vector<float> scale{2.f, -1.f, 0.5f, 9.f};
  scale.resize(scale_shape.back());
  const int s = constant(b, "bn/scale", DType::kFloat32, scale_shape, scale);
  const int t = constant(b, "bn/shift", DType::kFloat32, {3}, std::vector<float>{1.f, 0.f, -4.f});
  const int y = b.add_tensor(activation("y", {-1, 2, 3}));
  b.add_op(OpCode::kChannelAffine, "bn", {x, s, t}, y);
  b.set_input(x);
  b.set_output(y);
  return b.serialize();
}

TEST(LiteInterpreterTest, ChannelAffineScalesAndShiftsTheLastDimension) {
  const std::string file = affine_model({3});
  const std::vector<float> x{1, 2, 3, -4, 5, 6};
  const std::vector<float> y = Interpreter::from_buffer(file.data(), file.size())->run(x.data(), 1);
  EXPECT_EQ(y, (std::vector<float>{3.f, -2.f, -2.5f, -7.f, -5.f, -1.f}));
  const std::string bad = affine_model({4});
  try {
    Interpreter::from_buffer(bad.data(), bad.size());
    FAIL() << "a scale of 4 channels over 3 loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("op 0 (bn, ChannelAffine): scale"), std::string::npos)
        << e.what();
  }
}

// x [?, 4] -> LayerNorm(gamma, beta, epsilon).
std::string layer_norm_model(float epsilon) {
  ModelBuilder b;
  const int x = b.add_tensor(activation("x", {-1, 4}));
  const int g = constant(b, "ln/gamma", DType::kFloat32, {4}, std::vector<float>{1, 2, 1, 0.5f});
  const int be = constant(b, "ln/beta", DType::kFloat32, {4}, std::vector<float>{0, 0, 1, 0});
  const int y = b.add_tensor(activation("y", {-1, 4}));
  b.add_op(OpCode::kLayerNorm, "ln", {x, g, be}, y, Activation::kNone,
           {std::bit_cast<int32_t>(epsilon)});
  b.set_input(x);
  b.set_output(y);
  return b.serialize();
}

TEST(LiteInterpreterTest, LayerNormNormalizesEachRowAndRefusesABadEpsilon) {
  const std::string file = layer_norm_model(0.f);
  // Row 1, 2, 3, 6: mean 3, variance (4 + 1 + 0 + 9) / 4 = 3.5.
  const std::vector<float> x{1, 2, 3, 6};
  const std::vector<float> y = Interpreter::from_buffer(file.data(), file.size())->run(x.data(), 1);
  const double s = 1 / std::sqrt(3.5);
  const std::vector<double> want{-2 * s, -1 * s * 2, 0 + 1, 3 * s * 0.5};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << i;
  for (float bad : {-1.f, std::nanf("")}) {
    const std::string f = layer_norm_model(bad);
    try {
      Interpreter::from_buffer(f.data(), f.size());
      FAIL() << "epsilon " << bad << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("(ln, LayerNorm): epsilon"), std::string::npos)
          << e.what();
    }
  }
}

TEST(LiteInterpreterTest, DepthwiseWeightsThatDoNotChainAreRefused) {
  for (int64_t m : {4, 6}) {  // 4 output channels over 3 inputs: no whole multiplier
    ModelBuilder b;
    const int x = b.add_tensor(activation("x", {-1, 4, 4, 3}));
    const int wt =
        constant(b, "dw/w", DType::kFloat32, {m, 2, 2, 1}, std::vector<float>(m * 4, 0.5f));
    const int y = b.add_tensor(activation("y", {-1, 3, 3, m}));
    b.add_op(OpCode::kDepthwiseConv2D, "dw", {x, wt}, y, Activation::kRelu,
             ModelBuilder::window_params({2, 2, 1, 1}));
    b.set_input(x);
    b.set_output(y);
    const std::string file = b.serialize();
    if (m == 6) {  // multiplier 2: each input channel feeds two outputs, 4 taps of 0.5
      const std::vector<float> in(16 * 3, 1.f);
      const std::vector<float> out =
          Interpreter::from_buffer(file.data(), file.size())->run(in.data(), 1);
      EXPECT_EQ(out, std::vector<float>(9 * 6, 2.f));
      continue;
    }
    try {
      Interpreter::from_buffer(file.data(), file.size());
      FAIL() << "depthwise weights of 4 channels over 3 loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("(dw, DepthwiseConv2D): weights"), std::string::npos)
          << e.what();
    }
  }
}

TEST(LiteInterpreterTest, FloatActivationsComputeTheirFunctions) {
  const std::vector<float> x{-30.f, -2.f, -0.5f, 0.f, 0.25f, 3.f, 40.f};
  const int n = static_cast<int>(x.size());
  for (int kind : {1, 2, 3, 4, 6}) {
    ModelBuilder b;
    const int in = b.add_tensor(activation("x", {-1, n}));
    const int out = b.add_tensor(activation("y", {-1, n}));
    b.add_op(OpCode::kActivation, "act", {in}, out, Activation::kNone, {kind});
    b.set_input(in);
    b.set_output(out);
    const std::string file = b.serialize();
    const std::vector<float> y =
        Interpreter::from_buffer(file.data(), file.size())->run(x.data(), 1);
    for (int i = 0; i < n; ++i) {
      const double v = x[i], s = 1 / (1 + std::exp(-v));
      const double want = kind == 1   ? std::tanh(v)
                          : kind == 2 ? s
                          : kind == 3 ? v * s
                          : kind == 4 ? std::log1p(std::exp(v))
                                      : 0.5 * v * std::erfc(-v / std::sqrt(2.0));  // gelu
      EXPECT_NEAR(y[i], want, 1e-6 * std::max(1.0, std::abs(want))) << kind << " at " << v;
    }
  }
  ModelBuilder b;
  const int in = b.add_tensor(activation("x", {-1, 2}));
  const int out = b.add_tensor(activation("y", {-1, 2}));
  b.add_op(OpCode::kActivation, "act_9", {in}, out, Activation::kNone, {9});
  b.set_input(in);
  b.set_output(out);
  std::string message;
  try {
    const std::string file = b.serialize();
    Interpreter::from_buffer(file.data(), file.size());
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("act_9, Activation): unknown activation 9"), std::string::npos) << message;
}

// int8 Add and Concatenate of inputs at different scales: within one output step of the float
// result of the dequantized inputs.
TEST(LiteInterpreterTest, Int8AddAndConcatenateRescaleTheirInputs) {
  ModelBuilder b;
  const int x = b.add_tensor(activation("x", {-1, 4}));
  const int qa = b.add_tensor(activation("qa", {-1, 4}, DType::kInt8, 0.02f, -10));
  const int ra = b.add_tensor(activation("ra", {-1, 4}, DType::kInt8, 0.02f, -10));
  const int qb = b.add_tensor(activation("qb", {-1, 4}, DType::kInt8, 0.05f, 7));
  const int sum = b.add_tensor(activation("sum", {-1, 4}, DType::kInt8, 0.04f, 3));
  const int cat = b.add_tensor(activation("cat", {-1, 12}, DType::kInt8, 0.03f, -2));
  b.add_op(OpCode::kQuantize, "qa", {x}, qa);
  b.add_op(OpCode::kActivation, "unused", {x}, b.add_tensor(activation("relu", {-1, 4})),
           Activation::kNone, {5});
  b.add_op(OpCode::kReshape, "ra", {qa}, ra);
  b.add_op(OpCode::kQuantize, "qb", {x}, qb);
  b.add_op(OpCode::kAdd, "add", {ra, qb}, sum);
  b.add_op(OpCode::kConcatenate, "cat", {qa, sum, qb}, cat);
  b.set_input(x);
  b.set_output(cat);
  const std::string file = b.serialize();
  Options keep;
  keep.preserve_all_tensors = true;
  auto interp = Interpreter::from_buffer(file.data(), file.size(), keep);
  const std::vector<float> in = random_floats(6 * 4, 31, -2.5f, 2.5f);
  const std::vector<float> y = interp->run(in.data(), 6);
  auto real = [&](int t, int i) {
    const TensorInfo& info = interp->tensor(t);
    return info.scale * (static_cast<const int8_t*>(interp->tensor_data(t))[i] - info.zero_point);
  };
  for (int r = 0; r < 6; ++r) {
    for (int j = 0; j < 4; ++j) {
      const float s = real(qa, r * 4 + j) + real(qb, r * 4 + j);
      const float want_sum = std::clamp(s, 0.04f * (-128 - 3), 0.04f * (127 - 3));
      EXPECT_NEAR(real(sum, r * 4 + j), want_sum, 0.04f * 1.01f) << r << "," << j;
      // The join's range is [0.03 * (-128 + 2), 0.03 * (127 + 2)]: what is outside clamps.
      auto joined = [](float v) { return std::clamp(v, 0.03f * -126, 0.03f * 129); };
      EXPECT_NEAR(y[r * 12 + j], joined(real(qa, r * 4 + j)), 0.03f * 0.51f);
      EXPECT_NEAR(y[r * 12 + 4 + j], joined(real(sum, r * 4 + j)), 0.03f * 0.51f);
      EXPECT_NEAR(y[r * 12 + 8 + j], joined(real(qb, r * 4 + j)), 0.03f * 0.51f);
    }
  }
}

TEST(LiteInterpreterTest, LoadMapsTheFileItWasWrittenTo) {
  const std::string file = float_dense_model({1, 0, 0, 0, 1, 0}, {0, 0});
  const std::string path = testing::TempDir() + "/dense.klite";
  write_file(path, file);
  auto mapped = Interpreter::load(path);
  auto copied = Interpreter::from_buffer(file.data(), file.size());
  EXPECT_EQ(mapped->file_size(), file.size());
  const std::vector<float> x{0.3f, 0.7f, 0.f};
  EXPECT_EQ(mapped->run(x.data(), 1), copied->run(x.data(), 1));
  ASSERT_EQ(mapped->ops().size(), 2u);
  EXPECT_EQ(mapped->ops()[0].name, "dense");
  EXPECT_EQ(mapped->ops()[0].type, "FullyConnected");
  std::remove(path.c_str());
}

// A direct NHWC convolution, the oracle for Conv2D.
std::vector<float> direct_conv(const std::vector<float>& x, int64_t n, int64_t h, int64_t w,
                               int64_t c, const std::vector<float>& wt, int64_t m,
                               const kernels::Window& win, const std::vector<float>& bias) {
  const int64_t oh = win.out_h(h), ow = win.out_w(w);
  std::vector<float> y(n * oh * ow * m);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox)
        for (int64_t j = 0; j < m; ++j) {
          double acc = bias[j];
          for (int64_t ky = 0; ky < win.kh; ++ky)
            for (int64_t kx = 0; kx < win.kw; ++kx) {
              const int64_t iy = oy * win.stride_h + ky - win.pad_top;
              const int64_t ix = ox * win.stride_w + kx - win.pad_left;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              for (int64_t ci = 0; ci < c; ++ci) {
                acc += x[((b * h + iy) * w + ix) * c + ci] *
                       wt[((j * win.kh + ky) * win.kw + kx) * c + ci];
              }
            }
          y[((b * oh + oy) * ow + ox) * m + j] = static_cast<float>(acc);
        }
  return y;
}

TEST(LiteInterpreterTest, FloatConvWithPaddingAndStridesMatchesADirectConvolution) {
  const int64_t h = 7, w = 6, c = 3, m = 5;
  kernels::Window win{3, 3, 2, 1, 1, 1, 1, 0};
  const std::vector<float> wt = random_floats(m * 3 * 3 * c, 1), bias = random_floats(m, 2);
  ModelBuilder b;
  const int x = b.add_tensor(activation("x", {-1, h, w, c}));
  const int wi = constant(b, "conv/weights", DType::kFloat32, {m, 3, 3, c}, wt);
  const int bi = constant(b, "conv/bias", DType::kFloat32, {m}, bias);
  const int y = b.add_tensor(activation("conv/out", {-1, win.out_h(h), win.out_w(w), m}));
  b.add_op(OpCode::kConv2D, "conv", {x, wi, bi}, y, Activation::kNone,
           ModelBuilder::window_params(win));
  b.set_input(x);
  b.set_output(y);
  const std::string file = b.serialize();
  auto interp = Interpreter::from_buffer(file.data(), file.size());
  const std::vector<float> in = random_floats(2 * h * w * c, 3);
  const std::vector<float> want = direct_conv(in, 2, h, w, c, wt, m, win, bias);
  const std::vector<float> got = interp->run(in.data(), 2);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

// x f32 [?,4] -> quantize -> FullyConnected int8 (relu) -> the int8 output, dequantized by run.
struct Int8Dense {
  std::vector<int8_t> w{10, -20, 30, -127, 127, 0, 5, -5, 1, 2, 3, 4};  // [3][4]
  std::vector<int32_t> bias{100, -50, 7};
  std::vector<float> w_scales{0.01f, 0.02f, 0.005f};
  float x_scale = 0.05f, y_scale = 0.03f;
  int32_t x_zp = -3, y_zp = -10;

  std::string file(Activation act) const {
    ModelBuilder b;
    const int x = b.add_tensor(activation("x", {-1, 4}));
    const int xq = b.add_tensor(activation("xq", {-1, 4}, DType::kInt8, x_scale, x_zp));
    const int wi = constant(b, "w", DType::kInt8, {3, 4}, w);
    const int bi = constant(b, "b", DType::kInt32, {3}, bias);
    const int si = constant(b, "s", DType::kFloat32, {3}, w_scales);
    const int y = b.add_tensor(activation("y", {-1, 3}, DType::kInt8, y_scale, y_zp));
    b.add_op(OpCode::kQuantize, "quantize", {x}, xq);
    b.add_op(OpCode::kFullyConnected, "dense", {xq, wi, bi, si}, y, act);
    b.set_input(x);
    b.set_output(y);
    return b.serialize();
  }

  // The int8 result, by the scheme's definition, in integers (and the rounded float multiply).
  int8_t expected(const std::vector<float>& x, int row, int j, Activation act) const {
    int32_t acc = bias[j];
    for (int k = 0; k < 4; ++k) {
      const float q = std::round(x[row * 4 + k] / x_scale) + x_zp;
      const int32_t xq = static_cast<int32_t>(std::clamp(q, -128.f, 127.f));
      acc += (xq - x_zp) * w[j * 4 + k];
    }
    const kernels::Requant r =
        kernels::quantize_multiplier(double(x_scale) * w_scales[j] / y_scale);
    int32_t v = kernels::multiply_by_quantized_multiplier(acc, r) + y_zp;
    const int32_t lo = act == Activation::kNone ? -128 : std::max(-128, y_zp);
    return static_cast<int8_t>(std::clamp(v, lo, 127));
  }
};

TEST(LiteInterpreterTest, Int8DenseFollowsTheIntegerScheme) {
  const Int8Dense d;
  const std::vector<float> x = random_floats(5 * 4, 7, -6.f, 6.f);
  for (Activation act : {Activation::kNone, Activation::kRelu}) {
    const std::string file = d.file(act);
    auto interp = Interpreter::from_buffer(file.data(), file.size());
    EXPECT_EQ(interp->output().dtype, DType::kInt8);
    const std::vector<float> y = interp->run(x.data(), 5);
    for (int row = 0; row < 5; ++row) {
      for (int j = 0; j < 3; ++j) {
        const float want = d.y_scale * (d.expected(x, row, j, act) - d.y_zp);
        EXPECT_EQ(y[row * 3 + j], want) << "row " << row << " channel " << j;
      }
    }
  }
}

// A chain of every op: quantize, conv (relu), max pool, avg pool, reshape, dense, dequantize,
// softmax; run by one and by two threads, with buffers shared or kept.
std::string every_op_model() {
  ModelBuilder b;
  const int x = b.add_tensor(activation("x", {-1, 8, 8, 2}));
  const int xq = b.add_tensor(activation("xq", {-1, 8, 8, 2}, DType::kInt8, 0.01f, 0));
  std::vector<int8_t> cw(4 * 3 * 3 * 2);
  std::mt19937 rng(5);
  for (int8_t& v : cw) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  const int cwi = constant(b, "conv/w", DType::kInt8, {4, 3, 3, 2}, cw);
  const int cbi = constant(b, "conv/b", DType::kInt32, {4}, std::vector<int32_t>{10, -10, 0, 99});
  const int csi = constant(b, "conv/s", DType::kFloat32, {4}, std::vector<float>(4, 0.004f));
  const int c = b.add_tensor(activation("conv", {-1, 8, 8, 4}, DType::kInt8, 0.02f, -128));
  const int mp = b.add_tensor(activation("max", {-1, 4, 4, 4}, DType::kInt8, 0.02f, -128));
  const int ap = b.add_tensor(activation("avg", {-1, 2, 2, 4}, DType::kInt8, 0.02f, -128));
  const int r = b.add_tensor(activation("flat", {-1, 16}, DType::kInt8, 0.02f, -128));
  std::vector<int8_t> dw(3 * 16);
  for (int8_t& v : dw) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  const int dwi = constant(b, "dense/w", DType::kInt8, {3, 16}, dw);
  const int dsi =
      constant(b, "dense/s", DType::kFloat32, {3}, std::vector<float>{0.01f, 0.02f, 0.03f});
  const int d = b.add_tensor(activation("dense", {-1, 3}, DType::kInt8, 0.05f, 3));
  const int df = b.add_tensor(activation("dense_f", {-1, 3}));
  const int y = b.add_tensor(activation("y", {-1, 3}));
  b.add_op(OpCode::kQuantize, "quantize", {x}, xq);
  b.add_op(OpCode::kConv2D, "conv", {xq, cwi, cbi, csi}, c, Activation::kRelu,
           ModelBuilder::window_params({3, 3, 1, 1, 1, 1, 1, 1}));
  b.add_op(OpCode::kMaxPool2D, "max", {c}, mp, Activation::kNone,
           ModelBuilder::window_params({2, 2, 2, 2}));
  b.add_op(OpCode::kAvgPool2D, "avg", {mp}, ap, Activation::kNone,
           ModelBuilder::window_params({2, 2, 2, 2}));
  b.add_op(OpCode::kReshape, "flatten", {ap}, r);
  b.add_op(OpCode::kFullyConnected, "dense", {r, dwi, -1, dsi}, d);
  b.add_op(OpCode::kDequantize, "dequantize", {d}, df);
  b.add_op(OpCode::kSoftmax, "softmax", {df}, y);
  b.set_input(x);
  b.set_output(y);
  return b.serialize();
}

TEST(LiteInterpreterTest, ThreadsAndBufferSharingDoNotChangeABit) {
  const std::string file = every_op_model();
  const std::vector<float> x = random_floats(9 * 8 * 8 * 2, 11, 0.f, 2.f);
  auto one = Interpreter::from_buffer(file.data(), file.size());
  const std::vector<float> want = one->run(x.data(), 9);
  for (int threads : {1, 2, 3}) {
    for (bool keep : {false, true}) {
      Options o;
      o.num_threads = threads;
      o.preserve_all_tensors = keep;
      auto interp = Interpreter::from_buffer(file.data(), file.size(), o);
      EXPECT_EQ(interp->run(x.data(), 9), want) << threads << " threads, keep " << keep;
    }
  }
  float sum = 0;
  for (int i = 0; i < 3; ++i) sum += want[i];
  EXPECT_NEAR(sum, 1.f, 1e-6);
}

// x [?, 9, 8, 3] -> (quantize ->) Conv2D 3x3 valid (relu), 7 x 6 x 20 -> MaxPool2D pool_h x pool_w
// -> (dequantize ->) the output; with `also_read`, the conv's output is a second output's
// input too (an Add of it with itself), so the pool cannot take it over.
std::string conv_pool_model(bool int8, int64_t pool_h, int64_t pool_w, bool also_read) {
  ModelBuilder b;
  const int64_t m = 20, oh = 7, ow = 6;
  const DType dt = int8 ? DType::kInt8 : DType::kFloat32;
  const float scale = int8 ? 0.05f : 0.f;
  const int32_t zp = int8 ? -128 : 0;
  const int x = b.add_tensor(activation("x", {-1, 9, 8, 3}));
  int in = x;
  if (int8) {
    in = b.add_tensor(activation("xq", {-1, 9, 8, 3}, DType::kInt8, 0.01f, -3));
    b.add_op(OpCode::kQuantize, "quantize", {x}, in);
  }
  std::mt19937 rng(41);
  std::vector<int> conv_inputs = {in};
  if (int8) {
    std::vector<int8_t> w(m * 3 * 3 * 3);
    for (int8_t& v : w) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    std::vector<int32_t> bias(m);
    for (int32_t& v : bias) v = static_cast<int32_t>(rng() % 2001) - 1000;
    std::vector<float> scales(m);
    for (float& v : scales) v = 0.001f + 0.0002f * static_cast<float>(rng() % 10);
    conv_inputs.push_back(constant(b, "conv/w", DType::kInt8, {m, 3, 3, 3}, w));
    conv_inputs.push_back(constant(b, "conv/b", DType::kInt32, {m}, bias));
    conv_inputs.push_back(constant(b, "conv/s", DType::kFloat32, {m}, scales));
  } else {
    conv_inputs.push_back(
        constant(b, "conv/w", DType::kFloat32, {m, 3, 3, 3}, random_floats(m * 27, 42)));
    conv_inputs.push_back(constant(b, "conv/b", DType::kFloat32, {m}, random_floats(m, 43)));
  }
  const int c = b.add_tensor(activation("conv", {-1, oh, ow, m}, dt, scale, zp));
  b.add_op(OpCode::kConv2D, "conv", conv_inputs, c, Activation::kRelu,
           ModelBuilder::window_params({3, 3, 1, 1}));
  const int p = b.add_tensor(activation("pool", {-1, oh / pool_h, ow / pool_w, m}, dt, scale, zp));
  b.add_op(OpCode::kMaxPool2D, "pool", {c}, p, Activation::kNone,
           ModelBuilder::window_params({pool_h, pool_w, pool_h, pool_w}));
  int out = p;
  if (also_read) {
    const int flat =
        b.add_tensor(activation("flat", {-1, oh / pool_h * (ow / pool_w) * m}, dt, scale, zp));
    b.add_op(OpCode::kReshape, "flatten", {p}, flat);
    const int twice = b.add_tensor(activation("twice", {-1, oh, ow, m}, dt, scale * 2, zp));
    b.add_op(OpCode::kAdd, "twice", {c, c}, twice);
    const int twice_flat =
        b.add_tensor(activation("twice_flat", {-1, oh * ow * m}, dt, scale * 2, zp));
    b.add_op(OpCode::kReshape, "twice_flatten", {twice}, twice_flat);
    out = b.add_tensor(
        activation("both", {-1, oh / pool_h * (ow / pool_w) * m + oh * ow * m}, dt, scale * 2, zp));
    b.add_op(OpCode::kConcatenate, "both", {flat, twice_flat}, out);
  }
  if (int8) {
    std::vector<int64_t> shape = b.tensor(out).shape;
    const int f = b.add_tensor(activation("y", shape));
    b.add_op(OpCode::kDequantize, "dequantize", {out}, f);
    out = f;
  }
  b.set_input(x);
  b.set_output(out);
  return b.serialize();
}

// A Conv2D followed by a MaxPool2D whose windows tile its output runs as one GEMM that pools
// its rows (and skips the rows the pool drops: 7 x 6 pools to 3 x 3 in windows of 2 x 2): the
// same bits as the two ops apart, which keeping every tensor forces.
TEST(LiteInterpreterTest, AConvAndTheMaxPoolAfterItFuseWithoutChangingABit) {
  for (bool int8 : {false, true}) {
    for (auto [pool_h, pool_w] : {std::pair<int64_t, int64_t>{2, 2}, {2, 1}, {1, 2}, {3, 3}}) {
      for (bool also_read : {false, true}) {
        const std::string file = conv_pool_model(int8, pool_h, pool_w, also_read);
        std::vector<float> x = random_floats(5 * 9 * 8 * 3, 44, 0.f, 1.f);
        x[100] = std::nanf("");  // a NaN pools alike fused or apart (relu makes it 0 first)
        Options keep;
        keep.preserve_all_tensors = true;
        auto apart = Interpreter::from_buffer(file.data(), file.size(), keep);
        const std::vector<float> want = apart->run(x.data(), 5);
        for (int threads : {1, 2}) {
          Options o;
          o.num_threads = threads;
          o.profile = true;
          auto fused = Interpreter::from_buffer(file.data(), file.size(), o);
          EXPECT_EQ(fused->run(x.data(), 5), want)
              << (int8 ? "int8" : "float") << " pool " << pool_h << "x" << pool_w << " also read "
              << also_read << ", " << threads << " threads";
          EXPECT_EQ(fused->run(x.data(), 1),
                    std::vector<float>(want.begin(), want.begin() + want.size() / 5));
          // The pool ran inside the conv (no time of its own) exactly when it could fuse.
          const bool fusable = pool_h * pool_w <= 4 && !also_read;
          for (size_t i = 0; i < fused->ops().size(); ++i) {
            if (fused->ops()[i].name != "pool") continue;
            EXPECT_EQ(fused->op_seconds()[i] == 0.0, fusable)
                << "pool " << pool_h << "x" << pool_w << " also read " << also_read;
            EXPECT_EQ(fused->ops()[i].fused, fusable);
            EXPECT_FALSE(apart->ops()[i].fused);
          }
        }
        int positive = 0;
        for (float v : want) positive += v > 0;
        EXPECT_GT(positive, static_cast<int>(want.size()) / 4);  // relu left real values
      }
    }
  }
}

TEST(LiteInterpreterTest, BatchSizesChangeFromRunToRun) {
  const std::string file = every_op_model();
  auto interp = Interpreter::from_buffer(file.data(), file.size());
  const std::vector<float> x = random_floats(5 * 8 * 8 * 2, 12, 0.f, 2.f);
  const std::vector<float> all = interp->run(x.data(), 5);
  for (int64_t batch : {1, 3, 5, 2}) {
    const std::vector<float> part = interp->run(x.data(), batch);
    EXPECT_EQ(part, std::vector<float>(all.begin(), all.begin() + batch * 3)) << batch;
    EXPECT_EQ(interp->last_batch(), batch);
  }
  EXPECT_THROW(interp->run(x.data(), 0), Error);
}

TEST(LiteInterpreterTest, IntermediateTensorsAreReadableOnlyWhenKept) {
  const std::string file = every_op_model();
  const std::vector<float> x = random_floats(8 * 8 * 2, 13, 0.f, 2.f);
  auto shared = Interpreter::from_buffer(file.data(), file.size());
  shared->run(x.data(), 1);
  int conv = -1;
  for (int t = 0; t < shared->tensor_count(); ++t) {
    if (shared->tensor(t).name == "conv") conv = t;
  }
  ASSERT_GE(conv, 0);
  try {
    shared->tensor_data(conv);
    FAIL() << "an intermediate tensor of a shared buffer is readable";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("preserve_all_tensors"), std::string::npos) << e.what();
  }
  Options keep;
  keep.preserve_all_tensors = true;
  auto kept = Interpreter::from_buffer(file.data(), file.size(), keep);
  std::vector<float> caller = x;
  kept->run(caller.data(), 1);
  std::fill(caller.begin(), caller.end(), -1.f);  // the caller's buffer may change or go
  const auto* input = static_cast<const float*>(kept->tensor_data(0));
  EXPECT_EQ(std::vector<float>(input, input + x.size()), x);
  const auto* q = static_cast<const int8_t*>(kept->tensor_data(conv));
  int nonzero = 0;
  for (int i = 0; i < 8 * 8 * 4; ++i) {
    EXPECT_GE(q[i], -128);  // relu at zero point -128 clamps nothing below it
    nonzero += q[i] != -128;
  }
  EXPECT_GT(nonzero, 0);
}

ErrorCode load_error(const std::string& bytes, std::string* message) {
  try {
    auto interp = Interpreter::from_buffer(bytes.data(), bytes.size());
    std::vector<float> x(interp->input_size() * 2, 0.5f);
    interp->run(x.data(), 2);
  } catch (const Error& e) {
    *message = e.what();
    return e.code();
  }
  return static_cast<ErrorCode>(-1);
}

// Recomputes the checksum after an edit, so the edit reaches the semantic checks.
void fix_checksum(std::string& bytes) {
  auto* p = reinterpret_cast<uint8_t*>(bytes.data());
  format::put(p + 24, format::file_checksum(p, bytes.size()), 4);
}

TEST(LiteInterpreterTest, TruncatedFilesFailNamingTheOffset) {
  const std::string file = every_op_model();
  for (size_t len = 0; len < file.size(); len += (len < 200 ? 1 : 61)) {
    std::string message;
    EXPECT_EQ(load_error(file.substr(0, len), &message), ErrorCode::kDataLoss) << len;
    EXPECT_NE(message.find("offset"), std::string::npos) << message;
  }
}

TEST(LiteInterpreterTest, EveryFlippedBitIsCaughtByTheChecksum) {
  const std::string file = float_dense_model({1, 2, 3, 4, 5, 6}, {0, 1});
  for (size_t bit = 0; bit < file.size() * 8; ++bit) {
    std::string bad = file;
    bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
    std::string message;
    const ErrorCode code = load_error(bad, &message);
    EXPECT_TRUE(code == ErrorCode::kDataLoss || code == ErrorCode::kUnimplemented)
        << "bit " << bit << ": " << message;
  }
}

TEST(LiteInterpreterTest, ANewerVersionIsUnimplementedAndAnotherFileIsDataLoss) {
  std::string file = float_dense_model({1, 2, 3, 4, 5, 6}, {0, 1});
  std::string message;
  std::string newer = file;
  newer[8] = 2;
  EXPECT_EQ(load_error(newer, &message), ErrorCode::kUnimplemented);
  EXPECT_NE(message.find("version 2"), std::string::npos) << message;
  std::string other = file;
  other.replace(0, 8, "PK\x03\x04zip!");
  EXPECT_EQ(load_error(other, &message), ErrorCode::kDataLoss);
  EXPECT_NE(message.find("not a Kiln lite model file"), std::string::npos) << message;
}

TEST(LiteInterpreterTest, ShapesThatDoNotChainNameTheOp) {
  ModelBuilder b;
  const int x = b.add_tensor(activation("x", {-1, 3}));
  const int w = constant(b, "w", DType::kFloat32, {2, 4}, std::vector<float>(8, 1.f));
  const int y = b.add_tensor(activation("y", {-1, 2}));
  b.add_op(OpCode::kFullyConnected, "dense_7", {x, w}, y);
  b.set_input(x);
  b.set_output(y);
  std::string message;
  EXPECT_EQ(load_error(b.serialize(), &message), ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("op 0 (dense_7, FullyConnected)"), std::string::npos) << message;
  EXPECT_NE(message.find("4 vs 3"), std::string::npos) << message;
}

TEST(LiteInterpreterTest, GraphsThatReadBeforeWritingOrWriteTwiceAreRefused) {
  {
    ModelBuilder b;
    const int x = b.add_tensor(activation("x", {-1, 4}));
    const int a = b.add_tensor(activation("a", {-1, 4}));
    const int y = b.add_tensor(activation("y", {-1, 4}));
    b.add_op(OpCode::kSoftmax, "first", {a}, y);
    b.add_op(OpCode::kSoftmax, "second", {x}, a);
    b.set_input(x);
    b.set_output(y);
    std::string message;
    EXPECT_EQ(load_error(b.serialize(), &message), ErrorCode::kInvalidArgument);
    EXPECT_NE(message.find("before any op writes it"), std::string::npos) << message;
  }
  {
    ModelBuilder b;
    const int x = b.add_tensor(activation("x", {-1, 4}));
    const int y = b.add_tensor(activation("y", {-1, 4}));
    b.add_op(OpCode::kSoftmax, "first", {x}, y);
    b.add_op(OpCode::kSoftmax, "again", {x}, y);
    b.set_input(x);
    b.set_output(y);
    std::string message;
    EXPECT_EQ(load_error(b.serialize(), &message), ErrorCode::kInvalidArgument);
    EXPECT_NE(message.find("already written"), std::string::npos) << message;
  }
}

TEST(LiteInterpreterTest, DamagedRecordsWithAValidChecksumAreStillRefused) {
  const std::string file = every_op_model();
  // Each field of the first tensor record and the first op record, set to a bad value.
  const size_t tensors = 64,
               ops = 64 + format::get(reinterpret_cast<const uint8_t*>(file.data()) + 28, 4) * 96;
  const std::vector<std::pair<size_t, uint8_t>> edits = {
      {tensors + 8, 9},     // dtype
      {tensors + 9, 7},     // rank
      {tensors + 10, 2},    // constant flag
      {tensors + 24, 0},    // batch dim 0 -> 0 (low byte of -1)
      {tensors + 1, 0x7f},  // name offset past the names
      {ops, 0x55},          // opcode
      {ops + 2, 9},         // activation
      {ops + 3, 5},         // input count
      {ops + 13, 0x40},     // an input index out of range
      {ops + 28, 0x30},     // the output index out of range
  };
  for (const auto& [at, value] : edits) {
    std::string bad = file;
    bad[at] = static_cast<char>(value);
    fix_checksum(bad);
    std::string message;
    const ErrorCode code = load_error(bad, &message);
    EXPECT_TRUE(code == ErrorCode::kDataLoss || code == ErrorCode::kInvalidArgument)
        << "byte " << at << ": " << message;
  }
}

TEST(LiteInterpreterTest, AnActivationOnAnOpThatCannotFuseOneAndAWindowOutsideTheInputAreRefused) {
  {
    ModelBuilder b;
    const int x = b.add_tensor(activation("x", {-1, 4}));
    const int y = b.add_tensor(activation("y", {-1, 4}));
    b.add_op(OpCode::kSoftmax, "softmax_relu", {x}, y, Activation::kRelu);
    b.set_input(x);
    b.set_output(y);
    std::string message;
    EXPECT_EQ(load_error(b.serialize(), &message), ErrorCode::kInvalidArgument);
    EXPECT_NE(message.find("only FullyConnected, Conv2D and DepthwiseConv2D fuse"),
              std::string::npos)
        << message;
  }
  {
    // 5 rows of window over 3 rows of input and 1 of padding: out_h would round to 1.
    ModelBuilder b;
    const int x = b.add_tensor(activation("x", {-1, 3, 6, 1}));
    const int y = b.add_tensor(activation("y", {-1, 1, 3, 1}));
    b.add_op(OpCode::kMaxPool2D, "pool", {x}, y, Activation::kNone,
             ModelBuilder::window_params({5, 2, 2, 2, 1, 0, 0, 0}));
    b.set_input(x);
    b.set_output(y);
    std::string message;
    EXPECT_EQ(load_error(b.serialize(), &message), ErrorCode::kInvalidArgument);
    EXPECT_NE(message.find("window 5x2, strides 2,2, pads (top, left, bottom, right) 1,0,0,0 "
                           "does not fit input x f32[?,3,6,1]"),
              std::string::npos)
        << message;
  }
}

TEST(LiteInterpreterTest, MissingFilesAreNotFound) {
  try {
    Interpreter::load("/nonexistent/model.klite");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.klite"), std::string::npos);
  }
}

TEST(LiteInterpreterTest, AFailedWriteLeavesWhatWasThereAndNoTemporaryFile) {
  // A directory in the way: the rename fails (for root too), after the temporary was written.
  const std::string dir = testing::TempDir() + "/lite_write_" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string path = dir + "/m.klite";
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);
  write_file(path + "/kept", "old");
  EXPECT_THROW(write_file(path, "new"), Error);
  std::ifstream in(path + "/kept");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), "old");
  int entries = 0;
  for (DIR* d = ::opendir(dir.c_str()); d != nullptr;) {
    dirent* e = ::readdir(d);
    if (e == nullptr) {
      ::closedir(d);
      break;
    }
    entries += e->d_name[0] != '.';
  }
  EXPECT_EQ(entries, 1) << "a temporary file was left beside " << path;
  std::remove((path + "/kept").c_str());
  ::rmdir(path.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace kiln::lite
