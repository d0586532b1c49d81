// ConvPoolGradFusion (compiler/passes/conv_pool_grad_fusion.h) and its ops: fused_conv_pool's
// taps (output 2) and conv_pool_kernel_grad. A network's first convolution + bias + relu + max
// pool, trained through its kernel and bias only, gets one conv_pool_kernel_grad reading the
// pool's taps in place of the pool's gradient, the kernel's gradient and the bias's sum.
// Tolerance: none where the values are small integers (every sum is exact in f32, in any order),
// so a gradient routed to another tap of its window shows; a bound on the order of the sums
// otherwise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compiler/executable.h"
#include "compiler/pipeline.h"
#include "kiln/kiln.h"
#include "kiln/op_registry.h"
#include "ops/conv_direct.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/testing/conv.h"
#include "tests/testing/onednn.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;

// Small integers in [lo, hi], as f32: sums of their products are exact in any order.
Tensor integers(Shape shape, int lo, int hi, uint32_t seed) {
  return kiln::testing::small_integers(std::move(shape), lo, hi, seed);
}

int count(const std::vector<std::string>& thunks, const std::string& what) {
  return static_cast<int>(std::count(thunks.begin(), thunks.end(), what));
}

// conv2d(x, w) + b, activated, 2x2-pooled; the loss sum(pool * r) and its gradients with
// respect to the kernel and the bias (and the input when `input_grad`), as a training step
// computes them (outputs: the loss, then the gradients).
struct FirstLayer {
  Graph g{"first_layer"};
  Tensor x, w, b, r;
  std::vector<Tensor> grads;
  FirstLayer(Shape in, int64_t c_out, bool relu_act, bool input_grad, Axes strides = {1, 1}) {
    x = g.placeholder(f32, in, "x");
    w = g.placeholder(f32, {3, 3, in[3], c_out}, "w");
    b = g.placeholder(f32, {c_out}, "b");
    Tensor y = conv2d(x, w, strides) + b;
    if (relu_act) y = relu(y);
    Tensor p = max_pool2d(y, {2, 2});
    r = g.placeholder(f32, p.shape(), "r");
    Tensor loss = sum(p * r);
    grads = input_grad ? gradients(loss, {w, b, x}) : gradients(loss, {w, b});
    grads.insert(grads.begin(), loss);
  }
};

TEST(ConvPoolGradFusion, FirstConvolutionsGradientsComeFromThePoolsTaps) {
  // Integer inputs: many windows hold equal maxima (and relu's zeros), so the tap each gradient
  // goes to must be the one reduce_window_max_grad picks, or the kernel gradient differs.
  for (bool relu_act : {true, false}) {
    FirstLayer l({5, 9, 8, 2}, 6, relu_act, /*input_grad=*/false);
    FeedList feeds = {{l.x, integers({5, 9, 8, 2}, -2, 2, 1)},
                      {l.w, integers({3, 3, 2, 6}, -1, 1, 2)},
                      {l.b, integers({6}, -1, 1, 3)},
                      {l.r, integers({5, 3, 3, 6}, -3, 3, 4)}};
    Executable e = compile(l.g, l.grads, feeds);
    const std::vector<std::string> thunks = e.thunk_descriptions();
    EXPECT_EQ(count(thunks, "kernel conv_pool_kernel_grad"), 1) << e.fusion_log();
    EXPECT_EQ(count(thunks, "kernel reduce_window_max_grad"), 0);
    EXPECT_EQ(count(thunks, "kernel convolution_kernel_grad"), 0);
    testing::expect_bitwise_equal(e.run(feeds), l.g.run(feeds, l.grads));
  }
}

TEST(ConvPoolGradFusion, NaNsAndStridesFollowTheReferenceTaps) {
  // A NaN input makes some windows' maxima NaN: the gradient goes to the first NaN of the window,
  // as reduce_window_max_grad sends it, and the kernel gradient is NaN exactly where the
  // reference's is. Stride 2 and an odd output (a row and a column the pool drops).
  FirstLayer l({3, 12, 11, 1}, 4, /*relu_act=*/false, /*input_grad=*/false, {2, 2});
  Tensor x = integers({3, 12, 11, 1}, -3, 3, 5);
  std::vector<float> xv = x.to_vector<float>();
  xv[40] = std::numeric_limits<float>::quiet_NaN();
  FeedList feeds = {{l.x, Tensor::from_vector(xv, {3, 12, 11, 1})},
                    {l.w, integers({3, 3, 1, 4}, -2, 2, 6)},
                    {l.b, integers({4}, -1, 1, 7)},
                    {l.r, integers(l.r.shape(), -2, 2, 8)}};
  Executable e = compile(l.g, l.grads, feeds);
  EXPECT_EQ(count(e.thunk_descriptions(), "kernel conv_pool_kernel_grad"), 1) << e.fusion_log();
  testing::expect_bitwise_equal(e.run(feeds), l.g.run(feeds, l.grads));
}

TEST(ConvPoolGradFusion, RandomValuesStayWithinTheRoundingOfTheUnfusedSums) {
  FirstLayer l({16, 14, 14, 3}, 8, /*relu_act=*/true, /*input_grad=*/false);
  FeedList feeds = {{l.x, random_normal({16, 14, 14, 3}, 1)},
                    {l.w, random_normal({3, 3, 3, 8}, 2)},
                    {l.b, random_normal({8}, 3)},
                    {l.r, random_normal(l.r.shape(), 4)}};
  Executable e = compile(l.g, l.grads, feeds);
  EXPECT_EQ(count(e.thunk_descriptions(), "kernel conv_pool_kernel_grad"), 1);
  const std::vector<Tensor> got = e.run(feeds), want = l.g.run(feeds, l.grads);
  // Each gradient element sums at most 16 * 12 * 12 f32 products of N(0, 1) values in another
  // order than the unfused kernels: the two differ by rounding, far below 1e-4 relative.
  for (size_t i = 0; i < got.size(); ++i) {
    const std::vector<float> a = got[i].to_vector<float>(), b = want[i].to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k)
      EXPECT_NEAR(a[k], b[k], 1e-4 * (1 + std::abs(b[k]))) << "gradient " << i << "[" << k << "]";
  }
}

TEST(ConvPoolGradFusion, LeavesAGradientThatTheInputsGradientReads) {
  FirstLayer l({2, 6, 6, 2}, 3, /*relu_act=*/true, /*input_grad=*/true);
  FeedList feeds = {{l.x, integers({2, 6, 6, 2}, -2, 2, 1)},
                    {l.w, integers({3, 3, 2, 3}, -1, 1, 2)},
                    {l.b, integers({3}, -1, 1, 3)},
                    {l.r, integers(l.r.shape(), -2, 2, 4)}};
  Executable e = compile(l.g, l.grads, feeds);
  EXPECT_EQ(count(e.thunk_descriptions(), "kernel conv_pool_kernel_grad"), 0);
  EXPECT_EQ(count(e.thunk_descriptions(), "kernel convolution_input_grad"), 1);
  testing::expect_bitwise_equal(e.run(feeds), l.g.run(feeds, l.grads));
}

TEST(ConvPoolGradFusion, IsNotExact) {
  EXPECT_THAT(default_pipeline().pass_names(), HasSubstr("conv_pool_grad_fusion"));
  EXPECT_THAT(default_pipeline(Rewrites::kExact).pass_names(),
              ::testing::Not(HasSubstr("conv_pool_grad_fusion")));
}

// The conv_output attribute of the optimized graph's fused_conv_pools, in node order.
std::vector<bool> conv_outputs(const Graph& g, const std::vector<Tensor>& outputs) {
  const CompiledGraph c = optimize(g, outputs);
  std::vector<bool> kept;
  for (int id = 0; id < c.graph.num_nodes(); ++id) {
    const NodeInfo n = c.graph.node(id);
    if (n.op == "fused_conv_pool") kept.push_back(n.attrs.get_bool("conv_output", true));
  }
  return kept;
}

TEST(DropConvOutputs, DropsTheConvolutionOutputThatNothingReads) {
  // Training: once the gradient reads the taps, the relu mask and the pool gradient no longer
  // read the convolution's output.
  FirstLayer l({2, 6, 6, 2}, 3, /*relu_act=*/true, /*input_grad=*/false);
  EXPECT_EQ(conv_outputs(l.g, l.grads), std::vector<bool>{false});
  // ... but the input's gradient does (through the unfused pool gradient).
  FirstLayer with_input({2, 6, 6, 2}, 3, /*relu_act=*/true, /*input_grad=*/true);
  EXPECT_EQ(conv_outputs(with_input.g, with_input.grads), std::vector<bool>{true});

  // Inference: only the pool is read, unless the convolution's output is fetched too, or the
  // direct kernels would not pool it (8 input channels: they would compute it anyway).
  for (int64_t c_in : {1, 8}) {
    Graph g{"inference"};
    Tensor x = g.placeholder(f32, {4, 10, 10, c_in}, "x");
    Tensor w = g.placeholder(f32, {3, 3, c_in, 16}, "w");
    Tensor b = g.placeholder(f32, {16}, "b");
    Tensor y = relu(conv2d(x, w) + b);
    Tensor p = max_pool2d(y, {2, 2});
    EXPECT_EQ(conv_outputs(g, {p}), std::vector<bool>{c_in > 4}) << c_in << " channels";
    EXPECT_EQ(conv_outputs(g, {p, y}), std::vector<bool>{true}) << c_in << " channels";
  }
  {  // the kernels switched off when the graph is compiled
    kiln::testing::DirectConvOff off;
    EXPECT_EQ(conv_outputs(l.g, l.grads), std::vector<bool>{true});
  }
}

TEST(DropConvOutputs, RunsWithinRoundingOfTheFullOutputsPath) {
  FirstLayer l({3, 9, 8, 1}, 20, /*relu_act=*/true, /*input_grad=*/false);
  FeedList feeds = {{l.x, random_uniform({3, 9, 8, 1}, 1, -1, 1)},
                    {l.w, random_uniform({3, 3, 1, 20}, 2, -1, 1)},
                    {l.b, random_uniform({20}, 3, -1, 1)},
                    {l.r, random_uniform(l.r.shape(), 4, -1, 1)}};
  Executable dropped = compile(l.g, l.grads, feeds);
  const int64_t before = ops::direct_conv::counts().forward_pool;
  const std::vector<Tensor> got = dropped.run(feeds);
  EXPECT_GT(ops::direct_conv::counts().forward_pool, before) << "not pooled in registers";
  // The forward pools what the interpreter's convolution, bias, relu and pool give: the same loss.
  EXPECT_TRUE(testing::bitwise_equal(got[0], l.g.run(feeds, std::vector<Tensor>{l.grads[0]})[0]));
  // Against the program compiled with the direct kernels off (output 0 kept, oneDNN's or the
  // GEMM's sums): within rounding.
  std::vector<Tensor> want;
  {
    kiln::testing::DirectConvOff off;
    want = compile(l.g, l.grads, feeds).run(feeds);
  }
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(allclose(got[i], want[i], 1e-4, 1e-5)) << "output " << i;
}

// The taps, and the errors of a bad operand.
Attrs grad_attrs() {
  Attrs a;
  a.set("kernel_spatial", Axes{3, 3});
  a.set("pool", Axes{2, 2});
  return a;
}

TEST(ConvPoolKernelGrad, RejectsTapsOutsideTheWindowNamingTheElement) {
  Tensor x = integers({1, 6, 6, 1}, -1, 1, 1), dp = integers({1, 2, 2, 2}, -1, 1, 2);
  std::vector<uint8_t> taps(8, 1);
  taps[5] = 4;  // a 2x2 window has taps 0-3
  try {
    call_op("conv_pool_kernel_grad", {x, Tensor::from_vector(taps, {1, 2, 2, 2}), dp},
            grad_attrs());
    FAIL() << "a tap of 4 in a 2x2 window was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("taps: element 5 is 4, not a tap of a [2,2] window"));
  }
  taps[5] = 4 | 0x80;  // the flag does not make it a tap
  EXPECT_THROW(call_op("conv_pool_kernel_grad", {x, Tensor::from_vector(taps, {1, 2, 2, 2}), dp},
                       grad_attrs()),
               Error);
}

TEST(ConvPoolKernelGrad, RejectsAPoolGradientOfAnotherShape) {
  Tensor x = integers({1, 6, 6, 1}, -1, 1, 1), dp = integers({1, 3, 2, 2}, -1, 1, 2);
  std::vector<uint8_t> taps(12, 0);
  try {
    call_op("conv_pool_kernel_grad", {x, Tensor::from_vector(taps, {1, 3, 2, 2}), dp},
            grad_attrs());
    FAIL() << "a pool gradient of the wrong shape was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("conv_pool_kernel_grad"));
    EXPECT_THAT(e.what(), HasSubstr("is not the [2,2] pool of the convolution's output (4"));
  }
}

TEST(FusedConvPoolTaps, NameEachWindowsFirstMaximumAndFlagNonPositiveOnes) {
  // One channel, kernel 1x1 of weight 1, no bias: the output is the input itself.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector<float>({1, 3, 2, 3,    //
                                         0, 0, 5, -1,   //
                                         -1, -2, 0, 0,  //
                                         nan, 7, 7, nan},
                                        {1, 4, 4, 1});
  Tensor w = Tensor::from_vector<float>({1}, {1, 1, 1, 1});
  Attrs a;
  a.set("activation", std::string("none"));
  a.set("pool", Axes{2, 2});
  a.set("taps", true);
  const std::vector<Tensor> out = call_op("fused_conv_pool", {x, w}, a);
  ASSERT_EQ(out.size(), 3u);
  ASSERT_EQ(out[2].dtype(), u8);
  // Windows (rows 0-1, columns 0-1): 1 3 / 0 0 -> 3 at tap 1; (rows 0-1, columns 2-3):
  // 2 3 / 5 -1 -> 5 at tap 2; (rows 2-3, columns 0-1): -1 -2 / NaN 7 -> NaN at tap 2;
  // (rows 2-3, columns 2-3): 0 0 / 7 NaN -> NaN at tap 3.
  const std::vector<uint8_t> taps = out[2].to_vector<uint8_t>();
  EXPECT_EQ(taps, (std::vector<uint8_t>{1, 2, 2, 3}));
  // A maximum <= 0 is flagged.
  Tensor neg = Tensor::from_vector<float>({-1, -3, 0, -2}, {1, 2, 2, 1});
  const std::vector<uint8_t> flagged =
      call_op("fused_conv_pool", {neg, w}, a)[2].to_vector<uint8_t>();
  EXPECT_EQ(flagged, (std::vector<uint8_t>{2 | 0x80}));
}

}  // namespace
}  // namespace kiln::compiler
