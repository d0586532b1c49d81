// Differential test of the compiled path: 1,000 seeded random graphs (tests/compiler/
// random_graph.h) compiled with compiler::compile and run must match the reference interpreter
// within a per-dtype tolerance; a failing graph is shrunk to a small reproducer first. More
// graphs with the kernel-op recipes (convolution, pooling, gather, scatter) are checked as they
// are and through their gradients; a negative control shows a wrong emitter rule is caught.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

#include "compiler/executable.h"
#include "tests/compiler/random_graph.h"
#include "tests/subprocess.h"

namespace kiln::compiler {
namespace {

using testing::BuiltGraph;
using testing::GraphSpec;
using ::testing::HasSubstr;
using testing::Tolerance;

// Ten shards of 100 graphs: ctest runs each shard as its own test (ctest -j splits them).
// KILN_RANDOM_GRAPHS_PER_SHARD=<n> runs n per shard instead (a soak test: seeds 0 .. 10n-1).
constexpr int kShards = 10;
int graphs_per_shard() {
  const char* env = std::getenv("KILN_RANDOM_GRAPHS_PER_SHARD");
  return env && std::atoi(env) > 0 ? std::atoi(env) : 100;
}

// f32: the JIT's exp/log/tanh/logistic/erf are polynomial approximations within ~1e-6
// relative error of libm (cpu_codegen_test's ApproximationError), and a graph chains up to ~15
// ops, each of which may amplify that error a little: 1e-4 relative, 1e-5 absolute near 0.
// f64: the JIT calls libm for every transcendental, so only rounding order may differ; but an
// f64 value computed from f32 ones (a convert) carries their error, so a graph with any f32
// value compares its f64 outputs with the f32 tolerance. Integers and bools: exact.
Tolerance tolerance(DType t, bool has_f32) {
  if (t == f32 || (t == f64 && has_f32)) return {1e-4, 1e-5};
  if (t == f64) return {1e-10, 1e-12};
  return {0, 0};
}

// What is compared: a random graph's outputs, or the gradients of its outputs with respect to its
// floating-point feeds (testing::differentiate; second order for one seed in three).
enum class Mode { kOutputs, kGradients };

bool build_for(const GraphSpec& spec, Mode mode, BuiltGraph* b) {
  *b = testing::build(spec);
  return mode == Mode::kOutputs || testing::differentiate(b, spec.seed, spec.seed % 3 ? 1 : 2);
}

struct Outcome {
  bool invalid = false;  // the generator built a graph the interpreter rejects (a test bug)
  bool skipped = false;  // kGradients: nothing to differentiate
  std::string failure;   // "" when the compiled results match
  int fused = 0;         // fused kernels in the executable
};

Outcome check(const GraphSpec& spec, Mode mode = Mode::kOutputs) {
  Outcome out;
  BuiltGraph b;
  std::vector<Tensor> want;
  try {
    if (!build_for(spec, mode, &b)) {
      out.skipped = true;
      return out;
    }
    want = b.graph.run(b.feeds, b.outputs);
  } catch (const Error& e) {
    out.invalid = true;
    out.failure = std::string("the interpreter rejects the graph: ") + e.what();
    return out;
  }
  std::vector<Tensor> got;
  try {
    Executable exe = compile(b.graph, b.outputs, b.feeds);
    out.fused = exe.num_fused_thunks();
    got = exe.run(b.feeds);
    // A second run of the same executable gives the same bits (no state leaks between runs).
    std::vector<Tensor> again = exe.run(b.feeds);
    for (size_t i = 0; i < again.size() && i < got.size(); ++i)
      if (!testing::mismatch(again[i], got[i], {}).empty())
        out.failure += "output " + std::to_string(i) +
                       " differs on a second run: " + testing::mismatch(again[i], got[i], {}) +
                       "\n";
  } catch (const Error& e) {
    out.failure = std::string("the compiled path throws: ") + e.what() + "\n";
    return out;
  }
  if (got.size() != want.size()) {
    out.failure = "compiled run returned " + std::to_string(got.size()) + " outputs, want " +
                  std::to_string(want.size());
    return out;
  }
  bool has_f32 = false;
  for (int id = 0; id < b.graph.num_nodes(); ++id)
    for (const TensorType& t : b.graph.node(id).outputs) has_f32 |= t.dtype == f32;
  for (size_t i = 0; i < got.size(); ++i) {
    std::string why = testing::mismatch(got[i], want[i], tolerance(want[i].dtype(), has_f32));
    if (!why.empty()) out.failure += "output " + std::to_string(i) + ": " + why + "\n";
  }
  return out;
}

// The failure of `spec`, shrunk: the minimal spec, its graph and feeds, and what differs.
std::string reproducer(const GraphSpec& spec, const Outcome& first, Mode mode = Mode::kOutputs) {
  if (first.invalid) return first.failure + "\n" + spec.str();
  int attempts = 0;
  GraphSpec small = testing::shrink(
      spec,
      [mode](const GraphSpec& c) {
        Outcome o = check(c, mode);
        return !o.invalid && !o.failure.empty();
      },
      &attempts);
  Outcome o = check(small, mode);
  BuiltGraph b;
  build_for(small, mode, &b);
  std::string text = std::string("compiled ") +
                     (mode == Mode::kGradients ? "gradients differ" : "result differs") +
                     " from the interpreter (seed " + std::to_string(spec.seed) + "):\n" +
                     first.failure + "shrunk in " + std::to_string(attempts) + " attempts to:\n" +
                     small.str() + "graph:\n" + b.graph.to_text() + "\nfeeds: " + b.feed_shapes() +
                     "\nwhere " + o.failure;
  try {
    Executable exe = compile(b.graph, b.outputs, b.feeds);
    text += "thunks:\n";
    for (const std::string& d : exe.thunk_descriptions()) text += "  " + d + "\n";
  } catch (const Error&) {
  }
  return text;
}

// Checks `graphs` random graphs of shard `shard` (seeds shard * graphs + i) in `mode`.
void check_shard(int shard, int graphs, const testing::GeneratorOptions& opt, Mode mode) {
  auto t0 = std::chrono::steady_clock::now();
  int fused = 0, nodes = 0, failures = 0, skipped = 0;
  for (int i = 0; i < graphs; ++i) {
    auto seed = static_cast<uint32_t>(shard * graphs + i);
    GraphSpec spec = testing::generate(seed, opt);
    nodes += static_cast<int>(spec.nodes.size());
    Outcome o = check(spec, mode);
    fused += o.fused;
    skipped += o.skipped;
    if (o.failure.empty()) continue;
    ADD_FAILURE() << reproducer(spec, o, mode);
    if (++failures == 3) break;  // shrinking is slow; three reproducers are plenty
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ random graphs ] shard %d: %d graphs, %d recipes, %d fused kernels, %.1f s", shard,
              graphs, nodes, fused, s);
  if (mode == Mode::kGradients) std::printf(", %d with nothing to differentiate", skipped);
  std::printf("\n");
}

class CompiledRandomGraphs : public ::testing::TestWithParam<int> {};

TEST_P(CompiledRandomGraphs, MatchTheInterpreter) {
  check_shard(GetParam(), graphs_per_shard(), {}, Mode::kOutputs);
}

INSTANTIATE_TEST_SUITE_P(Shard, CompiledRandomGraphs, ::testing::Range(0, kShards));

// Graphs with convolutions, pooling, gathers and scatters as well (2 x 100 graphs), and the
// gradients of such graphs (3 x 100; a third of them second order), compiled and interpreted.
constexpr int kKernelOpShards = 2, kGradientShards = 3;
testing::GeneratorOptions with_kernel_ops() {
  testing::GeneratorOptions opt;
  opt.kernel_ops = true;
  return opt;
}

class CompiledRandomKernelOpGraphs : public ::testing::TestWithParam<int> {};

TEST_P(CompiledRandomKernelOpGraphs, MatchTheInterpreter) {
  check_shard(GetParam(), graphs_per_shard(), with_kernel_ops(), Mode::kOutputs);
}

INSTANTIATE_TEST_SUITE_P(Shard, CompiledRandomKernelOpGraphs, ::testing::Range(0, kKernelOpShards));

class CompiledRandomGradients : public ::testing::TestWithParam<int> {};

TEST_P(CompiledRandomGradients, MatchTheInterpreter) {
  check_shard(GetParam(), graphs_per_shard(), with_kernel_ops(), Mode::kGradients);
}

INSTANTIATE_TEST_SUITE_P(Shard, CompiledRandomGradients, ::testing::Range(0, kGradientShards));

// Runs of one executable from two threads at once give the interpreter's results.
TEST(CompiledRandomGraphsConcurrently, MatchTheInterpreter) {
  for (uint32_t seed = 0; seed < 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    BuiltGraph b = testing::build(testing::generate(seed));
    std::vector<Tensor> want = b.graph.run(b.feeds, b.outputs);
    Executable exe = compile(b.graph, b.outputs, b.feeds);
    std::vector<std::vector<Tensor>> got(2);
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t)
      threads.emplace_back([&, t] {
        for (int rep = 0; rep < 5; ++rep) got[t] = exe.run(b.feeds);
      });
    for (std::thread& t : threads) t.join();
    for (const auto& g : got) {
      ASSERT_EQ(g.size(), want.size());
      for (size_t i = 0; i < g.size(); ++i)
        EXPECT_EQ(testing::mismatch(g[i], want[i], tolerance(want[i].dtype(), true)), "")
            << b.graph.to_text();
    }
  }
}

// Larger values (rank 3, up to 40,000 elements, odd dimensions): the thread pool splits the
// kernels' [begin, end) ranges mid-row, and vector loops have remainders.
TEST(CompiledLargeRandomGraphs, MatchTheInterpreter) {
  testing::GeneratorOptions opt;
  opt.max_nodes = 10;
  opt.min_rank = 3;
  opt.max_dim = 50;
  opt.max_elements = 40000;
  int failures = 0;
  for (uint32_t seed = 0; seed < 60 && failures < 2; ++seed) {
    GraphSpec spec = testing::generate(seed, opt);
    Outcome o = check(spec);
    if (o.failure.empty()) continue;
    ADD_FAILURE() << reproducer(spec, o);
    ++failures;
  }
}

// The negative control: with a deliberately wrong emitter rule (sub(x, y) emitted as y - x,
// behind the test-only switch in compiler/llvm_ir/elemental_emitter.cc), the random tests
// above must fail, and their shrinker must isolate a sub. The switch is set in a child process
// (the first shard of the plain and the gradient tests, 20 graphs each), never in this one: the
// process-wide kernel cache would keep the wrong kernels for the tests that follow.
TEST(RandomGraphNegativeControl, AWrongSubRuleFailsTheRandomTests) {
  const std::string log = ::testing::TempDir() + "/kiln_miscompile_" + std::to_string(getpid());
  const std::string filter =
      "--gtest_filter=Shard/CompiledRandomGraphs.MatchTheInterpreter/0:"
      "Shard/CompiledRandomGradients.MatchTheInterpreter/0";
  const std::map<std::string, std::string> env = {
      {"KILN_RANDOM_GRAPHS_PER_SHARD", "20"},
      {"GTEST_TOTAL_SHARDS", "1"},  // all of the filter, even when this process is a gtest shard
      {"GTEST_SHARD_INDEX", "0"}};
  std::map<std::string, std::string> wrong = env;
  wrong["KILN_TEST_ONLY_MISCOMPILE"] = "sub-swaps-operands";

  testing_util::ProcessResult r = testing_util::run_process({"/proc/self/exe", filter}, log, wrong);
  EXPECT_FALSE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("compiled result differs from the interpreter"));
  EXPECT_THAT(r.output, HasSubstr("compiled gradients differ from the interpreter"));
  EXPECT_THAT(r.output, HasSubstr("2 FAILED TESTS"));
  // Each reproducer is shrunk to a graph that still subtracts.
  for (size_t at = r.output.find("shrunk in "); at != std::string::npos;
       at = r.output.find("shrunk in ", at + 1)) {
    const size_t end = r.output.find("thunks:", at);
    EXPECT_NE(r.output.substr(at, end - at).find(" sub("), std::string::npos)
        << r.output.substr(at, end - at);
  }
  // The same run without the switch passes: the failures are the wrong rule's.
  r = testing_util::run_process({"/proc/self/exe", filter}, log, env);
  EXPECT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("2 tests"));
}

TEST(RandomGraphGenerator, IsDeterministic) {
  for (uint32_t seed : {1u, 7u, 123u}) {
    GraphSpec a = testing::generate(seed), b = testing::generate(seed);
    EXPECT_TRUE(a == b);
    EXPECT_EQ(testing::build(a).graph.to_text(), testing::build(b).graph.to_text());
  }
}

// Seeds whose graph records the op `op`, and whose graph has at least `min_nodes` recipes.
uint32_t seed_with(const std::string& op, int min_nodes) {
  for (uint32_t seed = 0;; ++seed) {
    GraphSpec spec = testing::generate(seed);
    if (static_cast<int>(spec.nodes.size()) >= min_nodes &&
        testing::build(spec).graph.to_text().find(" " + op + "(") != std::string::npos)
      return seed;
  }
}

bool records(const GraphSpec& spec, const std::string& op) {
  return testing::build(spec).graph.to_text().find(" " + op + "(") != std::string::npos;
}

// An injected failure ("the graph contains a tanh") shrinks to one tanh of a scalar input.
TEST(RandomGraphShrinker, ShrinksAnInjectedFailureToATinyGraph) {
  GraphSpec spec = testing::generate(seed_with("tanh", 10));
  ASSERT_GE(spec.nodes.size(), 10u);
  int attempts = 0;
  GraphSpec small = testing::shrink(
      spec, [](const GraphSpec& c) { return records(c, "tanh"); }, &attempts);
  EXPECT_TRUE(records(small, "tanh"));
  EXPECT_EQ(small.nodes.size(), 1u) << small.str();
  EXPECT_EQ(small.inputs.size(), 1u) << small.str();
  EXPECT_EQ(small.outputs.size(), 1u) << small.str();
  EXPECT_TRUE(small.inputs[0].shape.empty()) << small.str();
  EXPECT_GT(attempts, 0);
}

// A predicate that never holds leaves the (pruned) spec as it is.
TEST(RandomGraphShrinker, KeepsAGraphThatDoesNotFail) {
  GraphSpec spec = testing::prune(testing::generate(5));
  EXPECT_TRUE(testing::shrink(spec, [](const GraphSpec&) { return false; }) == spec);
}

}  // namespace
}  // namespace kiln::compiler
