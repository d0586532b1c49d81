// The unroll_loops pass: scans unrolled fully (small ones, or unroll >= length) or by their
// unroll factor, bit for bit the same values as the loop; what it leaves alone, and why.
#include "compiler/passes/unroll.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "compiler/executable.h"
#include "compiler/passes/dce.h"
#include "kiln/control_flow.h"
#include "tests/compiler/compiler_test_util.h"

namespace kiln::compiler {
namespace {

using testing::expect_bitwise_equal;
using ::testing::HasSubstr;
using testing::notes_of;
using testing::run_module;
using Ts = std::vector<Tensor>;

int count_ops(const Module& m, const std::string& op) {
  const auto& nodes = nodes_of(m.graph);
  return static_cast<int>(
      std::count_if(nodes.begin(), nodes.end(), [&](const detail::Node& n) { return n.op == op; }));
}

int count_thunks(const Executable& exe, const std::string& prefix) {
  int n = 0;
  for (const std::string& d : exe.thunk_descriptions()) n += d.rfind(prefix, 0) == 0;
  return n;
}

// A recurrence with two xs, a captured weight, and two outputs per step (one of them the carry).
struct Recurrence {
  Graph g{"recurrence"};
  Tensor h0, xs, us, w;
  Ts outs;
  FeedList feeds;

  Recurrence(int64_t length, ScanOptions options, Shape batch = {2}) {
    Shape hs = batch;
    hs.push_back(3);
    Shape xshape = hs;
    xshape.insert(xshape.begin(), length);
    h0 = g.placeholder(f64, hs, "h0");
    xs = g.placeholder(f64, xshape, "xs");
    us = g.placeholder(f64, {length}, "us");
    w = g.placeholder(f64, {3, 3}, "w");
    {
      auto guard = g.as_default();
      ScanResult r = scan(
          [&](const Ts& c, const Ts& x) {
            Tensor h = tanh(matmul(c[0], w) + x[0] * x[1]);
            return std::make_pair(Ts{h, c[1] + x[1]}, Ts{h, sum(h) + x[1]});
          },
          {h0, Tensor::scalar(0.0)}, {xs, us}, options);
      outs = {r.carry[0], r.carry[1], r.ys[0], r.ys[1]};
    }
    Shape concrete = xshape;
    if (concrete[1] < 0) concrete[1] = 2;
    feeds = {{h0, random_normal({concrete[1], 3}, 1, 0, 1, f64)},
             {xs, random_normal(concrete, 2, 0, 1, f64)},
             {us, random_normal({length}, 3, 0, 1, f64)},
             {w, random_normal({3, 3}, 4, 0, 1, f64)}};
  }
};

TEST(UnrollLoopsTest, UnrollsASmallScanFully) {
  for (bool reverse : {false, true}) {
    Recurrence r(3, ScanOptions{.reverse = reverse});
    Module m = make_module(r.g, r.outs);
    UnrollLoops pass;
    EXPECT_TRUE(pass.run(m));
    EXPECT_EQ(count_ops(m, "scan"), 0);
    EXPECT_EQ(count_ops(m, "tanh"), 3);
    EXPECT_THAT(notes_of(pass), HasSubstr("of 3 steps unrolled fully"));
    expect_bitwise_equal(run_module(m, r.feeds), r.g.run(r.feeds, r.outs));
  }
}

TEST(UnrollLoopsTest, UnrollsByTheFactorWithTheLeftoverStepsInlined) {
  for (bool reverse : {false, true}) {
    for (int64_t length : {9, 10}) {  // 3 blocks of 3; or 3 blocks and 1 step left over
      SCOPED_TRACE(::testing::Message() << "reverse " << reverse << ", length " << length);
      Recurrence r(length, ScanOptions{.reverse = reverse, .unroll = 3});
      Module m = make_module(r.g, r.outs);
      UnrollLoops pass;
      EXPECT_TRUE(pass.run(m));
      Dce().run(m);
      ASSERT_EQ(count_ops(m, "scan"), 1);
      for (const detail::Node& n : nodes_of(m.graph)) {
        if (n.op != "scan") continue;
        EXPECT_EQ(n.attrs.get_int("length"), 3);
        EXPECT_EQ(n.attrs.get_bool("reverse", false), reverse);
        int tanhs = 0;
        for (const detail::Node& b : nodes_of(n.attrs.get_subgraph("body").graph))
          tanhs += b.op == "tanh";
        EXPECT_EQ(tanhs, 3);  // three steps per iteration
      }
      EXPECT_EQ(count_ops(m, "tanh"), length - 9);  // the leftover step, inlined
      expect_bitwise_equal(run_module(m, r.feeds), r.g.run(r.feeds, r.outs));
    }
  }
}

TEST(UnrollLoopsTest, AnUnrollOfTheWholeLengthUnrollsALargeLoopFully) {
  Recurrence r(12, ScanOptions{.unroll = 12});
  Module m = make_module(r.g, r.outs);
  EXPECT_TRUE(UnrollLoops().run(m));
  EXPECT_EQ(count_ops(m, "scan"), 0);
  expect_bitwise_equal(run_module(m, r.feeds), r.g.run(r.feeds, r.outs));
}

TEST(UnrollLoopsTest, LeavesLongLoopsWithoutAnUnrollFactor) {
  Recurrence r(UnrollLoops::kMaxAutoUnrollSteps + 1, ScanOptions{});
  Module m = make_module(r.g, r.outs);
  EXPECT_FALSE(UnrollLoops().run(m));
}

TEST(UnrollLoopsTest, LeavesALoopWhoseTypesAreNotKnownAndSaysWhy) {
  Recurrence r(3, ScanOptions{}, /*batch=*/{kUnknownDim});
  Module m = make_module(r.g, r.outs);
  UnrollLoops pass;
  EXPECT_FALSE(pass.run(m));
  EXPECT_THAT(notes_of(pass), HasSubstr("unknown size"));
}

TEST(UnrollLoopsTest, LeavesALoopWhoseBodyDrawsRandomNumbers) {
  Graph g("random_body");
  Tensor x0 = g.placeholder(f32, {4}, "x0");
  Tensor seed = g.placeholder(i64, {}, "seed");
  Ts out;
  {
    auto guard = g.as_default();
    out = fori_loop(
        0, 2, [&](const Tensor&, const Ts& v) { return Ts{v[0] + random_uniform({4}, seed)}; },
        {x0});
  }
  Module m = make_module(g, out);
  UnrollLoops pass;
  EXPECT_FALSE(pass.run(m));
  EXPECT_THAT(notes_of(pass), HasSubstr("stateful or random"));
}

TEST(UnrollLoopsTest, NestedSmallLoopsAreUnrolledByTheCompilerAndComputeTheSameValues) {
  Graph g("nested");
  Tensor x0 = g.placeholder(f64, {3}, "x0");
  Tensor xs = g.placeholder(f64, {2, 3}, "xs");
  Ts out;
  {
    auto guard = g.as_default();
    ScanResult outer = scan(
        [&](const Ts& c, const Ts& x) {
          Ts inner = fori_loop(
              0, 3, [&](const Tensor& i, const Ts& v) { return Ts{v[0] * x[0] + convert(i, f64)}; },
              {c[0]});
          return std::make_pair(Ts{inner[0]}, Ts{sin(inner[0])});
        },
        {x0}, {xs});
    out = {outer.carry[0], outer.ys[0]};
  }
  FeedList feeds = {{x0, random_normal({3}, 5, 0, 1, f64)},
                    {xs, random_normal({2, 3}, 6, 0, 0.5, f64)}};
  Executable exe = compile(g, out, feeds);
  EXPECT_EQ(count_thunks(exe, "scan("), 0) << ::testing::PrintToString(exe.thunk_descriptions());
  Ts got = exe.run(feeds), want = g.run(feeds, out);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(allclose(got[i], want[i], 1e-12, 1e-12));
}

TEST(UnrollLoopsTest, ACompiledLoopUnrolledByItsFactorAndItsGradient) {
  Graph g("train");
  Tensor h0 = g.placeholder(f64, {2, 3}, "h0"), xs = g.placeholder(f64, {7, 2, 3}, "xs");
  Tensor w = g.placeholder(f64, {3, 3}, "w");
  Ts fetches;
  {
    auto guard = g.as_default();
    ScanResult r = scan(
        [&](const Ts& c, const Ts& x) {
          Tensor h = tanh(matmul(c[0], w) + x[0]);
          return std::make_pair(Ts{h}, Ts{h * x[0]});
        },
        {h0}, {xs}, ScanOptions{.unroll = 2});
    Tensor loss = sum(r.carry[0]) + sum(r.ys[0]);
    Ts grads = gradients(loss, {h0, xs, w});
    fetches = {loss, grads[0], grads[1], grads[2]};
  }
  FeedList feeds = {{h0, random_normal({2, 3}, 1, 0, 1, f64)},
                    {xs, random_normal({7, 2, 3}, 2, 0, 1, f64)},
                    {w, random_normal({3, 3}, 3, 0, 1, f64)}};
  Executable exe = compile(g, fetches, feeds);
  // The forward scan (unroll 2) and the backward one (which keeps the factor): each 3
  // iterations of two steps, and the step left over inlined.
  EXPECT_EQ(count_thunks(exe, "scan(length 3, "), 2)
      << ::testing::PrintToString(exe.thunk_descriptions());
  EXPECT_EQ(count_thunks(exe, "scan("), 2) << ::testing::PrintToString(exe.thunk_descriptions());
  Ts got = exe.run(feeds), want = g.run(feeds, fetches);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(allclose(got[i], want[i], 1e-12, 1e-12)) << i;
}

TEST(UnrollLoopsTest, OnceUnrolledCseSharesTheLoopInvariantWorkOfTheSteps) {
  Graph g("invariant");
  Tensor x0 = g.placeholder(f64, {3}, "x0"), w = g.placeholder(f64, {3}, "w");
  Ts out;
  {
    auto guard = g.as_default();
    out = fori_loop(0, 3, [&](const Tensor&, const Ts& v) { return Ts{v[0] * exp(w)}; }, {x0});
  }
  FeedList feeds = {{x0, random_normal({3}, 1, 0, 1, f64)}, {w, random_normal({3}, 2, 0, 1, f64)}};
  CompiledGraph cg = optimize(g, out);
  int exps = 0, scans = 0;
  for (int id = 0; id < cg.graph.num_nodes(); ++id) {
    exps += cg.graph.node(id).op == "exp";
    scans += cg.graph.node(id).op == "scan";
  }
  EXPECT_EQ(scans, 0);
  EXPECT_EQ(exps, 1);  // computed once, not once per step
  Ts got = compile(g, out, feeds).run(feeds), want = g.run(feeds, out);
  EXPECT_TRUE(allclose(got[0], want[0], 1e-14, 1e-14));
}

}  // namespace
}  // namespace kiln::compiler
