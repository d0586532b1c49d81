#include "compiler/passes/cse.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compiler/passes/dce.h"
#include "tests/compiler/compiler_test_util.h"

namespace kiln::compiler {
namespace {

using testing::expect_bitwise_equal;
using ::testing::HasSubstr;
using testing::ops_of;
using testing::run_module;

TEST(CseTest, MergesEqualNodesTransitively) {
  Graph g;
  Tensor x = g.placeholder(f32, {3}, "x");
  Tensor a = exp(x) + x;
  Tensor b = exp(x) + x;  // the same computation, recorded twice
  Module m = make_module(g, {a * b});
  EXPECT_TRUE(Cse().run(m));
  Dce().run(m);
  EXPECT_EQ(ops_of(m), "placeholder exp add mul");
  FeedList feeds = {{x, Tensor::from_list<float>({0, 1, -2})}};
  expect_bitwise_equal(run_module(m, feeds), g.run(feeds, std::vector<Tensor>{a * b}));
}

TEST(CseTest, KeepsNodesWhoseAttributesDiffer) {
  Graph g;
  Tensor x = g.placeholder(f32, {2, 3}, "x");
  Module m = make_module(
      g, {sum(x, {0}), sum(x, {1}), slice(x, {0, 0}, {1, 3}), slice(x, {1, 0}, {2, 3})});
  EXPECT_FALSE(Cse().run(m));
}

TEST(CseTest, KeepsTwoPlaceholdersOfTheSameType) {
  Graph g;
  Tensor a = g.placeholder(f32, {2}, "a");
  Tensor b = g.placeholder(f32, {2}, "b");
  Module m = make_module(g, {a + b});
  EXPECT_FALSE(Cse().run(m));
  EXPECT_EQ(ops_of(m), "placeholder placeholder add");
}

TEST(CseTest, NeverMergesRandomOpsAndSaysWhy) {
  Graph g;
  Tensor seed = g.placeholder(i64, {}, "seed");
  Tensor r1 = random_uniform({4}, seed);
  Tensor r2 = random_uniform({4}, seed);
  Module m = make_module(g, {r1 - r2});
  Cse cse;
  EXPECT_FALSE(cse.run(m));
  EXPECT_EQ(ops_of(m), "placeholder random_uniform random_uniform sub");
  ASSERT_EQ(cse.notes().size(), 1u);
  EXPECT_THAT(cse.notes()[0], HasSubstr("random_uniform is random or stateful"));
}

TEST(CseTest, MergesTheSameConstantUsedTwice) {
  Graph g;
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor value = Tensor::from_list<float>({1, 2});
  Tensor c1 = g.constant(value), c2 = g.constant(value);
  Module m = make_module(g, {(x + c1) * (x + c2)});
  EXPECT_TRUE(Cse().run(m));
  Dce().run(m);
  EXPECT_EQ(ops_of(m), "placeholder constant add mul");
}

TEST(CseTest, MergesConstantsByValueButKeepsSignedZerosApart) {
  Graph g;
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor one_a = g.constant(Tensor::scalar<float>(1)), one_b = g.constant(Tensor::scalar<float>(1));
  Tensor zero = g.constant(Tensor::scalar<float>(0)),
         neg_zero = g.constant(Tensor::scalar<float>(-0.0f));
  Tensor ones_i = g.constant(Tensor::scalar<int32_t>(1));  // same value, other dtype
  Module m = make_module(g, {(x - one_a) * (x - one_b), x + zero, x + neg_zero, ones_i});
  EXPECT_TRUE(Cse().run(m));
  Dce().run(m);
  EXPECT_EQ(ops_of(m), "placeholder constant constant constant constant sub mul add add");
  FeedList feeds = {{x, Tensor::from_list<float>({-0.0f, 3})}};
  expect_bitwise_equal(run_module(m, feeds),
                       g.run(feeds, {(x - one_a) * (x - one_b), x + zero, x + neg_zero, ones_i}));
}

}  // namespace
}  // namespace kiln::compiler
