// Every registered op in both modes: each case of tests/testing/op_cases.h, on random inputs,
// compiled (compiler::compile) and interpreted (Graph::run) must agree within a per-dtype
// tolerance; alone, and between an elementwise producer and consumer so that fusion
// boundaries are crossed. A census fails on any registered op without a case.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "compiler/executable.h"
#include "tests/compiler/random_graph.h"
#include "tests/testing/op_cases.h"

namespace kiln::compiler {
namespace {

using op_cases::Input;
using op_cases::OpCase;
using testing::Tolerance;

// Registered ops that need no case here, with the reason.
const std::map<std::string, std::string>& exemptions() {
  static const std::map<std::string, std::string> kExempt = {
      {"placeholder", "every case feeds its inputs through placeholders"},
      {"constant", "a graph input with no computation; the random-graph test records many"},
      // The collectives need a communicator per replica thread; tests/distribute/
      // collective_ops_test.cc runs each eagerly, interpreted and compiled on 2 and 4 replicas.
      {"all_reduce", "a collective: tests/distribute/collective_ops_test.cc"},
      {"all_gather", "a collective: tests/distribute/collective_ops_test.cc"},
      {"reduce_scatter", "a collective: tests/distribute/collective_ops_test.cc"},
      {"broadcast", "a collective: tests/distribute/collective_ops_test.cc"},
      {"reduce_to_root", "a collective: tests/distribute/collective_ops_test.cc"},
      {"all_reduce_start", "a collective: tests/distribute/async_collective_test.cc"},
      {"all_reduce_done", "a collective: tests/distribute/async_collective_test.cc"},
  };
  return kExempt;
}

// f64: the JIT calls libm for every transcendental and adds no contractions, so results agree
// to rounding. f32: the JIT's vectorised exp/log/tanh/logistic/erf are polynomials within ~1e-6
// relative error of libm (cpu_codegen_test's ApproximationError); a case with a producer and a
// consumer adds one rounding each. Integers and bools: exact.
Tolerance tolerance(DType t) {
  if (t == f64) return {1e-12, 1e-13};
  if (t == f32) return {1e-5, 1e-6};
  return {0, 0};
}

// The case's floating-point inputs in `dtype` (f64 as the table has them, or f32).
std::vector<Tensor> case_inputs(const OpCase& c, DType dtype) {
  std::mt19937_64 rng(20240611);
  std::vector<Tensor> args;
  for (const Input& input : c.inputs) {
    Tensor t = op_cases::random_input(input, rng);
    args.push_back(is_floating(t.dtype()) ? convert(t, dtype) : t);
  }
  return args;
}

// Values that leave x unchanged when combined with it by the producer: 0 to add (numbers), or
// all-true / all-false to select between (bools).
Tensor zeros_of(const Tensor& x) { return convert(zeros(x.shape()), x.dtype()); }

// Runs `c` compiled and interpreted; with `fused`, each input first goes through an
// elementwise producer (x + 0 fed at run time, or select(x, true, false) for bools) and each
// output through a consumer (+ a fed random tensor, or select(out, a, b) for bools).
void check_modes(const OpCase& c, DType dtype, bool fused) {
  SCOPED_TRACE(std::string(dtype_name(dtype)) +
               (fused ? ", between a producer and a consumer" : ", alone"));
  std::vector<Tensor> args = case_inputs(c, dtype);
  // Eagerly, for the output types (the consumer's feeds need their shapes).
  std::vector<Tensor> eager = call_op(c.op, args, attrs_for(c, args));

  Graph g("op_modes");
  FeedList feeds;
  auto feed = [&](const Tensor& value, const std::string& name) {
    Tensor p = g.placeholder(value.dtype(), value.shape(), name);
    feeds.emplace_back(p, value);
    return p;
  };
  std::vector<Tensor> params;
  for (size_t i = 0; i < args.size(); ++i) {
    Tensor p = feed(args[i], "x" + std::to_string(i));
    if (fused && args[i].dtype() == bool_) {
      Tensor yes = feed(ones(args[i].shape(), bool_), "true" + std::to_string(i));
      Tensor no = feed(zeros(args[i].shape(), bool_), "false" + std::to_string(i));
      p = call_op("select", {p, yes, no})[0];
    } else if (fused) {
      p = call_op("add", {p, feed(zeros_of(args[i]), "zero" + std::to_string(i))})[0];
    }
    params.push_back(p);
  }
  std::vector<Tensor> outputs;
  if (params.empty()) {  // iota: nothing symbolic to record from, so record into g explicitly
    auto guard = g.as_default();
    outputs = call_op(c.op, params, attrs_for(c, params));
  } else {
    outputs = call_op(c.op, params, attrs_for(c, params));
  }
  if (fused) {
    std::mt19937_64 rng(7);
    for (size_t k = 0; k < outputs.size(); ++k) {
      const Tensor& e = eager[k];
      std::string n = std::to_string(k);
      if (e.dtype() == bool_) {
        Tensor a =
            feed(op_cases::random_input({e.shape(), op_cases::range(-1, 1), f32}, rng), "a" + n);
        Tensor b =
            feed(op_cases::random_input({e.shape(), op_cases::range(-1, 1), f32}, rng), "b" + n);
        outputs[k] = call_op("select", {outputs[k], a, b})[0];
      } else {
        Tensor r = op_cases::random_input({e.shape(), op_cases::range(-1, 1), f64}, rng);
        outputs[k] = call_op("add", {outputs[k], feed(convert(r, e.dtype()), "r" + n)})[0];
      }
    }
  }
  std::vector<Tensor> want = g.run(feeds, outputs);
  std::vector<Tensor> got;
  std::string thunks;
  try {
    Executable exe = compile(g, outputs, feeds);
    for (const std::string& d : exe.thunk_descriptions()) thunks += "\n  " + d;
    got = exe.run(feeds);
  } catch (const Error& e) {
    ADD_FAILURE() << "the compiled path throws: " << e.what() << "\n" << g.to_text();
    return;
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    std::string why = testing::mismatch(got[k], want[k], tolerance(want[k].dtype()));
    EXPECT_EQ(why, "") << "output " << k << " of " << g.to_text() << "\nthunks:" << thunks;
  }
}

class OpInBothModes : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpInBothModes, CompiledMatchesInterpreted) {
  const OpCase& c = GetParam();
  bool has_float = false;
  for (const Input& in : c.inputs) has_float |= is_floating(in.dtype);
  for (bool fused : {false, true}) {
    check_modes(c, f64, fused);
    if (has_float) check_modes(c, f32, fused);  // the JIT's own f32 approximations
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpInBothModes, ::testing::ValuesIn(op_cases::all_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           return op_cases::case_name(info.param);
                         });

TEST(OpInBothModesCensus, EveryRegisteredOpHasACaseOrAnExemption) {
  std::set<std::string> covered;
  for (const OpCase& c : op_cases::all_cases()) covered.insert(c.op);
  std::string missing;
  for (const std::string& name : OpRegistry::global().names()) {
    const OpDef* def = nullptr;
    try {
      def = &OpRegistry::global().find(name);
    } catch (const Error&) {
      continue;  // a failed registration (a test registers one on purpose); it throws on use
    }
    if (op_cases::registered_by_a_test(*def) || exemptions().count(name)) continue;
    if (!covered.count(name)) missing += " " + name;
  }
  EXPECT_EQ(missing, "") << "registered ops without a case in tests/testing/op_cases.h (add one "
                            "to differentiable_cases() or non_differentiable_cases(), or an "
                            "exemption with a reason in op_modes_test.cc):"
                         << missing;
}

TEST(OpInBothModesCensus, ExemptionsNameRegisteredOpsWithoutCases) {
  std::set<std::string> covered;
  for (const OpCase& c : op_cases::all_cases()) covered.insert(c.op);
  for (const auto& [op, reason] : exemptions()) {
    EXPECT_TRUE(OpRegistry::global().contains(op)) << "stale exemption: " << op;
    EXPECT_FALSE(covered.count(op)) << op << " has a case: drop its exemption";
    EXPECT_FALSE(reason.empty()) << op;
  }
}

}  // namespace
}  // namespace kiln::compiler
