// Generators (compiler/generator.h): random_bernoulli and random_uniform computed inside fused
// loops from (seed, element index), with their kernels' bits; what stays a kernel says why.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "compiler/cpu/emulated_device.h"
#include "compiler/device_backend.h"
#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "tests/compiler/compiler_test_util.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;
using testing::bitwise_equal;

// Seeds that exercise both halves of Philox's key: zero, small, all ones, a wide one.
const std::vector<int64_t> kSeeds = {0, 12345, -1, 0x123456789abcdefLL};

// Compiles `fetches` of `g`, then checks every seed's results against the interpreter (the
// kernels) bit for bit; returns the executable.
Executable check_against_kernels(Graph& g, const Tensor& seed, const std::vector<Tensor>& fetches,
                                 FeedList extra = {}) {
  FeedList feeds = extra;
  feeds.push_back({seed, Tensor::scalar(int64_t{0})});
  Executable e = compile(g, fetches, feeds);
  for (int64_t s : kSeeds) {
    SCOPED_TRACE("seed " + std::to_string(s));
    feeds.back().second = Tensor::scalar(s);
    std::vector<Tensor> got = e.run(feeds), want = g.run(feeds, fetches);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(bitwise_equal(got[i], want[i])) << "output " << i << "\n" << e.fusion_log();
  }
  return e;
}

int kernel_thunks(const Executable& e) { return e.num_thunks() - e.num_fused_thunks(); }

TEST(Generators, BernoulliInALoopHasItsKernelsBitsInEveryDtype) {
  for (DType t : {bool_, f32, f64, bf16, f16, i32, i64, u8, i8}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g{"bernoulli"};
    Tensor seed = g.placeholder(i64, {}, "seed");
    // 37 x 129: rows that are not a multiple of any vector width.
    Tensor y = random_bernoulli({37, 129}, seed, 0.3, t);
    Executable e = check_against_kernels(g, seed, {y});
    EXPECT_EQ(e.num_fused_thunks(), 1) << e.fusion_log();
    EXPECT_EQ(kernel_thunks(e), 0) << e.fusion_log();
  }
}

TEST(Generators, BernoulliWithPZeroAndOneIsAllFalseAndAllTrue) {
  for (double p : {0.0, 1.0}) {
    Graph g{"bernoulli_edges"};
    Tensor seed = g.placeholder(i64, {}, "seed");
    Tensor y = random_bernoulli({1000}, seed, p, f32);
    Executable e = check_against_kernels(g, seed, {y});
    std::vector<float> v = e.run({{seed, Tensor::scalar(int64_t{7})}})[0].to_vector<float>();
    for (float x : v) ASSERT_EQ(x, static_cast<float>(p));
  }
}

TEST(Generators, UniformInALoopHasItsKernelsBitsIncludingAtTheTopOfTheRange) {
  struct Range {
    double low, high;
  };
  // The last ranges are one or a few units wide: most draws round up to `high` and must step
  // down to the largest value below it, as the kernel's loop does.
  const double f32_one_up = std::nextafter(1.0f, 2.0f);
  const double f64_four_up = 1.0 + 4 * std::numeric_limits<double>::epsilon();
  for (DType t : {f32, f64}) {
    for (Range r : {Range{0, 1}, Range{-3, 5}, Range{-1e30, 1e30}, Range{0.1, 0.3},
                    Range{1, t == f32 ? f32_one_up : f64_four_up}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " [" + std::to_string(r.low) + ", " +
                   std::to_string(r.high) + ")");
      Graph g{"uniform"};
      Tensor seed = g.placeholder(i64, {}, "seed");
      Tensor y = random_uniform({3, 1000}, seed, r.low, r.high, t);
      Executable e = check_against_kernels(g, seed, {y});
      EXPECT_EQ(kernel_thunks(e), 0) << e.fusion_log();
      Tensor got = e.run({{seed, Tensor::scalar(int64_t{99})}})[0];
      for (double v : convert(got, f64).to_vector<double>()) {
        ASSERT_GE(v, r.low);
        ASSERT_LT(v, r.high);
      }
    }
  }
}

// Dropout: the mask is computed in the loop that applies it, forward, and stored once for the
// gradient's loop; the layer's whole forward is one loop.
TEST(Generators, ADropoutMaskIsComputedInsideTheLoopThatAppliesIt) {
  Graph g{"dropout"};
  Tensor x = g.placeholder(f32, {64, 100}, "x");
  Tensor seed = g.placeholder(i64, {}, "seed");
  Tensor keep = random_bernoulli_like(x, seed, 0.8, bool_);
  Tensor y = where(keep, relu(x) * 1.25f, zeros_like(x));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> xv(64 * 100);
  for (float& v : xv) v = normal(rng);
  Executable e = check_against_kernels(g, seed, {y}, {{x, Tensor::from_vector(xv, {64, 100})}});
  EXPECT_EQ(e.num_thunks(), 1) << e.fusion_log();
  EXPECT_EQ(e.num_fused_thunks(), 1) << e.fusion_log();
}

// A mask broadcast into its consumer (SpatialDropout's per-channel mask) keeps a loop of its
// own; a reduction of random values folds them where they are generated.
TEST(Generators, ABroadcastMaskAndAReductionOfRandomValuesHaveTheKernelsBits) {
  Graph g{"broadcast_and_reduce"};
  Tensor x = g.placeholder(f32, {4, 5, 8}, "x");
  Tensor seed = g.placeholder(i64, {}, "seed");
  Tensor keep = random_bernoulli({4, 1, 8}, seed, 0.5, f32);
  Tensor masked = x * keep;
  Tensor sums = sum(random_uniform({6, 50}, seed, -1, 1, f32), {1});
  std::vector<float> xv(4 * 5 * 8);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i) * 0.25f - 3;
  Executable e =
      check_against_kernels(g, seed, {masked, sums}, {{x, Tensor::from_vector(xv, {4, 5, 8})}});
  EXPECT_EQ(kernel_thunks(e), 0) << e.fusion_log();
}

// random_normal in a loop: Box-Muller in f64 with libm's log and cos, as its kernel, so the bits
// are the kernel's, over many elements (both Philox words and the tails of the distribution).
TEST(Generators, NormalInALoopHasItsKernelsBits) {
  for (DType t : {f32, f64}) {
    for (auto [mean, stddev] :
         std::vector<std::pair<double, double>>{{0, 1}, {-3.5, 0.25}, {2, 0}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " mean " + std::to_string(mean) + " stddev " +
                   std::to_string(stddev));
      Graph g{"normal"};
      Tensor seed = g.placeholder(i64, {}, "seed");
      Tensor y = random_normal({61, 67}, seed, mean, stddev, t);
      Tensor z = y * 2.0f + 1.0f;
      Executable e = check_against_kernels(g, seed, {y, z});
      EXPECT_EQ(kernel_thunks(e), 0) << e.fusion_log();
    }
  }
}

TEST(Generators, WhatTheLoopsCannotReproduceStaysAKernelAndTheLogSaysWhy) {
  Graph g{"kernels"};
  Tensor seed = g.placeholder(i64, {}, "seed");
  Tensor a = random_uniform({10}, seed, 0, 1, bf16);
  Tensor b = random_normal({10}, seed, 0, 1, f16);
  Executable e = check_against_kernels(g, seed, {a, b});
  EXPECT_THAT(e.fusion_log(), HasSubstr("random_uniform in bf16 rounds an f64 once to 16 bits"))
      << e.fusion_log();
  EXPECT_THAT(e.fusion_log(), HasSubstr("random_normal in f16 rounds an f64 once to 16 bits"))
      << e.fusion_log();
  EXPECT_EQ(kernel_thunks(e), 2) << e.fusion_log();
}

// A seed computed by the loop that would generate from it stays outside it: the loop reads its
// seed from a buffer.
TEST(Generators, ASeedComputedInTheSameShapeIsNotComputedByTheGeneratingLoop) {
  Graph g{"computed_seed"};
  Tensor base = g.placeholder(i64, {}, "base");
  Tensor seed = base + g.constant(Tensor::scalar(int64_t{7}));
  Tensor u = random_uniform({}, seed, 0, 1, f32);
  Tensor y = u * convert(seed, f32);
  Executable e = check_against_kernels(g, base, {y});
  EXPECT_THAT(e.fusion_log(), HasSubstr("would read a seed the same loop computes"))
      << e.fusion_log();
}

// On a device the mask is generated there: the program copies up only its feeds and runs no
// host kernel, and the results are the CPU program's bits.
TEST(Generators, OnADeviceTheMaskIsGeneratedThere) {
  auto gpu = cpu::emulated_gpu();
  Graph g{"device_dropout"};
  Tensor x = g.placeholder(f32, {32, 48}, "x");
  Tensor seed = g.placeholder(i64, {}, "seed");
  Tensor keep = random_bernoulli_like(x, seed, 0.75, bool_);
  Tensor y = sum(where(keep, x * 4.0f, zeros_like(x)), {1});
  std::vector<float> xv(32 * 48);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(static_cast<float>(i));
  FeedList feeds = {{x, Tensor::from_vector(xv, {32, 48})}, {seed, Tensor::scalar(int64_t{5})}};
  Executable host = compile(g, {y}, feeds);
  Executable dev = compile_for_device(gpu, g, {y}, feeds);
  for (const std::string& d : dev.thunk_descriptions())
    EXPECT_THAT(d, ::testing::Not(HasSubstr("kernel random"))) << "a host kernel draws the mask";
  dev.run(feeds);  // the first run also copies the program's constants up
  const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
  std::vector<Tensor> got = dev.run(feeds);
  const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
  EXPECT_TRUE(bitwise_equal(got[0], host.run(feeds)[0])) << dev.fusion_log();
  EXPECT_EQ(after.upload_bytes - before.upload_bytes,
            static_cast<int64_t>(feeds[0].second.nbytes() + feeds[1].second.nbytes()))
      << "only the feeds go up";
  EXPECT_EQ(after.download_bytes - before.download_bytes, static_cast<int64_t>(got[0].nbytes()));
}

}  // namespace
}  // namespace kiln::compiler
