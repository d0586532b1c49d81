// Differential test of the whole pipeline: random small graphs, run by the interpreter before
// and after optimize, must give bit-identical results (every rewrite the pipeline makes keeps
// the kernels and their inputs, so not even the evaluation order changes).
#include <gtest/gtest.h>

#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/random_graph.h"

namespace kiln::compiler {
namespace {

using testing::bitwise_equal;

TEST(OptimizeRandomTest, OptimizedGraphsGiveBitIdenticalResults) {
  int before = 0, after = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    testing::BuiltGraph rg =
        testing::build(testing::generate(seed, {.min_nodes = 6, .max_nodes = 18}));
    std::vector<Tensor> want = rg.graph.run(rg.feeds, rg.outputs);
    CompiledGraph c = optimize(rg.graph, rg.outputs);
    std::vector<Tensor> got = c.run(rg.feeds);
    before += c.nodes_before;
    after += c.graph.num_nodes();
    EXPECT_LE(c.graph.num_nodes(), c.nodes_before);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(bitwise_equal(got[i], want[i])) << "output " << i << "\n"
                                                  << rg.graph.to_text() << "\noptimized:\n"
                                                  << c.graph.to_text();
    }
    // Optimizing an optimized graph finds nothing more to do.
    CompiledGraph again = optimize(c.graph, c.outputs);
    EXPECT_EQ(again.graph.num_nodes(), c.graph.num_nodes()) << c.graph.to_text();
  }
  std::printf("[ random graphs ] %d nodes before, %d after optimize\n", before, after);
  EXPECT_LT(after, before);
}

}  // namespace
}  // namespace kiln::compiler
