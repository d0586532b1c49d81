// cond, while_loop, scan and fori_loop: eager, traced (interpreted and compiled) and their
// gradients against central finite differences; captures, nesting, type errors.
#include "kiln/control_flow.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "compiler/executable.h"
#include "kiln/io/saved_model.h"
#include "kiln/kiln.h"
#include "tests/testing/values.h"

namespace kiln {
namespace {

using test_values::expect_error;
using test_values::expect_values;
using Ts = std::vector<Tensor>;

Tensor f64s(Shape shape, std::vector<double> v) {
  return test_values::values(std::move(shape), std::move(v), f64);
}

Tensor random_f64(Shape shape, uint64_t seed) {
  return random_normal(std::move(shape), seed, 0, 1, f64);
}

// Runs f traced into a graph, interpreted and compiled, and checks both against eager f.
void expect_traced_matches_eager(const std::function<Ts(const Ts&)>& f, const Ts& args,
                                 double tol = 1e-12) {
  Ts eager = f(args);
  Graph g("traced");
  Ts params;
  FeedList feeds;
  for (size_t i = 0; i < args.size(); ++i) {
    params.push_back(g.placeholder(args[i].dtype(), args[i].shape(), "arg" + std::to_string(i)));
    feeds.emplace_back(params.back(), args[i]);
  }
  Ts outs;
  {
    auto guard = g.as_default();
    outs = f(params);
  }
  ASSERT_EQ(outs.size(), eager.size());
  Ts interpreted = g.run(feeds, outs);
  Ts compiled = compiler::compile(g, outs, feeds).run(feeds);
  for (size_t i = 0; i < eager.size(); ++i) {
    ASSERT_EQ(interpreted[i].shape(), eager[i].shape()) << "output " << i;
    ASSERT_EQ(compiled[i].shape(), eager[i].shape()) << "output " << i;
    EXPECT_TRUE(allclose(interpreted[i], eager[i], tol, tol)) << "interpreted output " << i;
    EXPECT_TRUE(allclose(compiled[i], eager[i], tol, tol)) << "compiled output " << i;
  }
}

// value_and_grad of f (traced: the control flow is recorded and differentiated) against central
// differences of f run eagerly.
void expect_gradients_match(const std::function<Tensor(const Ts&)>& f, const Ts& args,
                            double tol = 1e-6) {
  auto [value, grads] = value_and_grad(f, args);
  EXPECT_NEAR(value.item<double>(), f(args).item<double>(), 1e-9);
  ASSERT_EQ(grads.size(), args.size());
  const double eps = 1e-6;
  for (size_t a = 0; a < args.size(); ++a) {
    if (!is_floating(args[a].dtype())) continue;
    std::vector<double> base = args[a].to_vector<double>();
    std::vector<double> got = grads[a].to_vector<double>();
    ASSERT_EQ(got.size(), base.size());
    for (size_t i = 0; i < base.size(); ++i) {
      auto at = [&](double delta) {
        std::vector<double> v = base;
        v[i] += delta;
        Ts moved = args;
        moved[a] = Tensor::from_vector(v, args[a].shape());
        return f(moved).item<double>();
      };
      const double numeric = (at(eps) - at(-eps)) / (2 * eps);
      EXPECT_NEAR(got[i], numeric, tol * (1 + std::abs(numeric)))
          << "argument " << a << ", element " << i;
    }
  }
}

// ---- cond ------------------------------------------------------------------------------

TEST(Cond, EagerRunsOnlyTheBranchTaken) {
  int calls_true = 0, calls_false = 0;
  Tensor x = f64s({2}, {1, 2});
  Ts out = cond(
      Tensor::scalar(true),
      [&](const Ts& o) {
        ++calls_true;
        return Ts{o[0] * 2.0};
      },
      [&](const Ts& o) {
        ++calls_false;
        return Ts{o[0] - 1.0};
      },
      {x});
  expect_values(out[0], {2}, {2, 4});
  EXPECT_EQ(calls_true, 1);
  EXPECT_EQ(calls_false, 0);
}

TEST(Cond, TracedRecordsOneNodeWithBothBranches) {
  auto f = [](const Ts& a) {
    return cond(
        sum(a[0]) > scalar_like(0, a[0]),
        [](const Ts& o) {
          return Ts{o[0] * 2.0, o[1]};
        },
        [](const Ts& o) {
          return Ts{-o[0], o[1] + 1.0};
        },
        {a[0], a[1]});
  };
  expect_traced_matches_eager(f, {f64s({3}, {1, 2, 3}), f64s({}, {5})});
  expect_traced_matches_eager(f, {f64s({3}, {-1, -2, 0}), f64s({}, {5})});
  Graph g("g");
  Tensor x = g.placeholder(f64, {3}), y = g.placeholder(f64, {});
  {
    auto guard = g.as_default();
    f({x, y});
  }
  std::string text = g.to_text();
  EXPECT_NE(text.find("= cond("), std::string::npos) << text;
  EXPECT_NE(text.find("then_branch: graph true_fn"), std::string::npos) << text;
  EXPECT_NE(text.find("else_branch: graph false_fn"), std::string::npos) << text;
}

TEST(Cond, BranchesCaptureValuesOfTheEnclosingGraph) {
  auto f = [](const Ts& a) {
    Tensor w = a[1];
    return cond(
        a[2], [&](const Ts& o) { return Ts{o[0] * w}; }, [&](const Ts& o) { return Ts{o[0] + w}; },
        {a[0]});
  };
  Tensor x = f64s({2}, {1, 2}), w = f64s({2}, {3, 4});
  expect_traced_matches_eager(f, {x, w, Tensor::scalar(true)});
  expect_traced_matches_eager(f, {x, w, Tensor::scalar(false)});
}

TEST(Cond, BranchesThatDisagreeAreAnErrorNamingTheResult) {
  Graph g("g");
  Tensor x = g.placeholder(f32, {2});
  auto guard = g.as_default();
  expect_error(
      [&] {
        cond(
            Tensor::scalar(true), [](const Ts& o) { return Ts{o[0]}; },
            [](const Ts& o) {
              return Ts{concatenate({o[0], o[0]}, 0)};
            },
            {x});
      },
      ErrorCode::kInvalidArgument, "result 0 is f32[2] from true_fn but f32[4] from false_fn");
  expect_error(
      [&] {
        cond(
            Tensor::scalar(true), [](const Ts& o) { return Ts{o[0]}; },
            [](const Ts& o) {
              return Ts{o[0], o[0]};
            },
            {x});
      },
      ErrorCode::kInvalidArgument, "true_fn returns 1 values, false_fn 2");
  expect_error(
      [&] {
        cond(
            Tensor::scalar(1.0f), [](const Ts& o) { return o; }, [](const Ts& o) { return o; },
            {x});
      },
      ErrorCode::kInvalidArgument, "the predicate must be a bool scalar, got f32[]");
}

// ---- while_loop --------------------------------------------------------------------------

TEST(WhileLoop, SumsUntilTheConditionFails) {
  auto f = [](const Ts& a) {
    return while_loop([](const Ts& v) { return v[0] < scalar_like(10, v[0]); },
                      [](const Ts& v) {
                        return Ts{v[0] + 1.0, v[1] + v[0]};
                      },
                      {a[0], a[1]});
  };
  Ts eager = f({Tensor::scalar<int64_t>(0), Tensor::scalar<int64_t>(0)});
  EXPECT_EQ(eager[0].item<int64_t>(), 10);
  EXPECT_EQ(eager[1].item<int64_t>(), 45);
  expect_traced_matches_eager(f, {Tensor::scalar<int64_t>(3), Tensor::scalar<int64_t>(1)});
  expect_traced_matches_eager(f, {Tensor::scalar<int64_t>(12), Tensor::scalar<int64_t>(1)});
}

TEST(WhileLoop, MaximumIterationsStopsTheLoop) {
  WhileOptions o;
  o.maximum_iterations = 4;
  auto f = [&](const Ts& a) {
    return while_loop([](const Ts&) { return Tensor::scalar(true); },
                      [](const Ts& v) { return Ts{v[0] * 2.0}; }, {a[0]}, o);
  };
  expect_values(f({f64s({2}, {1, 3})})[0], {2}, {16, 48});
  expect_traced_matches_eager(f, {f64s({2}, {1, 3})});
}

TEST(WhileLoop, ABodyChangingAShapeIsAnErrorNamingTheVariable) {
  auto body = [](const Ts& v) { return Ts{v[0], concatenate({v[1], v[1]}, 0)}; };
  auto cond_fn = [](const Ts& v) { return v[0] < scalar_like(3, v[0]); };
  expect_error(
      [&] {
        while_loop(cond_fn, body, {Tensor::scalar(0.0), zeros({2})});
      },
      ErrorCode::kInvalidArgument, "loop variable 1 is f32[2] before the body and f32[4] after it");
  Graph g("g");
  Tensor x = g.placeholder(f32, {2});
  auto guard = g.as_default();
  expect_error(
      [&] {
        while_loop(cond_fn, body, {Tensor::scalar(0.0), x});
      },
      ErrorCode::kInvalidArgument, "loop variable 1 is f32[2] before the body and f32[4] after it");
}

TEST(WhileLoop, WithoutMaximumIterationsIsNotDifferentiable) {
  expect_error(
      [] {
        grad(
            [](const Ts& a) {
              return while_loop([](const Ts& v) { return sum(v[0]) < scalar_like(10, v[0]); },
                                [](const Ts& v) { return Ts{v[0] * 2.0}; }, {a[0]})[0];
            },
            {f64s({1}, {1})});
      },
      ErrorCode::kUnimplemented, "has no maximum_iterations, so it is not differentiable");
}

// ---- scan -----------------------------------------------------------------------------------

ScanFn cumulative = [](const Ts& c, const Ts& x) {
  Tensor next = c[0] + x[0];
  return std::make_pair(Ts{next}, Ts{next * 2.0});
};

TEST(Scan, CarriesAndStacksOutputs) {
  ScanResult r = scan(cumulative, {f64s({2}, {0, 10})}, {f64s({3, 2}, {1, 2, 3, 4, 5, 6})});
  expect_values(r.carry[0], {2}, {9, 22});
  expect_values(r.ys[0], {3, 2}, {2, 24, 8, 32, 18, 44});
  ScanOptions rev;
  rev.reverse = true;
  r = scan(cumulative, {f64s({2}, {0, 10})}, {f64s({3, 2}, {1, 2, 3, 4, 5, 6})}, rev);
  expect_values(r.carry[0], {2}, {9, 22});
  expect_values(r.ys[0], {3, 2}, {18, 44, 16, 40, 10, 32});
  for (bool reverse : {false, true}) {
    ScanOptions o;
    o.reverse = reverse;
    expect_traced_matches_eager(
        [&](const Ts& a) {
          ScanResult s = scan(cumulative, {a[0]}, {a[1]}, o);
          return Ts{s.carry[0], s.ys[0]};
        },
        {random_f64({4}, 1), random_f64({5, 4}, 2)});
  }
}

TEST(Scan, WithoutXsTakesALengthAndZeroStepsGiveEmptyOutputs) {
  ScanOptions o;
  o.length = 3;
  ScanResult r =
      scan([](const Ts& c, const Ts&) { return std::make_pair(Ts{c[0] * 3.0}, Ts{c[0]}); },
           {f64s({}, {1})}, {}, o);
  EXPECT_EQ(r.carry[0].item<double>(), 27);
  expect_values(r.ys[0], {3}, {1, 3, 9});
  r = scan(cumulative, {f64s({2}, {1, 2})}, {Tensor::empty(f64, {0, 2})});
  expect_values(r.carry[0], {2}, {1, 2});
  EXPECT_EQ(r.ys[0].shape(), (Shape{0, 2}));
  expect_error(
      [] {
        scan(cumulative, {f64s({2}, {1, 2})}, {});
      },
      ErrorCode::kInvalidArgument, "with no xs, give ScanOptions::length");
  auto grows = [](const Ts& c, const Ts&) {
    return std::make_pair(Ts{concatenate({c[0], c[0]}, 0)}, Ts{});
  };
  expect_error(
      [&] {
        scan(grows, {f64s({2}, {1, 2})}, {f64s({2, 2}, {1, 2, 3, 4})});
      },
      ErrorCode::kInvalidArgument,
      "carry 0 is f64[2] before the step function and f64[4] after it");
}

TEST(ForiLoop, RunsTheBodyWithTheIndex) {
  auto f = [](const Ts& a) {
    return fori_loop(2, 6,
                     [](const Tensor& i, const Ts& v) {
                       return Ts{v[0] + convert(i, f64) * v[1], v[1]};
                     },
                     {a[0], a[1]});
  };
  Ts out = f({f64s({}, {0}), f64s({}, {2})});
  EXPECT_EQ(out[0].item<double>(), 2 * (2 + 3 + 4 + 5));
  expect_traced_matches_eager(f, {f64s({}, {0.5}), f64s({}, {2})});
}

TEST(ControlFlow, Nests) {
  // A while loop inside a scan step inside a cond branch, each capturing outer values.
  auto f = [](const Ts& a) {
    Tensor w = a[1];
    return cond(
        a[2],
        [&](const Ts& o) {
          ScanResult r = scan(
              [&](const Ts& c, const Ts& x) {
                Ts v = while_loop([&](const Ts& u) { return sum(u[0]) < scalar_like(20, u[0]); },
                                  [&](const Ts& u) { return Ts{u[0] * w + x[0]}; }, {c[0]});
                return std::make_pair(v, Ts{sum(v[0])});
              },
              {o[0]}, {o[1]});
          return Ts{r.carry[0], r.ys[0]};
        },
        [&](const Ts& o) {
          return Ts{o[0], sum(o[1], {1})};
        },
        {a[0], a[3]});
  };
  Ts args = {f64s({2}, {1, 2}), f64s({2}, {1.5, 2}), Tensor::scalar(true),
             f64s({3, 2}, {1, 0, 0, 1, 1, 1})};
  expect_traced_matches_eager(f, args);
  args[2] = Tensor::scalar(false);
  expect_traced_matches_eager(f, args);
}

// ---- gradients ---------------------------------------------------------------------------

TEST(ControlFlowGradients, Cond) {
  for (bool take : {true, false}) {
    expect_gradients_match(
        [take](const Ts& a) {
          Tensor w = a[1];
          Ts r = cond(
              Tensor::scalar(take), [&](const Ts& o) { return Ts{sin(o[0]) * w}; },
              [&](const Ts& o) { return Ts{o[0] * o[0] + exp(w)}; }, {a[0]});
          return sum(r[0]);
        },
        {random_f64({3}, 5), random_f64({3}, 6)});
  }
}

TEST(ControlFlowGradients, ScanSavingResidualsAndRecomputing) {
  for (bool remat : {false, true}) {
    for (bool reverse : {false, true}) {
      ScanOptions o;
      o.remat = remat;
      o.reverse = reverse;
      expect_gradients_match(
          [&](const Ts& a) {
            Tensor w = a[2];
            ScanResult r = scan(
                [&](const Ts& c, const Ts& x) {
                  Tensor h = tanh(matmul(c[0], w) + x[0]);
                  return std::make_pair(Ts{h}, Ts{h * x[0]});
                },
                {a[0]}, {a[1]}, o);
            return sum(r.carry[0]) + sum(r.ys[0] * r.ys[0]);
          },
          {random_f64({2, 3}, 1), random_f64({4, 2, 3}, 2), random_f64({3, 3}, 3)});
    }
  }
}

TEST(ControlFlowGradients, ForiLoopAndWhileWithMaximumIterations) {
  expect_gradients_match(
      [](const Ts& a) {
        Ts v = fori_loop(0, 3, [&](const Tensor&, const Ts& u) { return Ts{sin(u[0]) * a[1]}; },
                         {a[0]});
        return sum(v[0]);
      },
      {random_f64({3}, 7), random_f64({3}, 8)});
  WhileOptions o;
  o.maximum_iterations = 6;
  expect_gradients_match(
      [&](const Ts& a) {
        Ts v = while_loop([](const Ts& u) { return u[1] < scalar_like(4, u[1]); },
                          [&](const Ts& u) {
                            return Ts{u[0] * a[1] + 0.1, u[1] + 1.0};
                          },
                          {a[0], Tensor::scalar<int64_t>(0)}, o);
        return sum(v[0]);
      },
      {random_f64({2}, 9), random_f64({2}, 10)});
}

TEST(ControlFlowGradients, NestedLoopsAndALoopInsideACond) {
  expect_gradients_match(
      [](const Ts& a) {
        Tensor w = a[1];
        Ts r = cond(
            sum(a[0]) > scalar_like(-100, a[0]),
            [&](const Ts& o) {
              ScanResult outer = scan(
                  [&](const Ts& c, const Ts& x) {
                    ScanOptions inner_o;
                    inner_o.length = 2;
                    ScanResult inner = scan(
                        [&](const Ts& ci, const Ts&) {
                          return std::make_pair(Ts{tanh(ci[0] * w + x[0])}, Ts{});
                        },
                        c, {}, inner_o);
                    return std::make_pair(inner.carry, Ts{sum(inner.carry[0])});
                  },
                  {o[0]}, {o[1]});
              return Ts{sum(outer.ys[0]) + sum(outer.carry[0])};
            },
            [&](const Ts& o) { return Ts{sum(o[0])}; }, {a[0], a[2]});
        return r[0];
      },
      {random_f64({2}, 11), random_f64({2}, 12), random_f64({3, 2}, 13)});
}

// ---- compiled -------------------------------------------------------------------------------

int count_of(const std::vector<std::string>& lines, const std::string& prefix) {
  return static_cast<int>(std::count_if(
      lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(prefix, 0) == 0; }));
}

TEST(CompiledControlFlow, BodiesAreCompiledSubPrograms) {
  Graph g("g");
  Tensor h0 = g.placeholder(f32, {2, 3}), xs = g.placeholder(f32, {5, 2, 3});
  Tensor w = g.placeholder(f32, {3, 3});
  ScanResult r;
  {
    auto guard = g.as_default();
    r = scan(
        [&](const Ts& c, const Ts& x) {
          Tensor h = tanh(matmul(c[0], w) + x[0]);
          return std::make_pair(Ts{h}, Ts{h * 2.0f});
        },
        {h0}, {xs});
  }
  FeedList feeds = {{h0, random_normal({2, 3}, 1)},
                    {xs, random_normal({5, 2, 3}, 2)},
                    {w, random_normal({3, 3}, 3)}};
  compiler::Executable exe = compiler::compile(g, {r.carry[0], r.ys[0]}, feeds);
  std::vector<std::string> thunks = exe.thunk_descriptions();
  ASSERT_EQ(count_of(thunks, "scan(length 5, body: "), 1) << ::testing::PrintToString(thunks);
  Ts got = exe.run(feeds), want = g.run(feeds, {r.carry[0], r.ys[0]});
  EXPECT_TRUE(allclose(got[0], want[0], 1e-5, 1e-6));
  EXPECT_TRUE(allclose(got[1], want[1], 1e-5, 1e-6));
  // Runs again with the same arenas: the same values.
  Ts again = exe.run(feeds);
  EXPECT_TRUE(allclose(again[0], got[0], 0, 0));
}

TEST(CompiledControlFlow, TheGradientsForwardScanReplacesTheOriginal) {
  Graph g("g");
  Tensor h0 = g.placeholder(f64, {2, 3}), xs = g.placeholder(f64, {6, 2, 3});
  Tensor w = g.placeholder(f64, {3, 3});
  Tensor loss;
  Ts grads;
  {
    auto guard = g.as_default();
    ScanResult r = scan(
        [&](const Ts& c, const Ts& x) {
          Tensor h = tanh(matmul(c[0], w) + x[0]);
          return std::make_pair(Ts{h}, Ts{h * x[0]});
        },
        {h0}, {xs});
    loss = sum(r.carry[0]) + sum(r.ys[0]);
    grads = gradients(loss, {h0, xs, w});
  }
  Ts fetches = {loss, grads[0], grads[1], grads[2]};
  FeedList feeds = {
      {h0, random_f64({2, 3}, 1)}, {xs, random_f64({6, 2, 3}, 2)}, {w, random_f64({3, 3}, 3)}};
  // Recorded: the scan, its augmented copy and the backward scan. Compiled: the copy runs
  // in the original's place.
  int recorded = 0;
  for (int id = 0; id < g.num_nodes(); ++id) recorded += g.node(id).op == "scan";
  EXPECT_EQ(recorded, 3);
  compiler::Executable exe = compiler::compile(g, fetches, feeds);
  EXPECT_EQ(count_of(exe.thunk_descriptions(), "scan("), 2)
      << ::testing::PrintToString(exe.thunk_descriptions());
  Ts got = exe.run(feeds), want = g.run(feeds, fetches);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(allclose(got[i], want[i], 1e-12, 1e-12)) << i;
}

TEST(CompiledControlFlow, VariablesReadInsideABodyInAFunction) {
  Variable w(Tensor::from_vector<float>({0.5f, 2.0f}), "w");
  auto f = kiln::function([&](const Tensor& x) {
    return fori_loop(0, 3, [&](const Tensor&, const Ts& v) { return Ts{v[0] * w.value()}; }, {x})[0];
  });
  Tensor x = Tensor::from_vector<float>({1, 1});
  expect_values(f(x), {2}, {0.125, 8});
  w.assign(Tensor::from_vector<float>({1.0f, 3.0f}));  // read again at the next call
  expect_values(f(x), {2}, {1, 27});
  EXPECT_EQ(f.stats().traces, 1);
}

// Variables assigned inside bodies behave as in the function around them: a loop carries the
// variable from step to step, a cond gives it from the branch taken, and the function assigns
// the result after each call; compiled and interpreted alike.
TEST(ControlFlowVariables, AssignedInsideLoopsAndBranchesOfAFunction) {
  for (ExecutionMode mode : {ExecutionMode::kCompiled, ExecutionMode::kInterpreted}) {
    SCOPED_TRACE(mode == ExecutionMode::kCompiled ? "compiled" : "interpreted");
    Variable total(zeros({2}), "total"), count(Tensor::scalar<float>(0), "count");
    FunctionOptions options;
    options.mode = mode;
    auto f = kiln::function(
        [&](const Tensor& xs) {
          // scan: total += row at every step; the carry is the row count.
          ScanResult r = scan(
              [&](const Ts& c, const Ts& row) {
                total.assign(total.value() + row[0]);
                return std::make_pair(Ts{c[0] + 1.0f}, Ts{total.value()});
              },
              {Tensor::scalar<float>(0)}, {xs});
          // fori_loop: count += i for i in [0, 4).
          fori_loop(0, 4, [&](const Tensor& i, const Ts& v) {
            count.assign(count.value() + convert(i, f32));
            return v;
          }, {});
          // cond: doubles total only when it is positive in its first element.
          cond(sum(slice(total.value(), {0}, {1})) > scalar_like(0, total.value()),
               [&](const Ts&) {
                 total.assign(total.value() * 2.0f);
                 return Ts{};
               },
               [](const Ts&) { return Ts{}; }, {});
          return Ts{r.carry[0], r.ys[0]};
        },
        options);
    const Tensor xs = Tensor::from_vector<float>({1, -1, 2, -2, 3, -3}, {3, 2});
    Ts out = f(xs);
    expect_values(out[0], {}, {3});
    expect_values(out[1], {3, 2}, {1, -1, 3, -3, 6, -6});  // the running totals
    expect_values(total.value(), {2}, {12, -12});           // (1 + 2 + 3) * 2
    expect_values(count.value(), {}, {6});
    f(xs);  // the variables carry on from where the last call left them
    expect_values(total.value(), {2}, {36, -36});  // (12 + 6) * 2
    expect_values(count.value(), {}, {12});
    EXPECT_EQ(f.stats().traces, 1);
    // Starting negative, the cond leaves total alone.
    total.assign(Tensor::from_vector<float>({-10, 10}));
    f(xs);
    expect_values(total.value(), {2}, {-4, 4});
  }
}

TEST(ControlFlowVariables, WhileLoopsReadAndAssignInTheirBody) {
  Variable v(Tensor::scalar<float>(1), "v");
  auto f = kiln::function([&](const Tensor& limit) {
    // Doubles v while it is below the limit; the loop variable counts the steps.
    return while_loop([&](const Ts&) { return v.value() < limit; },
                      [&](const Ts& n) {
                        v.assign(v.value() * 2.0f);
                        return Ts{n[0] + 1};
                      },
                      {Tensor::scalar<int32_t>(0)})[0];
  });
  expect_values(f(Tensor::scalar<float>(20)), {}, {5});
  expect_values(v.value(), {}, {32});
  expect_values(f(Tensor::scalar<float>(100)), {}, {2});
  expect_values(v.value(), {}, {128});
  // A condition may not assign.
  auto g = kiln::function([&](const Tensor& x) {
    return while_loop(
        [&](const Ts& n) {
          v.assign(v.value() + 1.0f);
          return n[0] < x;
        },
        [](const Ts& n) { return Ts{n[0] + 1.0f}; }, {zeros_like(x)})[0];
  });
  expect_error([&] { g(Tensor::scalar<float>(3)); }, ErrorCode::kInvalidArgument,
               "cond_fn: assigns variable 'v'; a loop's condition may read variables but not "
               "assign them");
}

TEST(ControlFlowVariables, NestedLoopsAssignTheSameVariableAndItsGradientFlows) {
  Variable acc(Tensor::scalar<double>(0), "acc");
  auto f = kiln::function([&](const Tensor& x) {
    fori_loop(0, 3, [&](const Tensor&, const Ts& v) {
      scan([&](const Ts& c, const Ts& row) {
        acc.assign(acc.value() + row[0] * x);
        return std::make_pair(c, Ts{});
      }, {}, {arange(1, 3, 1, f64)});
      return v;
    }, {});
    // The assigned value is differentiable like any other: d(acc)/dx.
    Tensor final_acc = acc.value();
    return Ts{final_acc, gradients(final_acc, {x})[0]};
  });
  Ts out = f(Tensor::scalar<double>(2));
  expect_values(out[0], {}, {18});  // 3 * (1 + 2) * 2
  expect_values(out[1], {}, {9});
  expect_values(acc.value(), {}, {18});
}

TEST(SavedControlFlow, ASavedModelKeepsItsSubGraphs) {
  Graph g("cf_model");
  Tensor x = g.placeholder(f32, {3, 2}), w = g.placeholder(f32, {2});
  Tensor y;
  {
    auto guard = g.as_default();
    ScanResult r = scan(
        [&](const Ts& c, const Ts& row) {
          Ts b = cond(
              sum(row[0]) > scalar_like(0, row[0]), [&](const Ts& o) { return Ts{o[0] * w}; },
              [](const Ts& o) { return Ts{-o[0]}; }, {row[0]});
          return std::make_pair(Ts{c[0] + b[0]}, Ts{b[0]});
        },
        {zeros({2})}, {x});
    y = r.carry[0] + sum(r.ys[0], {0});
  }
  const std::string dir = ::testing::TempDir() + "/kiln_saved_control_flow";
  std::filesystem::remove_all(dir);
  io::save_graph({"cf_model", g, {{"x", x}, {"w", w}}, {{"y", y}}, {}}, dir);
  io::LoadedModel m = io::load_model(dir);
  EXPECT_NE(m.graph().to_text().find("body: graph"), std::string::npos) << m.graph().to_text();
  Tensor xv = test_values::values({3, 2}, {1, 2, -3, -4, 5, -1}),
         wv = test_values::values({2}, {2, 3});
  Tensor want = g.run({{x, xv}, {w, wv}}, y);
  std::map<std::string, Tensor> got = m.run("serving_default", {{"x", xv}, {"w", wv}});
  EXPECT_TRUE(allclose(got.at("y"), want, 1e-6, 1e-6));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
