// Stateless random numbers: Philox-4x32-10 known answers, determinism, independence from the
// shape and thread count, distribution statistics, dtypes, errors and graphs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "ops/philox.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

struct Moments {
  double mean = 0, variance = 0;
};

Moments moments(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= v.size();
  for (double x : v) m.variance += (x - m.mean) * (x - m.mean);
  m.variance /= v.size();
  return m;
}

// The published known-answer vectors of Random123 (kat_vectors, "philox4x32 10").
TEST(Philox, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(ops::philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (ops::PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(ops::philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                               {0xffffffff, 0xffffffff}),
            (ops::PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(ops::philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                               {0xa4093822, 0x299f31d0}),
            (ops::PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// Element 0 of seed 0 is Philox(counter 0, key 0): its top bits are the uniform.
TEST(RandomUniform, ElementZeroIsTopBitsOfPhiloxOutput) {
  double f64_expected =
      std::ldexp(static_cast<double>(((uint64_t{0x6627e8d5} << 32) | 0xe169c58d) >> 11), -53);
  float f32_expected = std::ldexp(static_cast<float>(0x6627e8d5u >> 8), -24);
  EXPECT_EQ(random_uniform({1}, 0, 0, 1, f64).item<double>(), f64_expected);
  EXPECT_EQ(random_uniform({1}, 0).item<float>(), f32_expected);
}

// Counter = element index (low word first), key = seed (low word first), at any index of a
// tensor large enough to be filled by several threads.
TEST(RandomUniform, ElementIIsPhiloxOfCounterIKeyedBySeed) {
  const uint64_t seed = 0x123456789abcdef0;
  std::vector<double> u = random_uniform({200000}, seed, 0, 1, f64).to_vector<double>();
  for (uint32_t i : {0u, 99999u, 199999u}) {
    ops::PhiloxCounter r = ops::philox4x32_10({i, 0, 0, 0}, {0x9abcdef0, 0x12345678});
    double expected = std::ldexp(static_cast<double>(((uint64_t{r[0]} << 32) | r[1]) >> 11), -53);
    EXPECT_EQ(u[i], expected) << i;
  }
}

TEST(RandomUniform, SameSeedSameValuesDifferentSeedDifferentValues) {
  std::vector<float> a = random_uniform({1000}, 42).to_vector<float>();
  EXPECT_EQ(random_uniform({1000}, 42).to_vector<float>(), a);
  std::vector<float> b = random_uniform({1000}, 43).to_vector<float>();
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  EXPECT_LT(same, 5);
  // Every bit of a 64-bit seed counts (beyond the 53 bits a double holds).
  const uint64_t big = uint64_t{1} << 60;
  EXPECT_NE(random_uniform({4}, big).to_vector<float>(),
            random_uniform({4}, big + 1).to_vector<float>());
}

TEST(RandomUniform, ElementDependsOnlyOnSeedAndIndex) {
  std::vector<float> small = random_uniform({100}, 7).to_vector<float>();
  // A large tensor is filled by many threads; its prefix must still match.
  std::vector<float> large = random_uniform({200000}, 7).to_vector<float>();
  EXPECT_EQ(std::vector<float>(large.begin(), large.begin() + 100), small);
  std::vector<float> matrix = random_uniform({10, 10}, 7).to_vector<float>();
  EXPECT_EQ(matrix, small);
}

TEST(RandomUniform, StatisticsOf100kSamples) {
  Tensor t = random_uniform({100000}, 1, -2, 6);
  EXPECT_EQ(t.dtype(), f32);
  for (float v : t.to_vector<float>()) {
    ASSERT_GE(v, -2.0f);
    ASSERT_LT(v, 6.0f);
  }
  Moments m = moments(t);
  EXPECT_NEAR(m.mean, 2.0, 0.05);             // (low + high) / 2
  EXPECT_NEAR(m.variance, 64.0 / 12.0, 0.1);  // (high - low)^2 / 12
}

TEST(RandomUniform, LowPrecisionDtypesStayBelowHigh) {
  for (DType dtype : {f64, f16, bf16}) {
    Tensor t = random_uniform({20000}, 3, 0, 1, dtype);
    EXPECT_EQ(t.dtype(), dtype);
    for (double v : t.to_vector<double>()) {
      ASSERT_GE(v, 0.0) << dtype_name(dtype);
      ASSERT_LT(v, 1.0) << dtype_name(dtype);
    }
    EXPECT_NEAR(moments(t).mean, 0.5, 0.02) << dtype_name(dtype);
  }
  // The next bf16 above 1 is 1 + 2^-7: every value of [1, 1 + 2^-7) rounds to 1 or up to high,
  // and the ones that round up must be stepped back below high.
  for (double v : random_uniform({1000}, 5, 1, 1.0078125, bf16).to_vector<double>()) {
    ASSERT_EQ(v, 1.0);
  }
  for (double v : random_uniform({1000}, 5, -1.0078125, -1, bf16).to_vector<double>()) {
    ASSERT_EQ(v, -1.0078125);
  }
}

TEST(RandomNormal, StatisticsOf100kSamples) {
  Tensor t = random_normal({100000}, 11, 3, 2);
  Moments m = moments(t);
  EXPECT_NEAR(m.mean, 3.0, 0.05);
  EXPECT_NEAR(m.variance, 4.0, 0.15);
  int within_one_sigma = 0;
  for (double v : t.to_vector<double>()) within_one_sigma += std::abs(v - 3.0) < 2.0;
  EXPECT_NEAR(within_one_sigma / 1e5, 0.6827, 0.01);
}

TEST(RandomNormal, F64AndZeroStddev) {
  Moments m = moments(random_normal({100000}, 12, 0, 1, f64));
  EXPECT_NEAR(m.mean, 0.0, 0.02);
  EXPECT_NEAR(m.variance, 1.0, 0.03);
  for (float v : random_normal({10}, 12, 5, 0).to_vector<float>()) EXPECT_EQ(v, 5.0f);
}

TEST(RandomNormal, Deterministic) {
  EXPECT_EQ(random_normal({2, 3}, 9).to_vector<float>(),
            random_normal({2, 3}, 9).to_vector<float>());
  EXPECT_NE(random_normal({2, 3}, 9).to_vector<float>(),
            random_normal({2, 3}, 10).to_vector<float>());
}

TEST(RandomBernoulli, FractionOfTrueIsP) {
  Tensor t = random_bernoulli({100000}, 21, 0.3);
  EXPECT_EQ(t.dtype(), bool_);
  EXPECT_NEAR(moments(t).mean, 0.3, 0.01);
}

TEST(RandomBernoulli, ExtremesAndFloatOutput) {
  for (bool v : random_bernoulli({1000}, 1, 0.0).to_vector<bool>()) ASSERT_FALSE(v);
  for (bool v : random_bernoulli({1000}, 1, 1.0).to_vector<bool>()) ASSERT_TRUE(v);
  Tensor f = random_bernoulli({1000}, 2, 0.5, f32);
  EXPECT_EQ(f.dtype(), f32);
  for (float v : f.to_vector<float>()) ASSERT_TRUE(v == 0.0f || v == 1.0f);
  EXPECT_NEAR(moments(f).mean, 0.5, 0.06);
}

TEST(Random, ScalarAndZeroSizedShapes) {
  Tensor s = random_uniform({}, 4);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.item<float>(), random_uniform({1}, 4).item<float>());
  Tensor z = random_normal({0, 3}, 4);
  EXPECT_EQ(z.shape(), (Shape{0, 3}));
  EXPECT_EQ(z.size(), 0);
}

TEST(Random, SeedTensorOverloadMatchesIntegerSeed) {
  EXPECT_EQ(random_uniform({5}, Tensor::scalar<int64_t>(77)).to_vector<float>(),
            random_uniform({5}, 77).to_vector<float>());
  // Other integer seeds are widened to i64.
  EXPECT_EQ(random_uniform({5}, Tensor::scalar<int32_t>(77)).to_vector<float>(),
            random_uniform({5}, 77).to_vector<float>());
}

TEST(Random, InvalidArgumentsNameTheOp) {
  auto expect_error = [](auto f, const std::string& op, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(op));
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  expect_error([] { random_uniform({3}, 1, 2, 2); }, "random_uniform",
               "low must be less than high");
  expect_error([] { random_uniform({3}, 1, 0, 1, i32); }, "random_uniform", "dtype must be");
  expect_error([] { random_uniform({3, -2}, 1); }, "random_uniform", "dimension 1 is -2");
  expect_error([] { random_normal({3}, 1, 0, -1); }, "random_normal", "stddev");
  expect_error([] { random_bernoulli({3}, 1, 1.5); }, "random_bernoulli", "p must be in [0, 1]");
  expect_error([] { random_uniform({3}, Tensor::scalar(1.0f)); }, "random_uniform",
               "seed must be an i64 scalar, got f32[]");
  expect_error(
      [] {
        random_uniform({3}, Tensor::from_list<int64_t>({1, 2}));
      },
      "random_uniform", "i64[2]");
}

TEST(Random, SeedFedToAGraphVariesPerRun) {
  Graph g;
  Tensor seed = g.placeholder(i64, {}, "seed");
  Tensor u = random_uniform({4}, seed);
  Tensor n = random_normal({2, 2}, seed, 0, 1, f64);
  EXPECT_TRUE(u.is_symbolic());
  auto run = [&](int64_t s) { return g.run({{seed, Tensor::scalar(s)}}, {u, n}); };
  std::vector<Tensor> five = run(5);
  EXPECT_EQ(five[0].to_vector<float>(), random_uniform({4}, 5).to_vector<float>());
  EXPECT_EQ(five[1].to_vector<double>(), random_normal({2, 2}, 5, 0, 1, f64).to_vector<double>());
  EXPECT_EQ(run(5)[0].to_vector<float>(), five[0].to_vector<float>());
  EXPECT_NE(run(6)[0].to_vector<float>(), five[0].to_vector<float>());
}

TEST(RandomLike, TakesItsShapeAtRunTimeAndMatchesTheShapedVariant) {
  Graph g("dropout_mask");
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  Tensor seed = g.placeholder(i64, {}, "seed");
  Tensor mask = random_bernoulli_like(x, seed, 0.5);
  Tensor u = random_uniform_like(x, seed, -1, 1);
  EXPECT_EQ(mask.shape(), (Shape{kUnknownDim, 3}));
  auto out = g.run({{x, zeros({4, 3})}, {seed, Tensor::scalar<int64_t>(11)}}, {mask, u});
  EXPECT_EQ(out[0].shape(), (Shape{4, 3}));
  EXPECT_EQ(out[0].to_vector<bool>(), random_bernoulli({4, 3}, 11, 0.5).to_vector<bool>());
  EXPECT_EQ(out[1].to_vector<float>(), random_uniform({4, 3}, 11, -1, 1).to_vector<float>());
}

}  // namespace
}  // namespace kiln
