// The Verify pass: a recorded graph passes unchanged; a node whose recorded type, input or
// attributes are wrong, or an output outside the graph, is rejected with a message naming it.
#include "compiler/passes/verify.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compiler/pipeline.h"
#include "kiln/kiln.h"
#include "tests/testing/values.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;

std::string verify_error(Module& m) {
  return test_values::error_of([&] { Verify().run(m); });
}

TEST(VerifyTest, AcceptsARecordedGraphAndChangesNothing) {
  Graph g;
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  Tensor y = sum(relu(x) * 2.0, {1});
  Module m = make_module(g, {y});
  EXPECT_FALSE(Verify().run(m));
}

TEST(VerifyTest, RejectsAWrongRecordedTypeNamingTheNode) {
  Graph g;
  Tensor x = g.placeholder(f32, {2, 3}, "x");
  Tensor y = neg(x);
  Module m = make_module(g, {y});
  m.graph.impl()->nodes[y.impl()->node].outputs[0].shape = {3, 2};
  std::string msg = verify_error(m);
  EXPECT_THAT(msg, HasSubstr("'neg'"));
  EXPECT_THAT(msg, HasSubstr("f32[3,2]"));
  EXPECT_THAT(msg, HasSubstr("f32[2,3]"));
}

TEST(VerifyTest, RejectsAnInputThatIsNotAnEarlierNode) {
  Graph g;
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor y = neg(x);
  Tensor z = exp(y);
  Module m = make_module(g, {z});
  m.graph.impl()->nodes[y.impl()->node].inputs[0] = {z.impl()->node, 0};
  std::string msg = verify_error(m);
  EXPECT_THAT(msg, HasSubstr("'neg'"));
  EXPECT_THAT(msg, HasSubstr("not an earlier value"));
}

TEST(VerifyTest, RejectsAttributesTheShapeFunctionRefuses) {
  Graph g;
  Tensor x = g.placeholder(f32, {2, 3}, "x");
  Tensor y = transpose(x, {1, 0});
  Module m = make_module(g, {y});
  m.graph.impl()->nodes[y.impl()->node].attrs.set("perm", std::vector<int64_t>{0, 0});
  std::string msg = verify_error(m);
  EXPECT_THAT(msg, HasSubstr("'transpose'"));
  EXPECT_THAT(msg, HasSubstr("shape function"));
}

TEST(VerifyTest, RejectsAnOutputOutsideTheGraph) {
  Graph g;
  Tensor x = g.placeholder(f32, {2}, "x");
  Module m = make_module(g, {neg(x)});
  m.outputs[0].node = 99;
  EXPECT_THAT(verify_error(m), HasSubstr("output 0"));
}

}  // namespace
}  // namespace kiln::compiler
