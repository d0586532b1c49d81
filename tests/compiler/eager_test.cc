// Eager elementwise ops through the compiler's kernel cache: large flat operands run JIT'd
// kernels (one compile per op and dtypes, any size), agreeing with the reference kernels;
// small or broadcasting ones do not touch the cache; op errors are unchanged.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compiler/cpu/eager.h"
#include "compiler/cpu/kernel_cache.h"
#include "kiln/kiln.h"

namespace kiln::compiler {
namespace {

// Runs `f` with the reference kernels (interpreted mode) for the expected values.
template <class F>
Tensor reference(F f) {
  ExecutionMode before = default_execution_mode();
  set_default_execution_mode(ExecutionMode::kInterpreted);
  Tensor out = f();
  set_default_execution_mode(before);
  return out;
}

void expect_close(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  auto g = got.data<float>();
  auto w = want.data<float>();
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], 2e-6f * (1 + std::abs(w[i]))) << "at " << i;
}

class EagerCompiled : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(eager_runner_installed());
    before_ = default_execution_mode();
    set_default_execution_mode(ExecutionMode::kCompiled);
  }
  void TearDown() override { set_default_execution_mode(before_); }
  ExecutionMode before_;
};

TEST_F(EagerCompiled, LargeFlatOpsRunJitKernelsOncePerSignature) {
  const int64_t n = kEagerCompileMinElements * 2;
  Tensor x = random_uniform({n}, 1, -3, 3), y = random_uniform({n}, 2, 0.5, 2);
  KernelCacheStats s0 = kernel_cache_stats();
  Tensor a = tanh(x);
  KernelCacheStats s1 = kernel_cache_stats();
  EXPECT_EQ(s1.hits + s1.misses, s0.hits + s0.misses + 1);
  expect_close(a, reference([&] { return tanh(x); }));
  // Another size, another rank: the same flat kernel.
  Tensor x2 = random_uniform({3, n / 2}, 3, -3, 3);
  Tensor b = tanh(x2);
  KernelCacheStats s2 = kernel_cache_stats();
  EXPECT_EQ(s2.misses, s1.misses);
  EXPECT_EQ(s2.hits, s1.hits + 1);
  expect_close(b, reference([&] { return tanh(x2); }));
  // Binary ops, and a single-element operand.
  expect_close(x / y, reference([&] { return x / y; }));
  expect_close(x * 3.0, reference([&] { return x * 3.0; }));
  expect_close(maximum(x, y), reference([&] { return maximum(x, y); }));
}

TEST_F(EagerCompiled, SmallAndBroadcastingOpsKeepTheReferenceKernels) {
  KernelCacheStats s0 = kernel_cache_stats();
  Tensor small = random_uniform({100}, 4);
  Tensor e = exp(small);
  Tensor rows = random_uniform({kEagerCompileMinElements, 2}, 5);
  Tensor bias = random_uniform({2}, 6);
  Tensor sum = rows + bias;  // broadcasting: not a flat loop
  KernelCacheStats s1 = kernel_cache_stats();
  EXPECT_EQ(s1.hits + s1.misses, s0.hits + s0.misses);
  expect_close(e, reference([&] { return exp(small); }));
  expect_close(sum, reference([&] { return rows + bias; }));
}

TEST_F(EagerCompiled, ErrorsAreTheOpsOwn) {
  const int64_t n = kEagerCompileMinElements;
  Tensor a = zeros({n}), b = zeros({n + 1});
  EXPECT_THAT([&] { call_op("add", {a, b}); },
              testing::ThrowsMessage<Error>(testing::HasSubstr("add")));
}

TEST(KernelCacheKey, FlatKernelsIgnoreSizesOthersDoNot) {
  auto flat = [](Shape a, Shape b) {
    FusedSubgraph sg;
    int x = sg.add_input(f32, a), y = sg.add_input(f32, b);
    sg.add_output(sg.add(EltOp::kMul, {x, y}));
    return kernel_cache_key(sg);
  };
  EXPECT_EQ(flat({8}, {8}), flat({2, 50}, {2, 50}));
  EXPECT_EQ(flat({8}, {1}), flat({100}, {}));       // a single-element operand
  EXPECT_NE(flat({8}, {8}), flat({8}, {1}));        // ... is not a full one
  EXPECT_NE(flat({4, 3}, {3}), flat({5, 3}, {3}));  // broadcasting: keyed with shapes
}

TEST(KernelCache, BatchCompilesEachStructureOnceAndIsolatesFailures) {
  auto chain = [](Shape shape) {
    FusedSubgraph sg;
    int x = sg.add_input(f32, shape), s = sg.add_input(f32, {});
    // A structure no other test compiles: logistic(x * s) - x.
    int y = sg.add(EltOp::kSub, {sg.add(EltOp::kLogistic,
                                             {sg.add(EltOp::kMul, {x, s})}), x});
    sg.add_output(y);
    return sg;
  };
  FusedSubgraph bad;  // inputs that cannot broadcast
  bad.add_output(bad.add(EltOp::kAdd, {bad.add_input(f32, {2}), bad.add_input(f32, {3})}));
  FusedSubgraph other;
  other.add_output(other.add(EltOp::kCos, {other.add_input(f32, {5})}));

  KernelCacheStats before = kernel_cache_stats();
  std::vector<std::string> errors;
  std::vector<cpu::FusedKernel> k =
      cached_kernels({chain({4}), bad, chain({2, 3}), other}, &errors);
  KernelCacheStats after = kernel_cache_stats();
  ASSERT_EQ(k.size(), 4u);
  EXPECT_TRUE(errors[0].empty()) << errors[0];
  EXPECT_FALSE(errors[1].empty());
  EXPECT_EQ(k[1].fn(), nullptr);
  EXPECT_TRUE(errors[2].empty()) << errors[2];
  EXPECT_TRUE(errors[3].empty()) << errors[3];
  EXPECT_EQ(k[0].fn(), k[2].fn());  // one structure, two sizes: one kernel
  EXPECT_LE(after.misses - before.misses, 2);

  // The shared kernel computes each size correctly.
  Tensor x = Tensor::from_list<float>({-1, 0, 0.5f, 2, 3, -4}, {2, 3});
  Tensor s = Tensor::scalar<float>(0.5f);
  std::vector<Tensor> out = k[2].run({x, s});
  auto xv = x.data<float>();
  auto got = out[0].data<float>();
  for (size_t i = 0; i < xv.size(); ++i)
    EXPECT_NEAR(got[i], 1 / (1 + std::exp(-xv[i] * 0.5f)) - xv[i], 1e-6) << i;
}

}  // namespace
}  // namespace kiln::compiler
