// Reverse-mode autodiff: gradients of composed expressions against hand-derived formulas,
// accumulation, broadcasting, stopping the flow, composite nn functions through the layout,
// reduction and dot rules, graphs with an unknown batch size, errors, and value_and_grad.
#include "kiln/autodiff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>

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
  Tensor dx = gradients(y, {x}, ones_vec(4))[0];
  std::vector<double> want;
  for (double v : kX) want.push_back(6 * v - 1 / ((v + 2) * (v + 2)));
  expect_values(g.run({{x, vec(kX)}}, dx), want);
}

TEST(Gradients, DefaultCotangentIsOnes) {
  Graph g;
  Tensor x = g.placeholder(f64, {4}, "x");
  Tensor y = tanh(x);
  Tensor dx = gradients(y, {x})[0];
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
  std::vector<Tensor> d = gradients(sin(a), {a, b}, ones_vec(2));
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
  std::vector<Tensor> d = gradients((x + b) * s, {x, b, s}, dy);
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
  Tensor db = gradients(x * b, {b}, dy)[0];
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

// ---- composite functions through the layout, reduction and dot rules --------------------

Tensor mat(std::vector<double> v, Shape shape) { return Tensor::from_vector(v, shape); }

// Row-wise softmax of a rows x cols matrix, on the host.
std::vector<double> softmax_rows(const std::vector<double>& x, size_t cols) {
  std::vector<double> out(x.size());
  for (size_t r = 0; r < x.size() / cols; ++r) {
    double total = 0;
    for (size_t c = 0; c < cols; ++c) total += std::exp(x[r * cols + c]);
    for (size_t c = 0; c < cols; ++c) out[r * cols + c] = std::exp(x[r * cols + c]) / total;
  }
  return out;
}

TEST(CompositeGradients, LogSoftmaxGivesWeightsMinusSoftmaxTimesTheirSum) {
  // Row 2 has a tie for the maximum that log_softmax subtracts: its gradient cancels anyway.
  std::vector<double> x = {0.5, -1, 2, 3, 3, 0.1}, w = {1, 2, -1, 0.5, 0, 4};
  auto f = [](const std::vector<Tensor>& a) { return sum(log_softmax(a[0]) * a[1]); };
  std::vector<Tensor> d = grad(f, {mat(x, {2, 3}), mat(w, {2, 3})});
  std::vector<double> s = softmax_rows(x, 3), want_dx(6), want_dw(6);
  for (size_t i = 0; i < 6; ++i) {
    size_t r = i / 3;
    want_dx[i] = w[i] - s[i] * (w[3 * r] + w[3 * r + 1] + w[3 * r + 2]);
    want_dw[i] = std::log(s[i]);
  }
  expect_values(d[0], want_dx);
  expect_values(d[1], want_dw);
}

TEST(CompositeGradients, SoftmaxAlongTheFirstAxis) {
  // softmax over axis 0 of a 2 x 3 matrix: each column is a distribution s, and the gradient
  // of sum(s * w) is s * (w - sum(s * w)) per column.
  std::vector<double> x = {0.5, -1, 2, 3, 1, 0.1}, w = {1, 2, -1, 0.5, 0, 4};
  std::vector<double> xt = {x[0], x[3], x[1], x[4], x[2], x[5]};
  std::vector<double> st = softmax_rows(xt, 2), want(6);
  for (size_t c = 0; c < 3; ++c) {
    double s0 = st[2 * c], s1 = st[2 * c + 1];
    double mean_w = s0 * w[c] + s1 * w[3 + c];
    want[c] = s0 * (w[c] - mean_w);
    want[3 + c] = s1 * (w[3 + c] - mean_w);
  }
  auto f = [&](const std::vector<Tensor>& a) { return sum(softmax(a[0], 0) * mat(w, {2, 3})); };
  expect_values(grad(f, {mat(x, {2, 3})})[0], want);
}

TEST(CompositeGradients, LogsumexpGivesTheSoftmax) {
  std::vector<double> x = {0.5, -1, 2, 30, 31, 29};
  auto f = [](const std::vector<Tensor>& a) { return logsumexp(a[0], {1}); };
  std::vector<double> s = softmax_rows(x, 3), want(6);
  for (size_t i = 0; i < 6; ++i) want[i] = (i < 3 ? 1 : 2) * s[i];
  expect_values(grad(f, {mat(x, {2, 3})}, vec({1, 2}))[0], want);
}

TEST(CompositeGradients, GeluInBothForms) {
  std::vector<double> x = {-3, -0.5, 0, 0.7, 2.5};
  std::vector<double> want_erf, want_tanh;
  const double c = std::sqrt(2 / std::numbers::pi);
  for (double v : x) {
    double cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
    want_erf.push_back(cdf + v * std::exp(-v * v / 2) / std::sqrt(2 * std::numbers::pi));
    double t = std::tanh(c * (v + 0.044715 * v * v * v));
    want_tanh.push_back(0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v));
  }
  auto exact = [](const std::vector<Tensor>& a) { return gelu(a[0]); };
  auto approx = [](const std::vector<Tensor>& a) { return gelu(a[0], /*approximate=*/true); };
  expect_values(grad(exact, {vec(x)}, ones_vec(5))[0], want_erf);
  expect_values(grad(approx, {vec(x)}, ones_vec(5))[0], want_tanh);
}

TEST(CompositeGradients, SoftplusIsTheSigmoidEvenAtLargeMagnitudes) {
  std::vector<double> x = {-800, -50, -1, 0, 0.5, 30, 800}, want;
  for (double v : x) want.push_back(1 / (1 + std::exp(-v)));
  auto f = [](const std::vector<Tensor>& a) { return softplus(a[0]); };
  expect_values(grad(f, {vec(x)}, ones_vec(x.size()))[0], want);
}

TEST(CompositeGradients, MeanAndVariance) {
  std::vector<double> x = {1, 2, 6, -1, 0, 4};
  // variance over axis 1 with dy = (1, 2): dy_r * 2 (x - mean_r) / 3, row means 3 and 1.
  auto var = [](const std::vector<Tensor>& a) { return variance(a[0], {1}); };
  expect_values(grad(var, {mat(x, {2, 3})}, vec({1, 2}))[0],
                {-4.0 / 3, -2.0 / 3, 2, -8.0 / 3, -4.0 / 3, 4});
  // mean over axis 0 with dy = (1, 2, 3): dy_c / 2.
  auto mean0 = [](const std::vector<Tensor>& a) { return mean(a[0], {0}); };
  expect_values(grad(mean0, {mat(x, {2, 3})}, vec({1, 2, 3}))[0], {0.5, 1, 1.5, 0.5, 1, 1.5});
}

TEST(CompositeGradients, MatmulWithBroadcastBatchDimensions) {
  // a [2,1,2,3] x b [3,3,2] -> [2,3,2,2]: a's batch [2,1] and b's [3] broadcast to [2,3].
  std::vector<double> av(12), bv(18), dyv(24);
  for (size_t i = 0; i < av.size(); ++i) av[i] = 0.5 * i - 2;
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = std::sin(i + 1.0);
  for (size_t i = 0; i < dyv.size(); ++i) dyv[i] = std::cos(i + 0.5);
  auto f = [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); };
  auto [value, d] =
      value_and_grad(f, {mat(av, {2, 1, 2, 3}), mat(bv, {3, 3, 2})}, mat(dyv, {2, 3, 2, 2}));
  EXPECT_EQ(value.shape(), (Shape{2, 3, 2, 2}));
  auto A = [&](int i, int m, int k) { return av[(i * 2 + m) * 3 + k]; };
  auto B = [&](int j, int k, int n) { return bv[(j * 3 + k) * 2 + n]; };
  auto DY = [&](int i, int j, int m, int n) { return dyv[((i * 3 + j) * 2 + m) * 2 + n]; };
  std::vector<double> want_da(12, 0), want_db(18, 0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int m = 0; m < 2; ++m)
        for (int n = 0; n < 2; ++n)
          for (int k = 0; k < 3; ++k) {
            want_da[(i * 2 + m) * 3 + k] += DY(i, j, m, n) * B(j, k, n);
            want_db[(j * 3 + k) * 2 + n] += A(i, m, k) * DY(i, j, m, n);
          }
  expect_values(d[0], want_da);
  expect_values(d[1], want_db);
}

TEST(CompositeGradients, MatmulGradientsAreDotsWithoutTransposes) {
  for (bool batched_b : {false, true}) {
    Graph g;
    Tensor a = g.placeholder(f64, {2, 3, 4}, "a");
    Tensor b = g.placeholder(f64, batched_b ? Shape{2, 4, 5} : Shape{4, 5}, "b");
    Tensor y = matmul(a, b);
    int before = g.num_nodes();
    std::vector<Tensor> d = gradients(y, {a, b});
    int dots = 0, others = 0;
    for (int id = before; id < g.num_nodes(); ++id) {
      const std::string& op = g.node(id).op;
      if (op == "dot") ++dots;
      if (op == "transpose" || op == "reshape" || op == "broadcast_in_dim") ++others;
    }
    EXPECT_EQ(dots, 2) << g.to_text();
    // The default dy (ones) is one broadcast; nothing else moves data.
    EXPECT_LE(others, 1) << g.to_text();
    EXPECT_EQ(d[0].shape(), a.shape());
    EXPECT_EQ(d[1].shape(), b.shape());
    // With dy = ones: da[.., m, k] = sum_n b[k, n] and db[k, n] = sum over rows of a[.., k].
    std::vector<double> av(24), bv(batched_b ? 40 : 20);
    for (size_t i = 0; i < av.size(); ++i) av[i] = i;
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = 1;
    std::vector<Tensor> got = g.run({{a, mat(av, a.shape())}, {b, mat(bv, b.shape())}}, d);
    expect_values(got[0], std::vector<double>(24, 5));
    std::vector<double> want_db;
    for (int batch = 0; batch < (batched_b ? 2 : 1); ++batch) {
      for (int k = 0; k < 4; ++k) {
        double total = 0;
        for (int i = 0; i < 24; ++i)
          if (i % 4 == k && (!batched_b || i / 12 == batch)) total += av[i];
        for (int n = 0; n < 5; ++n) want_db.push_back(total);
      }
    }
    expect_values(got[1], want_db);
  }
}

TEST(CompositeGradients, ProdAtZerosIsTheProductOfTheOthers) {
  // No zero: prod / x. One zero: the product of the others there, 0 elsewhere. Two: all 0.
  std::vector<double> x = {2, 3, 4, 0, 3, 4, 0, 3, 0};
  auto f = [](const std::vector<Tensor>& a) { return prod(a[0], {1}); };
  expect_values(grad(f, {mat(x, {3, 3})}, vec({1, 2, 3}))[0], {12, 8, 6, 24, 0, 0, 0, 0, 0});
}

TEST(CompositeGradients, MaxAndMinReductionsSplitTiesEvenly) {
  Tensor x = mat({1, 3, 3, 2, -1, -1}, {2, 3});
  auto max1 = [](const std::vector<Tensor>& a) { return max(a[0], {1}); };
  auto min1 = [](const std::vector<Tensor>& a) { return min(a[0], {-1}); };
  auto max_all = [](const std::vector<Tensor>& a) { return max(a[0]); };
  expect_values(grad(max1, {x}, vec({1, 4}))[0], {0, 0.5, 0.5, 4, 0, 0});
  expect_values(grad(min1, {x}, vec({1, 4}))[0], {1, 0, 0, 0, 2, 2});
  expect_values(grad(max_all, {x})[0], {0, 0.5, 0.5, 0, 0, 0});
}

TEST(CompositeGradients, PadValueGetsTheGradientOfThePaddedPositions) {
  Graph g;
  Tensor x = g.placeholder(f64, {2}, "x");
  Tensor v = g.placeholder(f64, {}, "v");
  // [v, x0, v, x1, v, v]
  Tensor z =
      call_op("pad", {x, v}, {{"low", Axes{1}}, {"high", Axes{2}}, {"interior", Axes{1}}})[0];
  std::vector<Tensor> d = gradients(z, {x, v}, vec({1, 2, 3, 4, 5, 6}));
  std::vector<Tensor> got = g.run({{x, vec({7, 8})}, {v, Tensor::scalar(0.5)}}, d);
  expect_values(got[0], {2, 4});
  expect_values(got[1], {15});
}

// ---- gradients recorded with an unknown batch size ---------------------------------------

// rows x cols values from f(r, c).
Tensor rows_of(int64_t rows, int64_t cols, const std::function<double(int64_t, int64_t)>& f) {
  std::vector<double> v;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) v.push_back(f(r, c));
  return mat(v, {rows, cols});
}

TEST(UnknownBatch, ReshapeAndBroadcastRules) {
  Graph g;
  Tensor x = g.placeholder(f64, {kUnknownDim, 4}, "x");
  Tensor w = g.placeholder(f64, {2, 2}, "w");
  Tensor b = g.placeholder(f64, {4}, "b");
  Tensor r = reshape(x, {-1, 2, 2});  // [?, 2, 2]
  Tensor e = expand_dims(x, 1);       // [?, 1, 4], a broadcast_in_dim
  Tensor loss = sum(r * w) + sum(broadcast_like(b, x, {1}) * x) + sum(e * 3.0);
  std::vector<Tensor> d = gradients(loss, {x, w, b});
  for (int64_t n : {1, 3}) {
    Tensor xv = rows_of(n, 4, [](int64_t i, int64_t j) { return i * 4 + j; });
    std::vector<Tensor> got =
        g.run({{x, xv}, {w, mat({1, 2, 3, 4}, {2, 2})}, {b, vec({-1, 0, 1, 2})}}, d);
    EXPECT_EQ(got[0].shape(), (Shape{n, 4}));
    // dx = w (flattened) + b + 3; dw and db sum x over the batch.
    std::vector<double> want_dx, want_dw(4, 0), want_db(4, 0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        want_dx.push_back((j + 1) + (j - 1) + 3);
        want_dw[j] += i * 4 + j;
        want_db[j] += i * 4 + j;
      }
    }
    expect_values(got[0], want_dx);
    expect_values(got[1], want_dw);
    expect_values(got[2], want_db);
  }
}

TEST(UnknownBatch, ReductionRules) {
  Graph g;
  Tensor x = g.placeholder(f64, {kUnknownDim, 4}, "x");
  Tensor dy = g.placeholder(f64, {4}, "dy");
  Tensor d_sum = gradients(sum(x, {0}), {x}, dy)[0];
  Tensor d_mean = gradients(mean(x), {x})[0];
  Tensor d_max = gradients(max(x, {0}), {x}, dy)[0];
  Tensor d_prod = gradients(prod(x, {0}), {x})[0];
  Tensor xv = mat({1, 2, 3, 4, 5, -6, 7, 0, 2, 2, -1, 1}, {3, 4});
  std::vector<Tensor> got =
      g.run({{x, xv}, {dy, vec({1, 2, 3, 4})}}, {d_sum, d_mean, d_max, d_prod});
  expect_values(got[0], {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4});
  expect_values(got[1], std::vector<double>(12, 1.0 / 12));
  // Column maxima: 5 (row 1), 2 (rows 0 and 2 tie), 7 (row 1), 4 (row 0).
  expect_values(got[2], {0, 1, 0, 4, 1, 0, 3, 0, 0, 1, 0, 0});
  // Column products 10, -24, -21 over x; column 3 holds one zero, which gets 4 * 1.
  expect_values(got[3], {10, -12, -7, 0, 2, 4, -3, 4, 5, -12, 21, 0});
  got = g.run({{x, mat({1, 2, 3, 4}, {1, 4})}, {dy, vec({1, 2, 3, 4})}}, {d_sum, d_mean});
  expect_values(got[0], {1, 2, 3, 4});
  expect_values(got[1], {0.25, 0.25, 0.25, 0.25});
}

TEST(UnknownBatch, MatmulRule) {
  Graph g;
  Tensor x = g.placeholder(f64, {kUnknownDim, 3}, "x");
  Tensor w = g.placeholder(f64, {3, 2}, "w");
  Tensor dy = g.placeholder(f64, {kUnknownDim, 2}, "dy");
  std::vector<Tensor> d = gradients(matmul(x, w), {x, w}, dy);
  std::vector<double> wv = {1, -1, 2, 0.5, -3, 2};
  for (int64_t n : {2, 4}) {
    Tensor xv = rows_of(n, 3, [](int64_t i, int64_t j) { return i - j * 0.5; });
    Tensor dyv = rows_of(n, 2, [](int64_t i, int64_t j) { return 1 + i + 2 * j; });
    std::vector<Tensor> got = g.run({{x, xv}, {w, mat(wv, {3, 2})}, {dy, dyv}}, d);
    std::vector<double> want_dx, want_dw(6, 0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < 3; ++k) {
        double total = 0;
        for (int64_t j = 0; j < 2; ++j) {
          total += (1 + i + 2 * j) * wv[k * 2 + j];
          want_dw[k * 2 + j] += (i - k * 0.5) * (1 + i + 2 * j);
        }
        want_dx.push_back(total);
      }
    }
    expect_values(got[0], want_dx);
    expect_values(got[1], want_dw);
  }
}

TEST(UnknownBatch, ConcatenatePadAndSliceRules) {
  Graph g;
  Tensor x = g.placeholder(f64, {kUnknownDim, 3}, "x");
  Tensor dc = g.placeholder(f64, {kUnknownDim, 6}, "dc");
  Tensor dp = g.placeholder(f64, {kUnknownDim, 8}, "dp");
  Tensor c = concatenate({x, x * 2.0}, 1);       // [?, 6]
  Tensor p = pad(x, {0, 1}, {0, 2}, 0, {0, 1});  // [?, 8]: x at columns 1, 3 and 5
  Tensor s = slice(x, {1, 0}, {3, 3}, {1, 2});   // rows 1 and 2, columns 0 and 2
  std::vector<Tensor> d = {gradients(c, {x}, dc)[0], gradients(p, {x}, dp)[0],
                           gradients(s, {x}, mat({1, 2, 3, 4}, {2, 2}))[0]};
  auto tens = [](int64_t i, int64_t j) { return 10.0 * i + j; };
  std::vector<Tensor> got =
      g.run({{x, rows_of(3, 3, tens)}, {dc, rows_of(3, 6, tens)}, {dp, rows_of(3, 8, tens)}}, d);
  expect_values(got[0], {6, 9, 12, 36, 39, 42, 66, 69, 72});  // dc[:, j] + 2 dc[:, j + 3]
  expect_values(got[1], {1, 3, 5, 11, 13, 15, 21, 23, 25});
  expect_values(got[2], {0, 0, 0, 1, 0, 2, 3, 0, 4});
  got = g.run({{x, rows_of(4, 3, tens)}, {dc, rows_of(4, 6, tens)}, {dp, rows_of(4, 8, tens)}}, d);
  expect_values(got[0], {6, 9, 12, 36, 39, 42, 66, 69, 72, 96, 99, 102});
  expect_values(got[1], {1, 3, 5, 11, 13, 15, 21, 23, 25, 31, 33, 35});
  expect_values(got[2], {0, 0, 0, 1, 0, 2, 3, 0, 4, 0, 0, 0});
}

TEST(UnknownBatch, ConcatenatingAlongAnUnknownSizeIsReported) {
  Graph g;
  Tensor x = g.placeholder(f64, {kUnknownDim, 3}, "x");
  std::string msg = message_of([&] { gradients(concatenate({x, x}, 0), {x}); });
  EXPECT_THAT(msg, HasSubstr("concatenate: cannot build the gradient: the size of input 0 [?,3] "
                             "along axis 0 is unknown while recording"));
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
  std::pair<Tensor, std::vector<Tensor>> r = value_and_grad(
      [](const std::vector<Tensor>& a) { return sum(a[0] * a[0]); }, {vec({1, 2, 3})});
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
  std::vector<Tensor> d = grad([](const std::vector<Tensor>& a) { return exp(a[0]); },
                               {vec({0}), Tensor::from_list<float>({1, 2})}, vec({1}));
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
