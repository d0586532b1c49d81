#include "compiler/pipeline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "compiler/passes/cse.h"
#include "compiler/passes/dce.h"
#include "tests/compiler/compiler_test_util.h"

namespace kiln::compiler {
namespace {

using testing::expect_bitwise_equal;
using ::testing::HasSubstr;
using testing::ops_of;

// Claims a change every time: the fixed-point loop must still stop.
class AlwaysChanges : public Pass {
 public:
  explicit AlwaysChanges(int* runs) : runs_(runs) {}
  std::string name() const override { return "always_changes"; }
  bool run(Module&) override {
    ++*runs_;
    return true;
  }

 private:
  int* runs_;
};

// Records a wrong output type on the last node: a rewrite bug the verifier must catch.
class BreaksTypes : public Pass {
 public:
  std::string name() const override { return "breaks_types"; }
  bool run(Module& m) override {
    m.graph.impl()->nodes.back().outputs[0].shape = {99};
    return true;
  }
};

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PipelineTest, BoundsTheFixedPointIterations) {
  int runs = 0;
  std::vector<std::unique_ptr<Pass>> group;
  group.push_back(std::make_unique<AlwaysChanges>(&runs));
  Pipeline p;
  p.set_dump_dir("");
  p.add_fixed_point(std::move(group), 5);
  Graph g;
  Module m = make_module(g, {});
  EXPECT_TRUE(p.run(m));
  EXPECT_EQ(runs, 5);
}

TEST(PipelineTest, RepeatsTheGroupUntilNothingChanges) {
  // CSE of the two exps makes the two adds equal: a second round merges them.
  Graph g;
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor y = (exp(x) + x) * (exp(x) + x);
  std::vector<std::unique_ptr<Pass>> group;
  group.push_back(std::make_unique<Cse>());
  group.push_back(std::make_unique<Dce>());
  Pipeline p;
  p.set_dump_dir("");
  p.add_fixed_point(std::move(group), 4);
  Module m = make_module(g, {y});
  p.run(m);
  EXPECT_EQ(ops_of(m), "placeholder exp add mul");
}

TEST(PipelineTest, VerifiesAfterEveryPassAndNamesThePassThatBrokeTheModule) {
  Graph g;
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor y = neg(x);
  Pipeline p;
  p.set_dump_dir("");
  p.set_verify_each(true);
  p.add(std::make_unique<BreaksTypes>());
  p.add(std::make_unique<Dce>());
  Module m = make_module(g, {y});
  try {
    p.run(m);
    FAIL() << "expected the verifier to report the broken module";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_THAT(e.what(), HasSubstr("after pass breaks_types"));
  }
  // Without verification after each pass the bug goes unreported here.
  Pipeline quiet;
  quiet.set_dump_dir("");
  quiet.set_verify_each(false);
  quiet.add(std::make_unique<BreaksTypes>());
  Module m2 = make_module(g, {y});
  EXPECT_NO_THROW(quiet.run(m2));
}

// Outside a compile, each optimize() dumps into a new subdirectory of KILN_DUMP named by the graph.
TEST(PipelineTest, DumpsEveryPassNumberedInOrderWithReasons) {
  auto root = std::filesystem::temp_directory_path() /
              ("kiln_pipeline_dump_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  ::setenv("KILN_DUMP", root.c_str(), 1);
  Graph g("dumped");
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor seed = g.constant(Tensor::scalar<int64_t>(1), "seed");
  Tensor y = x * 1.0 + random_uniform({2}, seed);
  CompiledGraph c = optimize(g, {y});
  ::unsetenv("KILN_DUMP");
  std::vector<std::filesystem::path> dumps(std::filesystem::directory_iterator(root), {});
  ASSERT_EQ(dumps.size(), 1u);
  const std::filesystem::path dir = dumps[0];
  EXPECT_THAT(dir.filename().string(), ::testing::StartsWith("dumped_"));
  EXPECT_TRUE(std::filesystem::exists(dir / "001_optimize.verify.txt"));
  EXPECT_TRUE(std::filesystem::exists(dir / "001_optimize.verify.dot"));
  EXPECT_THAT(read(dir / "002_optimize.constant_folding.round0.log"),
              HasSubstr("random_uniform is random or stateful"));
  EXPECT_THAT(read(dir / "003_optimize.algebraic_simplifier.round0.log"), HasSubstr("changed"));
  EXPECT_THAT(read(dir / "003_optimize.algebraic_simplifier.round0.txt"), HasSubstr("add"));
  EXPECT_THAT(read(dir / "003_optimize.algebraic_simplifier.round0.dot"), HasSubstr("digraph"));
  std::filesystem::remove_all(root);
}

TEST(PipelineTest, ReportsADumpDirectoryItCannotCreate) {
  Pipeline p = default_pipeline();
  p.set_dump_dir("/proc/kiln_cannot_create_this");
  Graph g;
  Tensor x = g.placeholder(f32, {2}, "x");
  try {
    optimize(g, {neg(x)}, p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("KILN_DUMP: cannot create '/proc/kiln_cannot_create_this'"));
  }
}

TEST(OptimizeTest, MapsPlaceholdersAndOutputsToTheNewGraph) {
  Graph g;
  Tensor unused = g.placeholder(f32, {2}, "unused");
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor two = g.constant(Tensor::scalar<float>(1)) + g.constant(Tensor::scalar<float>(1));
  Tensor y = neg(neg(x)) * two;
  CompiledGraph c = optimize(g, {y, x});
  EXPECT_EQ(c.nodes_before, 8);
  EXPECT_EQ(c.graph.num_nodes(), 4);  // unused, x, the folded 2, mul
  EXPECT_EQ(c.placeholder(x).name(), "x:0");
  EXPECT_EQ(c.outputs[1].impl()->node, c.placeholder(x).impl()->node);
  FeedList feeds = {{x, Tensor::from_list<float>({1.5f, -3})}};
  expect_bitwise_equal(c.run(feeds), g.run(feeds, {y, x}));
  EXPECT_EQ(c.run(feeds)[0].to_vector<float>(), (std::vector<float>{3, -6}));
}

TEST(OptimizeTest, RejectsValuesOfAnotherGraph) {
  Graph g, other;
  Tensor x = other.placeholder(f32, {2}, "x");
  EXPECT_THROW(optimize(g, {x}), Error);
  Tensor y = g.placeholder(f32, {2}, "y");
  CompiledGraph c = optimize(g, {y});
  EXPECT_THROW(c.placeholder(x), Error);
  EXPECT_THROW(c.placeholder(neg(y)), Error);
}

TEST(OptimizeTest, DoesNotRecordIntoTheDefaultGraph) {
  Graph g;
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor y = x * g.constant(Tensor::from_list<float>({1, 1}));
  Graph outer;
  auto guard = outer.as_default();
  optimize(g, {y});
  EXPECT_EQ(outer.num_nodes(), 0);
}

}  // namespace
}  // namespace kiln::compiler
