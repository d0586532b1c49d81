// Differential test of the whole pipeline: random small graphs, run by the interpreter before
// and after optimize. The exact passes (Rewrites::kExact) must give bit-identical results (their
// rewrites keep the kernels and their inputs, so not even the evaluation order changes); the full
// pipeline adds the layout pass, whose folded dots may sum in another order (see below).
#include <gtest/gtest.h>

#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/random_graph.h"

namespace kiln::compiler {
namespace {

using testing::bitwise_equal;

TEST(OptimizeRandomTest, ExactPassesGiveBitIdenticalResults) {
  int before = 0, after = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    testing::BuiltGraph rg =
        testing::build(testing::generate(seed, {.min_nodes = 6, .max_nodes = 18}));
    std::vector<Tensor> want = rg.graph.run(rg.feeds, rg.outputs);
    Pipeline exact = default_pipeline(Rewrites::kExact);
    CompiledGraph c = optimize(rg.graph, rg.outputs, exact);
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
    Pipeline exact_again = default_pipeline(Rewrites::kExact);
    CompiledGraph again = optimize(c.graph, c.outputs, exact_again);
    EXPECT_EQ(again.graph.num_nodes(), c.graph.num_nodes()) << c.graph.to_text();
  }
  std::printf("[ random graphs ] %d nodes before, %d after optimize\n", before, after);
  EXPECT_LT(after, before);
}

// The same on graphs with convolutions, pooling, gathers and scatters, and on their gradients
// (second order for one seed in three): epilogue fusion turns their dots and convolutions into
// fused_dot and fused_conv, whose results must be the same bits.
TEST(OptimizeRandomTest, ExactPassesGiveBitIdenticalResultsOnKernelOpGraphsAndTheirGradients) {
  int fused = 0;
  for (uint32_t seed = 0; seed < 1000; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    testing::GeneratorOptions opt;
    opt.kernel_ops = true;
    testing::BuiltGraph rg = testing::build(testing::generate(seed, opt));
    for (bool gradients : {false, true}) {
      if (gradients && !testing::differentiate(&rg, seed, seed % 3 ? 1 : 2)) continue;
      std::vector<Tensor> want = rg.graph.run(rg.feeds, rg.outputs);
      Pipeline exact = default_pipeline(Rewrites::kExact);
      CompiledGraph c;
      try {
        c = optimize(rg.graph, rg.outputs, exact);
      } catch (const Error& e) {
        ADD_FAILURE() << "optimize throws: " << e.what() << "\n" << rg.graph.to_text();
        break;
      }
      fused += static_cast<int>(c.graph.to_text().find(" fused_") != std::string::npos);
      std::vector<Tensor> got = c.run(rg.feeds);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(bitwise_equal(got[i], want[i]))
            << (gradients ? "gradient " : "output ") << i << "\n"
            << rg.graph.to_text() << "\noptimized:\n"
            << c.graph.to_text();
      }
    }
  }
  std::printf("[ random graphs ] %d optimized graphs with fused_dot or fused_conv\n", fused);
  EXPECT_GT(fused, 0);
}

// The full pipeline, layout folding included: random graphs rarely put a transpose before a dot
// (10 of the first 3000 seeds), so 3000 are optimized both ways and those the layout pass changed
// are run. A folded dot sums in another order (tests/compiler/layout_test.cc bounds it by
// 2*K*u*sum|a b|, K <= 8 here); later ops carry the difference on, so outputs compare with 1e-5
// relative and 1e-6 absolute (f32; 1e-12 and 1e-14 for f64); integer dots are exact in any order.
TEST(OptimizeRandomTest, FullPipelineMatchesWithinAReorderedSumsRounding) {
  int folded = 0;
  for (uint32_t seed = 0; seed < 3000; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    testing::BuiltGraph rg =
        testing::build(testing::generate(seed, {.min_nodes = 6, .max_nodes = 18}));
    CompiledGraph c = optimize(rg.graph, rg.outputs);
    Pipeline exact = default_pipeline(Rewrites::kExact);
    if (optimize(rg.graph, rg.outputs, exact).graph.to_text() == c.graph.to_text()) continue;
    ++folded;
    std::vector<Tensor> want = rg.graph.run(rg.feeds, rg.outputs);
    std::vector<Tensor> got = c.run(rg.feeds);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      testing::Tolerance tol = want[i].dtype() == f64   ? testing::Tolerance{1e-12, 1e-14}
                               : want[i].dtype() == f32 ? testing::Tolerance{1e-5, 1e-6}
                                                        : testing::Tolerance{};
      EXPECT_EQ(testing::mismatch(got[i], want[i], tol), "") << "output " << i << "\n"
                                                             << c.graph.to_text();
    }
  }
  std::printf("[ random graphs ] the layout pass changed %d of 3000\n", folded);
  EXPECT_GT(folded, 0);
}

}  // namespace
}  // namespace kiln::compiler
