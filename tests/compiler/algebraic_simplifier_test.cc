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

// ---- relu before a max pool: its gradient's mask folds into the pool's gradient ----

struct PoolGrads {
  Graph g;
  Tensor z, dy;
  Attrs window{{"window", Axes{1, 2, 2, 1}}, {"strides", Axes{1, 2, 2, 1}}};
  PoolGrads()
      : z(g.placeholder(f32, {2, 4, 6, 3}, "z")), dy(g.placeholder(f32, {2, 2, 3, 3}, "dy")) {}
  Tensor max_grad(const Tensor& x) { return call_op("reduce_window_max_grad", {x, dy}, window)[0]; }
  FeedList feeds() const {
    // Many zeros and negatives (masked windows), ties, and a NaN (never masked).
    std::vector<float> zv(2 * 4 * 6 * 3);
    for (size_t i = 0; i < zv.size(); ++i)
      zv[i] = static_cast<float>(static_cast<int>(i * 7 % 5) - 2);
    zv[5] = std::nanf("");
    std::vector<float> dv(2 * 2 * 3 * 3);
    for (size_t i = 0; i < dv.size(); ++i) dv[i] = 0.5f + static_cast<float>(i);
    return {{z, Tensor::from_vector(zv, {2, 4, 6, 3})},
            {dy, Tensor::from_vector(dv, {2, 2, 3, 3})}};
  }
};

int count_ops(const Module& m, const std::string& op) {
  int count = 0;
  for (const detail::Node& n : nodes_of(m.graph)) count += n.op == op;
  return count;
}

std::string masked_attr(const Module& m) {
  for (const detail::Node& n : nodes_of(m.graph)) {
    if (n.op == "reduce_window_max_grad")
      return n.attrs.get_bool("relu_mask", false) ? "masked" : "plain";
  }
  return "none";
}

TEST(AlgebraicSimplifierTest, FoldsTheReluMaskIntoTheMaxPoolGradient) {
  PoolGrads p;
  Graph& g = p.g;
  Tensor zero = c32(g, 0.0f);
  // As recorded: x = select(z <= 0, 0, z); the relu's gradient masks with the same test.
  Tensor test = less_equal(p.z, zero);
  Tensor x = where(test, zero, p.z);
  Tensor recorded = where(test, zero, p.max_grad(x));
  // After the epilogue pass: the test reads x itself.
  Tensor y = relu(p.z);
  Tensor fused_form = where(less_equal(y, zero), zero, p.max_grad(y));
  for (const Tensor& out : {recorded, fused_form}) {
    Module m = make_module(g, {out});
    Dce().run(m);
    const int selects = count_ops(m, "select");
    const std::string ops = simplified(m);
    EXPECT_EQ(masked_attr(m), "masked") << ops;
    EXPECT_EQ(count_ops(m, "select"), selects - 1) << "the mask's select is gone: " << ops;
    expect_bitwise_equal(run_module(m, p.feeds()), g.run(p.feeds(), std::vector<Tensor>{out}));
  }
}

TEST(AlgebraicSimplifierTest, KeepsTheReluMaskWhereFoldingItWouldChangeBits) {
  PoolGrads p;
  Graph& g = p.g;
  Tensor zero = c32(g, 0.0f), neg_zero = c32(g, -0.0f);
  Tensor y = relu(p.z);
  Tensor test = less_equal(y, zero);
  Tensor shared = p.max_grad(y);
  std::vector<std::pair<std::string, std::vector<Tensor>>> cases = {
      // The masked kernel writes +0.0.
      {"-0.0 fill", {where(test, neg_zero, p.max_grad(y))}},
      // The unmasked gradient is read elsewhere too.
      {"shared gradient", {where(test, zero, shared), shared}},
      // The test is on another tensor than the pool's operand.
      {"other tensor", {where(less_equal(neg(p.z), zero), zero, p.max_grad(y))}},
      // The test is not x <= 0.
      {"other test", {where(less_equal(y, c32(g, 1.0f)), zero, p.max_grad(y))}},
  };
  for (const auto& [what, outs] : cases) {
    Module m = make_module(g, outs);
    const std::string ops = simplified(m);
    EXPECT_EQ(masked_attr(m), "plain") << what << ": " << ops;
    expect_bitwise_equal(run_module(m, p.feeds()), g.run(p.feeds(), outs));
  }
}

}  // namespace
}  // namespace kiln::compiler
