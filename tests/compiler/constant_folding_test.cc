#include "compiler/passes/constant_folding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/compiler/compiler_test_util.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;
using testing::ops_of;
using testing::run_module;

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

TEST(ConstantFoldingTest, FoldsAConstantSubgraphIntoOneConstant) {
  Graph g;
  Tensor x = g.placeholder(f32, {3}, "x");
  Tensor a = g.constant(Tensor::from_list<float>({1, 2, 3}), "a");
  Tensor b = g.constant(Tensor::from_list<float>({10, 20, 30}), "b");
  Tensor y = x * neg(a + b);
  Module m = make_module(g, {y});
  ConstantFolding fold;
  EXPECT_TRUE(fold.run(m));
  // add and neg are now constants (the old a, b stay until DCE).
  EXPECT_EQ(ops_of(m), "placeholder constant constant constant constant mul");
  FeedList feeds = {{x, Tensor::from_list<float>({1, 0.5f, -1})}};
  EXPECT_EQ(run_module(m, feeds)[0].to_vector<float>(), (std::vector<float>{-11, -11, 33}));
  EXPECT_FALSE(fold.run(m));  // a fixed point
}

TEST(ConstantFoldingTest, FoldsOpsWithoutInputsAndIntegerOps) {
  Graph g;
  Tensor y;
  {
    auto guard = g.as_default();
    y = iota({2, 3}, 1, i32) * g.constant(Tensor::scalar<int32_t>(2));
  }
  Module m = make_module(g, {y});
  EXPECT_TRUE(ConstantFolding().run(m));
  const auto& nodes = nodes_of(m.graph);
  const detail::Node& out = nodes[m.outputs[0].node];
  ASSERT_EQ(out.op, "constant");
  EXPECT_EQ(out.attrs.get_tensor("value").to_vector<int32_t>(),
            (std::vector<int32_t>{0, 2, 4, 0, 2, 4}));
}

TEST(ConstantFoldingTest, RefusesPlaceholdersAndRandomOps) {
  Graph g;
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor r = random_uniform({2}, g.constant(Tensor::scalar<int64_t>(7)));
  Tensor y = x + r;
  Module m = make_module(g, {y});
  ConstantFolding fold;
  EXPECT_FALSE(fold.run(m));
  EXPECT_EQ(ops_of(m), "placeholder constant random_uniform add");
  EXPECT_THAT(joined(fold.notes()), HasSubstr("random_uniform is random or stateful"));
}

TEST(ConstantFoldingTest, RefusesResultsOverTheSizeCapAndSaysWhy) {
  Graph g;
  Tensor c = g.constant(Tensor::scalar<float>(1.5f));
  Tensor big = broadcast_to(c, {3, 4});
  Module m = make_module(g, {big});
  ConstantFolding fold(/*max_elements=*/8);
  EXPECT_FALSE(fold.run(m));
  EXPECT_EQ(ops_of(m), "constant broadcast_in_dim");
  EXPECT_THAT(joined(fold.notes()), HasSubstr("f32[3,4] has more than 8 elements"));
  EXPECT_TRUE(ConstantFolding(12).run(m));
  EXPECT_EQ(run_module(m, {})[0].to_vector<float>(), std::vector<float>(12, 1.5f));
}

TEST(ConstantFoldingTest, LeavesAFailingKernelToFailAtRunTime) {
  Graph g;
  Tensor idx = g.constant(Tensor::from_list<int64_t>({5}));
  Tensor table = g.constant(Tensor::from_list<float>({1, 2}));
  Tensor y = gather(table, idx);
  Module m = make_module(g, {y});
  ConstantFolding fold;
  EXPECT_FALSE(fold.run(m));
  EXPECT_THAT(joined(fold.notes()), HasSubstr("kernel fails"));
  EXPECT_THROW(run_module(m, {}), Error);
}

}  // namespace
}  // namespace kiln::compiler
