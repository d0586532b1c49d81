// Lambda: values, shapes, gradients, compiled models, summary rows, the function registry
// behind its config, errors, and its layer zoo case.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/nn/layer_checks.h"
#include "tests/nn/layer_zoo.h"
#include "tests/testing/values.h"

namespace kiln::nn::testing {
namespace {

using test_values::expect_error;
using test_values::expect_values;
using test_values::values;
using ::testing::HasSubstr;

Tensor softsign(const Tensor& x) { return x / (1.0 + abs(x)); }

// Registered when the test program loads, so a model saved with it loads in any process running
// these tests (the layer zoo's child process too).
[[maybe_unused]] const bool kSoftsignRegistered = [] {
  register_lambda_function("lambda_test_softsign", UnaryLambdaFunction(softsign));
  return true;
}();

TEST(Lambda, ComputesItsFunctionOfOneOrMoreInputs) {
  Lambda twice_plus_one([](const Tensor& x) { return x * 2.0 + 1.0; });
  EXPECT_EQ(twice_plus_one.type_name(), "Lambda");
  EXPECT_EQ(twice_plus_one.name(), "lambda");
  expect_values(twice_plus_one(values({2, 2}, {1, -2, 0.5, 3})), {2, 2}, {3, -3, 2, 7});
  Lambda product([](const std::vector<Tensor>& xs) { return xs[0] * xs[1]; });
  expect_values(product({values({3}, {1, 2, 3}), values({3}, {4, 5, -1})}), {3}, {4, 10, -3});
}

TEST(Lambda, SymbolicShapesAreThoseOfItsFunction) {
  EXPECT_EQ(Lambda(softsign)(Input({3, 2})).shape(), (Shape{kUnknownDim, 3, 2}));
  Lambda row_sums([](const Tensor& x) { return sum(x, {-1}); });
  EXPECT_EQ(row_sums(Input({3, 2})).shape(), (Shape{kUnknownDim, 3}));
}

TEST(Lambda, GradientsMatchFiniteDifferences) {
  Lambda unary([](const Tensor& x) { return tanh(x) * x; });
  expect_gradients_match_finite_differences(unary, {random_normal({2, 3}, 1, 0, 1, f64)});
  Lambda binary([](const std::vector<Tensor>& xs) { return xs[0] * exp(xs[1]); });
  expect_gradients_match_finite_differences(
      binary, {random_normal({2, 3}, 2, 0, 1, f64), random_normal({2, 3}, 3, 0, 1, f64)});
}

TEST(Lambda, ModelCompiledMatchesInterpretedAndTheLayers) {
  Tensor in = Input({3});
  Dense dense = seeded_dense(4, "dense", 1);
  Lambda squash(softsign, "lambda_test_softsign");
  Model model(in, squash(dense(in)));
  Tensor x = random_normal({5, 3}, 2);
  Tensor got = expect_compiled_matches_interpreted(model, x);
  EXPECT_TRUE(allclose(got, softsign(dense(x)), 1e-5, 1e-6));
  EXPECT_THAT(summary_row(model, "lambda", "Lambda"), HasSubstr("(None, 4)"));
}

TEST(Lambda, ConfigNamesTheFunctionAndRebuildsItFromTheRegistry) {
  Lambda squash(softsign, "lambda_test_softsign");
  EXPECT_EQ(squash.config().get_string("function"), "lambda_test_softsign");
  expect_config_rebuilds(squash, {random_normal({2, 3}, 1)});
  // A function of several tensors, registered as such.
  register_lambda_function("lambda_test_difference",
                           LambdaFunction([](const auto& xs) { return xs[0] - xs[1]; }),
                           /*replace=*/true);
  std::shared_ptr<Lambda> difference = lambda_from_registry("lambda_test_difference");
  EXPECT_EQ(difference->function_name(), "lambda_test_difference");
  expect_values((*difference)({values({2}, {5, 1}), values({2}, {2, 3})}), {2}, {3, -2});
}

TEST(Lambda, AnUnnamedLambdaCannotBeSaved) {
  Lambda unnamed(softsign);
  expect_error([&] { unnamed.config(); }, ErrorCode::kFailedPrecondition,
               "Lambda 'lambda': a Lambda needs a registered function name to be saved: make it "
               "as Lambda(fn, \"function_name\") and call "
               "kiln::nn::register_lambda_function(\"function_name\", fn)");
}

TEST(Lambda, LoadingAnUnregisteredFunctionNamesItAndHowToRegisterIt) {
  expect_error(
      [] {
        layer_from_config("Lambda", {{"function", "no_such_function"}}, "mine");
      },
      ErrorCode::kNotFound,
      "layer 'mine' (Lambda): Lambda function 'no_such_function' is not registered in "
      "this program: call kiln::nn::register_lambda_function(\"no_such_function\", fn) "
      "before loading the model");
  EXPECT_FALSE(is_lambda_function_registered("no_such_function"));
  EXPECT_TRUE(is_lambda_function_registered("lambda_test_softsign"));
}

TEST(Lambda, RegisteringANameTwiceIsRefusedUnlessReplacing) {
  UnaryLambdaFunction identity = [](const Tensor& x) { return x; };
  register_lambda_function("lambda_test_twice", identity, /*replace=*/true);
  expect_error([&] { register_lambda_function("lambda_test_twice", identity); },
               ErrorCode::kAlreadyExists, "'lambda_test_twice' is registered already");
  expect_error([&] { register_lambda_function("", identity); }, ErrorCode::kInvalidArgument,
               "register_lambda_function: needs a name and a function");
}

TEST(Lambda, BadFunctionsAndCallsNameTheLayer) {
  expect_error([] { Lambda(UnaryLambdaFunction{}, "empty"); }, ErrorCode::kInvalidArgument,
               "Lambda: the function is empty");
  expect_call_error(Lambda(softsign), {zeros({2}), zeros({2})},
                    "Lambda 'lambda' has a function of one tensor but got 2 inputs");
  expect_call_error(Lambda([](const Tensor&) { return Tensor(); }), {zeros({2})},
                    "Lambda 'lambda': the function returned no tensor");
  // A kiln::Error inside the function gets the layer's name in front.
  expect_call_error(Lambda([](const Tensor& x) { return reshape(x, {5}); }), {zeros({2, 3})},
                    "Lambda 'lambda': ");
}

KILN_ZOO_CASE(
    "lambda",
    [] {
      return std::make_unique<Sequential>(
          std::vector<LayerRef>{Dense(4), Lambda(softsign, "lambda_test_softsign"), Dense(2)});
    },
    [] {
      Tensor x = random_normal({64, 5}, 41);
      return std::pair{x, matmul(x, random_normal({5, 2}, 42))};
    });

}  // namespace
}  // namespace kiln::nn::testing
