// kiln::function: results equal eager execution in both modes, one trace per signature,
// variables read and assigned inside, composition inside other traces, custom ops inside
// compiled programs, and clear errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/autodiff.h"
#include "kiln/kiln.h"
#include "kiln/variable.h"
#include "tests/subprocess.h"

KILN_REGISTER_OP(function_test_cube).input("x").shape_fn([](const kiln::InferContext& ctx) {
  return std::vector<kiln::TensorType>{ctx.input(0)};
});
KILN_REGISTER_KERNEL(function_test_cube).dtypes({kiln::f32}).fn([](kiln::KernelContext& ctx) {
  auto x = ctx.input(0).data<float>();
  auto y = ctx.allocate_output(0).mutable_data<float>();
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * x[i] * x[i];
});

namespace kiln {
namespace {

using ::testing::HasSubstr;

Tensor seq(Shape shape, float scale = 0.1f, float offset = -0.3f) {
  Tensor t = zeros(shape);
  auto d = t.mutable_data<float>();
  for (size_t i = 0; i < d.size(); ++i) d[i] = offset + scale * static_cast<float>(i % 13);
  return t;
}

void expect_near(const Tensor& got, const Tensor& want, float tol = 1e-5f) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  auto g = got.data<float>();
  auto w = want.data<float>();
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << "at " << i;
}

Tensor dense(const Tensor& x, const Tensor& w, const Tensor& b) {
  return tanh(relu(matmul(x, w) + b) * 0.5 + 1.0);
}

class FunctionModes : public testing::TestWithParam<ExecutionMode> {};

TEST_P(FunctionModes, MatchesEagerAndTracesOncePerSignature) {
  auto f = function([](const Tensor& x, const Tensor& w, const Tensor& b) { return dense(x, w, b); },
                    {.name = "dense", .mode = GetParam()});
  Tensor x = seq({4, 3}), w = seq({3, 5}, 0.2f), b = seq({5}, 0.05f, 0.1f);
  expect_near(f(x, w, b), dense(x, w, b));
  expect_near(f(x, w, b), dense(x, w, b));
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().cache_hits, 1);
  Tensor x2 = seq({7, 3});  // a new batch size is a new signature
  expect_near(f(x2, w, b), dense(x2, w, b));
  EXPECT_EQ(f.stats().traces, 2);
  EXPECT_EQ(f.stats().calls, 3);
}

TEST_P(FunctionModes, ReadsAndAssignsVariables) {
  Variable counter(Tensor::scalar<float>(0), "counter");
  Variable w(seq({3}), "w");
  auto step = function(
      [&](const Tensor& x) {
        Tensor y = x * w.value();
        counter.assign(counter.value() + 1.0);
        w.assign(w.value() * 2.0);
        return y + w.value();  // reads the value assigned above
      },
      {.mode = GetParam()});
  Tensor x = seq({3}, 1.0f, 1.0f);  // 1, 2, 3
  Tensor w0 = w.value();
  Tensor y = step(x);
  expect_near(y, x * w0 + w0 * 2.0);
  EXPECT_FLOAT_EQ(counter.value().item<float>(), 1.0f);
  expect_near(w.value(), w0 * 2.0);
  w.assign(seq({3}, 0.0f, 1.0f));  // changed outside: the next call sees the new value
  step(x);
  expect_near(w.value(), seq({3}, 0.0f, 2.0f));
  EXPECT_FLOAT_EQ(counter.value().item<float>(), 2.0f);
  EXPECT_EQ(step.stats().traces, 1);
}

TEST_P(FunctionModes, TrainsWithGradientsInside) {
  Variable w(zeros({3}), "w");
  Tensor x = random_uniform({8, 3}, /*seed=*/3, -1, 1);
  Tensor target =
      reshape(matmul(x, reshape(Tensor::from_list<float>({1.0f, -2.0f, 0.5f}), {3, 1})), {8});
  auto sgd = function(
      [&](const Tensor& xs, const Tensor& ys) {
        Tensor wv = w.value();
        Tensor err = reshape(matmul(xs, reshape(wv, {3, 1})), {8}) - ys;
        Tensor loss = mean(err * err);
        w.assign(wv - gradients(loss, {wv})[0] * 0.1);
        return loss;
      },
      {.mode = GetParam()});
  double first = sgd(x, target).item<float>();
  double last = first;
  for (int i = 0; i < 200; ++i) last = sgd(x, target).item<float>();
  EXPECT_LT(last, first * 1e-3);
  auto wv = w.value().data<float>();
  EXPECT_NEAR(wv[0], 1.0f, 1e-2);
  EXPECT_NEAR(wv[1], -2.0f, 1e-2);
  EXPECT_NEAR(wv[2], 0.5f, 1e-2);
  EXPECT_EQ(sgd.stats().traces, 1);
}

TEST_P(FunctionModes, CustomOpsRunInside) {
  auto f = function([](const Tensor& x) { return call_op("function_test_cube", {x * 2.0})[0] + 1.0; },
                    {.mode = GetParam()});
  Tensor x = seq({2, 3});
  expect_near(f(x), call_op("function_test_cube", {x * 2.0})[0] + 1.0);
}

TEST_P(FunctionModes, ConstantAndPassThroughResults) {
  auto f = function(
      [](const std::vector<Tensor>& args) {
        return std::vector<Tensor>{args[0], full({2}, 7.0), args[1] * 3.0};
      },
      {.mode = GetParam()});
  Tensor a = seq({2, 2}), b = seq({3});
  std::vector<Tensor> out = f(a, b);
  ASSERT_EQ(out.size(), 3u);
  expect_near(out[0], a);
  expect_near(out[1], full({2}, 7.0));
  expect_near(out[2], b * 3.0);
}

INSTANTIATE_TEST_SUITE_P(Modes, FunctionModes,
                         testing::Values(ExecutionMode::kCompiled, ExecutionMode::kInterpreted),
                         [](const testing::TestParamInfo<ExecutionMode>& info) {
                           return std::string(execution_mode_name(info.param));
                         });

TEST(Function, InlinesInsideAnotherTrace) {
  auto inner = function([](const Tensor& x) { return exp(x) - 1.0; });
  auto outer = function([&](const Tensor& x) { return inner(x) * inner(x * 2.0); });
  Tensor x = seq({5});
  expect_near(outer(x), (exp(x) - 1.0) * (exp(x * 2.0) - 1.0));
  EXPECT_EQ(inner.stats().traces, 0);  // called on symbolic tensors: inlined, never traced
  Graph g("g");
  Tensor p = g.placeholder(f32, {5}, "p");
  Tensor y = inner(p);
  EXPECT_TRUE(y.is_symbolic());
  expect_near(g.run({{p, x}}, y), exp(x) - 1.0);
}

TEST(Function, TraceShowsTheGraph) {
  auto f = function([](const Tensor& x) { return sigmoid(x) * 2.0; }, {.name = "scaled"});
  Function::Trace t = f.trace({seq({3})});
  EXPECT_EQ(t.graph.name(), "scaled");
  ASSERT_EQ(t.arguments.size(), 1u);
  EXPECT_EQ(t.arguments[0].shape(), (Shape{3}));
  EXPECT_THAT(t.graph.to_text(), HasSubstr("logistic"));
  EXPECT_EQ(f.stats().calls, 0);
}

TEST(Function, CacheIsBoundedLru) {
  auto f = function([](const Tensor& x) { return x + 1.0; }, {.cache_capacity = 2});
  for (int64_t n : {1, 2, 3, 1}) f(zeros({n}));
  EXPECT_EQ(f.stats().traces, 4);  // 1 was evicted by 3
  EXPECT_EQ(f.stats().evictions, 2);
  f(zeros({1}));
  EXPECT_EQ(f.stats().cache_hits, 1);
}

TEST(Function, ErrorsNameTheFunction) {
  auto f = function([](const Tensor& x, const Tensor& y) { return x + y; }, {.name = "adder"});
  try {
    f.call({seq({2})});
    FAIL() << "expected an arity error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("'adder' takes 2 tensors, called with 1"));
  }
  auto g = function([](const Tensor&) { return Tensor(); }, {.name = "hollow"});
  EXPECT_THAT([&] { g(seq({2})); },
              testing::ThrowsMessage<Error>(HasSubstr("'hollow': result 0 is undefined")));
  // Errors inside the body propagate with the op's message and nothing is cached.
  auto h = function([](const Tensor& x) { return matmul(x, x); });
  EXPECT_THROW(h(seq({2, 3})), Error);
  EXPECT_EQ(h.stats().traces, 0);
}

TEST(Function, DefaultModeCanBeSwitched) {
  ExecutionMode before = default_execution_mode();
  set_default_execution_mode(ExecutionMode::kInterpreted);
  EXPECT_EQ(default_execution_mode(), ExecutionMode::kInterpreted);
  auto f = function([](const Tensor& x) { return x * x; });
  expect_near(f(seq({4})), seq({4}) * seq({4}));
  set_default_execution_mode(ExecutionMode::kCompiled);
  expect_near(f(seq({4})), seq({4}) * seq({4}));
  set_default_execution_mode(before);
}

// Checks the environment's choice in whatever process runs it; the test below runs it again in a
// child process with KILN_INTERPRET=1.
TEST(ExecutionModeEnvironment, FollowsKilnInterpret) {
  const char* v = std::getenv("KILN_INTERPRET");
  bool interpret = v && *v && std::string(v) != "0";
  EXPECT_EQ(default_execution_mode(),
            interpret ? ExecutionMode::kInterpreted : ExecutionMode::kCompiled);
  std::printf("default execution mode: %s\n", execution_mode_name(default_execution_mode()));
}

TEST(ExecutionModeEnvironment, KilnInterpretSelectsTheInterpreterInANewProcess) {
  std::string log = testing::TempDir() + "/kiln_interpret_" + std::to_string(getpid()) + ".log";
  testing_util::ProcessResult r = testing_util::run_process(
      {"/proc/self/exe", "--gtest_filter=ExecutionModeEnvironment.FollowsKilnInterpret"}, log,
      {{"KILN_INTERPRET", "1"}});
  EXPECT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("default execution mode: interpreted"));
  EXPECT_THAT(r.output, HasSubstr("1 test"));
}

}  // namespace
}  // namespace kiln
