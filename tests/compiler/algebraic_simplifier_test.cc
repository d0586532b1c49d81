#include "compiler/passes/algebraic_simplifier.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compiler/passes/dce.h"
#include "tests/compiler/compiler_test_util.h"

namespace kiln::compiler {
namespace {

using testing::expect_bitwise_equal;
using testing::ops_of;
using testing::run_module;

// Simplifies then removes what became dead; returns the surviving ops.
std::string simplified(Module& m) {
  AlgebraicSimplifier().run(m);
  Dce().run(m);
  return ops_of(m);
}

Tensor c32(Graph& g, float v) { return g.constant(Tensor::scalar<float>(v)); }

TEST(AlgebraicSimplifierTest, RemovesMultiplyAndDivideByOne) {
  Graph g;
  Tensor x = g.placeholder(f32, {2, 2}, "x");
  Tensor y = c32(g, 1) * (x / c32(g, 1));
  Module m = make_module(g, {y});
  EXPECT_EQ(simplified(m), "placeholder");
  EXPECT_EQ(m.outputs[0].node, 0);
}

TEST(AlgebraicSimplifierTest, AddsOnlyTheZeroThatIsExact) {
  Graph g;
  Tensor x = g.placeholder(f32, {3}, "x");
  Tensor plus_zero = x + c32(g, 0.0f);      // -0.0 + 0.0 = +0.0: must stay
  Tensor minus_zero = x + c32(g, -0.0f);    // exact for every x
  Tensor sub_zero = x - c32(g, 0.0f);       // exact for every x
  Tensor sub_neg_zero = x - c32(g, -0.0f);  // -0.0 - -0.0 = +0.0: must stay
  Module m = make_module(g, {plus_zero, minus_zero, sub_zero, sub_neg_zero});
  EXPECT_EQ(simplified(m), "placeholder constant add constant sub");
  EXPECT_EQ(m.outputs[1].node, 0);
  EXPECT_EQ(m.outputs[2].node, 0);
  FeedList feeds = {{x, Tensor::from_list<float>({-0.0f, 1.5f, std::nanf("")})}};
  std::vector<Tensor> out = run_module(m, feeds);
  EXPECT_FALSE(std::signbit(out[0].to_vector<float>()[0]));
  EXPECT_TRUE(std::signbit(out[1].to_vector<float>()[0]));
}

TEST(AlgebraicSimplifierTest, IntegerZeroIsAnIdentityEitherSide) {
  Graph g;
  Tensor x = g.placeholder(i32, {2}, "x");
  Tensor zero = g.constant(Tensor::from_list<int32_t>({0, 0}));
  Module m = make_module(g, {zero + x, x - zero});
  EXPECT_EQ(simplified(m), "placeholder");
}

TEST(AlgebraicSimplifierTest, MultipliesByZeroOnlyForIntegers) {
  Graph g;
  Tensor i = g.placeholder(i32, {2}, "i");
  Tensor f = g.placeholder(f32, {2}, "f");
  Tensor izero = g.constant(Tensor::from_list<int32_t>({0, 0}), "izero");
  Tensor fzero = g.constant(Tensor::from_list<float>({0, 0}), "fzero");
  Module m = make_module(g, {i * izero, f * fzero});  // NaN * 0 is NaN, -1.0 * 0 is -0.0
  EXPECT_EQ(simplified(m), "placeholder placeholder constant constant mul");
  EXPECT_EQ(nodes_of(m.graph)[m.outputs[0].node].name, "izero");
  FeedList feeds = {{i, Tensor::from_list<int32_t>({5, -7})},
                    {f, Tensor::from_list<float>({-1, std::nanf("")})}};
  std::vector<Tensor> out = run_module(m, feeds);
  EXPECT_EQ(out[0].to_vector<int32_t>(), (std::vector<int32_t>{0, 0}));
  EXPECT_TRUE(std::signbit(out[1].to_vector<float>()[0]));
  EXPECT_TRUE(std::isnan(out[1].to_vector<float>()[1]));
}

TEST(AlgebraicSimplifierTest, KeepsAnIdentityThatBroadcasts) {
  Graph g;
  Tensor x = g.placeholder(f32, {3}, "x");
  Tensor ones = g.constant(Tensor::from_list<float>({1, 1, 1, 1, 1, 1}, {2, 3}));
  Module m = make_module(g, {x * ones});  // f32[2,3], not x
  EXPECT_EQ(simplified(m), "placeholder constant mul");
}

TEST(AlgebraicSimplifierTest, RemovesDoubleNegationAndSameTypeConvert) {
  Graph g;
  Tensor x = g.placeholder(i64, {4}, "x");
  Module m = make_module(g, {neg(neg(convert(x, i64)))});
  EXPECT_EQ(simplified(m), "placeholder");
  int64_t lowest = std::numeric_limits<int64_t>::min();
  FeedList feeds = {{x, Tensor::from_list<int64_t>({lowest, -1, 0, 7})}};
  expect_bitwise_equal(run_module(m, feeds), g.run(feeds, std::vector<Tensor>{neg(neg(x))}));
}

TEST(AlgebraicSimplifierTest, ComposesReshapesAndDropsIdentityReshape) {
  Graph g;
  Tensor x = g.placeholder(f32, {2, 3}, "x");
  Tensor y = reshape(reshape(reshape(x, {6}), {3, 2}), {1, 6});
  Tensor same = reshape(x, {2, 3});
  Module m = make_module(g, {y, same});
  EXPECT_EQ(simplified(m), "placeholder reshape");
  EXPECT_EQ(m.outputs[1].node, 0);
  FeedList feeds = {{x, Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {2, 3})}};
  std::vector<Tensor> out = run_module(m, feeds);
  EXPECT_EQ(out[0].shape(), (Shape{1, 6}));
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(AlgebraicSimplifierTest, ComposesTransposesAndDropsTheIdentity) {
  Graph g;
  Tensor x = g.placeholder(f32, {2, 3, 4}, "x");
  Tensor composed = transpose(transpose(x, {1, 2, 0}), {2, 0, 1});  // identity
  Tensor rotated = transpose(transpose(x, {1, 0, 2}), {0, 2, 1});   // = transpose(x, {1, 2, 0})
  Tensor identity = transpose(x, {0, 1, -1});
  Module m = make_module(g, {composed, rotated, identity});
  EXPECT_EQ(simplified(m), "placeholder transpose");
  EXPECT_EQ(m.outputs[0].node, 0);
  EXPECT_EQ(m.outputs[2].node, 0);
  const auto& t = nodes_of(m.graph)[m.outputs[1].node];
  EXPECT_EQ(t.attrs.get_ints("perm"), (std::vector<int64_t>{1, 2, 0}));
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  FeedList feeds = {{x, Tensor::from_vector(v, {2, 3, 4})}};
  expect_bitwise_equal(run_module(m, feeds), g.run(feeds, {composed, rotated, identity}));
}

TEST(AlgebraicSimplifierTest, RemovesIdentityBroadcastAndSlice) {
  Graph g;
  Tensor x = g.placeholder(f32, {2, 3}, "x");
  Tensor b = broadcast_in_dim(x, {2, 3}, {0, 1});
  Tensor s = slice(b, {0, 0}, {2, 3});
  Tensor strided = slice(x, {0, 0}, {2, 3}, {1, 2});  // not the identity
  Tensor grown = broadcast_in_dim(x, {4, 2, 3}, {1, 2});
  Module m = make_module(g, {s, strided, grown});
  EXPECT_EQ(simplified(m), "placeholder slice broadcast_in_dim");
  EXPECT_EQ(m.outputs[0].node, 0);
}

TEST(AlgebraicSimplifierTest, KeepsUnknownShapesWhereTheRuleCannotBeChecked) {
  Graph g;
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  Tensor y = reshape(x, {-1, 3});
  Module m = make_module(g, {y});
  EXPECT_EQ(simplified(m), "placeholder reshape");
}

}  // namespace
}  // namespace kiln::compiler
