// The fusion planner (compiler/passes/fusion.h) on hand-built graphs: which nodes group, which
// become group outputs, and the reasons recorded for refused fusions.
#include "compiler/passes/fusion.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compiler/passes/pass.h"
#include "kiln/kiln.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;

// Plans over the whole graph with the recorded (fully known) types, fetching `fetched`.
FusionPlan plan(const Graph& g, const std::vector<Tensor>& fetched) {
  const auto& nodes = nodes_of(g);
  std::vector<std::vector<TensorType>> types;
  for (const auto& n : nodes) types.push_back(n.outputs);
  std::vector<ValueRef> refs;
  for (const Tensor& t : fetched) refs.push_back({t.impl()->node, t.impl()->output});
  return plan_fusion(nodes, types, std::vector<bool>(nodes.size(), true), refs);
}

int id(const Tensor& t) { return t.impl()->node; }

TEST(FusionTest, ChainAndDiamondFormOneGroupWithOneOutput) {
  Graph g{"diamond"};
  Tensor x = g.placeholder(f32, {2, 3}, "x");
  Tensor a = exp(x);
  Tensor b = neg(a);
  Tensor c = abs(a);
  Tensor d = b - c;  // a feeds two consumers, both in the group
  FusionPlan p = plan(g, {d});
  ASSERT_EQ(p.groups.size(), 1u) << p.log();
  EXPECT_EQ(p.groups[0].nodes, (std::vector<int>{id(a), id(b), id(c), id(d)}));
  EXPECT_EQ(p.groups[0].outputs, (std::vector<int>{id(d)}));
  EXPECT_EQ(p.groups[0].shape, (Shape{2, 3}));
  EXPECT_EQ(p.group_of[id(x)], -1);
}

TEST(FusionTest, ValueUsedOutsideTheGroupBecomesAnOutput) {
  Graph g{"outside"};
  Tensor x = g.placeholder(f32, {2, 2}, "x");
  Tensor a = exp(x);
  Tensor b = a * a;
  Tensor m = matmul(a, x);  // a is also needed by a non-fusible op
  FusionPlan p = plan(g, {b, m});
  ASSERT_EQ(p.groups.size(), 1u) << p.log();
  EXPECT_EQ(p.groups[0].outputs, (std::vector<int>{id(a), id(b)}));
}

TEST(FusionTest, CycleThroughANonFusibleOpIsRefused) {
  Graph g{"cycle"};
  Tensor x = g.placeholder(f32, {2, 2}, "x");
  Tensor a = tanh(x);
  Tensor m = matmul(a, x);
  Tensor c = a + m;
  FusionPlan p = plan(g, {c});
  EXPECT_NE(p.group_of[id(a)], p.group_of[id(c)]);
  EXPECT_THAT(p.log(), HasSubstr("would create a cycle")) << p.log();
  EXPECT_THAT(p.log(), HasSubstr("tanh"));
}

TEST(FusionTest, CycleThroughAnotherGroupIsRefused) {
  // a1 -> [m = matmul] -> group B member b1, b2 independent of m; a2 uses b2 while a1 feeds b1:
  // grouping a1 with a2 while b1, b2 share a group would make the two groups wait on each other.
  Graph g{"groups"};
  Tensor x = g.placeholder(f32, {2, 2}, "x");
  Tensor a1 = exp(x);
  Tensor m = matmul(a1, x);
  Tensor b2 = neg(x);
  Tensor b1 = m * b2;        // joins b2's group
  Tensor a2 = a1 + b2;       // would join a1's group and b2's: refuse the one making a cycle
  Tensor out = a2 + b1;
  FusionPlan p = plan(g, {out});
  // Whatever the grouping, the group graph must be acyclic: a1 and b1 are not both grouped
  // with a2 unless m is also (it cannot be).
  EXPECT_FALSE(p.group_of[id(a1)] >= 0 && p.group_of[id(a1)] == p.group_of[id(b1)]) << p.log();
  EXPECT_THAT(p.log(), HasSubstr("would create a cycle")) << p.log();
}

TEST(FusionTest, UnknownDimsAndUnsupportedDtypesAreNoted) {
  Graph g{"notes"};
  Tensor x = g.placeholder(f32, {kUnknownDim}, "x");
  Tensor u = g.placeholder(u8, {3}, "u");
  Tensor a = exp(x);
  Tensor b = call_op("add", {u, u})[0];
  FusionPlan p = plan(g, {a, b});
  EXPECT_TRUE(p.groups.empty()) << p.log();
  EXPECT_THAT(p.log(), HasSubstr("unknown input dimension"));
  EXPECT_THAT(p.log(), HasSubstr("unsupported dtypes"));
}

}  // namespace
}  // namespace kiln::compiler
