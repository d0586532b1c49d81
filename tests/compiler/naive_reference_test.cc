// The kernel ops of random graphs against naive f64 references (tests/compiler/naive_reference.h):
// the compiled-vs-interpreted tests run the same registered kernel on both sides for these ops,
// so here each kernel-op node of a random graph, of its gradient graph and of its optimized form
// (fused_dot, fused_conv) is recomputed from its inputs by direct loops and compared within a
// bound on f32 rounding that grows with the number of terms summed.
#include "tests/compiler/naive_reference.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "compiler/pipeline.h"
#include "tests/compiler/random_graph.h"

namespace kiln::compiler {
namespace {

using testing::GraphSpec;
using testing::Reference;

std::string types_of(const std::vector<Tensor>& ts) {
  std::string s;
  for (const Tensor& t : ts) s += (s.empty() ? "" : ", ") + TensorType{t.dtype(), t.shape()}.str();
  return s;
}

// Runs `graph` with the interpreter, fetching every value, and compares each node that has a
// naive reference with it; a kernel op without one is a failure too. Counts the nodes checked
// per op in *checked. Returns "" when all match.
std::string check_kernel_nodes(const Graph& graph, const FeedList& feeds,
                               std::map<std::string, int>* checked) {
  std::vector<Tensor> fetches;
  std::vector<int> first_output;  // per node, its first output's position in fetches
  for (int id = 0; id < graph.num_nodes(); ++id) {
    first_output.push_back(static_cast<int>(fetches.size()));
    for (size_t k = 0; k < graph.node(id).outputs.size(); ++k)
      fetches.push_back(graph.value(id, static_cast<int>(k)));
  }
  const std::vector<Tensor> values = graph.run(feeds, fetches);
  const auto& refs = testing::naive_references();
  std::string failure;
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const NodeInfo node = graph.node(id);
    auto ref = refs.find(node.op);
    if (ref == refs.end()) {
      if (OpRegistry::global().find(node.op).kind == OpKind::kKernel)
        failure += "no naive reference for the kernel op " + node.op + " (" + node.name + ")\n";
      continue;
    }
    std::vector<Tensor> inputs;
    for (const ValueRef& in : node.inputs)
      inputs.push_back(values[first_output[in.node] + in.output]);
    const Reference want = ref->second(inputs, node.attrs);
    const std::string why = testing::within_rounding(
        values[first_output[id] + testing::referenced_output(node.op, node.attrs)], want);
    ++(*checked)[node.op];
    if (!why.empty())
      failure += node.name + " = " + node.op + "(" + types_of(inputs) + ") {" + node.attrs.str() +
                 "}: " + why + "\n";
  }
  return failure;
}

// Checks the graph of `spec`, its gradient graph and the optimized form of both. A graph that
// optimize() cannot compile is counted in *unoptimized and left to the compiled random tests
// (tests/compiler/compiled_random_test.cc), which report it.
std::string check_spec(const GraphSpec& spec, std::map<std::string, int>* checked,
                       int* unoptimized) {
  std::string failure;
  auto check_graph = [&](const testing::BuiltGraph& b, const char* what) {
    std::string why = check_kernel_nodes(b.graph, b.feeds, checked);
    if (!why.empty()) failure += std::string(what) + ":\n" + why;
    CompiledGraph c;
    try {
      c = optimize(b.graph, b.outputs);
    } catch (const Error&) {
      ++*unoptimized;
      return;
    }
    why = check_kernel_nodes(c.graph, c.map_feeds(b.feeds), checked);
    if (!why.empty()) failure += std::string(what) + ", optimized:\n" + why;
  };
  testing::BuiltGraph b = testing::build(spec);
  check_graph(b, "the graph");
  if (testing::differentiate(&b, spec.seed, spec.seed % 3 ? 1 : 2)) check_graph(b, "its gradients");
  return failure;
}

// check_spec's failures, or what it throws.
std::string failure_of(const GraphSpec& spec, std::map<std::string, int>* checked,
                       int* unoptimized) {
  try {
    return check_spec(spec, checked, unoptimized);
  } catch (const Error& e) {
    return std::string("throws: ") + e.what() + "\n";
  }
}

TEST(NaiveReference, KernelOpsOfRandomGraphsAndTheirGradientsMatchIt) {
  auto t0 = std::chrono::steady_clock::now();
  testing::GeneratorOptions opt;
  opt.kernel_ops = true;
  std::map<std::string, int> checked;
  int failures = 0, unoptimized = 0;
  for (uint32_t seed = 0; seed < 1000 && failures < 3; ++seed) {
    GraphSpec spec = testing::generate(seed, opt);
    const std::string why = failure_of(spec, &checked, &unoptimized);
    if (why.empty()) continue;
    ++failures;
    std::map<std::string, int> ignored;
    int also_ignored = 0;
    auto fails = [&](const GraphSpec& c) {
      return !failure_of(c, &ignored, &also_ignored).empty();
    };
    GraphSpec small = testing::shrink(spec, fails);
    ADD_FAILURE() << "seed " << seed << ": " << why << "shrunk to:\n"
                  << small.str() << testing::build(small).graph.to_text() << "\nwhere "
                  << failure_of(small, &ignored, &also_ignored);
  }
  // The gradient graphs above keep only the gradients, so no forward pool survives them to fuse
  // with its gradient: a training step of a network's first convolution (its loss and the
  // gradients of its kernel and bias; the compiler's conv_pool_kernel_grad pattern) does.
  {
    Graph g{"first_conv_step"};
    Tensor x = g.placeholder(f32, {3, 9, 8, 2}, "x"), w = g.placeholder(f32, {3, 3, 2, 4}, "w");
    Tensor b = g.placeholder(f32, {4}, "b");
    Tensor p = max_pool2d(relu(conv2d(x, w) + b), {2, 2});
    Tensor r = g.placeholder(f32, p.shape(), "r");
    Tensor loss = sum(p * r);
    std::vector<Tensor> outputs = gradients(loss, {w, b});
    outputs.push_back(loss);
    const FeedList feeds = {{x, random_normal({3, 9, 8, 2}, 1)},
                            {w, random_normal({3, 3, 2, 4}, 2)},
                            {b, random_normal({4}, 3)},
                            {r, random_normal(p.shape(), 4)}};
    const CompiledGraph c = optimize(g, outputs);
    EXPECT_EQ(check_kernel_nodes(c.graph, c.map_feeds(feeds), &checked), "");
  }
  // Every reference met its op, and every kernel op Kiln registers (ops/, compiler/) has one.
  std::string counts;
  for (const auto& [op, fn] : testing::naive_references()) {
    EXPECT_GT(checked[op], 0) << "no random graph produced " << op;
    counts += " " + op + " " + std::to_string(checked[op]);
  }
  for (const std::string& op : OpRegistry::global().names()) {
    OpDef def;
    try {
      def = OpRegistry::global().find(op);
    } catch (const Error&) {  // a registration that failed (tests/core/errors_test.cc makes one)
      continue;
    }
    const bool kiln_op = def.source.find("/tests/") == std::string::npos &&
                         (def.source.find("/ops/") != std::string::npos ||
                          def.source.find("/compiler/") != std::string::npos);
    // The control-flow ops compute nothing themselves: their reference is their sub-graphs run
    // by the interpreter, against which tests/compiler/random_control_flow_test.cc checks
    // random bodies compiled.
    const bool control_flow = op == "cond" || op == "while" || op == "scan";
    if (def.kind == OpKind::kKernel && kiln_op && !control_flow)
      EXPECT_TRUE(testing::naive_references().count(op)) << op << " (" << def.source << ")";
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ naive reference ] nodes checked:%s; %d graphs optimize() rejects; %.1f s\n",
              counts.c_str(), unoptimized, s);
}

// The references themselves, on cases small enough to work out by hand.
std::vector<double> naive(const std::string& op, const std::vector<Tensor>& inputs,
                          const Attrs& attrs) {
  return testing::naive_references().at(op)(inputs, attrs).value;
}

Tensor f32s(std::vector<float> v, Shape shape) { return Tensor::from_vector(v, std::move(shape)); }

TEST(NaiveReference, AgreesWithHandWorkedCases) {
  // [[1, 2], [3, 4]] x [5, 6] = [17, 39]
  EXPECT_EQ(naive("dot", {f32s({1, 2, 3, 4}, {2, 2}), f32s({5, 6}, {2})},
                  {{"lhs_contract", Axes{1}}, {"rhs_contract", Axes{0}}}),
            (std::vector<double>{17, 39}));
  // 1-d, stride 2, padding 1 low: windows over [0, 1, 2, 3, 4] at -1, 1, 3 with taps {1, 10}
  Tensor x = f32s({1, 2, 3, 4, 5}, {1, 5, 1}), k = f32s({1, 10}, {2, 1, 1});
  Attrs conv{{"strides", Axes{2}}, {"padding_low", Axes{1}}, {"padding_high", Axes{0}}};
  EXPECT_EQ(naive("convolution", {x, k}, conv), (std::vector<double>{10, 32, 54}));
  // Kernel dilation 2 and an input dilated by 2 ([1, _, 2, _, 3]): taps 2 apart, holes skipped.
  Attrs dilated{{"dilation", Axes{2}}, {"lhs_dilation", Axes{2}}};
  EXPECT_EQ(naive("convolution", {f32s({1, 2, 3}, {1, 3, 1}), k}, dilated),
            (std::vector<double>{21, 0, 32}));
  // Two groups of one channel: each output channel sees its own input channel.
  EXPECT_EQ(naive("convolution", {f32s({1, 2}, {1, 1, 2}), f32s({3, 4}, {1, 1, 2})},
                  {{"groups", int64_t{2}}}),
            (std::vector<double>{3, 8}));
  // The gradients of the strided convolution above for dy = [1, 1, 1].
  Tensor dy = f32s({1, 1, 1}, {1, 3, 1});
  EXPECT_EQ(naive("convolution_input_grad", {dy, k},
                  {{"strides", Axes{2}}, {"padding_low", Axes{1}}, {"input_spatial", Axes{5}}}),
            (std::vector<double>{10, 1, 10, 1, 10}));
  EXPECT_EQ(naive("convolution_kernel_grad", {x, dy},
                  {{"strides", Axes{2}}, {"padding_low", Axes{1}}, {"kernel_spatial", Axes{2}}}),
            (std::vector<double>{6, 9}));
  // Windows of 2, stride 1, padding 1 high over [3, NaN, 1, 5, 5]: the first NaN and the first
  // of equal maxima win.
  Tensor w = f32s({3, NAN, 1, 5, 5}, {5});
  Attrs win{{"window", Axes{2}}, {"padding_high", Axes{1}}};
  std::vector<double> max = naive("reduce_window_max", {w}, win);
  ASSERT_EQ(max.size(), 5u);
  EXPECT_TRUE(std::isnan(max[0]) && std::isnan(max[1]));
  EXPECT_EQ(std::vector<double>(max.begin() + 2, max.end()), (std::vector<double>{5, 5, 5}));
  EXPECT_EQ(naive("reduce_window_max_grad", {w, f32s({1, 2, 4, 8, 16}, {5})}, win),
            (std::vector<double>{0, 3, 0, 12, 16}));
  EXPECT_EQ(naive("reduce_window_max_select", {w, f32s({1, 2, 3, 4, 5}, {5})}, win),
            (std::vector<double>{2, 2, 4, 4, 5}));
  Attrs sum_grad = win;
  sum_grad.set("operand_shape", Axes{5});
  EXPECT_EQ(naive("reduce_window_sum_grad", {f32s({1, 2, 4, 8, 16}, {5})}, sum_grad),
            (std::vector<double>{1, 3, 6, 12, 24}));
  // Along axis 1 of [[1, 2, 3], [4, 5, 6]]: take [2, 0, 2]; scatter-add [1, 1, 1] there.
  Tensor m = f32s({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor idx = Tensor::from_vector(std::vector<int32_t>{2, 0, 2}, {3});
  EXPECT_EQ(naive("gather", {m, idx}, {{"axis", int64_t{1}}}),
            (std::vector<double>{3, 1, 3, 6, 4, 6}));
  EXPECT_EQ(
      naive("scatter_add", {m, idx, f32s({1, 1, 1, 1, 1, 1}, {2, 3})}, {{"axis", int64_t{-1}}}),
      (std::vector<double>{2, 2, 5, 5, 5, 8}));
  // fused_dot: [17, 39] + bias [-20] then relu.
  EXPECT_EQ(naive("fused_dot", {f32s({1, 2, 3, 4}, {2, 2}), f32s({5, 6}, {2, 1}), f32s({-20}, {1})},
                  {{"lhs_contract", Axes{1}},
                   {"rhs_contract", Axes{0}},
                   {"activation", std::string("relu")}}),
            (std::vector<double>{0, 19}));
}

// The tolerance: a sum of n f32 terms may be off by about n ulp of sum|term|, not more.
TEST(NaiveReference, ToleratesRoundingButNotMore) {
  Reference r({1});
  for (int i = 0; i < 10; ++i) r.add(0, 0.1);
  EXPECT_EQ(testing::within_rounding(f32s({1.0f + 1e-6f}, {1}), r), "");
  EXPECT_NE(testing::within_rounding(f32s({1.0f + 1e-5f}, {1}), r), "");
  EXPECT_NE(testing::within_rounding(f32s({INFINITY}, {1}), r), "");
  EXPECT_NE(testing::within_rounding(f32s({1, 1}, {2}), r), "");  // shape
  Reference exact({1}, 3);  // a gathered value: no terms, so no slack
  EXPECT_NE(testing::within_rounding(f32s({std::nextafter(3.0f, 4.0f)}, {1}), exact), "");
}

}  // namespace
}  // namespace kiln::compiler
