// The fused_conv op (compiler/cpu/fused_conv.h) and the epilogue fusion pass on convolutions: which
// conv -> add(bias) -> activation chains fuse, the refusals and their notes, and results.
// Tolerance: none. fused_conv runs the convolution's own kernel (the same oneDNN chunks, or im2col
// blocks and Eigen products) and applies the reference kernels' bias-add and activation formulas
// to each block, so every result must be bit-identical to convolution -> add -> activation run op
// by op.
#include "compiler/cpu/fused_conv.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "compiler/executable.h"
#include "compiler/passes/epilogue_fusion.h"
#include "kiln/kiln.h"
#include "kiln/op_registry.h"
#include "ops/kernel_util.h"
#include "ops/onednn_conv.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/mlp_step.h"

namespace kiln::compiler {
namespace {

using test_models::random_tensor;
using testing::expect_bitwise_equal;
using ::testing::HasSubstr;
using testing::notes_of;
using testing::ops_of;
using testing::run_module;

int count_op(const Module& m, const std::string& op) {
  int c = 0;
  for (const auto& n : nodes_of(m.graph)) c += n.op == op;
  return c;
}

const detail::Node* find_op(const Module& m, const std::string& op) {
  for (const auto& n : nodes_of(m.graph))
    if (n.op == op) return &n;
  return nullptr;
}

Tensor activate(const Tensor& x, const std::string& act) {
  if (act == "relu") return relu(x);
  if (act == "tanh") return tanh(x);
  if (act == "logistic") return logistic(x);
  return x;
}

// A convolution layer in a graph: input, kernel and bias placeholders and their random feeds.
struct ConvLayer {
  Graph g{"conv"};
  Tensor x, w, b;
  FeedList feeds;
  ConvLayer(Shape in, Shape kernel, Shape bias, DType t = f32) {
    x = g.placeholder(t, in, "x");
    w = g.placeholder(t, kernel, "w");
    b = g.placeholder(t, bias, "b");
    feeds = {{x, random_tensor(in, 1, t)},
             {w, random_tensor(kernel, 2, t)},
             {b, random_tensor(bias, 3, t)}};
  }
};

// Runs the pass, expects every convolution to have become a fused_conv with `activation`, and
// the module's results to equal the unfused graph's bit for bit.
void expect_fused(const ConvLayer& l, const std::vector<Tensor>& ys, const std::string& act,
                  size_t inputs) {
  Module m = make_module(l.g, ys);
  EpilogueFusion pass;
  EXPECT_TRUE(pass.run(m)) << notes_of(pass);
  EXPECT_EQ(count_op(m, "convolution"), 0) << ops_of(m);
  const detail::Node* f = find_op(m, "fused_conv");
  ASSERT_NE(f, nullptr) << ops_of(m);
  EXPECT_EQ(f->inputs.size(), inputs);
  EXPECT_EQ(f->attrs.get_string("activation"), act);
  expect_bitwise_equal(run_module(m, l.feeds), l.g.run(l.feeds, ys));
}

// NHWC 2-d convolutions with strides, padding, dilation and groups; bias and every activation.
// 4 x 19 x 17 outputs of 72-deep patches span several row blocks and threads.
TEST(FusedConvTest, Conv2dBiasActivationIsBitIdentical) {
  struct Config {
    const char* label;
    Shape in, kernel;
    ConvOptions options;
  };
  const std::vector<Config> configs = {
      {"plain", {4, 21, 19, 8}, {3, 3, 8, 16}, {}},
      {"strided_padded", {3, 20, 15, 5}, {3, 2, 5, 7}, {{2, 1}, {1, 0}, {1, 1}}},
      {"grouped_dilated", {2, 11, 12, 6}, {2, 3, 2, 9}, {{1, 2}, {0, 2}, {1, 0}, {2, 1}, {}, 3}},
  };
  for (const Config& c : configs) {
    for (const char* act : {"none", "relu", "tanh", "logistic"}) {
      SCOPED_TRACE(std::string(c.label) + " " + act);
      ConvLayer l(c.in, c.kernel, {c.kernel.back()});
      Tensor y = activate(conv(l.x, l.w, c.options) + l.b, act);
      expect_fused(l, {y}, act, 3);
    }
  }
}

TEST(FusedConvTest, WithoutBiasBiasFirstAndBroadcastShapes) {
  {
    ConvLayer l({2, 9, 9, 3}, {3, 3, 3, 4}, {4});  // activation only
    Tensor y = tanh(conv(l.x, l.w));
    expect_fused(l, {y}, "tanh", 2);
  }
  {
    ConvLayer l({2, 9, 9, 3}, {3, 3, 3, 4}, {1, 1, 1, 4});  // bias + conv, bias [1, 1, 1, C]
    Tensor y = relu(l.b + conv2d(l.x, l.w, {1, 1}, "same"));
    expect_fused(l, {y}, "relu", 3);
  }
  {
    ConvLayer l({2, 9, 9, 3}, {3, 3, 3, 4}, {1, 4});  // bias [1, C], bias only
    Tensor y = conv2d(l.x, l.w, {2, 2}, "same") + l.b;
    expect_fused(l, {y}, "none", 3);
  }
  {
    ConvLayer l({2, 6, 7, 3}, {2, 2, 3, 5}, {5});  // a scalar constant bias
    Tensor y = logistic(conv(l.x, l.w) + l.g.constant(Tensor::scalar<float>(0.5f)));
    expect_fused(l, {y}, "logistic", 3);
  }
}

TEST(FusedConvTest, F64And1dAnd3d) {
  for (const char* act : {"relu", "tanh"}) {
    ConvLayer l({3, 8, 8, 2}, {3, 3, 2, 5}, {5}, f64);
    expect_fused(l, {activate(conv(l.x, l.w, {{2, 2}, {1, 1}, {1, 1}}) + l.b, act)}, act, 3);
  }
  {
    ConvLayer l({3, 40, 4}, {5, 4, 6}, {6});  // 1-d: [batch, width, channels]
    expect_fused(l, {relu(conv(l.x, l.w, {{2}, {2}, {2}}) + l.b)}, "relu", 3);
  }
  {
    ConvLayer l({2, 5, 6, 4, 3}, {2, 3, 2, 3, 4}, {4});  // 3-d
    expect_fused(l, {logistic(conv(l.x, l.w) + l.b)}, "logistic", 3);
  }
}

// An input with no channels gives patches of depth 0: the output is the bias, activated.
TEST(FusedConvTest, ZeroDepthAndEmptyOutputs) {
  ConvLayer l({2, 4, 4, 0}, {3, 3, 0, 3}, {3});
  expect_fused(l, {tanh(conv(l.x, l.w) + l.b)}, "tanh", 3);
  ConvLayer e({0, 4, 4, 2}, {3, 3, 2, 3}, {3});
  Tensor y = relu(conv(e.x, e.w) + e.b);
  expect_fused(e, {y}, "relu", 3);
}

// The convolution's result is used elsewhere: nothing fuses. The pre-activation is used
// elsewhere (beside relu's mask and select): nothing fuses either, since the bias alone
// would leave the activation's loop re-reading the pre-activation (see the pass).
TEST(FusedConvTest, IntermediatesWithOtherUsersAreRefused) {
  {
    ConvLayer l({2, 6, 6, 3}, {3, 3, 3, 4}, {4});
    Tensor z = conv(l.x, l.w);
    Tensor y = relu(z + l.b);
    Module m = make_module(l.g, {y, z});
    EpilogueFusion pass;
    EXPECT_FALSE(pass.run(m));
    EXPECT_THAT(notes_of(pass),
                HasSubstr("the convolution's result is also used elsewhere (2 uses)"))
        << notes_of(pass);
  }
  {
    ConvLayer l({2, 6, 6, 3}, {3, 3, 3, 4}, {4});
    Tensor pre = conv(l.x, l.w) + l.b;
    Tensor y = relu(pre);
    Tensor other = pre * pre;
    Module m = make_module(l.g, {y, other});
    EpilogueFusion pass;
    EXPECT_FALSE(pass.run(m)) << ops_of(m);
    EXPECT_THAT(notes_of(pass), HasSubstr("is also used elsewhere (4 uses), and a convolution "
                                          "does not take the bias alone"))
        << notes_of(pass);
  }
  {
    // No activation to share a loop with: the bias fuses though its sum is used twice.
    ConvLayer l({2, 6, 6, 3}, {3, 3, 3, 4}, {4});
    Tensor pre = conv(l.x, l.w) + l.b;
    Tensor other = pre * pre;
    Module m = make_module(l.g, {pre, other});
    EpilogueFusion pass;
    EXPECT_TRUE(pass.run(m));
    const detail::Node* f = find_op(m, "fused_conv");
    ASSERT_NE(f, nullptr) << ops_of(m);
    EXPECT_EQ(f->attrs.get_string("activation"), "none");
    expect_bitwise_equal(run_module(m, l.feeds), l.g.run(l.feeds, std::vector<Tensor>{pre, other}));
  }
  {
    ConvLayer l({2, 6, 6, 3}, {3, 3, 3, 4}, {4});
    Tensor z = conv(l.x, l.w);
    Tensor y = z + sum(z, {0, 1, 2});  // the "bias" is computed from the convolution
    Module m = make_module(l.g, {y});
    EpilogueFusion pass;
    EXPECT_FALSE(pass.run(m));
    EXPECT_THAT(notes_of(pass),
                HasSubstr("depends on the convolution (fusing would create a cycle)"))
        << notes_of(pass);
  }
}

// A bias that broadcasts along another axis than the channels, or is output-sized, stays apart,
// with its reason; a half-precision convolution fuses (tests/compiler/lowp_epilogue_test.cc).
TEST(FusedConvTest, WrongAxisBiasIsRefusedAndHalfPrecisionFuses) {
  for (Shape bias : {Shape{1, 4, 1, 1}, Shape{4, 1}, Shape{1, 1, 4, 4}, Shape{2, 4, 4, 4}}) {
    SCOPED_TRACE(shape_str(bias));
    ConvLayer l({2, 6, 6, 3}, {3, 3, 3, 4}, bias);
    Tensor y = relu(conv(l.x, l.w) + l.b);
    Module m = make_module(l.g, {y});
    EpilogueFusion pass;
    EXPECT_FALSE(pass.run(m));
    EXPECT_THAT(notes_of(pass), HasSubstr("neither one element nor a vector along the last "
                                          "(channel) dimension"))
        << notes_of(pass);
    EXPECT_THAT(notes_of(pass), HasSubstr("bias f32" + shape_str(bias))) << notes_of(pass);
    EXPECT_THAT(notes_of(pass), HasSubstr("(convolution)")) << notes_of(pass);
  }
  {
    ConvLayer l({2, 6, 6, 3}, {3, 3, 3, 4}, {4}, f16);
    Tensor y = relu(conv(l.x, l.w) + l.b);
    Module m = make_module(l.g, {y});
    EpilogueFusion pass;
    EXPECT_TRUE(pass.run(m)) << notes_of(pass);
    EXPECT_NE(find_op(m, "fused_conv"), nullptr);
  }
}

TEST(FusedConvTest, OpChecksItsInputs) {
  Tensor x = random_tensor({2, 5, 5, 3}, 1), w = random_tensor({3, 3, 3, 4}, 2);
  Attrs attrs{{"strides", Axes{1, 1}}, {"activation", std::string("relu")}};
  auto call = [&](std::vector<Tensor> in, const Attrs& a) { return call_op("fused_conv", in, a); };
  try {
    call({x, w, random_tensor({3}, 3)}, attrs);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("fused_conv"));
    EXPECT_THAT(e.what(), HasSubstr("bias f32[3]"));
    EXPECT_THAT(e.what(), HasSubstr("f32[2,3,3,4]"));
  }
  try {
    call({x, w, random_tensor({3, 4}, 3)}, attrs);  // broadcasts along the width
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("last (channel) dimension"));
  }
  Attrs gelu = attrs;
  gelu.set("activation", std::string("gelu"));
  EXPECT_THROW(call({x, w}, gelu), Error);
  EXPECT_THROW(call({x, w}, Attrs{{"strides", Axes{1, 1}}}), Error);
  EXPECT_THROW(call({x.to(i32), w.to(i32)}, attrs), Error);
  EXPECT_THROW(call({x, random_tensor({3, 3, 2, 4}, 2)}, attrs), Error);  // conv's own checks
  // Eagerly: equal to conv + bias, then max(., 0).
  Tensor bias = random_tensor({4}, 4);
  std::vector<float> got = call({x, w, bias}, attrs)[0].to_vector<float>();
  std::vector<float> want = relu(conv(x, w) + bias).to_vector<float>();
  EXPECT_EQ(got, want);
}

// Compiled: the fused_conv runs as a kernel thunk; the default pipeline fuses it.
TEST(FusedConvTest, CompiledConvLayerUsesFusedConv) {
  ConvLayer l({4, 12, 12, 3}, {3, 3, 3, 8}, {8});
  Tensor y = logistic(conv2d(l.x, l.w, {1, 1}, "same") + l.b);
  Executable e = compile(l.g, {y}, l.feeds);
  std::string thunks;
  for (const std::string& t : e.thunk_descriptions()) thunks += t + "\n";
  EXPECT_THAT(thunks, HasSubstr("kernel fused_conv")) << thunks;
  expect_bitwise_equal(e.run(l.feeds), l.g.run(l.feeds, std::vector<Tensor>{y}));
}

// ---- fused_conv_pool: the max pool of a fused convolution's output, image by image ----

// Runs the pass on conv -> bias -> relu -> max_pool2d(pool, valid) and expects one
// fused_conv_pool whose two outputs equal the unfused graph's bit for bit, on oneDNN's chunks of
// whole images and on Kiln's own row blocks (which cut images), with NaNs in the input.
void expect_pool_fused(Shape in, Shape kernel, Axes pool, DType t, bool with_nans) {
  SCOPED_TRACE(shape_str(in) + " * " + shape_str(kernel) + " pool " + ops::ints_str(pool) + " " +
               dtype_name(t) + (with_nans ? " with NaNs" : ""));
  ConvLayer l(in, kernel, {kernel.back()}, t);
  if (with_nans) {
    std::vector<double> x = l.feeds[0].second.to_vector<double>();
    for (size_t i = 0; i < x.size(); i += 37) x[i] = std::nan("");
    l.feeds[0].second = convert(Tensor::from_vector(x, in), t);
  }
  Tensor pre = relu(conv(l.x, l.w) + l.b);
  Tensor pooled = max_pool2d(pre, pool);
  Module m = make_module(l.g, {pooled, pre});
  EpilogueFusion pass;
  EXPECT_TRUE(pass.run(m)) << notes_of(pass);
  EXPECT_EQ(count_op(m, "fused_conv_pool"), 1) << ops_of(m);
  EXPECT_EQ(count_op(m, "reduce_window_max"), 0) << ops_of(m);
  const detail::Node* f = find_op(m, "fused_conv_pool");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->attrs.get_ints("pool"), pool);
  for (bool onednn : {true, false}) {  // each path against the unfused ops on the same path
    SCOPED_TRACE(onednn ? "oneDNN" : "Kiln's own convolution");
    const bool was = ops::onednn::enabled();
    ops::onednn::set_enabled(onednn);
    const std::vector<Tensor> got = run_module(m, l.feeds);
    const std::vector<Tensor> want = l.g.run(l.feeds, std::vector<Tensor>{pooled, pre});
    ops::onednn::set_enabled(was);
    expect_bitwise_equal(got, want);
  }
}

TEST(FusedConvPoolTest, ConvReluMaxPoolIsBitIdentical) {
  // The CNN trainer's two layers (26 -> 13; 11 -> 5, a row and a column left over), a 3x3
  // window, and a 1x1 one; 4 images of 19 x 17 outputs span several row blocks and threads.
  expect_pool_fused({3, 28, 28, 1}, {3, 3, 1, 32}, {2, 2}, f32, false);
  expect_pool_fused({5, 13, 13, 32}, {3, 3, 32, 64}, {2, 2}, f32, true);
  expect_pool_fused({4, 21, 19, 8}, {3, 3, 8, 16}, {3, 2}, f32, true);
  expect_pool_fused({2, 9, 8, 3}, {2, 2, 3, 5}, {1, 1}, f64, true);
  expect_pool_fused({2, 10, 10, 3}, {3, 3, 3, 4}, {2, 3}, f64, false);
}

TEST(FusedConvPoolTest, OtherPoolsAndTypesStayApart) {
  ConvLayer l({2, 12, 12, 3}, {3, 3, 3, 4}, {4});
  Tensor pre = relu(conv(l.x, l.w) + l.b);
  const std::vector<Tensor> apart = {
      max_pool2d(pre, {2, 2}, {1, 1}),      // overlapping windows
      max_pool2d(pre, {3, 3}, {}, "same"),  // padded
      avg_pool2d(pre, {2, 2}),              // not a max
  };
  for (const Tensor& y : apart) {
    Module m = make_module(l.g, {y});
    EpilogueFusion pass;
    EXPECT_TRUE(pass.run(m)) << notes_of(pass);
    EXPECT_EQ(count_op(m, "fused_conv_pool"), 0) << ops_of(m);
    EXPECT_EQ(count_op(m, "fused_conv"), 1) << ops_of(m);
    expect_bitwise_equal(run_module(m, l.feeds), l.g.run(l.feeds, std::vector<Tensor>{y}));
  }
  // bf16 keeps its pool apart (the fused pool takes f32 and f64).
  ConvLayer h({2, 12, 12, 3}, {3, 3, 3, 4}, {4}, bf16);
  Tensor y = max_pool2d(relu(conv(h.x, h.w) + h.b), {2, 2});
  Module m = make_module(h.g, {y});
  EpilogueFusion pass(/*fuse_narrow=*/true);
  pass.run(m);
  EXPECT_EQ(count_op(m, "fused_conv_pool"), 0) << ops_of(m);
}

TEST(FusedConvPoolTest, OpChecksItsPoolAttribute) {
  Tensor x = random_tensor({1, 6, 6, 2}, 1, f32), w = random_tensor({3, 3, 2, 3}, 2, f32);
  auto call = [&](const Attrs& a) { return call_op("fused_conv_pool", {x, w}, a); };
  Attrs attrs = {{"activation", std::string("relu")}};
  try {
    call(attrs);
    ADD_FAILURE() << "no pool attribute accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("needs the attribute pool"));
  }
  attrs.set("pool", Axes{5, 2});  // the 4 x 4 output has no 5-row window
  try {
    call(attrs);
    ADD_FAILURE() << "a window larger than the output accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("larger than the output f32[1,4,4,3]"));
  }
  attrs.set("pool", Axes{2, 2});
  const std::vector<Tensor> out = call(attrs);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].shape(), (Shape{1, 2, 2, 3}));
  EXPECT_TRUE(testing::bitwise_equal(out[1], max_pool2d(relu(conv(x, w)), {2, 2})));
}

// Compiled: the CNN's layer runs as one fused_conv_pool kernel thunk.
TEST(FusedConvPoolTest, CompiledConvPoolLayerUsesFusedConvPool) {
  ConvLayer l({4, 28, 28, 1}, {3, 3, 1, 32}, {32});
  Tensor y = max_pool2d(relu(conv2d(l.x, l.w, {1, 1}, "valid") + l.b), {2, 2});
  Executable e = compile(l.g, {y}, l.feeds);
  std::string thunks;
  for (const std::string& t : e.thunk_descriptions()) thunks += t + "\n";
  EXPECT_THAT(thunks, HasSubstr("kernel fused_conv_pool")) << thunks;
  EXPECT_THAT(thunks, ::testing::Not(HasSubstr("reduce_window_max"))) << thunks;
  expect_bitwise_equal(e.run(l.feeds), l.g.run(l.feeds, std::vector<Tensor>{y}));
}

}  // namespace
}  // namespace kiln::compiler
