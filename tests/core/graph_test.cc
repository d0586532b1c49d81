// Graph recording and the reference interpreter: scoped unique names, dumps, placeholders
// with unknown dimensions, default graphs, node inspection, and running only what is needed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "kiln/kiln.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

std::vector<float> floats(const Tensor& t) {
  auto d = t.data<float>();
  return {d.begin(), d.end()};
}

TEST(Graph, NodesGetUniqueScopedNames) {
  Graph g("g");
  Tensor x = g.placeholder(f32, {2}, "x");
  {
    auto dense = g.name_scope("dense");
    add(x, x);
    add(x, x);
    {
      auto inner = g.name_scope("inner");
      mul(x, x);
    }
    exp(x);
  }
  add(x, x);
  Tensor x2 = g.placeholder(f32, {2}, "x");

  EXPECT_EQ(g.num_nodes(), 7);
  EXPECT_EQ(g.node(1).name, "dense/add");
  EXPECT_EQ(g.node(2).name, "dense/add_1");
  EXPECT_EQ(g.node(3).name, "dense/inner/mul");
  EXPECT_EQ(g.node(4).name, "dense/exp");
  EXPECT_EQ(g.node(5).name, "add");
  EXPECT_EQ(g.node(6).name, "x_1");
  EXPECT_EQ(x2.name(), "x_1:0");
}

TEST(Graph, ScopeNamesMustBeSimple) {
  Graph g("g");
  EXPECT_THROW(g.name_scope(""), Error);
  EXPECT_THROW(g.name_scope("a/b"), Error);
}

TEST(Graph, ToTextListsEveryNodeWithInputsAttrsAndTypes) {
  Graph g("tiny");
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  {
    auto scope = g.name_scope("act");
    exp(x);
  }
  EXPECT_EQ(g.to_text(),
            "graph tiny {\n"
            "  %0 = x = placeholder() {dtype=f32, shape=[-1,3]} -> f32[?,3]\n"
            "  %1 = act/exp = exp(%0) -> f32[?,3]\n"
            "}\n");
}

TEST(Graph, ToTextShowsConstantValuesAndAttrs) {
  Graph g("c");
  Tensor x = g.placeholder(i32, {2}, "x");
  Tensor y = convert(x + Tensor::from_list<int32_t>({5, 6}), f64);
  (void)y;
  std::string text = g.to_text();
  EXPECT_THAT(text, HasSubstr("%1 = constant = constant() {value=[5, 6]} -> i32[2]"));
  EXPECT_THAT(text, HasSubstr("%2 = add = add(%0, %1) -> i32[2]"));
  EXPECT_THAT(text, HasSubstr("%3 = convert = convert(%2) {dtype=f64} -> f64[2]"));
}

TEST(Graph, ToDotHasANodePerOpAndTypedEdges) {
  Graph g("tiny");
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  exp(x);
  std::string dot = g.to_dot();
  EXPECT_THAT(dot, HasSubstr("digraph \"tiny\" {"));
  // Lines of a label are separated by \n, which Graphviz shows as a line break.
  EXPECT_THAT(dot, HasSubstr("n0 [label=\"x\\nplaceholder\\nf32[?,3]\"];"));
  EXPECT_THAT(dot, HasSubstr("n1 [label=\"exp\\nexp\\nf32[?,3]\"];"));
  EXPECT_THAT(dot, HasSubstr("n0 -> n1 [label=\"f32[?,3]\"];"));
  EXPECT_EQ(dot.back(), '\n');
}

TEST(Graph, UnknownDimsRunWithDifferentBatchSizes) {
  Graph g("g");
  Tensor x = g.placeholder(f32, {kUnknownDim, 2}, "x");
  Tensor b = Tensor::from_list<float>({10, 20});
  Tensor y = x * 2.0 + b;
  EXPECT_EQ(y.shape(), (Shape{kUnknownDim, 2}));

  Tensor one = g.run({{x, Tensor::from_list<float>({1, 2}, {1, 2})}}, y);
  EXPECT_EQ(one.shape(), (Shape{1, 2}));
  EXPECT_EQ(floats(one), (std::vector<float>{12, 24}));

  Tensor three = g.run({{x, Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {3, 2})}}, y);
  EXPECT_EQ(three.shape(), (Shape{3, 2}));
  EXPECT_EQ(floats(three), (std::vector<float>{12, 24, 16, 28, 20, 32}));

  Tensor empty = g.run({{x, Tensor::empty(f32, {0, 2})}}, y);
  EXPECT_EQ(empty.shape(), (Shape{0, 2}));
}

TEST(Graph, RunFetchesSeveralValuesAndPlaceholdersThemselves) {
  Graph g("g");
  Tensor x = g.placeholder(i32, {3}, "x");
  Tensor y = x * x;
  Tensor z = y - x;
  Tensor in = Tensor::from_list<int32_t>({1, 2, 3});
  std::vector<Tensor> out = g.run({{x, in}}, {z, y, x});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].to_vector<int32_t>(), (std::vector<int32_t>{0, 2, 6}));
  EXPECT_EQ(out[1].to_vector<int32_t>(), (std::vector<int32_t>{1, 4, 9}));
  EXPECT_EQ(out[2].to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(out[0].is_symbolic());
}

TEST(Graph, RunningTwiceGivesTheSameResultAndLeavesFeedsUntouched) {
  Graph g("g");
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor y = exp(x) - exp(x);
  Tensor in = Tensor::from_list<float>({0.5f, -1});
  EXPECT_EQ(floats(g.run({{x, in}}, y)), (std::vector<float>{0, 0}));
  EXPECT_EQ(floats(g.run({{x, in}}, y)), (std::vector<float>{0, 0}));
  EXPECT_EQ(floats(in), (std::vector<float>{0.5f, -1}));
}

TEST(Graph, AsDefaultRecordsOpsOnConcreteTensorsAndCapturesThemAsConstants) {
  Graph g("g");
  Tensor a = Tensor::from_list<float>({1, 2, 3});
  Tensor y;
  {
    auto guard = g.as_default();
    y = a * a + a;
  }
  EXPECT_TRUE(y.is_symbolic());
  EXPECT_EQ(y.graph(), g);
  EXPECT_EQ(g.node(0).op, "constant");
  EXPECT_EQ(g.run({}, y).to_vector<float>(), (std::vector<float>{2, 6, 12}));

  // The guard is gone: ops compute eagerly again.
  Tensor eager = a + a;
  EXPECT_FALSE(eager.is_symbolic());
  EXPECT_EQ(floats(eager), (std::vector<float>{2, 4, 6}));
}

TEST(Graph, AsDefaultNestsAndIsPerThread) {
  Graph outer("outer"), inner("inner");
  Tensor a = Tensor::scalar(1.0f);
  auto g1 = outer.as_default();
  {
    auto g2 = inner.as_default();
    EXPECT_EQ(neg(a).graph(), inner);
    bool other_thread_eager = false;
    std::thread t([&] { other_thread_eager = !neg(a).is_symbolic(); });
    t.join();
    EXPECT_TRUE(other_thread_eager);
  }
  EXPECT_EQ(neg(a).graph(), outer);
}

TEST(Graph, NodeInspection) {
  Graph g("g");
  Tensor x = g.placeholder(f32, {kUnknownDim, 4}, "x");
  Tensor y;
  {
    auto scope = g.name_scope("dense");
    y = add(x, x);
  }
  NodeInfo add_node = g.node("dense/add");
  EXPECT_EQ(add_node.id, 1);
  EXPECT_EQ(add_node.op, "add");
  EXPECT_EQ(add_node.inputs, (std::vector<ValueRef>{{0, 0}, {0, 0}}));
  EXPECT_EQ(add_node.outputs, (std::vector<TensorType>{{f32, {kUnknownDim, 4}}}));
  EXPECT_EQ(y.name(), "dense/add:0");

  NodeInfo placeholder = g.node(0);
  EXPECT_EQ(placeholder.op, "placeholder");
  EXPECT_EQ(placeholder.attrs.get_dtype("dtype"), f32);
  EXPECT_EQ(placeholder.attrs.get_ints("shape"), (std::vector<int64_t>{kUnknownDim, 4}));

  Tensor again = g.value(1);
  EXPECT_TRUE(again.is_symbolic());
  EXPECT_EQ(again.name(), "dense/add:0");
  EXPECT_EQ(again.shape(), (Shape{kUnknownDim, 4}));

  try {
    g.node("dense/mul");
    ADD_FAILURE() << "expected kNotFound";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_THAT(e.what(), HasSubstr("'dense/mul'"));
  }
  try {
    g.node(7);
    ADD_FAILURE() << "expected kOutOfRange";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
  }
  EXPECT_THROW(g.value(1, 1), Error);
}

TEST(Graph, PlaceholderRejectsInvalidDims) {
  Graph g("g");
  EXPECT_THROW(g.placeholder(f32, {2, -2}, "x"), Error);
  EXPECT_THROW(g.constant(g.placeholder(f32, {2}, "p")), Error);
}

TEST(Graph, ZeroSizedAndScalarPlaceholders) {
  Graph g("g");
  Tensor s = g.placeholder(f64, {}, "s");
  Tensor e = g.placeholder(f64, {0, 3}, "e");
  Tensor y = e * s;
  EXPECT_EQ(y.shape(), (Shape{0, 3}));
  Tensor out = g.run({{s, Tensor::scalar(2.0)}, {e, Tensor::empty(f64, {0, 3})}}, y);
  EXPECT_EQ(out.shape(), (Shape{0, 3}));
  EXPECT_EQ(g.run({{s, Tensor::scalar(2.0)}}, s * s).item<double>(), 4.0);
}

// An op whose kernel counts its runs, to see what the interpreter executes.
std::atomic<int> counted_runs{0};
KILN_REGISTER_OP(graph_test_counted).input("x").shape_fn([](const InferContext& ctx) {
  return std::vector<TensorType>{ctx.input(0)};
});
KILN_REGISTER_KERNEL(graph_test_counted).fn([](KernelContext& ctx) {
  ++counted_runs;
  ctx.set_output(0, ctx.input(0));
});

TEST(Graph, InterpreterRunsOnlyWhatTheFetchesNeed) {
  Graph g("g");
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor unfed = g.placeholder(f32, {2}, "unfed");
  Tensor counted = call_op("graph_test_counted", {x})[0];
  Tensor needs_unfed = exp(unfed) + counted;  // would fail: `unfed` has no value
  Tensor wanted = x + x;
  (void)needs_unfed;

  counted_runs = 0;
  Tensor out = g.run({{x, Tensor::from_list<float>({1, 2})}}, wanted);
  EXPECT_EQ(floats(out), (std::vector<float>{2, 4}));
  EXPECT_EQ(counted_runs, 0);

  // A value used twice is computed once.
  Tensor twice = counted * counted;
  out = g.run({{x, Tensor::from_list<float>({1, 2})}}, twice);
  EXPECT_EQ(floats(out), (std::vector<float>{1, 4}));
  EXPECT_EQ(counted_runs, 1);
}

TEST(Graph, GraphsCompareByIdentityAndTensorsKnowTheirGraph) {
  Graph a("same"), b("same");
  Tensor x = a.placeholder(f32, {1}, "x");
  EXPECT_EQ(x.graph(), a);
  EXPECT_FALSE(x.graph() == b);
  EXPECT_EQ(a.name(), "same");
  EXPECT_THROW(Tensor::scalar(1.0f).graph(), Error);
}

}  // namespace
}  // namespace kiln
