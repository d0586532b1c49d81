// Initializers: Keras fan computation, constants, determinism in the seed, bounds, and sample
// statistics of large draws against the closed-form mean and standard deviation.
#include "kiln/nn/initializers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"

namespace kiln::nn {
namespace {

struct Stats {
  double mean, stddev, min, max;
};

Stats stats_of(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  double sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
  for (double x : v) {
    sum += x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  double mean = sum / v.size();
  for (double x : v) sq += (x - mean) * (x - mean);
  return {mean, std::sqrt(sq / v.size()), lo, hi};
}

// The stddev of a standard normal truncated to [-2, 2].
constexpr double kTruncatedStddev = 0.87962566103423978;

TEST(ComputeFans, DenseAndConvShapes) {
  EXPECT_EQ(compute_fans({}), (std::pair<double, double>{1, 1}));
  EXPECT_EQ(compute_fans({5}), (std::pair<double, double>{5, 5}));
  EXPECT_EQ(compute_fans({784, 128}), (std::pair<double, double>{784, 128}));
  // HWIO kernel 3x3, 16 in, 32 out: receptive field 9.
  EXPECT_EQ(compute_fans({3, 3, 16, 32}), (std::pair<double, double>{144, 288}));
  EXPECT_EQ(compute_fans({5, 4, 6}), (std::pair<double, double>{20, 30}));
  EXPECT_THROW(compute_fans({kUnknownDim, 3}), Error);
}

TEST(Initializers, Constants) {
  Tensor z = zeros_init()({2, 3}, f32, 7);
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0));
  Tensor o = ones_init()({4}, f64, 0);
  EXPECT_EQ(o.dtype(), f64);
  EXPECT_EQ(o.to_vector<double>(), std::vector<double>(4, 1));
  EXPECT_EQ(constant_init(0.25)({3}, f32, 0).to_vector<float>(), std::vector<float>(3, 0.25f));
}

TEST(Initializers, DeterministicInSeed) {
  for (const Initializer& init :
       {random_uniform_init(), random_normal_init(), truncated_normal_init(), glorot_uniform(),
        glorot_normal(), he_uniform(), he_normal()}) {
    Tensor a = init({16, 8}, f32, 42);
    Tensor b = init({16, 8}, f32, 42);
    Tensor c = init({16, 8}, f32, 43);
    EXPECT_EQ(a.shape(), (Shape{16, 8}));
    EXPECT_EQ(a.dtype(), f32);
    EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
    EXPECT_NE(a.to_vector<float>(), c.to_vector<float>());
  }
}

TEST(Initializers, RandomUniformBoundsAndStats) {
  Tensor t = random_uniform_init(-1, 3)({100000}, f32, 1);
  Stats s = stats_of(t);
  EXPECT_GE(s.min, -1);
  EXPECT_LT(s.max, 3);
  EXPECT_NEAR(s.mean, 1, 0.02);
  EXPECT_NEAR(s.stddev, 4 / std::sqrt(12.0), 0.02);
  EXPECT_THROW(random_uniform_init(1, 0), Error);
}

TEST(Initializers, RandomNormalStats) {
  Stats s = stats_of(random_normal_init(2, 0.5)({100000}, f32, 3));
  EXPECT_NEAR(s.mean, 2, 0.01);
  EXPECT_NEAR(s.stddev, 0.5, 0.01);
}

TEST(Initializers, TruncatedNormalStaysWithinTwoStddevs) {
  Tensor t = truncated_normal_init(1, 2)({200000}, f32, 5);
  Stats s = stats_of(t);
  EXPECT_GE(s.min, 1 - 4);
  EXPECT_LE(s.max, 1 + 4);
  EXPECT_NEAR(s.mean, 1, 0.02);
  EXPECT_NEAR(s.stddev, 2 * kTruncatedStddev, 0.02);
  // Values inside the range are kept, not squeezed: some land near both edges.
  EXPECT_LT(s.min, 1 - 3.9);
  EXPECT_GT(s.max, 1 + 3.9);
}

TEST(Initializers, TruncatedNormalInF64) {
  Tensor t = truncated_normal_init(0, 1)({1000}, f64, 9);
  EXPECT_EQ(t.dtype(), f64);
  Stats s = stats_of(t);
  EXPECT_GE(s.min, -2);
  EXPECT_LE(s.max, 2);
}

TEST(Initializers, GlorotUniform) {
  double limit = std::sqrt(6.0 / (200 + 300));
  Stats s = stats_of(glorot_uniform()({200, 300}, f32, 11));
  EXPECT_GE(s.min, -limit);
  EXPECT_LE(s.max, limit);
  EXPECT_GT(s.max, 0.99 * limit);
  EXPECT_NEAR(s.mean, 0, 0.002);
  EXPECT_NEAR(s.stddev, limit / std::sqrt(3.0), 0.002);
}

TEST(Initializers, HeUniformUsesFanIn) {
  double limit = std::sqrt(6.0 / (3 * 3 * 32));  // conv kernel: fan_in = 3 * 3 * 32
  Stats s = stats_of(he_uniform()({3, 3, 32, 64}, f32, 12));
  EXPECT_GE(s.min, -limit);
  EXPECT_LE(s.max, limit);
  EXPECT_NEAR(s.stddev, limit / std::sqrt(3.0), 0.01 * limit);
}

TEST(Initializers, GlorotNormalHasTargetStddev) {
  double target = std::sqrt(2.0 / (400 + 250));
  Stats s = stats_of(glorot_normal()({400, 250}, f32, 13));
  EXPECT_NEAR(s.mean, 0, 0.01 * target);
  EXPECT_NEAR(s.stddev, target, 0.02 * target);
  EXPECT_LE(std::max(-s.min, s.max), 2 * target / kTruncatedStddev + 1e-6);
}

TEST(Initializers, HeNormalHasTargetStddev) {
  double target = std::sqrt(2.0 / 400);
  Stats s = stats_of(he_normal()({400, 250}, f32, 14));
  EXPECT_NEAR(s.stddev, target, 0.02 * target);
  EXPECT_LE(std::max(-s.min, s.max), 2 * target / kTruncatedStddev + 1e-6);
}

// Tall weights have orthonormal columns, wide ones orthonormal rows (Keras' Orthogonal), times
// the gain; the same seed gives the same matrix, another seed another.
TEST(Initializers, OrthogonalTallAndWide) {
  auto gram = [](const Tensor& w, bool rows) {
    return rows ? matmul(w, transpose(w)) : matmul(transpose(w), w);
  };
  auto identity = [](int64_t n, double scale) {
    std::vector<float> v(n * n, 0);
    for (int64_t i = 0; i < n; ++i) v[i * n + i] = static_cast<float>(scale);
    return Tensor::from_vector(v, {n, n});
  };
  const Tensor tall = orthogonal_init()({12, 5}, f32, 3);
  EXPECT_TRUE(allclose(gram(tall, false), identity(5, 1), 1e-5, 1e-5));
  const Tensor wide = orthogonal_init(2.0)({4, 16}, f32, 3);
  EXPECT_TRUE(allclose(gram(wide, true), identity(4, 4), 1e-5, 1e-5));
  const Tensor square = orthogonal_init()({6, 6}, f64, 9);
  EXPECT_TRUE(allclose(gram(square, true), identity(6, 1).to(f64), 1e-12, 1e-12));
  EXPECT_TRUE(allclose(orthogonal_init()({12, 5}, f32, 3), tall, 0, 0));
  EXPECT_FALSE(allclose(orthogonal_init()({12, 5}, f32, 4), tall, 1e-3, 1e-3));
  // Rank 3: the leading dimensions flatten into rows.
  const Tensor conv = orthogonal_init()({2, 3, 4}, f32, 5);
  EXPECT_TRUE(allclose(gram(reshape(conv, {6, 4}), false), identity(4, 1), 1e-5, 1e-5));
  EXPECT_THROW(orthogonal_init()({5}, f32, 0), Error);
  const Initializer back = initializer_from_config("orthogonal", orthogonal_init(0.5).config());
  EXPECT_TRUE(allclose(back({3, 3}, f32, 1), orthogonal_init(0.5)({3, 3}, f32, 1), 0, 0));
}

TEST(Initializers, StayConcreteWhileAGraphIsRecording) {
  // Layers build their weights while a step is traced.
  Graph g;
  auto guard = g.as_default();
  for (const Initializer& init :
       {zeros_init(), constant_init(2), glorot_uniform(), he_normal(), orthogonal_init()}) {
    Tensor t = init({3, 2}, f32, 1);
    EXPECT_FALSE(t.is_symbolic());
    EXPECT_EQ(t.size(), 6);
  }
  EXPECT_TRUE((Tensor::scalar<float>(1) + 1.0).is_symbolic());  // recording resumes after
}

TEST(Initializers, ZeroSizedShapes) {
  EXPECT_EQ(glorot_uniform()({0, 4}, f32, 1).size(), 0);
  EXPECT_EQ(he_normal()({3, 0}, f32, 1).size(), 0);
}

TEST(Initializers, IntegerDTypeThrows) {
  try {
    glorot_uniform()({2, 2}, i32, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("i32"));
  }
  EXPECT_THROW(truncated_normal_init()({2}, i64, 0), Error);
}

}  // namespace
}  // namespace kiln::nn
