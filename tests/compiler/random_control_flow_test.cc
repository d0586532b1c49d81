// Random control flow: the random graphs of random_graph.h as the bodies of scan and while
// loops and as a branch of cond, run by the interpreter (sub-graphs interpreted) and compiled
// (sub-graphs compiled with their own passes and fusion; scans unrolled, fully or by a factor),
// outputs and gradients compared.
#include <gtest/gtest.h>

#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "tests/compiler/random_graph.h"

namespace kiln::compiler {
namespace {

using testing::BuiltGraph;
using testing::Tolerance;

enum class Kind { kScan, kWhile, kCond };
constexpr int kLength = 3;  // scan steps and while iterations

// The random graph's feed that carries (the first f32 one), or -1.
int carried_feed(const BuiltGraph& body) {
  for (size_t i = 0; i < body.feeds.size(); ++i)
    if (body.feeds[i].first.dtype() == f32) return static_cast<int>(i);
  return -1;
}

// A bounded update of the carry from the body's floating-point outputs.
Tensor next_carry(const BuiltGraph& body, const Tensor& carry) {
  Tensor s = scalar_like(0, carry);
  for (const Tensor& o : body.outputs)
    if (is_floating(o.dtype())) s = s + sum(tanh(convert(o, f32))) * 0.1;
  return tanh(carry * 0.5 + s);
}

// The outer graph: one control-flow node over the random body, fed random values.
BuiltGraph wrap(BuiltGraph body, Kind kind, uint32_t seed) {
  BuiltGraph out;
  out.graph = Graph("random_control_flow");
  const int c = carried_feed(body);
  auto sub = std::make_shared<SubGraph>();
  sub->graph = body.graph;
  Attrs attrs;
  std::vector<Tensor> inputs;
  auto feed = [&](DType dtype, const Shape& shape, const Tensor& value) {
    Tensor p = out.graph.placeholder(dtype, shape, "f" + std::to_string(out.feeds.size()));
    out.feeds.push_back({p, value});
    out.feed_names.push_back(p.graph().node(p.impl()->node).name);
    inputs.push_back(p);
  };
  auto others = [&](bool stacked) {
    for (size_t i = 0; i < body.feeds.size(); ++i) {
      if (static_cast<int>(i) == c) continue;
      const Tensor& p = body.feeds[i].first;
      sub->params.push_back(p);
      Shape shape = p.shape();
      if (stacked) shape.insert(shape.begin(), kLength);
      feed(p.dtype(), shape,
           stacked ? testing::random_graph_detail::random_value(p.dtype(), shape, seed + i)
                   : body.feeds[i].second);
    }
  };
  const Tensor carry = body.feeds[c].first;
  if (kind == Kind::kScan) {
    sub->params.push_back(carry);
    feed(f32, carry.shape(), body.feeds[c].second);
    others(/*stacked=*/true);
    {
      auto guard = body.graph.as_default();
      sub->results = {next_carry(body, carry)};
    }
    for (const Tensor& o : body.outputs) sub->results.push_back(o);
    attrs.set("body", std::shared_ptr<const SubGraph>(sub));
    attrs.set("num_carry", int64_t{1});
    attrs.set("num_xs", static_cast<int64_t>(body.feeds.size() - 1));
    attrs.set("length", int64_t{kLength});
    attrs.set("reverse", seed % 2 == 0);
    // Every third scan unrolled by 2 (one iteration of two steps, one step inlined); the others
    // run as a loop or, when their body is small, are unrolled fully (compiler/passes/unroll.h).
    attrs.set("unroll", int64_t{seed % 3 == 0 ? 2 : 1});
    out.outputs = call_op("scan", inputs, attrs);
  } else if (kind == Kind::kWhile) {
    Tensor counter = body.graph.placeholder(i64, {}, "counter");
    sub->params = {counter, carry};
    feed(i64, {}, Tensor::scalar<int64_t>(0));
    feed(f32, carry.shape(), body.feeds[c].second);
    others(/*stacked=*/false);
    auto cond_sub = std::make_shared<SubGraph>();
    cond_sub->graph = Graph("cond");
    for (const Tensor& p : sub->params)
      cond_sub->params.push_back(cond_sub->graph.placeholder(p.dtype(), p.shape()));
    {
      auto guard = cond_sub->graph.as_default();
      cond_sub->results = {less(cond_sub->params[0], Tensor::scalar<int64_t>(kLength))};
      auto body_guard = body.graph.as_default();
      sub->results = {counter + 1.0, next_carry(body, carry)};
    }
    attrs.set("cond", std::shared_ptr<const SubGraph>(cond_sub));
    attrs.set("body", std::shared_ptr<const SubGraph>(sub));
    attrs.set("num_vars", int64_t{2});
    attrs.set("max_iterations", int64_t{kLength + 1});
    out.outputs = call_op("while", inputs, attrs);
  } else {
    feed(bool_, {}, Tensor::scalar(seed % 2 == 0));
    sub->params.push_back(carry);
    feed(f32, carry.shape(), body.feeds[c].second);
    others(/*stacked=*/false);
    sub->results = body.outputs;
    auto zeros_sub = std::make_shared<SubGraph>();
    zeros_sub->graph = Graph("zeros");
    for (const Tensor& p : sub->params)
      zeros_sub->params.push_back(zeros_sub->graph.placeholder(p.dtype(), p.shape()));
    for (const Tensor& r : sub->results)
      zeros_sub->results.push_back(zeros_sub->graph.constant(zeros(r.shape(), r.dtype())));
    attrs.set("then_branch", std::shared_ptr<const SubGraph>(sub));
    attrs.set("else_branch", std::shared_ptr<const SubGraph>(zeros_sub));
    out.outputs = call_op("cond", inputs, attrs);
  }
  return out;
}

std::string failure_of(BuiltGraph b, bool gradients, uint32_t seed) {
  if (gradients && !testing::differentiate(&b, seed)) return "";
  std::vector<Tensor> want = b.graph.run(b.feeds, b.outputs);
  std::vector<Tensor> got = compile(b.graph, b.outputs, b.feeds).run(b.feeds);
  for (size_t i = 0; i < want.size(); ++i) {
    // f32 bodies: the JIT's approximations (compiled_random_test.cc's tolerance), over steps.
    Tolerance tol = is_floating(want[i].dtype()) ? Tolerance{1e-3, 1e-4} : Tolerance{};
    std::string why = testing::mismatch(got[i], want[i], tol);
    if (!why.empty()) return "output " + std::to_string(i) + ": " + why;
  }
  return "";
}

TEST(RandomControlFlow, CompiledBodiesMatchTheInterpreter) {
  int checked = 0;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    testing::GraphSpec spec = testing::generate(seed);
    for (Kind kind : {Kind::kScan, Kind::kWhile, Kind::kCond}) {
      BuiltGraph body = testing::build(spec);
      if (carried_feed(body) < 0) continue;
      BuiltGraph outer = wrap(body, kind, seed);
      for (bool gradients : {false, true}) {
        std::string why = failure_of(outer, gradients, seed);
        EXPECT_EQ(why, "") << "seed " << seed << ", " << (gradients ? "gradients of " : "")
                           << (kind == Kind::kScan    ? "scan"
                               : kind == Kind::kWhile ? "while"
                                                      : "cond")
                           << "\n"
                           << spec.str() << outer.graph.to_text();
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace kiln::compiler
