// Reverse-mode autodiff: gradients of composed expressions against hand-derived formulas,
// accumulation, broadcasting, stopping the flow, errors, and value_and_grad.
#include "kiln/autodiff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"

namespace kiln {

// Custom ops, registered as a user would: one without a gradient rule, one whose rule returns
// the wrong dtype, one with a correct rule (d/dx 2x = 2).
namespace {
std::vector<TensorType> same_type(const InferContext& ctx) { return {ctx.input(0)}; }
std::vector<Tensor> bad_rule(const GradContext& g) { return {convert(g.output_grads[0], f32)}; }
std::vector<Tensor> twice_rule(const GradContext& g) { return {g.output_grads[0] * 2.0}; }
}  // namespace

KILN_REGISTER_OP(autodiff_test_opaque).input("x").shape_fn(same_type);
KILN_REGISTER_KERNEL(autodiff_test_opaque).fn([](KernelContext& ctx) {
  ctx.set_output(0, ctx.input(0));
});
KILN_REGISTER_OP(autodiff_test_bad_rule).input("x").shape_fn(same_type).gradient(bad_rule);
KILN_REGISTER_KERNEL(autodiff_test_bad_rule).fn([](KernelContext& ctx) {
  ctx.set_output(0, ctx.input(0));
});
KILN_REGISTER_OP(autodiff_test_twice).input("x").shape_fn(same_type);
KILN_REGISTER_KERNEL(autodiff_test_twice).fn([](KernelContext& ctx) {
  ctx.set_output(0, ctx.input(0) * 2.0);
});
KILN_REGISTER_GRADIENT(autodiff_test_twice, twice_rule);

namespace {

using testing::HasSubstr;

// TEMPORARY, until ops/pending.cc is gone: a statement that needs an op another family is
// still writing (sum, zeros_like, ones_like) skips the test instead of failing it.
#define SKIP_IF_PENDING(...)                                                           \
  try {                                                                                \
    __VA_ARGS__;                                                                       \
  } catch (const Error& e) {                                                           \
    if (std::string(e.what()).find("not implemented yet") == std::string::npos) throw; \
    GTEST_SKIP() << e.what();                                                          \
  }

Tensor vec(std::vector<double> v) { return Tensor::from_vector(v); }
Tensor ones_vec(size_t n) { return vec(std::vector<double>(n, 1.0)); }

void expect_values(const Tensor& t, const std::vector<double>& want, double tol = 1e-12) {
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size()) << t;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

const std::vector<double> kX = {-0.5, 0.1, 0.7, 2.0};

TEST(Gradients, ComposedExpressionMatchesHandDerivedFormula) {
  Graph g;
  Tensor x = g.placeholder(f64, {4}, "x");
  Tensor y = sin(x) * exp(x) + x * x / cos(x);
  Tensor dx = gradients(y, {x}, ones_vec(4))[0];
  EXPECT_EQ(dx.dtype(), f64);
  EXPECT_EQ(dx.shape(), (Shape{4}));
  std::vector<double> want;
  for (double v : kX) {
    double c = std::cos(v), s = std::sin(v);
    want.push_back((c + s) * std::exp(v) + (2 * v * c + v * v * s) / (c * c));
  }
  expect_values(g.run({{x, vec(kX)}}, dx), want);
}

TEST(Gradients, ExpressionWithScalarConstants) {
  Graph g;
  Tensor x = g.placeholder(f64, {4}, "x");
  Tensor y = 3.0 * x * x + 1.0 / (x + 2.0) - 5.0;
  Tensor dx;
  SKIP_IF_PENDING(dx = gradients(y, {x}, ones_vec(4))[0]);
  std::vector<double> want;
  for (double v : kX) want.push_back(6 * v - 1 / ((v + 2) * (v + 2)));
  expect_values(g.run({{x, vec(kX)}}, dx), want);
}

TEST(Gradients, DefaultCotangentIsOnes) {
  Graph g;
  Tensor x = g.placeholder(f64, {4}, "x");
  Tensor y = tanh(x);
  Tensor dx;
  SKIP_IF_PENDING(dx = gradients(y, {x})[0]);
  std::vector<double> want;
  for (double v : kX) want.push_back(1 - std::tanh(v) * std::tanh(v));
  expect_values(g.run({{x, vec(kX)}}, dx), want);
}

TEST(Gradients, ContributionsOfAValueUsedSeveralTimesAreSummed) {
  Graph g;
  Tensor x = g.placeholder(f64, {4}, "x");
  Tensor y = x * x + sin(x * x) - x;  // x feeds three nodes, twice into one of them
  std::vector<double> want;
  for (double v : kX) want.push_back(2 * v + 2 * v * std::cos(v * v) - 1);
  expect_values(g.run({{x, vec(kX)}}, gradients(y, {x}, ones_vec(4))[0]), want);
}

TEST(Gradients, NonScalarYGivesTheVectorJacobianProductWithDy) {
  Graph g;
  Tensor x = g.placeholder(f64, {3}, "x");
  Tensor w = g.placeholder(f64, {3}, "w");
  std::vector<Tensor> d = gradients(x * w, {x, w}, vec({1, 2, 3}));
  std::vector<Tensor> got = g.run({{x, vec({4, 5, 6})}, {w, vec({7, 8, 9})}}, d);
  expect_values(got[0], {7, 16, 27});
  expect_values(got[1], {4, 10, 18});
}

TEST(Gradients, SecondOrderByDifferentiatingTheGradient) {
  Graph g;
  Tensor x = g.placeholder(f64, {4}, "x");
  Tensor dx = gradients(x * x * x, {x}, ones_vec(4))[0];
  Tensor ddx = gradients(dx, {x}, ones_vec(4))[0];
  std::vector<Tensor> got = g.run({{x, vec(kX)}}, {dx, ddx});
  std::vector<double> want1, want2;
  for (double v : kX) want1.push_back(3 * v * v), want2.push_back(6 * v);
  expect_values(got[0], want1);
  expect_values(got[1], want2);
}

TEST(Gradients, IntermediateXGetsItsTotalDerivative) {
  Graph g;
  Tensor a = g.placeholder(f64, {2}, "a");
  Tensor b = a + a;
  std::vector<Tensor> d = gradients(b * b, {a, b}, ones_vec(2));
  std::vector<Tensor> got = g.run({{a, vec({1, -3})}}, d);
  expect_values(got[0], {8, -24});  // d(4a^2)/da
  expect_values(got[1], {4, -12});  // 2b
}

TEST(Gradients, UnreachableXGetsZeros) {
  Graph g;
  Tensor a = g.placeholder(f64, {2}, "a");
  Tensor b = g.placeholder(f32, {3}, "b");
  std::vector<Tensor> d;
  SKIP_IF_PENDING(d = gradients(sin(a), {a, b}, ones_vec(2)));
  EXPECT_EQ(d[1].dtype(), f32);
  std::vector<Tensor> got = g.run({{a, vec({0, 1})}, {b, Tensor::from_list<float>({1, 2, 3})}}, d);
  expect_values(got[0], {1, std::cos(1.0)});
  expect_values(got[1], {0, 0, 0});
}

TEST(Gradients, ComparisonsAndIntegerValuesStopTheFlow) {
  Graph g;
  Tensor x = g.placeholder(f64, {4}, "x");
  // x > 0 is bool and convert(x, i32) is an integer: neither carries gradient, so only the
  // outer factor x is differentiated.
  Tensor mask = convert(x > scalar_like(0, x), f64);
  Tensor truncated = convert(convert(x, i32), f64);
  Tensor y = x * mask + x * truncated;
  expect_values(g.run({{x, vec(kX)}}, gradients(y, {x}, ones_vec(4))[0]), {0, 1, 1, 3});
}

TEST(Gradients, ConvertSendsTheGradientBackInTheInputDtype) {
  Graph g;
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor x64 = convert(x, f64);
  Tensor dx = gradients(x64 * x64, {x}, ones_vec(2))[0];
  EXPECT_EQ(dx.dtype(), f32);
  expect_values(g.run({{x, Tensor::from_list<float>({1.5, -2})}}, dx), {3, -4});
}

TEST(Gradients, StopGradientIsTheIdentityThroughWhichNoGradientFlows) {
  expect_values(stop_gradient(vec({1, 2})), {1, 2});
  Graph g;
  Tensor x = g.placeholder(f64, {4}, "x");
  Tensor dx = gradients(x * stop_gradient(x), {x}, ones_vec(4))[0];
  expect_values(g.run({{x, vec(kX)}}, dx), kX);
  // The output of stop_gradient can itself be an x.
  Tensor c = stop_gradient(x);
  std::vector<Tensor> d = gradients(c * x * x, {x, c}, ones_vec(4));
  std::vector<Tensor> got = g.run({{x, vec({1, 2, 3, 4})}}, d);
  expect_values(got[0], {2, 8, 18, 32});  // 2cx
  expect_values(got[1], {1, 4, 9, 16});   // x^2
}

TEST(Gradients, MaxAndMinSplitTiesClampGivesThemToX) {
  Graph g;
  Tensor x = g.placeholder(f64, {3}, "x");
  Tensor y = g.placeholder(f64, {3}, "y");
  Tensor dz = vec({1, 2, 4});
  std::vector<Tensor> dmax = gradients(maximum(x, y), {x, y}, dz);
  std::vector<Tensor> dmin = gradients(minimum(x, y), {x, y}, dz);
  // clamp(x, lo = y, hi = y + 1): x = 1 is below lo, 2 equals lo, 3 equals hi.
  Tensor hi = g.placeholder(f64, {3}, "hi");
  std::vector<Tensor> dclamp = gradients(clamp(x, y, hi), {x, y, hi}, dz);
  FeedList feeds = {{x, vec({1, 2, 3})}, {y, vec({2, 2, 2})}, {hi, vec({3, 3, 3})}};
  std::vector<Tensor> got = g.run(feeds, {dmax[0], dmax[1], dmin[0], dmin[1]});
  expect_values(got[0], {0, 1, 4});
  expect_values(got[1], {1, 1, 0});
  expect_values(got[2], {1, 1, 0});
  expect_values(got[3], {0, 1, 4});
  got = g.run(feeds, dclamp);
  expect_values(got[0], {0, 2, 4});
  expect_values(got[1], {1, 0, 0});
  expect_values(got[2], {0, 0, 0});
}

TEST(Gradients, PowExponentGradientIsZeroWhereTheBaseIsNotPositive) {
  Graph g;
  Tensor x = g.placeholder(f64, {3}, "x");
  Tensor y = g.placeholder(f64, {3}, "y");
  std::vector<Tensor> d = gradients(pow(x, y), {x, y}, ones_vec(3));
  std::vector<Tensor> got = g.run({{x, vec({0, -2, 2})}, {y, vec({2, 2, 3})}}, d);
  expect_values(got[0], {0, -4, 12});
  expect_values(got[1], {0, 0, 8 * std::log(2.0)});
}

TEST(Gradients, BiasGradientIsSummedOverTheBroadcastRows) {
  Graph g;
  Tensor x = g.placeholder(f64, {2, 3}, "x");
  Tensor b = g.placeholder(f64, {3}, "b");
  Tensor s = g.placeholder(f64, {}, "s");
  Tensor dy = Tensor::from_list<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  std::vector<Tensor> d;
  SKIP_IF_PENDING(d = gradients((x + b) * s, {x, b, s}, dy));
  EXPECT_EQ(d[1].shape(), (Shape{3}));
  EXPECT_EQ(d[2].shape(), (Shape{}));
  std::vector<Tensor> got = g.run({{x, Tensor::from_list<double>({1, 1, 1, 2, 2, 2}, {2, 3})},
                                   {b, vec({0, 1, 2})},
                                   {s, Tensor::scalar(10.0)}},
                                  d);
  expect_values(got[0], {10, 20, 30, 40, 50, 60});
  expect_values(got[1], {50, 70, 90});
  // ds = sum(dy * (x + b)) = 1*1 + 2*2 + 3*3 + 4*2 + 5*3 + 6*4
  expect_values(got[2], {61});
}

TEST(Gradients, BroadcastingWorksWhenTheBatchSizeIsUnknownWhileRecording) {
  Graph g;
  Tensor x = g.placeholder(f64, {kUnknownDim, 2}, "x");
  Tensor b = g.placeholder(f64, {1, 2}, "b");
  Tensor dy = g.placeholder(f64, {kUnknownDim, 2}, "dy");
  Tensor db;
  SKIP_IF_PENDING(db = gradients(x * b, {b}, dy)[0]);
  auto rows = [](std::vector<double> v) {
    int64_t n = static_cast<int64_t>(v.size()) / 2;
    return Tensor::from_vector(v, {n, 2});
  };
  expect_values(g.run({{x, rows({1, 2, 3, 4})}, {b, rows({0, 0})}, {dy, rows({1, 1, 1, 1})}}, db),
                {4, 6});
  expect_values(g.run({{x, rows({1, 1, 1, 1, 1, 1, 1, 1})},
                       {b, rows({0, 0})},
                       {dy, rows({1, 2, 3, 4, 5, 6, 7, 8})}},
                      db),
                {16, 20});
}

TEST(Gradients, BackwardNodesAreRecordedUnderTheGradientsScope) {
  Graph g;
  Tensor x = g.placeholder(f64, {4}, "x");
  Tensor y = exp(x) * x;
  int before = g.num_nodes();
  gradients(y, {x}, ones_vec(4));
  ASSERT_GT(g.num_nodes(), before);
  for (int id = before; id < g.num_nodes(); ++id)
    EXPECT_THAT(g.node(id).name, testing::StartsWith("gradients/"));
}

TEST(Gradients, CustomOpWithARegisteredRule) {
  Graph g;
  Tensor x = g.placeholder(f64, {2}, "x");
  Tensor y = call_op("autodiff_test_twice", {x})[0] * x;  // 2x^2
  expect_values(g.run({{x, vec({1, -2})}}, gradients(y, {x}, ones_vec(2))[0]), {4, -8});
}

// ---- errors ----------------------------------------------------------------------------

TEST(GradientsErrors, OpWithoutARuleIsNamedWithItsNode) {
  Graph g;
  Tensor x = g.placeholder(f64, {2}, "x");
  Tensor y = call_op("autodiff_test_opaque", {x})[0] * x;
  std::string msg = message_of([&] { gradients(y, {x}, ones_vec(2)); });
  EXPECT_THAT(msg, HasSubstr("op 'autodiff_test_opaque' (node 'autodiff_test_opaque')"));
  EXPECT_THAT(msg, HasSubstr("no gradient rule"));
  // Cutting the path with stop_gradient avoids the op.
  Tensor z = call_op("autodiff_test_opaque", {stop_gradient(x)})[0] * x;
  expect_values(g.run({{x, vec({3, 4})}}, gradients(z, {x}, ones_vec(2))[0]), {3, 4});
}

TEST(GradientsErrors, RuleReturningTheWrongTypeIsReported) {
  Graph g;
  Tensor x = g.placeholder(f64, {2}, "x");
  Tensor y = call_op("autodiff_test_bad_rule", {x})[0];
  std::string msg = message_of([&] { gradients(y, {x}, ones_vec(2)); });
  EXPECT_THAT(msg, HasSubstr("autodiff_test_bad_rule"));
  EXPECT_THAT(msg, HasSubstr("returned f32[2] for input 0 of type f64[2]"));
}

TEST(GradientsErrors, XFromAnotherGraph) {
  Graph g("main"), other("other");
  Tensor x = other.placeholder(f64, {2}, "x");
  Tensor y = exp(g.placeholder(f64, {2}, "a"));
  EXPECT_THAT(message_of([&] { gradients(y, {x}, ones_vec(2)); }),
              HasSubstr("xs[0] belongs to graph 'other', but y to graph 'main'"));
}

TEST(GradientsErrors, ConcreteOrUndefinedArguments) {
  Graph g;
  Tensor x = g.placeholder(f64, {2}, "x");
  Tensor y = exp(x);
  EXPECT_THAT(message_of([&] {
                gradients(vec({1, 2}), {x});
              }),
              HasSubstr("y is a concrete tensor"));
  EXPECT_THAT(message_of([&] {
                gradients(y, {vec({1, 2})});
              }),
              HasSubstr("xs[0] is a concrete tensor"));
  EXPECT_THAT(message_of([&] { gradients(y, {Tensor()}); }),
              HasSubstr("xs[0] is an undefined tensor"));
}

TEST(GradientsErrors, NonFloatYOrMismatchedDy) {
  Graph g;
  Tensor x = g.placeholder(f64, {2}, "x");
  EXPECT_THAT(message_of([&] { gradients(convert(x, i32), {x}); }),
              HasSubstr("y must be floating-point to be differentiated, got i32[2]"));
  EXPECT_THAT(message_of([&] { gradients(exp(x), {x}, ones_vec(3)); }),
              HasSubstr("dy is f64[3] but y is f64[2]"));
  EXPECT_THAT(message_of([&] {
                gradients(exp(x), {x}, Tensor::from_list<float>({1, 1}));
              }),
              HasSubstr("dy is f32[2] but y is f64[2]"));
}

// ---- value_and_grad --------------------------------------------------------------------

TEST(ValueAndGrad, SumOfSquares) {
  std::pair<Tensor, std::vector<Tensor>> r;
  SKIP_IF_PENDING(r = value_and_grad([](const std::vector<Tensor>& a) { return sum(a[0] * a[0]); },
                                     {vec({1, 2, 3})}));
  expect_values(r.first, {14});
  ASSERT_EQ(r.second.size(), 1u);
  expect_values(r.second[0], {2, 4, 6});
}

TEST(ValueAndGrad, ElementwiseFunctionWithNonScalarOutputAndExplicitDy) {
  auto f = [](const std::vector<Tensor>& a) { return tanh(a[0] * a[1]); };
  std::vector<double> x = {0.5, -1, 2}, w = {1, 0.25, -0.5}, dy = {1, 2, 3};
  auto [value, grads] = value_and_grad(f, {vec(x), vec(w)}, vec(dy));
  std::vector<double> want_value, want_dx, want_dw;
  for (size_t i = 0; i < 3; ++i) {
    double t = std::tanh(x[i] * w[i]);
    want_value.push_back(t);
    want_dx.push_back(dy[i] * (1 - t * t) * w[i]);
    want_dw.push_back(dy[i] * (1 - t * t) * x[i]);
  }
  EXPECT_FALSE(value.is_symbolic());
  expect_values(value, want_value);
  ASSERT_EQ(grads.size(), 2u);
  expect_values(grads[0], want_dx);
  expect_values(grads[1], want_dw);
  expect_values(grad(f, {vec(x), vec(w)}, vec(dy))[1], want_dw);
}

TEST(ValueAndGrad, FunctionIgnoringAnArgumentGivesItZeros) {
  std::vector<Tensor> d;
  SKIP_IF_PENDING(d = grad([](const std::vector<Tensor>& a) { return exp(a[0]); },
                           {vec({0}), Tensor::from_list<float>({1, 2})}, vec({1})));
  expect_values(d[0], {1});
  EXPECT_EQ(d[1].dtype(), f32);
  expect_values(d[1], {0, 0});
}

TEST(ValueAndGrad, ArgumentsMustBeConcrete) {
  Graph g;
  Tensor x = g.placeholder(f64, {2}, "x");
  EXPECT_THAT(
      message_of([&] { value_and_grad([](const std::vector<Tensor>& a) { return a[0]; }, {x}); }),
      HasSubstr("value_and_grad: args[0] must be a concrete tensor"));
}

}  // namespace
}  // namespace kiln
