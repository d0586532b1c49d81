// Errors a user can cause: each throws kiln::Error with the right ErrorCode and a message
// naming the op and the shapes, dtypes or names involved.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/testing/values.h"

namespace kiln {
namespace {

using test_values::thrown_error;

using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;

Tensor f32s(Shape shape) { return Tensor::empty(f32, std::move(shape)); }

// A static registration that fails (a second op of the same name) cannot throw before main:
// the error is remembered and thrown on the first use of the op.
KILN_REGISTER_OP(errors_test_registered_twice).input("x").shape_fn([](const InferContext& ctx) {
  return std::vector<TensorType>{ctx.input(0)};
});
KILN_REGISTER_OP(errors_test_registered_twice).input("x").shape_fn([](const InferContext& ctx) {
  return std::vector<TensorType>{ctx.input(0)};
});

// ---- shapes and dtypes -------------------------------------------------------------------

TEST(Errors, NonBroadcastableShapesNameOpAndShapes) {
  Error e = thrown_error([] { add(f32s({2, 3}), f32s({4})); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("add"), HasSubstr("[2,3]"), HasSubstr("[4]"),
                              HasSubstr("cannot be broadcast")));
}

TEST(Errors, NonBroadcastableShapesInAGraphFailWhenRecorded) {
  Graph g("g");
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  Error e = thrown_error([&] { mul(x, f32s({4})); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("mul"), HasSubstr("[?,3]"), HasSubstr("[4]")));
}

TEST(Errors, UnknownDimsAreCheckedAgainWhenTheGraphRuns) {
  Graph g("g");
  Tensor a = g.placeholder(f32, {kUnknownDim, 3}, "a");
  Tensor b = g.placeholder(f32, {kUnknownDim, 3}, "b");
  Tensor y;
  {
    auto scope = g.name_scope("block");
    y = a - b;  // fine while recording: both batch sizes are unknown
  }
  Error e = thrown_error([&] { g.run({{a, f32s({2, 3})}, {b, f32s({5, 3})}}, y); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("sub"), HasSubstr("[2,3]"), HasSubstr("[5,3]"),
                              HasSubstr("block/sub")));
}

TEST(Errors, DtypeMismatchOfPrimitiveNamesBothTypes) {
  Tensor a = Tensor::from_list<float>({1, 2});
  Tensor b = Tensor::from_list<double>({1, 2});
  Error e = thrown_error([&] { call_op("add", {a, b}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("add"), HasSubstr("dtype mismatch"), HasSubstr("f32[2]"),
                              HasSubstr("f64[2]")));
}

TEST(Errors, WhereWithNonBoolConditionNamesTheCondition) {
  Tensor cond = Tensor::from_list<int32_t>({1, 0, 1});
  Tensor a = Tensor::from_list<float>({1, 2, 3});
  Error e = thrown_error([&] { where(cond, a, a); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  // where() is the public name of the select primitive.
  EXPECT_THAT(e.what(), AllOf(HasSubstr("select"), HasSubstr("bool"), HasSubstr("i32[3]")));
}

TEST(Errors, OpNotDefinedForDtypeNamesIt) {
  // The primitive: exp is float-only (the public exp() converts integers to f32 first).
  Error e = thrown_error([] { call_op("exp", {Tensor::from_list<int32_t>({1, 2, 3})}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("exp"), HasSubstr("i32[3]"), HasSubstr("floating")));

  Error not_bool = thrown_error([] { logical_not(Tensor::from_list<float>({1})); });
  EXPECT_THAT(not_bool.what(), AllOf(HasSubstr("logical_not"), HasSubstr("f32[1]")));
}

TEST(Errors, KernelMissingForDtypeListsTheDtypesThatHaveKernels) {
  // An op whose shape function accepts any dtype but which has only an f32 kernel.
  if (!OpRegistry::global().contains("errors_test_f32_only")) {
    OpDef def;
    def.name = "errors_test_f32_only";
    def.inputs = {"x"};
    def.shape_fn = [](const InferContext& ctx) { return std::vector<TensorType>{ctx.input(0)}; };
    OpRegistry::global().add(def);
    KernelRegistry::global().add(
        {"errors_test_f32_only", DeviceType::kCpu, {f32}, [](KernelContext& ctx) {
           ctx.set_output(0, ctx.input(0));
         }});
  }
  Error e =
      thrown_error([] { call_op("errors_test_f32_only", {Tensor::from_list<int32_t>({1})}); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("errors_test_f32_only"), HasSubstr("no cpu kernel"),
                              HasSubstr("i32"), HasSubstr("kernels exist for: f32")));
}

TEST(Errors, WrongNumberOfInputsNamesTheCounts) {
  Error e = thrown_error([] { call_op("add", {Tensor::scalar(1.0f)}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("add"), HasSubstr("expects 2 input(s), got 1")));
}

TEST(Errors, UndefinedInputNamesItsPosition) {
  Error e = thrown_error([] { call_op("neg", {Tensor()}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("neg"), HasSubstr("input 0"), HasSubstr("undefined")));
}

TEST(Errors, MissingAttributeNamesOpAndAttribute) {
  Error e = thrown_error([] { call_op("convert", {Tensor::scalar(1.0f)}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("convert"), HasSubstr("'dtype'")));
}

// ---- memory --------------------------------------------------------------------------------

// 2^53 bytes, more than a 47-bit (or 56-bit) user address space holds: the allocator refuses
// it whatever the kernel's overcommit policy, and the error says what could not be allocated.
TEST(Errors, AllocationBeyondMemoryIsResourceExhaustedNamingSizeShapeAndDType) {
  Error e = thrown_error([] { zeros({int64_t{1} << 25, int64_t{1} << 25}, f64); });
  EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
  EXPECT_STREQ(error_code_name(e.code()), "resource exhausted");
  EXPECT_THAT(e.what(), AllOf(HasSubstr("cannot allocate 9007199254740992 bytes"),
                              HasSubstr("[33554432,33554432]"), HasSubstr("f64")));
}

TEST(Errors, TensorWhoseByteCountOverflowsIsInvalidArgument) {
  Error e = thrown_error([] { Tensor::empty(f32, {int64_t{1} << 40, int64_t{1} << 40}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  EXPECT_THAT(e.what(), AllOf(HasSubstr("[1099511627776,1099511627776]"), HasSubstr("f32"),
                              HasSubstr("too large")));
}

// ---- the op registry ---------------------------------------------------------------------

TEST(Errors, UnknownOpSuggestsCloseNames) {
  Error e = thrown_error([] { call_op("addd", {Tensor::scalar(1.0f), Tensor::scalar(2.0f)}); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_THAT(e.what(),
              AllOf(HasSubstr("unknown op 'addd'"), HasSubstr("did you mean"), HasSubstr("add")));
}

TEST(Errors, RegisteringAnExistingOpNameSaysWhereBothCameFrom) {
  OpDef def;
  def.name = "add";
  def.inputs = {"x", "y"};
  def.shape_fn = [](const InferContext& ctx) { return std::vector<TensorType>{ctx.input(0)}; };
  def.source = "my_ops.cc:12";
  Error e = thrown_error([&] { OpRegistry::global().add(def); });
  EXPECT_EQ(e.code(), ErrorCode::kAlreadyExists);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("'add'"), HasSubstr("registered twice"),
                              HasSubstr("elementwise.cc"), HasSubstr("my_ops.cc:12")));
  // The original op still works.
  EXPECT_EQ(add(Tensor::scalar(1.0f), Tensor::scalar(2.0f)).item<float>(), 3.0f);
}

TEST(Errors, DuplicateStaticRegistrationIsThrownOnFirstUse) {
  Error e = thrown_error([] { OpRegistry::global().find("errors_test_registered_twice"); });
  EXPECT_EQ(e.code(), ErrorCode::kAlreadyExists);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("errors_test_registered_twice"),
                              HasSubstr("registered twice"), HasSubstr("errors_test.cc")));
  Error on_call =
      thrown_error([] { call_op("errors_test_registered_twice", {Tensor::scalar(1.0f)}); });
  EXPECT_EQ(on_call.code(), ErrorCode::kAlreadyExists);
}

// ---- running graphs ----------------------------------------------------------------------

TEST(Errors, MissingFeedNamesThePlaceholderAndItsType) {
  Graph g("model");
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "images");
  Tensor y = exp(x);
  Error e = thrown_error([&] { g.run({}, y); });
  EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("missing feed"), HasSubstr("'images'"),
                              HasSubstr("f32[?,3]"), HasSubstr("'model'")));
}

TEST(Errors, FeedOfWrongShapeNamesBothShapes) {
  Graph g("model");
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  Error e = thrown_error([&] { g.run({{x, f32s({2, 4})}}, exp(x)); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("'x'"), HasSubstr("f32[2,4]"), HasSubstr("f32[?,3]")));
  Error rank = thrown_error([&] { g.run({{x, f32s({3})}}, exp(x)); });
  EXPECT_THAT(rank.what(), AllOf(HasSubstr("f32[3]"), HasSubstr("f32[?,3]")));
}

TEST(Errors, FeedOfWrongDtypeNamesBothTypes) {
  Graph g("model");
  Tensor x = g.placeholder(f32, {2}, "x");
  Error e = thrown_error([&] { g.run({{x, Tensor::from_list<double>({1, 2})}}, exp(x)); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("'x'"), HasSubstr("f64[2]"), HasSubstr("f32[2]")));
}

TEST(Errors, FeedKeyThatIsNotAPlaceholder) {
  Graph g("model");
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor y = exp(x);
  Error e = thrown_error([&] { g.run({{y, f32s({2})}}, y); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("'exp'"), HasSubstr("not a placeholder")));
}

TEST(Errors, FetchFromAnotherGraphNamesBothGraphs) {
  Graph g1("first"), g2("second");
  Tensor x1 = g1.placeholder(f32, {2}, "x");
  Tensor x2 = g2.placeholder(f32, {2}, "x");
  Tensor y2 = exp(x2);
  Error e = thrown_error([&] { g1.run({{x1, f32s({2})}}, y2); });
  EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("fetch 0"), HasSubstr("'first'"), HasSubstr("'second'")));

  Error concrete = thrown_error([&] { g1.run({}, f32s({2})); });
  EXPECT_EQ(concrete.code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(concrete.what(), HasSubstr("concrete"));
}

TEST(Errors, FeedFromAnotherGraphNamesBothGraphs) {
  Graph g1("first"), g2("second");
  Tensor x1 = g1.placeholder(f32, {2}, "x");
  Tensor x2 = g2.placeholder(f32, {2}, "x");
  Error e = thrown_error([&] { g1.run({{x2, f32s({2})}}, exp(x1)); });
  EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("'first'"), HasSubstr("'second'")));
}

TEST(Errors, InputsFromTwoGraphsNameBothGraphs) {
  Graph g1("first"), g2("second");
  Tensor a = g1.placeholder(f32, {2}, "a");
  Tensor b = g2.placeholder(f32, {2}, "b");
  Error e = thrown_error([&] { add(a, b); });
  EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("add"), HasSubstr("different graphs"), HasSubstr("'first'"),
                              HasSubstr("'second'")));
}

TEST(Errors, SymbolicTensorHasNoData) {
  Graph g("model");
  Tensor x = g.placeholder(f32, {2}, "x");
  Error e = thrown_error([&] { x.data<float>(); });
  EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("x:0"), HasSubstr("symbolic"), HasSubstr("'model'")));
}

TEST(Errors, NothingAbortsOnAnUndefinedTensor) {
  Tensor t;
  EXPECT_EQ(thrown_error([&] { t.shape(); }).code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(thrown_error([&] { exp(t); }).code(), ErrorCode::kFailedPrecondition);
}

// ---- other op families (these pass once the families land) -------------------------------

TEST(Errors, MatmulInnerDimensionMismatchNamesBothShapes) {
  Error e = thrown_error([] { matmul(f32s({2, 3}), f32s({4, 5})); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(ContainsRegex("matmul|dot"), HasSubstr("[2,3]"), HasSubstr("[4,5]")));
}

TEST(Errors, ReshapeToDifferentElementCountNamesBothShapes) {
  Error e = thrown_error([] { reshape(f32s({2, 3}), {4}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("reshape"), HasSubstr("[2,3]"), HasSubstr("4")));
}

TEST(Errors, AxisOutOfRangeNamesAxisAndShape) {
  Error e = thrown_error([] { sum(f32s({2, 3}), {2}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(),
              AllOf(HasSubstr("sum"), HasSubstr("axis"), HasSubstr("2"), HasSubstr("[2,3]")));
  Error negative = thrown_error([] { sum(f32s({2, 3}), {-3}); });
  EXPECT_THAT(negative.what(), AllOf(HasSubstr("-3"), HasSubstr("[2,3]")));
}

TEST(Errors, InvalidTransposePermutationNamesIt) {
  Error e = thrown_error([] { transpose(f32s({2, 3}), {0, 0}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), AllOf(HasSubstr("transpose"), ContainsRegex("0, ?0")));
  Error length = thrown_error([] { transpose(f32s({2, 3}), {1, 0, 2}); });
  EXPECT_EQ(length.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(length.what(), HasSubstr("transpose"));
}

}  // namespace
}  // namespace kiln
