// The fusion planner (compiler/passes/fusion.h) on hand-built graphs: which nodes group, which
// become group outputs, and the reasons recorded for refused fusions.
#include "compiler/passes/fusion.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compiler/cpu/fusion_target.h"
#include "compiler/executable.h"
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
  return plan_fusion(cpu::fusion_target(), nodes, types, std::vector<bool>(nodes.size(), true), refs);
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

// 8-bit integers are loaded and converted inside a fused loop, not computed on: u8 pixels ->
// f32 / 255 is one group; u8 + u8 stays a kernel.
TEST(FusionTest, ConvertFromU8FusesIntoTheArithmeticAfterIt) {
  Graph g{"pixels"};
  Tensor u = g.placeholder(u8, {4, 784}, "u");
  Tensor scaled = convert(u, f32) / 255.0;
  Tensor sum = call_op("add", {u, u})[0];
  FusionPlan p = plan(g, {scaled, sum});
  ASSERT_EQ(p.groups.size(), 1u) << p.log();
  EXPECT_EQ(p.groups[0].nodes.size(), 2u) << p.log();
  EXPECT_THAT(p.log(), HasSubstr("unsupported dtypes"));
}

// ---- input (reduction) fusion ----

Tensor reduce_op(const std::string& op, const Tensor& x, std::vector<int64_t> axes) {
  return call_op(op, {x}, {{"axes", axes}})[0];
}

// softmax = e / sum(e) with e = exp(x - max(x)): the max has nothing to fold in and is left to
// the reference kernel; sub, exp and the sum form one group with two outputs (e, which div
// needs, and the sum); div cannot join it, since its other input depends on the group through a
// reshape (a cycle), and the log says so.
TEST(FusionTest, SoftmaxBecomesReductionGroupsWithAMultiOutputGroup) {
  Graph g{"softmax"};
  Tensor x = g.placeholder(f32, {8, 100}, "x");
  Tensor y = softmax(x, -1);
  const auto& nodes = nodes_of(g);
  FusionPlan p = plan(g, {y});
  int sum_id = -1, max_id = -1, exp_id = -1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].op == "reduce_sum") sum_id = static_cast<int>(i);
    if (nodes[i].op == "reduce_max") max_id = static_cast<int>(i);
    if (nodes[i].op == "exp") exp_id = static_cast<int>(i);
  }
  ASSERT_GE(sum_id, 0);
  ASSERT_GE(p.group_of[sum_id], 0) << p.log();
  const FusionGroup& grp = p.groups[p.group_of[sum_id]];
  EXPECT_EQ(p.group_of[exp_id], p.group_of[sum_id]) << p.log();
  EXPECT_TRUE(grp.has_reductions);
  EXPECT_EQ(grp.reduce_axes, (std::vector<int64_t>{1}));
  EXPECT_EQ(grp.shape, (Shape{8, 100}));
  EXPECT_EQ(grp.outputs, (std::vector<int>{exp_id, sum_id})) << p.log();
  EXPECT_EQ(p.group_of[max_id], -1);
  EXPECT_THAT(p.log(), HasSubstr("no fusible producer")) << p.log();
  EXPECT_NE(p.group_of[id(y)], p.group_of[sum_id]);
  EXPECT_THAT(p.log(), HasSubstr("reducing axes [1]"));
  EXPECT_THAT(p.log(), HasSubstr("would create a cycle")) << p.log();

  // Compiled: equal to the interpreter within the f32-accumulation tolerance (1e-5 relative:
  // sums of 100 positive terms in f32, plus the exp approximation).
  std::vector<float> v(800);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37) % 101) / 10.0f - 5;
  Tensor xv = Tensor::from_vector(v, {8, 100});
  Executable exe = compile(g, {y}, {{x, xv}});
  std::vector<float> got = exe.run({{x, xv}})[0].to_vector<float>();
  std::vector<float> want = g.run({{x, xv}}, std::vector<Tensor>{y})[0].to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i] + 1e-12);
  std::string thunks;
  for (const std::string& t : exe.thunk_descriptions()) thunks += t + "\n";
  EXPECT_THAT(thunks, HasSubstr("fused(sub,exp,reduce_sum) -> 2 outputs")) << thunks;
}

TEST(FusionTest, ReductionRefusalsAreNoted) {
  Graph g{"refusals"};
  Tensor x = g.placeholder(f32, {4, 5, 6}, "x");
  Tensor e = exp(x);
  Tensor gap = reduce_op("reduce_sum", e, {0, 2});  // kept axis between reduced ones
  Tensor r1 = reduce_op("reduce_max", e, {2});
  Tensor r2 = reduce_op("reduce_sum", e, {2});      // same axes: joins r1's group
  Tensor r3 = reduce_op("reduce_sum", e, {1, 2});   // other axes: e becomes an output instead
  Tensor after = neg(r2);                          // uses a reduction: a new group
  Tensor b = g.placeholder(bool_, {4, 5}, "b");
  Tensor any = reduce_op("reduce_any", b, {1});
  FusionPlan p = plan(g, {gap, r1, r3, after, any});
  EXPECT_EQ(p.group_of[id(gap)], -1);
  EXPECT_THAT(p.log(), HasSubstr("are not adjacent")) << p.log();
  EXPECT_EQ(p.group_of[id(r1)], p.group_of[id(e)]);
  EXPECT_EQ(p.group_of[id(r2)], p.group_of[id(e)]);
  EXPECT_NE(p.group_of[id(r3)], p.group_of[id(e)]);
  EXPECT_EQ(p.group_of[id(r3)], -1);  // left to the reference kernel, reading e
  EXPECT_THAT(p.log(), HasSubstr("the group already reduces axes [2]")) << p.log();
  EXPECT_NE(p.group_of[id(after)], p.group_of[id(e)]);
  EXPECT_THAT(p.log(), HasSubstr("uses a reduction's result")) << p.log();
  EXPECT_EQ(p.group_of[id(any)], -1);
  const FusionGroup& grp = p.groups[p.group_of[id(e)]];
  EXPECT_EQ(grp.outputs, (std::vector<int>{id(e), id(r1), id(r2)})) << p.log();
}

// y = e - sum(e, axis 0): y may not join e's group through e, since it uses the group's
// reduction (broadcast back without a reshape).
TEST(FusionTest, ConsumerOfAGroupsReductionStaysOutsideItThroughEveryInput) {
  Graph g{"back"};
  Tensor x = g.placeholder(f32, {4, 4}, "x");
  Tensor e = exp(x);
  Tensor s = reduce_op("reduce_sum", e, {0});
  Tensor y = e - s;
  FusionPlan p = plan(g, {y});
  EXPECT_EQ(p.group_of[id(s)], p.group_of[id(e)]) << p.log();
  EXPECT_NE(p.group_of[id(y)], p.group_of[id(e)]) << p.log();
  EXPECT_THAT(p.log(), HasSubstr("uses a reduction's result")) << p.log();
  std::vector<float> v(16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) / 8 - 1;
  Tensor xv = Tensor::from_vector(v, {4, 4});
  Executable exe = compile(g, {y}, {{x, xv}});
  EXPECT_EQ(exe.fusion_log().find("left to the reference kernels"), std::string::npos)
      << exe.fusion_log();
  std::vector<float> got = exe.run({{x, xv}})[0].to_vector<float>();
  std::vector<float> want = g.run({{x, xv}}, std::vector<Tensor>{y})[0].to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i]) + 1e-5);
}

// A reduction whose consumers feed back into its producers' group is refused (a cycle), and
// compiled graphs with reductions match the interpreter.
TEST(FusionTest, ReductionGroupsCompileAndMatchTheInterpreter) {
  Graph g{"norm"};
  Tensor x = g.placeholder(f32, {33, 70}, "x");
  Tensor c = x - mean(x, {0}, true);        // column mean, then centred
  Tensor var = mean(c * c, {0});            // column sum of squares fused with the square
  Tensor rows = max(abs(c), {1});           // row max of |c|
  Executable exe = compile(g, {var, rows}, {});
  std::vector<float> v(33 * 70);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 53) % 97) / 7.0f - 6;
  Tensor xv = Tensor::from_vector(v, {33, 70});
  std::vector<Tensor> got = exe.run({{x, xv}});
  std::vector<Tensor> want = g.run({{x, xv}}, std::vector<Tensor>{var, rows});
  for (int k = 0; k < 2; ++k) {
    std::vector<float> a = got[k].to_vector<float>(), b = want[k].to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * std::abs(b[i]) + 1e-5);
  }
  EXPECT_THAT(exe.fusion_log(), HasSubstr("reducing axes")) << exe.fusion_log();
}

}  // namespace
}  // namespace kiln::compiler
