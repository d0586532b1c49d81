// The epilogue fusion pass (compiler/passes/epilogue_fusion.h) on dots and the fused_dot op it
// creates: which chains fuse, the refusals and their notes, and results against the unfused
// reference kernels (convolutions: tests/compiler/fused_conv_test.cc).
// Tolerance: none. fused_dot runs the same Eigen products over the same row blocks as dot's
// reference kernel and applies the reference kernels' bias-add and activation formulas, so every
// result must be bit-identical to dot -> add -> activation run op by op.
#include "compiler/passes/epilogue_fusion.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "compiler/executable.h"
#include "compiler/pipeline.h"
#include "kiln/kiln.h"
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

const detail::Node* find_op(const Module& m, const std::string& op) {
  for (const auto& n : nodes_of(m.graph))
    if (n.op == op) return &n;
  return nullptr;
}

struct Dense {
  Graph g{"dense"};
  Tensor x, w, b;
  FeedList feeds;
  Dense(int64_t batch, int64_t in, int64_t out, DType t = f32) {
    x = g.placeholder(t, {batch, in}, "x");
    w = g.placeholder(t, {in, out}, "w");
    b = g.placeholder(t, {out}, "b");
    feeds = {{x, random_tensor({batch, in}, 1, t)},
             {w, random_tensor({in, out}, 2, t)},
             {b, random_tensor({out}, 3, t)}};
  }
};

TEST(EpilogueFusionTest, DenseBiasActivationBecomesOneFusedDot) {
  for (const char* act : {"relu", "tanh", "logistic"}) {
    Dense d(37, 50, 70);
    Tensor pre = matmul(d.x, d.w) + d.b;
    Tensor y = std::string(act) == "relu"   ? relu(pre)
               : std::string(act) == "tanh" ? tanh(pre)
                                            : logistic(pre);
    Module m = make_module(d.g, {y});
    EpilogueFusion pass;
    EXPECT_TRUE(pass.run(m));
    EXPECT_EQ(find_op(m, "dot"), nullptr) << ops_of(m);
    const detail::Node* f = find_op(m, "fused_dot");
    ASSERT_NE(f, nullptr) << ops_of(m);
    EXPECT_EQ(f->inputs.size(), 3u);
    EXPECT_EQ(f->attrs.get_string("activation"), act);
    EXPECT_EQ(m.outputs[0].node, static_cast<int>(f - nodes_of(m.graph).data()));
    expect_bitwise_equal(run_module(m, d.feeds), d.g.run(d.feeds, std::vector<Tensor>{y}));
  }
}

// bf16/f16 epilogues round once, not per op: the pass says so (exact() false), and exact
// pipelines (Rewrites::kExact) leave those chains unfused, with a note, and still fuse f32 ones,
// bit-identical to the unfused graph.
TEST(EpilogueFusionTest, ExactPipelinesFuseOnlyWideEpilogues) {
  EXPECT_FALSE(EpilogueFusion().exact());
  EXPECT_TRUE(EpilogueFusion(/*fuse_narrow=*/false).exact());
  for (DType t : {bf16, f16, f32}) {
    SCOPED_TRACE(dtype_name(t));
    Dense d(9, 20, 30, t);
    Tensor y = relu(matmul(d.x, d.w) + d.b);
    Pipeline exact = default_pipeline(Rewrites::kExact);
    CompiledGraph c = optimize(d.g, {y}, exact);
    bool fused = false;
    for (const auto& n : nodes_of(c.graph)) fused |= n.op == "fused_dot";
    EXPECT_EQ(fused, t == f32) << c.graph.to_text();
    expect_bitwise_equal(c.run(d.feeds), d.g.run(d.feeds, std::vector<Tensor>{y}));
    Module m = make_module(d.g, {y});
    EpilogueFusion keep_narrow(/*fuse_narrow=*/false);
    EXPECT_EQ(keep_narrow.run(m), t == f32);
    if (t != f32) EXPECT_THAT(notes_of(keep_narrow), HasSubstr("keeps exact rewrites only"));
    Pipeline all = default_pipeline(Rewrites::kAll);
    CompiledGraph c_all = optimize(d.g, {y}, all);
    fused = false;
    for (const auto& n : nodes_of(c_all.graph)) fused |= n.op == "fused_dot";
    EXPECT_TRUE(fused) << "the default pipeline fuses every floating type";
  }
}

// add(dot_a, dot_b) with one-element outputs: each dot could take the add as its bias-add (a
// one-element addend passes as a bias), but only one may; the other stays its bias.
TEST(EpilogueFusionTest, TwoDotsAddedTogetherFuseOnlyOneEpilogue) {
  Graph g("two_dots");
  Tensor a = g.placeholder(f32, {1, 6}, "a"), b = g.placeholder(f32, {6, 1}, "b");
  Tensor c = g.placeholder(f32, {1, 4}, "c"), d = g.placeholder(f32, {4, 1}, "d");
  Tensor y = logistic(matmul(a, b) + matmul(c, d));
  const FeedList feeds = {{a, random_tensor({1, 6}, 1)},
                          {b, random_tensor({6, 1}, 2)},
                          {c, random_tensor({1, 4}, 3)},
                          {d, random_tensor({4, 1}, 4)}};
  Module m = make_module(g, {y});
  EpilogueFusion pass;
  EXPECT_TRUE(pass.run(m));
  int fused = 0, dots = 0;
  for (const auto& n : nodes_of(m.graph)) {
    fused += n.op == "fused_dot";
    dots += n.op == "dot";
  }
  EXPECT_EQ(fused, 1) << ops_of(m);
  EXPECT_EQ(dots, 1) << ops_of(m);
  EXPECT_THAT(notes_of(pass), HasSubstr("is already the epilogue of another dot"));
  expect_bitwise_equal(run_module(m, feeds), g.run(feeds, std::vector<Tensor>{y}));
}

TEST(EpilogueFusionTest, BiasOnlyActivationOnlyAndF64) {
  {
    Dense d(5, 3, 4, f64);
    Tensor y = matmul(d.x, d.w) + d.b;  // bias only
    Tensor z = tanh(matmul(d.x, d.w));  // activation only
    Module m = make_module(d.g, {y, z});
    EXPECT_TRUE(EpilogueFusion().run(m));
    EXPECT_EQ(ops_of(m), "placeholder placeholder placeholder fused_dot fused_dot") << ops_of(m);
    expect_bitwise_equal(run_module(m, d.feeds), d.g.run(d.feeds, std::vector<Tensor>{y, z}));
  }
  {
    Dense d(8, 6, 1);  // a scalar bias, and a transposed rhs read in place
    Tensor wt = d.g.placeholder(f32, {9, 6}, "wt");
    Tensor y = relu(dot(d.x, wt, {1}, {1}) + d.g.constant(Tensor::scalar<float>(0.25f)));
    Module m = make_module(d.g, {y});
    EXPECT_TRUE(EpilogueFusion().run(m));
    ASSERT_NE(find_op(m, "fused_dot"), nullptr) << ops_of(m);
    FeedList feeds = d.feeds;
    feeds.push_back({wt, random_tensor({9, 6}, 4)});
    expect_bitwise_equal(run_module(m, feeds), d.g.run(feeds, std::vector<Tensor>{y}));
  }
  {
    Graph g{"batched"};  // batch dimensions, bias [1, N]
    Tensor a = g.placeholder(f32, {3, 20, 7}, "a");
    Tensor b = g.placeholder(f32, {3, 7, 11}, "b");
    Tensor bias = g.placeholder(f32, {1, 11}, "bias");
    Tensor y = logistic(matmul(a, b) + bias);
    Module m = make_module(g, {y});
    EXPECT_TRUE(EpilogueFusion().run(m));
    ASSERT_NE(find_op(m, "fused_dot"), nullptr) << ops_of(m);
    FeedList feeds = {{a, random_tensor({3, 20, 7}, 5)},
                      {b, random_tensor({3, 7, 11}, 6)},
                      {bias, random_tensor({1, 11}, 7)}};
    expect_bitwise_equal(run_module(m, feeds), g.run(feeds, std::vector<Tensor>{y}));
  }
}

// The pre-activation is needed elsewhere (as the backward pass needs it): only the bias fuses.
TEST(EpilogueFusionTest, PreActivationUsedElsewhereFusesOnlyTheBias) {
  Dense d(4, 3, 5);
  Tensor pre = matmul(d.x, d.w) + d.b;
  Tensor y = relu(pre);
  Tensor other = pre * pre;
  Module m = make_module(d.g, {y, other});
  EpilogueFusion pass;
  EXPECT_TRUE(pass.run(m));
  const detail::Node* f = find_op(m, "fused_dot");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->attrs.get_string("activation"), "none");
  EXPECT_NE(find_op(m, "select"), nullptr);  // relu stays apart
  EXPECT_THAT(notes_of(pass), HasSubstr("fused only the bias")) << notes_of(pass);
  EXPECT_THAT(notes_of(pass), HasSubstr("is also used elsewhere (4 uses)")) << notes_of(pass);
  expect_bitwise_equal(run_module(m, d.feeds), d.g.run(d.feeds, std::vector<Tensor>{y, other}));
}

// The dot itself is used elsewhere, or the bias depends on the dot (a cycle): nothing fuses.
TEST(EpilogueFusionTest, RefusalsAreNoted) {
  {
    Dense d(4, 3, 5);
    Tensor z = matmul(d.x, d.w);
    Tensor y = relu(z + d.b);
    Module m = make_module(d.g, {y, z});
    EpilogueFusion pass;
    EXPECT_FALSE(pass.run(m));
    EXPECT_THAT(notes_of(pass), HasSubstr("the dot's result is also used elsewhere"));
  }
  {
    Dense d(4, 3, 5);
    Tensor z = matmul(d.x, d.w);
    Tensor y = z + sum(z, {0});  // the "bias" is computed from the dot
    Module m = make_module(d.g, {y});
    EpilogueFusion pass;
    EXPECT_FALSE(pass.run(m));
    EXPECT_THAT(notes_of(pass), HasSubstr("would create a cycle")) << notes_of(pass);
  }
  {
    Dense d(4, 3, 5);
    Tensor y = matmul(d.x, d.w) + d.g.placeholder(f32, {4, 5}, "full");
    Tensor c = matmul(d.x, d.w) + d.g.placeholder(f32, {4, 1}, "column");
    Module m = make_module(d.g, {y, c});
    EpilogueFusion pass;
    EXPECT_FALSE(pass.run(m));
    EXPECT_THAT(notes_of(pass), HasSubstr("is not a broadcast bias"));
    EXPECT_THAT(notes_of(pass), HasSubstr("neither one element, a vector along the last"));
  }
  {
    Graph g{"layout"};  // lhs contracting its middle dimension: a copy would be needed
    Tensor a = g.placeholder(f32, {2, 3, 4}, "a");
    Tensor b = g.placeholder(f32, {3, 5}, "b");
    Tensor bias = g.placeholder(f32, {5}, "bias");
    Tensor y = dot(a, b, {1}, {0}) + bias;
    Module m = make_module(g, {y});
    EpilogueFusion pass;
    EXPECT_FALSE(pass.run(m));
    EXPECT_THAT(notes_of(pass), HasSubstr("is in neither [batch, M, K] nor [batch, K, M] order"));
  }
}

TEST(EpilogueFusionTest, FusedDotOpChecksItsInputs) {
  Tensor a = random_tensor({2, 3}, 1), b = random_tensor({3, 4}, 2);
  auto call = [&](std::vector<Tensor> in, const std::string& act) {
    return call_op("fused_dot", in,
                   {{"lhs_contract", std::vector<int64_t>{1}},
                    {"rhs_contract", std::vector<int64_t>{0}},
                    {"activation", act}});
  };
  try {
    call({a, b, random_tensor({3}, 3)}, "relu");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("fused_dot"));
    EXPECT_THAT(e.what(), HasSubstr("bias f32[3]"));
    EXPECT_THAT(e.what(), HasSubstr("f32[2,4]"));
  }
  EXPECT_THROW(call({a, b}, "gelu"), Error);
  EXPECT_THROW(call({a.to(i32), b.to(i32)}, "none"), Error);
  // Eagerly: equal to dot + bias, then max(., 0).
  Tensor bias = random_tensor({4}, 4);
  std::vector<float> got = call({a, b, bias}, "relu")[0].to_vector<float>();
  std::vector<float> want = relu(matmul(a, b) + bias).to_vector<float>();
  EXPECT_EQ(got, want);
}

// The MLP training step: each Dense layer's dot fuses its bias, and the hidden layer's relu
// too: its gradient's mask (pre-activation <= 0) now reads relu's output, the fused dot's;
// every bit as the interpreter.
TEST(EpilogueFusionTest, MlpTrainingStepFusesBiasesAndRelu) {
  test_models::MlpStep step = test_models::make_mlp_step(64, 128, 10, 16);
  Module m = make_module(step.graph, step.fetches);
  auto selects = [](const Module& m) {
    int k = 0;
    for (const auto& n : nodes_of(m.graph)) k += n.op == "select";
    return k;
  };
  const int selects_before = selects(m);
  EpilogueFusion pass;
  EXPECT_TRUE(pass.run(m));
  EXPECT_EQ(selects(m), selects_before - 1);  // relu's own; its gradient's select stays
  int fused = 0, relu = 0;
  for (const auto& n : nodes_of(m.graph)) {
    fused += n.op == "fused_dot";
    relu += n.op == "fused_dot" && n.attrs.get_string("activation") == "relu";
  }
  EXPECT_EQ(fused, 2) << ops_of(m);
  EXPECT_EQ(relu, 1) << ops_of(m);
  const detail::Node* mask = find_op(m, "le");
  ASSERT_NE(mask, nullptr) << ops_of(m);
  EXPECT_EQ(nodes_of(m.graph)[mask->inputs[0].node].op, "fused_dot");
  expect_bitwise_equal(run_module(m, step.feeds), step.graph.run(step.feeds, step.fetches));

  CompiledGraph c = optimize(step.graph, step.fetches);  // in the default pipeline
  int in_default = 0;
  for (const auto& n : nodes_of(c.graph)) in_default += n.op == "fused_dot";
  EXPECT_EQ(in_default, 2);
}

// A convolution layer's training step: the gradients of tanh and relu read the activation's
// output, so the whole chain fuses. The backward convolutions are left alone; every bit as the
// interpreter.
TEST(EpilogueFusionTest, ConvTrainingStepFusesLayersWhole) {
  for (const char* act : {"relu", "tanh"}) {
    SCOPED_TRACE(act);
    Graph g{"conv_step"};
    Tensor x = g.placeholder(f32, {8, 10, 10, 3}, "x");
    Tensor w = g.placeholder(f32, {3, 3, 3, 6}, "w");
    Tensor b = g.placeholder(f32, {6}, "b");
    Tensor pre = conv2d(x, w, {1, 1}, "same") + b;
    const bool is_relu = std::string(act) == "relu";
    Tensor h = is_relu ? relu(pre) : tanh(pre);
    Tensor loss = mean(h * h);
    std::vector<Tensor> grads = gradients(loss, {w, b});
    std::vector<Tensor> fetches = {loss, grads[0], grads[1]};
    FeedList feeds = {{x, random_tensor({8, 10, 10, 3}, 1)},
                      {w, random_tensor({3, 3, 3, 6}, 2)},
                      {b, random_tensor({6}, 3)}};
    Module m = make_module(g, fetches);
    EpilogueFusion pass;
    EXPECT_TRUE(pass.run(m)) << notes_of(pass);
    EXPECT_NE(find_op(m, "convolution_kernel_grad"), nullptr) << ops_of(m);
    const detail::Node* f = find_op(m, "fused_conv");
    ASSERT_NE(f, nullptr) << ops_of(m);
    EXPECT_EQ(f->attrs.get_string("activation"), act);
    if (is_relu) {
      const detail::Node* mask = find_op(m, "le");
      ASSERT_NE(mask, nullptr) << ops_of(m);
      EXPECT_EQ(nodes_of(m.graph)[mask->inputs[0].node].op, "fused_conv");
    }
    EXPECT_EQ(find_op(m, "convolution"), nullptr) << ops_of(m);
    expect_bitwise_equal(run_module(m, feeds), g.run(feeds, fetches));
  }
}

// KILN_DUMP: the pass's log after the simplification fixed point says what it fused and why it
// declined.
TEST(EpilogueFusionTest, DumpLogsTheRefusals) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kiln_epilogue_fusion_" + std::to_string(getpid()));
  fs::remove_all(dir);
  Dense d(4, 3, 5);
  Tensor pre = matmul(d.x, d.w) + d.b;
  Tensor y = tanh(pre);
  Pipeline p = default_pipeline();
  p.set_dump_dir(dir.string());
  CompiledGraph c = optimize(d.g, {y, pre}, p);
  std::string log;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.find("epilogue_fusion") == std::string::npos || !name.ends_with(".log")) continue;
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    log = ss.str();
  }
  fs::remove_all(dir);
  EXPECT_THAT(log, HasSubstr("epilogue_fusion: changed")) << log;
  EXPECT_THAT(log, HasSubstr("fused only the bias")) << log;
  expect_bitwise_equal(c.run(d.feeds), d.g.run(d.feeds, std::vector<Tensor>{y, pre}));
}

// Compiled: a fused_dot runs as a kernel thunk among fused loops.
TEST(EpilogueFusionTest, CompiledMlpForwardUsesFusedDot) {
  Dense d(64, 32, 16);
  Tensor w2 = d.g.placeholder(f32, {16, 10}, "w2");
  Tensor b2 = d.g.placeholder(f32, {10}, "b2");
  Tensor y = softmax(matmul(relu(matmul(d.x, d.w) + d.b), w2) + b2, -1);
  FeedList feeds = d.feeds;
  feeds.push_back({w2, random_tensor({16, 10}, 8)});
  feeds.push_back({b2, random_tensor({10}, 9)});
  Executable e = compile(d.g, {y}, feeds);
  std::string thunks;
  for (const std::string& t : e.thunk_descriptions()) thunks += t + "\n";
  EXPECT_THAT(thunks, HasSubstr("kernel fused_dot")) << thunks;
  std::vector<float> got = e.run(feeds)[0].to_vector<float>();
  std::vector<float> want = d.g.run(feeds, std::vector<Tensor>{y})[0].to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  // Softmax in fused loops: exp approximated (2e-6) and sums in f32.
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i] + 1e-7);
}

}  // namespace
}  // namespace kiln::compiler
