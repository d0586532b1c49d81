// Optimizing a real training step: the graph model.cc traces for Sequential
// [Dense(128, relu), Dropout(0.5), Dense(10)] with sparse categorical cross-entropy and Adam.
// Model does not expose its step graph, so this traces the same computation from the same
// public pieces (the layers' formulas, the loss, kiln::gradients, Adam::apply).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "kiln/nn.h"
#include "kiln/optim.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/mlp_step.h"

namespace kiln::compiler {
namespace {

using testing::expect_bitwise_equal;

TEST(MlpStepTest, OptimizingTheTrainingStepRemovesNodesAndKeepsEveryBit) {
  test_models::MlpStep step = test_models::make_mlp_step(/*in=*/64, /*hidden_units=*/128, /*classes=*/10,
                                                  /*batch=*/16);
  const Graph& g = step.graph;
  const std::vector<Tensor>& fetches = step.fetches;
  const FeedList& feeds = step.feeds;
  CompiledGraph c = optimize(g, fetches);
  std::printf("[ mlp step ] %d nodes before, %d after optimize\n", c.nodes_before,
              c.graph.num_nodes());
  EXPECT_LT(c.graph.num_nodes(), c.nodes_before);
  expect_bitwise_equal(c.run(feeds), g.run(feeds, fetches));
}

}  // namespace
}  // namespace kiln::compiler
