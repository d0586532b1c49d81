// The op and kernel registries: custom ops registered at run time and with the macros from a
// user's translation unit, used eagerly and in graphs; kernel dtype constraints; gradients.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>

#include "kiln/kiln.h"
#include "tests/testing/values.h"

namespace kiln {
namespace {

using test_values::thrown_error;

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;

std::vector<TensorType> same_as_input(const InferContext& ctx) { return {ctx.input(0)}; }

// ---- an op registered at run time: axpy(x, y; alpha) = alpha * x + y (same shapes) ---------

template <class T>
void axpy_kernel(KernelContext& ctx) {
  T alpha = static_cast<T>(ctx.attrs().get_float("alpha"));
  auto x = ctx.input(0).data<T>();
  auto y = ctx.input(1).data<T>();
  auto out = ctx.allocate_output(0).mutable_data<T>();
  for (size_t i = 0; i < x.size(); ++i) out[i] = alpha * x[i] + y[i];
}

void register_axpy_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpDef def;
    def.name = "registry_test_axpy";
    def.inputs = {"x", "y"};
    def.shape_fn = [](const InferContext& ctx) {
      const TensorType& x = ctx.input(0);
      const TensorType& y = ctx.input(1);
      if (x.dtype != y.dtype) ctx.fail("dtype mismatch: x is " + x.str() + ", y is " + y.str());
      if (x.shape.size() != y.shape.size()) {
        ctx.fail("shapes differ: x is " + x.str() + ", y is " + y.str());
      }
      Shape out = x.shape;
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i] == kUnknownDim) out[i] = y.shape[i];
        if (x.shape[i] != kUnknownDim && y.shape[i] != kUnknownDim && x.shape[i] != y.shape[i])
          ctx.fail("shapes differ: x is " + x.str() + ", y is " + y.str());
      }
      ctx.attrs().get_float("alpha");
      return std::vector<TensorType>{{x.dtype, out}};
    };
    def.source = "registry_test.cc (run time)";
    OpRegistry::global().add(std::move(def));
    KernelRegistry::global().add(
        {"registry_test_axpy", DeviceType::kCpu, {f32}, axpy_kernel<float>, "registry_test.cc"});
    KernelRegistry::global().add(
        {"registry_test_axpy", DeviceType::kCpu, {f64}, axpy_kernel<double>, "registry_test.cc"});
  });
}

Tensor axpy(const Tensor& x, const Tensor& y, double alpha) {
  return call_op("registry_test_axpy", {x, y}, {{"alpha", alpha}})[0];
}

TEST(Registry, RunTimeRegisteredOpRunsEagerly) {
  register_axpy_once();
  Tensor x = Tensor::from_list<float>({1, 2, 3});
  Tensor y = Tensor::from_list<float>({10, 20, 30});
  Tensor out = axpy(x, y, 2.0);
  EXPECT_EQ(out.dtype(), f32);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{12, 24, 36}));

  Tensor xd = Tensor::from_list<double>({0.5});
  EXPECT_EQ(axpy(xd, xd, -4.0).item<double>(), -1.5);
}

TEST(Registry, RunTimeRegisteredOpRecordsAndRunsInAGraph) {
  register_axpy_once();
  Graph g("g");
  Tensor x = g.placeholder(f32, {kUnknownDim}, "x");
  Tensor y;
  {
    auto scope = g.name_scope("layer");
    y = axpy(x, x * 3.0, 0.5);
  }
  NodeInfo node = g.node("layer/registry_test_axpy");
  EXPECT_EQ(node.op, "registry_test_axpy");
  EXPECT_EQ(node.attrs.get_float("alpha"), 0.5);
  EXPECT_THAT(g.to_text(), HasSubstr("registry_test_axpy(%0, %2) {alpha=0.5} -> f32[?]"));
  Tensor out = g.run({{x, Tensor::from_list<float>({2, 4})}}, y);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{7, 14}));
}

TEST(Registry, ShapeFunctionErrorsNameTheCustomOpAndNode) {
  register_axpy_once();
  Graph g("g");
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor y = g.placeholder(f32, {3}, "y");
  auto scope = g.name_scope("block");
  Error e = thrown_error([&] { axpy(x, y, 1.0); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("registry_test_axpy: shapes differ"), HasSubstr("f32[2]"),
                              HasSubstr("f32[3]"), HasSubstr("(in block/registry_test_axpy)")));

  Error attr = thrown_error([&] { call_op("registry_test_axpy", {x, x}); });
  EXPECT_THAT(attr.what(), AllOf(HasSubstr("registry_test_axpy"), HasSubstr("'alpha'")));
}

TEST(Registry, KernelDtypeConstraintsSelectTheKernel) {
  register_axpy_once();
  auto& kernels = KernelRegistry::global();
  EXPECT_TRUE(kernels.contains("registry_test_axpy", DeviceType::kCpu, f32));
  EXPECT_TRUE(kernels.contains("registry_test_axpy", DeviceType::kCpu, f64));
  EXPECT_FALSE(kernels.contains("registry_test_axpy", DeviceType::kCpu, i32));
  EXPECT_FALSE(kernels.contains("registry_test_axpy", DeviceType::kCuda, f32));

  Tensor xi = Tensor::from_list<int32_t>({1});
  Error e = thrown_error([&] { axpy(xi, xi, 1.0); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("registry_test_axpy"), HasSubstr("cpu"),
                              HasSubstr("dtype i32"), HasSubstr("f32, f64")));

  Error cuda = thrown_error(
      [] { KernelRegistry::global().find("registry_test_axpy", DeviceType::kCuda, f32); });
  EXPECT_EQ(cuda.code(), ErrorCode::kNotFound);
  EXPECT_THAT(cuda.what(), HasSubstr("no cuda kernel"));
}

TEST(Registry, OverlappingKernelDtypesAreRejected) {
  register_axpy_once();
  KernelDef overlapping{
      "registry_test_axpy", DeviceType::kCpu, {i32, f64}, axpy_kernel<double>, "second.cc:3"};
  Error e = thrown_error([&] { KernelRegistry::global().add(overlapping); });
  EXPECT_EQ(e.code(), ErrorCode::kAlreadyExists);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("registry_test_axpy"), HasSubstr("registry_test.cc"),
                              HasSubstr("second.cc:3")));
  // A kernel claiming every dtype overlaps any other.
  KernelDef any{"registry_test_axpy", DeviceType::kCpu, {}, axpy_kernel<float>, "any.cc"};
  EXPECT_EQ(thrown_error([&] { KernelRegistry::global().add(any); }).code(),
            ErrorCode::kAlreadyExists);
  // Nothing was added: i32 still has no kernel.
  EXPECT_FALSE(KernelRegistry::global().contains("registry_test_axpy", DeviceType::kCpu, i32));
}

TEST(Registry, InvalidRegistrationsAreRejected) {
  OpDef no_shape_fn;
  no_shape_fn.name = "registry_test_no_shape_fn";
  EXPECT_EQ(thrown_error([&] { OpRegistry::global().add(no_shape_fn); }).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_FALSE(OpRegistry::global().contains("registry_test_no_shape_fn"));

  OpDef unnamed;
  unnamed.shape_fn = same_as_input;
  EXPECT_EQ(thrown_error([&] { OpRegistry::global().add(unnamed); }).code(),
            ErrorCode::kInvalidArgument);

  KernelDef no_fn{"registry_test_axpy", DeviceType::kCpu, {i64}, nullptr, "x.cc"};
  Error e = thrown_error([&] { KernelRegistry::global().add(no_fn); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("registry_test_axpy"));
}

TEST(Registry, NamesListsBuiltInAndCustomOps) {
  register_axpy_once();
  std::vector<std::string> names = OpRegistry::global().names();
  EXPECT_THAT(names, Contains("add"));
  EXPECT_THAT(names, Contains("placeholder"));
  EXPECT_THAT(names, Contains("registry_test_axpy"));
  EXPECT_THAT(names, Contains("registry_test_softsign"));
}

// ---- ops registered with the macros in this translation unit -------------------------------

// softsign(x; scale) = scale * x / (1 + |x|), with a gradient composed from other ops.
KILN_REGISTER_OP(registry_test_softsign).input("x").shape_fn([](const InferContext& ctx) {
  if (ctx.input(0).dtype != f32) ctx.fail("expects f32, got " + ctx.input(0).str());
  return std::vector<TensorType>{ctx.input(0)};
});
KILN_REGISTER_KERNEL(registry_test_softsign).dtypes({f32}).fn([](KernelContext& ctx) {
  float scale = static_cast<float>(ctx.attrs().get_float("scale", 1.0));
  auto x = ctx.input(0).data<float>();
  auto y = ctx.allocate_output(0).mutable_data<float>();
  for (size_t i = 0; i < x.size(); ++i) y[i] = scale * x[i] / (1 + (x[i] < 0 ? -x[i] : x[i]));
});
KILN_REGISTER_GRADIENT(registry_test_softsign, [](const GradContext& g) {
  double scale = g.attrs().has("scale") ? g.attrs().get_float("scale") : 1.0;
  return std::vector<Tensor>{g.output_grads[0] * scale / square(1.0 + abs(g.inputs[0]))};
});

// Two outputs: the positive and the negative part of x.
KILN_REGISTER_OP(registry_test_split_sign)
    .input("x")
    .outputs(2)
    .kind(OpKind::kKernel)
    .non_differentiable()
    .shape_fn([](const InferContext& ctx) {
      return std::vector<TensorType>{ctx.input(0), ctx.input(0)};
    });
KILN_REGISTER_KERNEL(registry_test_split_sign).dtypes({i32}).fn([](KernelContext& ctx) {
  auto x = ctx.input(0).data<int32_t>();
  auto pos = ctx.allocate_output(0).mutable_data<int32_t>();
  auto neg = ctx.allocate_output(1).mutable_data<int32_t>();
  for (size_t i = 0; i < x.size(); ++i) {
    pos[i] = x[i] > 0 ? x[i] : 0;
    neg[i] = x[i] < 0 ? x[i] : 0;
  }
});

// A gradient registered before its op exists is attached when the op arrives.
KILN_REGISTER_GRADIENT(registry_test_late,
                       [](const GradContext& g) { return std::vector<Tensor>{g.output_grads[0]}; });

TEST(Registry, MacroRegisteredOpHasItsDefinition) {
  const OpDef& def = OpRegistry::global().find("registry_test_softsign");
  EXPECT_EQ(def.inputs, (std::vector<std::string>{"x"}));
  EXPECT_EQ(def.num_outputs, 1);
  EXPECT_EQ(def.kind, OpKind::kKernel);
  EXPECT_TRUE(def.differentiable);
  EXPECT_TRUE(static_cast<bool>(def.gradient));
  EXPECT_THAT(def.source, HasSubstr("registry_test.cc:"));

  const OpDef& split = OpRegistry::global().find("registry_test_split_sign");
  EXPECT_EQ(split.num_outputs, 2);
  EXPECT_FALSE(split.differentiable);
}

TEST(Registry, MacroRegisteredOpRunsEagerlyAndInAGraph) {
  Tensor x = Tensor::from_list<float>({-3, 0, 1});
  Attrs attrs{{"scale", 2.0}};
  Tensor eager = call_op("registry_test_softsign", {x}, attrs)[0];
  EXPECT_EQ(eager.to_vector<float>(), (std::vector<float>{-1.5f, 0, 1}));

  Graph g("g");
  Tensor px = g.placeholder(f32, {kUnknownDim}, "x");
  Tensor py = call_op("registry_test_softsign", {px}, attrs)[0];
  EXPECT_TRUE(py.is_symbolic());
  EXPECT_EQ(g.run({{px, x}}, py).to_vector<float>(), (std::vector<float>{-1.5f, 0, 1}));

  Error wrong =
      thrown_error([] { call_op("registry_test_softsign", {Tensor::from_list<double>({1})}); });
  EXPECT_THAT(wrong.what(), AllOf(HasSubstr("registry_test_softsign"), HasSubstr("f64[1]")));
}

TEST(Registry, MultiOutputOpGivesEveryOutputEagerlyAndInAGraph) {
  Tensor x = Tensor::from_list<int32_t>({-2, 0, 5});
  std::vector<Tensor> eager = call_op("registry_test_split_sign", {x});
  ASSERT_EQ(eager.size(), 2u);
  EXPECT_EQ(eager[0].to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 5}));
  EXPECT_EQ(eager[1].to_vector<int32_t>(), (std::vector<int32_t>{-2, 0, 0}));

  Graph g("g");
  Tensor px = g.placeholder(i32, {3}, "x");
  std::vector<Tensor> parts = call_op("registry_test_split_sign", {px});
  EXPECT_EQ(parts[1].name(), "registry_test_split_sign:1");
  Tensor abs_x = parts[0] - parts[1];
  EXPECT_THAT(g.to_text(), HasSubstr("sub(%1, %1:1)"));
  std::vector<Tensor> out = g.run({{px, x}}, {abs_x, parts[1]});
  EXPECT_EQ(out[0].to_vector<int32_t>(), (std::vector<int32_t>{2, 0, 5}));
  EXPECT_EQ(out[1].to_vector<int32_t>(), (std::vector<int32_t>{-2, 0, 0}));
}

TEST(Registry, GradientComposedFromOpsMatchesTheDerivative) {
  // d/dx [scale * x / (1 + |x|)] = scale / (1 + |x|)^2.
  Graph g("g");
  Tensor x = g.placeholder(f32, {3}, "x");
  Tensor y = call_op("registry_test_softsign", {x}, {{"scale", 2.0}})[0];
  Tensor dy = g.placeholder(f32, {3}, "dy");
  NodeInfo node = g.node("registry_test_softsign");
  GradContext ctx{node, {x}, {y}, {dy}};
  std::vector<Tensor> grads = OpRegistry::global().find("registry_test_softsign").gradient(ctx);
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_TRUE(grads[0].is_symbolic());
  Tensor dx =
      g.run({{x, Tensor::from_list<float>({-3, 0, 1})}, {dy, Tensor::from_list<float>({1, 1, 10})}},
            grads[0]);
  EXPECT_EQ(dx.to_vector<float>(), (std::vector<float>{2.0f / 16, 2, 10 * 2.0f / 4}));
}

TEST(Registry, GradientRegisteredBeforeTheOpIsAttached) {
  OpDef def;
  def.name = "registry_test_late";
  def.inputs = {"x"};
  def.shape_fn = same_as_input;
  if (!OpRegistry::global().contains(def.name)) OpRegistry::global().add(def);
  const OpDef& found = OpRegistry::global().find("registry_test_late");
  EXPECT_TRUE(static_cast<bool>(found.gradient));
}

TEST(Registry, KernelOutputOfTheWrongTypeIsAnInternalError) {
  static std::once_flag once;
  std::call_once(once, [] {
    OpDef def;
    def.name = "registry_test_bad_kernel";
    def.inputs = {"x"};
    def.shape_fn = same_as_input;
    OpRegistry::global().add(def);
    KernelRegistry::global().add({"registry_test_bad_kernel",
                                  DeviceType::kCpu,
                                  {f32},
                                  [](KernelContext& ctx) {
                                    ctx.set_output(0, Tensor::scalar(1.0));  // f64[], not f32
                                  },
                                  "registry_test.cc"});
    KernelRegistry::global().add({"registry_test_bad_kernel",
                                  DeviceType::kCpu,
                                  {f64},
                                  [](KernelContext&) {},  // sets no output
                                  "registry_test.cc"});
  });
  Error wrong = thrown_error([] {
    call_op("registry_test_bad_kernel", {Tensor::from_list<float>({1, 2})});
  });
  EXPECT_EQ(wrong.code(), ErrorCode::kInternal);
  EXPECT_THAT(wrong.what(), AllOf(HasSubstr("registry_test_bad_kernel"), HasSubstr("f64[]"),
                                  HasSubstr("f32[2]")));
  Error missing =
      thrown_error([] { call_op("registry_test_bad_kernel", {Tensor::from_list<double>({1})}); });
  EXPECT_EQ(missing.code(), ErrorCode::kInternal);
  EXPECT_THAT(missing.what(), HasSubstr("did not set output 0"));
}

TEST(Registry, KernelErrorsNameTheOpAndNode) {
  static std::once_flag once;
  std::call_once(once, [] {
    OpDef def;
    def.name = "registry_test_failing";
    def.inputs = {"x"};
    def.shape_fn = same_as_input;
    OpRegistry::global().add(def);
    KernelRegistry::global().add({"registry_test_failing",
                                  DeviceType::kCpu,
                                  {},
                                  [](KernelContext& ctx) {
                                    ctx.fail("value " + std::to_string(ctx.input(0).size()) +
                                                 " is too large",
                                             ErrorCode::kOutOfRange);
                                  },
                                  "registry_test.cc"});
  });
  Graph g("g");
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor y;
  {
    auto scope = g.name_scope("outer");
    y = call_op("registry_test_failing", {x})[0];
  }
  Error e = thrown_error([&] { g.run({{x, Tensor::from_list<float>({1, 2})}}, y); });
  EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(std::string(e.what()),
            "registry_test_failing: value 2 is too large (in outer/registry_test_failing)");
}

}  // namespace
}  // namespace kiln
