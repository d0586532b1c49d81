// Every gradient rule checked against central finite differences in f64, interpreted
// (Graph::run) and compiled (compiler::compile), on two seeds and at two shapes (the table's
// and a larger one, tests/autodiff/larger_cases.h); and a census of the op registry: each
// differentiable op needs a gradient rule and a case in the gradient table
// (differentiable_cases() in tests/testing/op_cases.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <set>

#include "compiler/executable.h"
#include "kiln/autodiff.h"
#include "kiln/kiln.h"
#include "tests/autodiff/larger_cases.h"
#include "tests/testing/op_cases.h"

namespace kiln {
namespace {

using namespace op_cases;  // NOLINT: the shared case table and its helpers

const std::vector<OpCase>& cases() { return differentiable_cases(); }

enum class Mode { kInterpreted, kCompiled };

// One check: a case of the table, at the table's shape or the larger one, on one seed (which
// draws the inputs and the cotangents), in one mode. Every element of every input is checked:
// the larger shapes are small enough that no sampling is needed.
struct GradCheck {
  OpCase c;
  bool larger = false;
  uint64_t seed = 0;
  Mode mode = Mode::kInterpreted;
};

constexpr uint64_t kSeeds[] = {20240611, 97};

std::string name_of(const GradCheck& p) {
  return case_name(p.c) + (p.larger ? "_larger" : "_table") + "_seed" + std::to_string(p.seed) +
         (p.mode == Mode::kCompiled ? "_compiled" : "_interpreted");
}
void PrintTo(const GradCheck& p, std::ostream* os) { *os << name_of(p); }

std::vector<GradCheck> all_checks() {
  std::vector<GradCheck> out;
  for (const OpCase& c : cases())
    for (bool larger : {false, true})
      for (uint64_t seed : kSeeds)
        for (Mode mode : {Mode::kInterpreted, Mode::kCompiled})
          out.push_back({c, larger, seed, mode});
  return out;
}

// <dz, op(args)[k]>, in f64 on the host (eagerly: the same oracle for both modes).
double weighted_output(const OpCase& c, const std::vector<Tensor>& args, int k,
                       const std::vector<double>& dz) {
  std::vector<double> z = call_op(c.op, args, attrs_for(c, args))[k].to_vector<double>();
  double total = 0;
  for (size_t i = 0; i < z.size(); ++i) total += dz[i] * z[i];
  return total;
}

// Failing elements reported one by one (the rest are counted): larger shapes have hundreds.
constexpr int64_t kShown = 4;

// The gradients `grads` of g, run in `mode`; compiled, also checked against the interpreter
// (the gradients are f64: the JIT calls libm and adds no contractions, so the two agree to
// rounding).
std::vector<Tensor> run_gradients(const Graph& g, const FeedList& feeds,
                                  const std::vector<Tensor>& grads, Mode mode) {
  std::vector<Tensor> interpreted = g.run(feeds, grads);
  if (mode == Mode::kInterpreted) return interpreted;
  std::vector<Tensor> compiled;
  try {
    compiled = compiler::compile(g, grads, feeds).run(feeds);
  } catch (const Error& e) {
    ADD_FAILURE() << "the compiled path throws: " << e.what() << "\n" << g.to_text();
    return {};
  }
  EXPECT_EQ(compiled.size(), interpreted.size());
  for (size_t w = 0; w < std::min(compiled.size(), interpreted.size()); ++w) {
    std::vector<double> got = compiled[w].to_vector<double>();
    std::vector<double> want = interpreted[w].to_vector<double>();
    if (got.size() != want.size()) {
      ADD_FAILURE() << "gradient " << w << ": " << got.size() << " elements compiled, "
                    << want.size() << " interpreted";
      continue;
    }
    int64_t differ = 0;
    for (size_t j = 0; j < got.size(); ++j) {
      if (std::abs(got[j] - want[j]) <= 1e-12 * (1 + std::abs(want[j]))) continue;
      if (++differ <= kShown) {
        ADD_FAILURE() << "gradient " << w << ", element " << j << ": compiled " << got[j]
                      << ", interpreted " << want[j];
      }
    }
    EXPECT_EQ(differ, 0) << "elements of gradient " << w
                         << " where the modes differ (the first are shown above)";
  }
  return compiled;
}

// For each floating-point output k and a random cotangent dz, the gradient that gradients()
// builds from the rule must match the central differences of <dz, op(args)[k]>.
void check_case(const GradCheck& p) {
  OpCase c = p.c;
  if (p.larger) {
    try {
      c = larger_case(p.c);
    } catch (const Error& e) {
      FAIL() << e.what();
    }
  }
  std::mt19937_64 rng(p.seed);
  std::vector<Tensor> args;
  std::string inputs;
  for (const Input& input : c.inputs) {
    args.push_back(random_input(input, rng));
    inputs += " " + TensorType{args.back().dtype(), args.back().shape()}.str();
  }
  SCOPED_TRACE((p.mode == Mode::kCompiled ? "compiled" : "interpreted") + std::string(", seed ") +
               std::to_string(p.seed) + ", inputs" + inputs);

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
  std::vector<Tensor> outputs = call_op(c.op, params, attrs_for(c, params));
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!is_floating(outputs[k].dtype())) continue;
    Tensor dz = random_input(
        {call_op(c.op, args, attrs_for(c, args))[k].shape(), range(-1, 1), outputs[k].dtype()}, rng);
    std::vector<double> dzv = dz.to_vector<double>();
    // Fed, not a constant: the compiler would fold every rule that does not read the inputs
    // (those of linear ops) at compile time with the reference kernels.
    FeedList with_dz = feeds;
    with_dz.emplace_back(g.placeholder(dz.dtype(), dz.shape(), "dz" + std::to_string(k)), dz);
    std::vector<Tensor> rule =
        run_gradients(g, with_dz, gradients(outputs[k], wrt, with_dz.back().first), p.mode);
    ASSERT_EQ(rule.size(), wrt.size());
    for (size_t w = 0; w < wrt.size(); ++w) {
      size_t i = wrt_index[w];
      std::vector<double> analytic = rule[w].to_vector<double>();
      ASSERT_EQ(static_cast<int64_t>(analytic.size()), args[i].size());
      int64_t wrong = 0;
      for (int64_t j = 0; j < args[i].size(); ++j) {
        std::vector<Tensor> plus = args, minus = args;
        plus[i].mutable_data<double>()[j] += c.step;
        minus[i].mutable_data<double>()[j] -= c.step;
        double numeric =
            (weighted_output(c, plus, k, dzv) - weighted_output(c, minus, k, dzv)) / (2 * c.step);
        if (std::abs(analytic[j] - numeric) <= c.tol * (1 + std::abs(numeric))) continue;
        if (++wrong <= kShown) {
          ADD_FAILURE() << c.op << ": output " << k << ", input " << i << ", element " << j
                        << " (x = " << args[i].data<double>()[j] << "): the rule gives "
                        << analytic[j] << ", central differences give " << numeric;
        }
      }
      EXPECT_EQ(wrong, 0) << c.op << ": elements of input " << i << " where the rule and central "
                          << "differences differ (the first are shown above)";
    }
  }
}

class GradientRule : public testing::TestWithParam<GradCheck> {};

TEST_P(GradientRule, MatchesCentralDifferences) { check_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Ops, GradientRule, testing::ValuesIn(all_checks()),
                         [](const testing::TestParamInfo<GradCheck>& info) {
                           return name_of(info.param);
                         });

TEST(GradientRules, EveryDifferentiableOpHasARuleAndAGradCheckCase) {
  std::set<std::string> covered;
  for (const OpCase& c : cases()) covered.insert(c.op);
  // Collectives need a communicator per replica thread: their gradients are checked against
  // hand-derived ones on 2 and 4 replicas in tests/distribute/collective_ops_test.cc.
  for (const char* op :
       {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce_to_root"})
    covered.insert(op);
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

// Every case has a larger variant: no input or output dimension smaller than the table's, at
// least one larger (all but cases of scalars only); every written-out larger case replaces one.
TEST(GradientRules, EveryCaseHasALargerVariant) {
  std::set<std::string> names;
  for (const OpCase& c : cases()) {
    names.insert(case_name(c));
    OpCase big;
    try {
      big = larger_case(c);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    std::mt19937_64 rng(1);
    std::vector<Shape> small, large;
    std::vector<Tensor> small_args, large_args;
    for (const Input& input : c.inputs) small_args.push_back(random_input(input, rng));
    for (const Input& input : big.inputs) large_args.push_back(random_input(input, rng));
    for (const Tensor& t : small_args) small.push_back(t.shape());
    for (const Tensor& t : large_args) large.push_back(t.shape());
    for (const Tensor& t : call_op(c.op, small_args, attrs_for(c, small_args))) small.push_back(t.shape());
    for (const Tensor& t : call_op(big.op, large_args, attrs_for(big, large_args))) large.push_back(t.shape());
    ASSERT_EQ(big.op, c.op);
    ASSERT_EQ(small.size(), large.size()) << case_name(c);
    bool grows = false, all_scalars = true;
    for (size_t i = 0; i < small.size(); ++i) {
      ASSERT_EQ(small[i].size(), large[i].size()) << case_name(c) << ": rank of shape " << i;
      all_scalars &= small[i].empty();
      for (size_t d = 0; d < small[i].size(); ++d) {
        EXPECT_GE(large[i][d], small[i][d]) << case_name(c) << ": shape " << i << ", dim " << d;
        grows |= large[i][d] > small[i][d];
      }
    }
    EXPECT_TRUE(grows || all_scalars) << case_name(c) << ": the larger variant is no larger";
  }
  for (const auto& [name, c] : written_larger_cases()) {
    EXPECT_TRUE(names.count(name)) << "a larger case replaces no case of the table: " << name;
  }
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
