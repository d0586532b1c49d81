#include "compiler/passes/dce.h"

#include <gtest/gtest.h>

#include "tests/compiler/compiler_test_util.h"

namespace kiln::compiler {
namespace {

using testing::ops_of;
using testing::run_module;

TEST(DceTest, RemovesWhatTheOutputsDoNotNeedAndKeepsPlaceholders) {
  Graph g;
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor unused = g.placeholder(f32, {2}, "unused");
  Tensor dead = exp(unused) * 3.0;
  Tensor y = neg(x);
  Tensor dead2 = y + 1.0;
  Module m = make_module(g, {y});
  EXPECT_TRUE(Dce().run(m));
  EXPECT_EQ(ops_of(m), "placeholder placeholder neg");
  ASSERT_EQ(m.placeholders.size(), 2u);
  EXPECT_EQ(m.placeholders[1].original, unused.impl()->node);
  FeedList feeds = {{x, Tensor::from_list<float>({1, -2})}};
  EXPECT_EQ(run_module(m, feeds)[0].to_vector<float>(), (std::vector<float>{-1, 2}));
  EXPECT_FALSE(Dce().run(m));
  (void)dead;
  (void)dead2;
}

TEST(DceTest, KeepsEverythingAnOutputNeedsIncludingRepeatedOutputs) {
  Graph g;
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor a = exp(x);
  Tensor b = a * x;
  Module m = make_module(g, {b, a, b});
  EXPECT_FALSE(Dce().run(m));
  EXPECT_EQ(ops_of(m), "placeholder exp mul");
}

TEST(DceTest, RemapsOutputsAfterRemovingEarlierNodes) {
  Graph g;
  Tensor dead = g.constant(Tensor::scalar<float>(5), "dead");
  Tensor x = g.placeholder(f32, {}, "x");
  Tensor y = x * x;
  Module m = make_module(g, {y});
  EXPECT_TRUE(Dce().run(m));
  EXPECT_EQ(ops_of(m), "placeholder mul");
  EXPECT_EQ(m.outputs[0].node, 1);
  EXPECT_EQ(m.placeholders[0].current, 0);
  EXPECT_EQ(run_module(m, {{x, Tensor::scalar<float>(3)}})[0].item<float>(), 9.0f);
  (void)dead;
}

}  // namespace
}  // namespace kiln::compiler
