// Every gradient rule checked against central finite differences in f64, and a census of the
// op registry: each differentiable op needs a gradient rule and a case in the gradient table
// (differentiable_cases() in tests/testing/op_cases.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>

#include "kiln/autodiff.h"
#include "kiln/kiln.h"
#include "tests/testing/op_cases.h"

namespace kiln {
namespace {

using namespace op_cases;  // NOLINT: the shared case table and its helpers

const std::vector<OpCase>& cases() { return differentiable_cases(); }

// <dz, op(args)[k]>, in f64 on the host.
double weighted_output(const OpCase& c, const std::vector<Tensor>& args, int k,
                       const std::vector<double>& dz) {
  std::vector<double> z = call_op(c.op, args, c.attrs)[k].to_vector<double>();
  double total = 0;
  for (size_t i = 0; i < z.size(); ++i) total += dz[i] * z[i];
  return total;
}

// For each floating-point output k and a random cotangent dz, the gradient that gradients()
// builds from the rule must match the central differences of <dz, op(args)[k]>.
void check_case(const OpCase& c) {
  std::mt19937_64 rng(20240611);
  std::vector<Tensor> args;
  for (const Input& input : c.inputs) args.push_back(random_input(input, rng));

  Graph g("gradcheck");
  std::vector<Tensor> params, wrt;
  std::vector<size_t> wrt_index;
  FeedList feeds;
  for (size_t i = 0; i < args.size(); ++i) {
    params.push_back(g.placeholder(args[i].dtype(), args[i].shape(), "x" + std::to_string(i)));
    feeds.emplace_back(params.back(), args[i]);
    if (!is_floating(args[i].dtype())) continue;
    ASSERT_EQ(args[i].dtype(), f64) << "differentiated inputs are f64";
    wrt.push_back(params.back());
    wrt_index.push_back(i);
  }
  std::vector<Tensor> outputs = call_op(c.op, params, c.attrs);
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!is_floating(outputs[k].dtype())) continue;
    Tensor dz = random_input(
        {call_op(c.op, args, c.attrs)[k].shape(), range(-1, 1), outputs[k].dtype()}, rng);
    std::vector<double> dzv = dz.to_vector<double>();
    std::vector<Tensor> rule = g.run(feeds, gradients(outputs[k], wrt, dz));
    for (size_t w = 0; w < wrt.size(); ++w) {
      size_t i = wrt_index[w];
      std::vector<double> analytic = rule[w].to_vector<double>();
      ASSERT_EQ(static_cast<int64_t>(analytic.size()), args[i].size());
      for (int64_t j = 0; j < args[i].size(); ++j) {
        std::vector<Tensor> plus = args, minus = args;
        plus[i].mutable_data<double>()[j] += c.step;
        minus[i].mutable_data<double>()[j] -= c.step;
        double numeric =
            (weighted_output(c, plus, k, dzv) - weighted_output(c, minus, k, dzv)) / (2 * c.step);
        EXPECT_LE(std::abs(analytic[j] - numeric), c.tol * (1 + std::abs(numeric)))
            << c.op << ": output " << k << ", input " << i << ", element " << j
            << " (x = " << args[i].data<double>()[j] << "): the rule gives " << analytic[j]
            << ", central differences give " << numeric;
      }
    }
  }
}

class GradientRule : public testing::TestWithParam<OpCase> {};

TEST_P(GradientRule, MatchesCentralDifferences) { check_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Ops, GradientRule, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<OpCase>& info) {
                           return case_name(info.param);
                         });

TEST(GradientRules, EveryDifferentiableOpHasARuleAndAGradCheckCase) {
  std::set<std::string> covered;
  for (const OpCase& c : cases()) covered.insert(c.op);
  std::string no_rule, no_case;
  for (const std::string& name : OpRegistry::global().names()) {
    const OpDef* found = nullptr;
    try {
      found = &OpRegistry::global().find(name);
    } catch (const Error&) {
      continue;  // a failed registration (a test registers one on purpose); it throws on use
    }
    const OpDef& def = *found;
    if (!def.differentiable || registered_by_a_test(def)) continue;
    if (!def.gradient) no_rule += " " + name;
    if (!covered.count(name)) no_case += " " + name;
  }
  EXPECT_EQ(no_rule, "") << "differentiable ops without a gradient rule (give them one with "
                            ".gradient(...) or KILN_REGISTER_GRADIENT, or mark them "
                            ".non_differentiable()):"
                         << no_rule;
  EXPECT_EQ(no_case, "") << "differentiable ops without a case in "
                            "tests/testing/op_cases.h (differentiable_cases()):"
                         << no_case;
}

TEST(GradientRules, EveryCaseNamesARegisteredDifferentiableOp) {
  for (const OpCase& c : cases()) {
    ASSERT_TRUE(OpRegistry::global().contains(c.op)) << "unknown op in cases(): " << c.op;
    EXPECT_TRUE(OpRegistry::global().find(c.op).differentiable) << c.op;
  }
}

TEST(GradientRules, NonDifferentiableOpsAreMarked) {
  for (const char* op : {"placeholder", "constant", "stop_gradient", "eq", "ne", "lt", "le", "gt",
                         "ge", "logical_not", "logical_and", "logical_or", "is_finite", "iota",
                         "reduce_any", "reduce_all", "argmax", "argmin"}) {
    EXPECT_FALSE(OpRegistry::global().find(op).differentiable) << op;
  }
}

// ---- convolution, pooling, gather, and the ops that carry no gradient
TEST(GradientRules, RandomIotaAndArgOpsAreNonDifferentiable) {
  for (const char* op :
       {"random_uniform", "random_normal", "random_bernoulli", "iota", "argmax", "argmin"}) {
    ASSERT_TRUE(OpRegistry::global().contains(op)) << op;
    EXPECT_FALSE(OpRegistry::global().find(op).differentiable) << op;
  }
}

}  // namespace
}  // namespace kiln
