// libkiln_lite's kernels (lite/kernels.h): every int8 path bit for bit equal to the reference,
// the float paths within rounding of it, TF Lite's fixed-point requantization, and the simple ops.
#include "lite/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kiln/error.h"

namespace kiln::lite::kernels {
namespace {

constexpr int32_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int32_t kInt32Min = std::numeric_limits<int32_t>::min();

std::vector<int8_t> random_int8(std::mt19937& rng, int64_t count) {
  std::uniform_int_distribution<int> dist(-128, 127);
  std::vector<int8_t> v(count);
  for (int8_t& x : v) x = static_cast<int8_t>(dist(rng));
  return v;
}

std::vector<float> random_floats(std::mt19937& rng, int64_t count, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// ---- paths ----------------------------------------------------------------------------------

TEST(LiteKernelPaths, ReferenceAndGenericAlwaysRunAndTheBestPathIsAvailable) {
  EXPECT_STREQ(path_name(Path::kReference), "reference");
  EXPECT_STREQ(path_name(Path::kGeneric), "generic");
  EXPECT_STREQ(path_name(Path::kAvx512), "avx512");
  for (Path path : {Path::kReference, Path::kGeneric}) {
    EXPECT_TRUE(int8_path_available(path));
    EXPECT_TRUE(float_path_available(path));
  }
  EXPECT_TRUE(int8_path_available(best_int8_path()));
  EXPECT_TRUE(float_path_available(best_float_path()));
  // VNNI implies AVX512F.
  if (int8_path_available(Path::kAvx512)) {
    EXPECT_TRUE(float_path_available(Path::kAvx512));
  }
  std::printf("best int8 path %s, best float path %s\n", path_name(best_int8_path()),
              path_name(best_float_path()));
}

TEST(LiteKernelPaths, TheEnvironmentVariablePicksAnAvailablePathAndIgnoresOthers) {
  // The choice is read once per process, so each case runs in a fresh one ("threadsafe" death
  // tests re-execute the binary).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto chosen = [](const char* value) {
    setenv("KILN_LITE_PATH", value, 1);
    std::exit(10 * static_cast<int>(best_int8_path()) + static_cast<int>(best_float_path()));
  };
  EXPECT_EXIT(chosen("reference"), testing::ExitedWithCode(0), "");
  EXPECT_EXIT(chosen("generic"), testing::ExitedWithCode(11), "");
  const int fastest = 10 * (int8_path_available(Path::kAvx512) ? 2 : 1) +
                      (float_path_available(Path::kAvx512) ? 2 : 1);
  EXPECT_EXIT(chosen("avx512"), testing::ExitedWithCode(fastest), "");
  EXPECT_EXIT(chosen("turbo"), testing::ExitedWithCode(fastest), "");
}

// ---- fixed-point requantization -------------------------------------------------------------

TEST(LiteQuantizeMultiplier, HandCheckedValues) {
  const Requant half = quantize_multiplier(0.5);
  EXPECT_EQ(half.multiplier, 1 << 30);
  EXPECT_EQ(half.shift, 0);
  const Requant one = quantize_multiplier(1.0);
  EXPECT_EQ(one.multiplier, 1 << 30);
  EXPECT_EQ(one.shift, 1);
  const Requant three_eighths = quantize_multiplier(0.375);  // 0.75 * 2^-1
  EXPECT_EQ(three_eighths.multiplier, 3 << 29);
  EXPECT_EQ(three_eighths.shift, -1);
}

TEST(LiteQuantizeMultiplier, AFractionRoundingUpToOneMovesIntoTheNextPowerOfTwo) {
  // frexp gives 1 - 2^-40 as 0.99999... * 2^0, whose Q31 rounds to 2^31.
  const Requant r = quantize_multiplier(1.0 - std::ldexp(1.0, -40));
  EXPECT_EQ(r.multiplier, 1 << 30);
  EXPECT_EQ(r.shift, 1);
}

TEST(LiteQuantizeMultiplier, ZeroTinyAndInvalidMultipliersGiveZero) {
  for (double real : {0.0, -0.5, std::ldexp(1.0, -33), 1e-12, std::nan(""),
                      std::numeric_limits<double>::infinity()}) {
    const Requant r = quantize_multiplier(real);
    EXPECT_EQ(r.multiplier, 0) << real;
    EXPECT_EQ(r.shift, 0) << real;
  }
  // 2^-32 is 0.5 * 2^-31: the smallest shift still kept.
  EXPECT_EQ(quantize_multiplier(std::ldexp(1.0, -32)).shift, -31);
}

TEST(LiteQuantizeMultiplier, RoundTripsWithinQ31Precision) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> log10(-9, 4);
  for (int i = 0; i < 10000; ++i) {
    const double real = std::pow(10.0, log10(rng));
    const Requant r = quantize_multiplier(real);
    ASSERT_GE(r.multiplier, 1 << 30) << real;
    ASSERT_LE(r.multiplier, kInt32Max) << real;
    const double back = std::ldexp(static_cast<double>(r.multiplier), r.shift - 31);
    ASSERT_NEAR(back / real, 1.0, std::ldexp(1.0, -30)) << real;
  }
}

TEST(LiteMultiplyByQuantizedMultiplier, HandCheckedRounding) {
  const Requant half{1 << 30, 0}, quarter{1 << 30, -1}, one{1 << 30, 1};
  EXPECT_EQ(multiply_by_quantized_multiplier(3, half), 2);  // 1.5 -> 2
  // The doubling high multiply rounds halves up, so -1.5 -> -1 without a shift...
  EXPECT_EQ(multiply_by_quantized_multiplier(-3, half), -1);
  // ...while the rounding shift takes them away from zero: -6 / 4 = -1.5 -> -2.
  EXPECT_EQ(multiply_by_quantized_multiplier(-6, quarter), -2);
  EXPECT_EQ(multiply_by_quantized_multiplier(6, quarter), 2);
  EXPECT_EQ(multiply_by_quantized_multiplier(-5, quarter), -1);  // -1.25
  EXPECT_EQ(multiply_by_quantized_multiplier(100, one), 100);
  EXPECT_EQ(multiply_by_quantized_multiplier(-100, one), -100);
  EXPECT_EQ(multiply_by_quantized_multiplier(0, quarter), 0);
  EXPECT_EQ(multiply_by_quantized_multiplier(12345, Requant{}), 0);
  // The smallest shift: INT32_MAX * 2^-32 is just under 0.5, but the high multiply rounds it
  // to 2^30 first, which the shift by 31 takes to 1.
  EXPECT_EQ(multiply_by_quantized_multiplier(kInt32Max, Requant{1 << 30, -31}), 1);
}

TEST(LiteMultiplyByQuantizedMultiplier, ALeftShiftSaturatesInsteadOfOverflowing) {
  // x * 2^1 saturates to the int32 bound, then halves.
  EXPECT_EQ(multiply_by_quantized_multiplier(kInt32Max, Requant{1 << 30, 1}), 1 << 30);
  EXPECT_EQ(multiply_by_quantized_multiplier(kInt32Min, Requant{1 << 30, 1}), -(1 << 30));
}

TEST(LiteMultiplyByQuantizedMultiplier, WithinOneUnitOfTheFloatProduct) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> log10(-9, 3);
  std::uniform_real_distribution<double> unit(-1, 1);
  for (int i = 0; i < 200000; ++i) {
    const double real = std::pow(10.0, log10(rng));
    // |x * real| stays below 2^30, so nothing saturates.
    const double x_limit = std::min(2147483647.0, std::ldexp(1.0, 30) / real);
    const int32_t x = static_cast<int32_t>(unit(rng) * x_limit);
    const double want = std::round(static_cast<double>(x) * real);
    const int32_t got = multiply_by_quantized_multiplier(x, quantize_multiplier(real));
    ASSERT_LE(std::abs(got - want), 1.0) << "x " << x << " real " << real;
  }
}

// ---- int8 GEMM ------------------------------------------------------------------------------

struct QuantCase {
  int64_t n, k, m;
};

// A random problem whose outputs spread over the int8 range, with channels that hit the
// requant's corners: exact powers of two (rounding ties), multipliers > 1 (left shifts) and
// < 1e-6.
struct QuantProblem {
  int64_t n, k, m;
  std::vector<int8_t> a, w;
  std::vector<int32_t> bias;
  std::vector<Requant> requant;
  QuantGemmParams params;

  QuantProblem(std::mt19937& rng, QuantCase c, int clamp_kind, bool with_bias)
      : n(c.n), k(c.k), m(c.m), a(random_int8(rng, n * k)), w(random_int8(rng, m * k)) {
    std::uniform_int_distribution<int> zp(-128, 127), kind(0, 9);
    std::uniform_real_distribution<double> log_factor(-1, 0.5);
    const double spread = 5400.0 * std::sqrt(std::max<double>(k, 1));  // a typical |acc|
    for (int64_t j = 0; j < m; ++j) {
      double real = 50.0 / spread * std::pow(10.0, log_factor(rng));
      switch (kind(rng)) {
        case 0:
          real = std::ldexp(1.0, -static_cast<int>(std::log2(spread)) + 6);  // ties
          break;
        case 1:
          real = 1.0 + 3.0 * std::abs(log_factor(rng));  // left shift
          break;
        case 2:
          real = 1e-7;
          break;
        default:
          break;
      }
      requant.push_back(quantize_multiplier(real));
      bias.push_back(static_cast<int32_t>(spread * log_factor(rng)));
    }
    params.a_zero_point = zp(rng);
    params.out_zero_point = zp(rng);
    if (clamp_kind == 1) params.out_min = params.out_zero_point;  // relu
    if (clamp_kind == 2) {                                        // relu6 at a scale of 0.1
      params.out_min = params.out_zero_point;
      params.out_max = std::min(127, params.out_zero_point + 60);
    }
    params.bias = with_bias ? bias.data() : nullptr;
    params.requant = requant.data();
  }

  std::vector<int8_t> run(Path path) const {
    const PackedInt8 packed(w.data(), m, k, path);
    std::vector<int8_t> out(n * m, 99);
    quant_gemm(a.data(), n, packed, params, out.data());
    return out;
  }
};

const QuantCase kQuantCases[] = {
    {1, 1, 1},     {1, 3, 5},     {2, 4, 16},    {7, 9, 32},     {13, 5, 17},    {3, 2, 33},
    {1, 288, 64},  {37, 288, 64}, {5, 1600, 10}, {1, 1600, 128}, {19, 130, 100}, {25, 27, 48},
    {100, 9, 32},  {6, 7, 80},    {11, 64, 47},  {64, 128, 10},  {29, 17, 3},    {2, 4000, 20},
    {9, 300, 200}, {15, 1, 16},   {12, 12, 31},  {8, 33, 64},    {4, 6, 49},     {6, 10, 65},
    {4, 0, 20},  // no inputs: the bias alone
};

class LiteQuantGemm : public testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    if (!int8_path_available(GetParam())) {
      GTEST_SKIP() << "this CPU lacks the " << path_name(GetParam()) << " int8 path";
    }
  }
};

TEST_P(LiteQuantGemm, EqualsTheReferenceBitForBitOnRandomShapes) {
  std::mt19937 rng(3);
  for (const QuantCase& c : kQuantCases) {
    for (int clamp_kind = 0; clamp_kind < 3; ++clamp_kind) {
      const QuantProblem problem(rng, c, clamp_kind, /*with_bias=*/clamp_kind != 1);
      const std::vector<int8_t> want = problem.run(Path::kReference);
      const std::vector<int8_t> got = problem.run(GetParam());
      ASSERT_EQ(got, want) << "n " << c.n << " k " << c.k << " m " << c.m << " clamp "
                           << clamp_kind;
    }
  }
}

TEST_P(LiteQuantGemm, OutputsSpreadOverTheRangeSoTheComparisonMeansSomething) {
  std::mt19937 rng(4);
  const QuantProblem problem(rng, {64, 288, 64}, 0, true);
  const std::vector<int8_t> out = problem.run(GetParam());
  const int64_t inside =
      std::count_if(out.begin(), out.end(), [](int8_t v) { return v > -128 && v < 127; });
  // A tenth of the channels saturate (multipliers > 1) on purpose.
  EXPECT_GT(inside, static_cast<int64_t>(out.size()) / 2);
}

TEST_P(LiteQuantGemm, ExtremeAccumulatorsAndMultipliersStayExact) {
  // All-(-128) activations at zero point 127 against weights of 127 or -128: |acc| about 2^27,
  // so the left shifts saturate and the tiny multipliers round.
  const int64_t n = 5, k = 4000, m = 40;
  std::vector<int8_t> a(n * k, -128), w(m * k);
  for (int64_t i = 0; i < m * k; ++i) w[i] = (i / k / 4) % 2 ? 127 : -128;  // both signs per kind
  std::vector<Requant> requant;
  std::vector<int32_t> bias(m);
  for (int64_t j = 0; j < m; ++j) {
    requant.push_back(j % 4 == 0   ? quantize_multiplier(std::ldexp(1.0, -static_cast<int>(j)))
                      : j % 4 == 1 ? Requant{kInt32Max, static_cast<int32_t>(j % 31)}
                      : j % 4 == 2 ? Requant{1 << 30, -static_cast<int32_t>(j % 32)}
                                   : quantize_multiplier(1e-6 * static_cast<double>(j)));
    bias[j] = static_cast<int32_t>(j * 1000003 % 2000001) - 1000000;
  }
  QuantGemmParams params;
  params.a_zero_point = 127;
  params.out_zero_point = -3;
  params.bias = bias.data();
  params.requant = requant.data();
  const PackedInt8 reference(w.data(), m, k, Path::kReference), packed(w.data(), m, k, GetParam());
  std::vector<int8_t> want(n * m), got(n * m);
  quant_gemm(a.data(), n, reference, params, want.data());
  quant_gemm(a.data(), n, packed, params, got.data());
  EXPECT_EQ(got, want);
}

TEST_P(LiteQuantGemm, PackedLayoutHoldsRowSumsAndPadding) {
  std::mt19937 rng(5);
  const int64_t m = 21, k = 7;
  const std::vector<int8_t> w = random_int8(rng, m * k);
  const PackedInt8 packed(w.data(), m, k, GetParam());
  EXPECT_EQ(packed.path(), GetParam());
  EXPECT_EQ(packed.m(), m);
  EXPECT_EQ(packed.k(), k);
  EXPECT_GE(packed.k_padded(), k);
  EXPECT_EQ(packed.k_padded() % 4, 0);
  EXPECT_EQ(packed.m_padded(), 32);
  for (int64_t j = 0; j < m; ++j) {
    int32_t sum = 0;
    for (int64_t kk = 0; kk < k; ++kk) sum += w[j * k + kk];
    EXPECT_EQ(packed.row_sums()[j], sum);
  }
}

TEST_P(LiteQuantGemm, RowRangesOnSeparateThreadsMatchOneCall) {
  // The caller splits rows across threads; the kernels' scratch must not be shared.
  std::mt19937 rng(6);
  const QuantProblem problem(rng, {203, 288, 64}, 1, true);
  const PackedInt8 packed(problem.w.data(), problem.m, problem.k, GetParam());
  std::vector<int8_t> whole(problem.n * problem.m), split(problem.n * problem.m);
  quant_gemm(problem.a.data(), problem.n, packed, problem.params, whole.data());
  std::vector<std::thread> threads;
  const int64_t parts = 4, rows = (problem.n + parts - 1) / parts;
  for (int64_t t = 0; t < parts; ++t) {
    threads.emplace_back([&, t] {
      const int64_t begin = t * rows, count = std::min(rows, problem.n - begin);
      quant_gemm(problem.a.data() + begin * problem.k, count, packed, problem.params,
                 split.data() + begin * problem.m);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(split, whole);
}

// out[g][j] = max over the rows g * pool_rows + p of rows[.][j]: a fused pool's definition.
template <typename T>
std::vector<T> max_of_groups(const std::vector<T>& rows, int64_t n, int64_t m, int pool_rows) {
  std::vector<T> out(n / pool_rows * m);
  for (int64_t g = 0; g < n / pool_rows; ++g) {
    for (int64_t j = 0; j < m; ++j) {
      T v = rows[g * pool_rows * m + j];
      for (int p = 1; p < pool_rows; ++p) v = std::max(v, rows[(g * pool_rows + p) * m + j]);
      out[g * m + j] = v;
    }
  }
  return out;
}

// A fused max pool is the max of each group of rows of the reference's unpooled output, bit for
// bit: the requant is monotonic, so taking the max of the int32 sums first changes nothing.
TEST_P(LiteQuantGemm, AFusedPoolIsTheMaxOfEachGroupOfTheReferenceRows) {
  std::mt19937 rng(31);
  const QuantCase cases[] = {{2, 5, 3},     {4, 9, 32},    {12, 9, 32},
                             {676, 9, 32},  {24, 288, 64}, {100, 288, 64},
                             {8, 1600, 10}, {20, 33, 48},  {16, 130, 100}};
  for (int pool_rows : {2, 4}) {
    for (const QuantCase& c : cases) {
      if (c.n % pool_rows != 0) continue;
      for (int clamp_kind = 0; clamp_kind < 3; ++clamp_kind) {
        const QuantProblem problem(rng, c, clamp_kind, /*with_bias=*/true);
        const std::vector<int8_t> want =
            max_of_groups(problem.run(Path::kReference), c.n, c.m, pool_rows);
        const PackedInt8 packed(problem.w.data(), c.m, c.k, GetParam());
        const QuantGemm gemm(packed, problem.params);
        std::vector<int8_t> got(want.size(), 99);
        gemm.run(problem.a.data(), c.n, got.data(), pool_rows);
        ASSERT_EQ(got, want) << "n " << c.n << " k " << c.k << " m " << c.m << " pool " << pool_rows
                             << " clamp " << clamp_kind;
      }
    }
  }
}

TEST_P(LiteQuantGemm, APoolThatDoesNotDivideTheRowsIsRefused) {
  std::mt19937 rng(32);
  const QuantProblem problem(rng, {6, 8, 16}, 0, true);
  const PackedInt8 packed(problem.w.data(), 16, 8, GetParam());
  const QuantGemm gemm(packed, problem.params);
  std::vector<int8_t> out(6 * 16);
  EXPECT_THROW(gemm.run(problem.a.data(), 6, out.data(), 4), Error);  // 6 rows, windows of 4
  EXPECT_THROW(gemm.run(problem.a.data(), 6, out.data(), 3), Error);  // not 1, 2 or 4
}

INSTANTIATE_TEST_SUITE_P(Paths, LiteQuantGemm, testing::Values(Path::kGeneric, Path::kAvx512),
                         [](const testing::TestParamInfo<Path>& info) {
                           return std::string(path_name(info.param));
                         });

TEST(LiteQuantGemmReference, MatchesTheFormulaOnAHandCheckedCase) {
  // a = [[1, 2], [3, 4]] at zero point 1, w = [[1, -1], [2, 0]], bias [10, -2]:
  // acc = [[0*1 + 1*-1 + 10, 0*2 + 1*0 - 2], [2*1 + 3*-1 + 10, 2*2 - 2]] = [[9, -2], [9, 2]].
  const std::vector<int8_t> a = {1, 2, 3, 4}, w = {1, -1, 2, 0};
  const std::vector<int32_t> bias = {10, -2};
  const std::vector<Requant> requant = {quantize_multiplier(0.5), quantize_multiplier(2.0)};
  QuantGemmParams params;
  params.a_zero_point = 1;
  params.out_zero_point = 5;
  params.bias = bias.data();
  params.requant = requant.data();
  const PackedInt8 packed(w.data(), 2, 2, Path::kReference);
  std::vector<int8_t> out(4);
  quant_gemm(a.data(), 2, packed, params, out.data());
  // 9 * 0.5 = 4.5 -> 5, -2 * 2 = -4, 2 * 2 = 4; plus 5.
  EXPECT_EQ(out, (std::vector<int8_t>{10, 1, 10, 9}));
  params.out_min = 6;  // relu at zero point 5, one unit up
  params.out_max = 9;
  quant_gemm(a.data(), 2, packed, params, out.data());
  EXPECT_EQ(out, (std::vector<int8_t>{9, 6, 9, 9}));
}

// ---- float GEMM -----------------------------------------------------------------------------

class LiteGemmF32 : public testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    if (!float_path_available(GetParam())) {
      GTEST_SKIP() << "this CPU lacks the " << path_name(GetParam()) << " float path";
    }
  }
};

TEST_P(LiteGemmF32, MatchesTheReferenceWithinRounding) {
  std::mt19937 rng(7);
  for (const QuantCase& c : kQuantCases) {
    const std::vector<float> a = random_floats(rng, c.n * c.k), w = random_floats(rng, c.m * c.k),
                             bias = random_floats(rng, c.m, -2, 2);
    const PackedF32 reference(w.data(), c.m, c.k, Path::kReference),
        packed(w.data(), c.m, c.k, GetParam());
    for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kRelu6}) {
      for (const float* b : {bias.data(), static_cast<const float*>(nullptr)}) {
        std::vector<float> want(c.n * c.m), got(c.n * c.m, 99.0f);
        gemm_f32(a.data(), c.n, reference, b, act, want.data());
        gemm_f32(a.data(), c.n, packed, b, act, got.data());
        for (int64_t i = 0; i < c.n; ++i) {
          for (int64_t j = 0; j < c.m; ++j) {
            double magnitude = b ? std::abs(b[j]) : 0.0;
            for (int64_t kk = 0; kk < c.k; ++kk)
              magnitude += std::abs(a[i * c.k + kk] * w[j * c.k + kk]);
            ASSERT_NEAR(got[i * c.m + j], want[i * c.m + j], 1e-5 * magnitude + 1e-6)
                << "n " << c.n << " k " << c.k << " m " << c.m << " at " << i << ", " << j
                << " activation " << static_cast<int>(act);
          }
        }
      }
    }
  }
}

TEST_P(LiteGemmF32, ActivationsClampAtZeroAndSix) {
  // One input of 1 against weights -3, 2, 8 with bias 0: relu6 gives 0, 2, 6.
  const std::vector<float> a = {1.0f}, w = {-3.0f, 2.0f, 8.0f};
  const PackedF32 packed(w.data(), 3, 1, GetParam());
  std::vector<float> out(3);
  gemm_f32(a.data(), 1, packed, nullptr, Activation::kNone, out.data());
  EXPECT_EQ(out, (std::vector<float>{-3.0f, 2.0f, 8.0f}));
  gemm_f32(a.data(), 1, packed, nullptr, Activation::kRelu, out.data());
  EXPECT_EQ(out, (std::vector<float>{0.0f, 2.0f, 8.0f}));
  gemm_f32(a.data(), 1, packed, nullptr, Activation::kRelu6, out.data());
  EXPECT_EQ(out, (std::vector<float>{0.0f, 2.0f, 6.0f}));
}

// The fused pool takes the max before the bias and the activation (both monotonic): the same
// bits as pooling the path's own unpooled output.
TEST_P(LiteGemmF32, AFusedPoolIsTheMaxOfEachGroupOfRows) {
  std::mt19937 rng(33);
  const QuantCase cases[] = {{4, 9, 32}, {676, 9, 32}, {100, 288, 64}, {8, 1600, 10}, {20, 33, 48}};
  for (int pool_rows : {2, 4}) {
    for (const QuantCase& c : cases) {
      const std::vector<float> a = random_floats(rng, c.n * c.k), w = random_floats(rng, c.m * c.k),
                               bias = random_floats(rng, c.m, -2, 2);
      const PackedF32 packed(w.data(), c.m, c.k, GetParam());
      for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kRelu6}) {
        std::vector<float> rows(c.n * c.m), got(c.n / pool_rows * c.m, 99.0f);
        gemm_f32(a.data(), c.n, packed, bias.data(), act, rows.data());
        gemm_f32(a.data(), c.n, packed, bias.data(), act, got.data(), pool_rows);
        ASSERT_EQ(got, max_of_groups(rows, c.n, c.m, pool_rows))
            << "n " << c.n << " k " << c.k << " m " << c.m << " pool " << pool_rows;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, LiteGemmF32,
                         testing::Values(Path::kReference, Path::kGeneric, Path::kAvx512),
                         [](const testing::TestParamInfo<Path>& info) {
                           return std::string(path_name(info.param));
                         });

// ---- im2col, pooling, softmax, quantization -------------------------------------------------

TEST(LiteIm2col, FloatPatchesTimesAFilterEqualADirectConvolution) {
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> small(-4, 4);
  const int64_t n = 2, h = 7, w = 6, c = 3, m = 4;
  Window win;
  win.kh = 3, win.kw = 2, win.stride_h = 2, win.stride_w = 1;
  win.pad_top = 1, win.pad_left = 1, win.pad_bottom = 1, win.pad_right = 0;
  // Small integers keep every sum exact, so the two orders agree exactly.
  std::vector<float> x(n * h * w * c), filter(m * win.kh * win.kw * c);
  for (float& v : x) v = static_cast<float>(small(rng));
  for (float& v : filter) v = static_cast<float>(small(rng));
  const int64_t oh = win.out_h(h), ow = win.out_w(w), row = win.kh * win.kw * c;
  ASSERT_EQ(oh, 4);
  ASSERT_EQ(ow, 6);
  std::vector<float> patches(n * oh * ow * row, 99.0f);
  im2col_f32(x.data(), n, h, w, c, win, patches.data());
  const PackedF32 packed(filter.data(), m, row, Path::kReference);
  std::vector<float> conv(n * oh * ow * m);
  gemm_f32(patches.data(), n * oh * ow, packed, nullptr, Activation::kNone, conv.data());
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        for (int64_t j = 0; j < m; ++j) {
          float sum = 0.0f;
          for (int64_t ky = 0; ky < win.kh; ++ky) {
            for (int64_t kx = 0; kx < win.kw; ++kx) {
              const int64_t y = oy * win.stride_h - win.pad_top + ky;
              const int64_t xx = ox * win.stride_w - win.pad_left + kx;
              if (y < 0 || y >= h || xx < 0 || xx >= w) continue;
              for (int64_t ch = 0; ch < c; ++ch) {
                sum += x[((b * h + y) * w + xx) * c + ch] *
                       filter[((j * win.kh + ky) * win.kw + kx) * c + ch];
              }
            }
          }
          ASSERT_EQ(conv[((b * oh + oy) * ow + ox) * m + j], sum)
              << b << " " << oy << " " << ox << " " << j;
        }
      }
    }
  }
}

TEST(LiteIm2col, Int8PatchesCopyTheInputAndFillThePaddingWithThePadValue) {
  // x is 1 x 2 x 2 x 1 = [[1, 2], [3, 4]]; a 2x2 window at stride 1 with one pixel of padding
  // on every side gives 3 x 3 patches.
  const std::vector<int8_t> x = {1, 2, 3, 4};
  Window win;
  win.kh = 2, win.kw = 2, win.pad_top = 1, win.pad_left = 1, win.pad_bottom = 1, win.pad_right = 1;
  std::vector<int8_t> patches(9 * 4);
  im2col_int8(x.data(), 1, 2, 2, 1, win, -7, patches.data());
  const int8_t p = -7;
  EXPECT_EQ(patches, (std::vector<int8_t>{p, p, p, 1, p, p, 1, 2, p, p, 2, p,  //
                                          p, 1, p, 3, 1, 2, 3, 4, 2, p, 4, p,  //
                                          p, 3, p, p, 3, 4, p, p, 4, p, p, p}));
}

TEST(LitePool, MaxPoolTakesTheLargestOfEachWindow) {
  // 1 x 4 x 4 x 1 holding 1..16, 2x2 at stride 2.
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(i + 1);
  Window win;
  win.kh = 2, win.kw = 2, win.stride_h = 2, win.stride_w = 2;
  std::vector<float> out(4);
  max_pool_f32(x.data(), 1, 4, 4, 1, win, out.data());
  EXPECT_EQ(out, (std::vector<float>{6, 8, 14, 16}));
  std::vector<int8_t> xq(x.begin(), x.end()), outq(4);
  max_pool_int8(xq.data(), 1, 4, 4, 1, win, outq.data());
  EXPECT_EQ(outq, (std::vector<int8_t>{6, 8, 14, 16}));
}

TEST(LitePool, MaxPoolLeavesPaddingOutSoNegativeInputsStayNegative) {
  // Two channels of all-negative values, 3x3 at stride 1 with one pixel of padding: every
  // window sees all four inputs (a padded zero would win otherwise).
  const std::vector<float> x = {-1, -10, -2, -20, -3, -30, -4, -40};  // 1 x 2 x 2 x 2
  Window win;
  win.kh = 3, win.kw = 3, win.pad_top = 1, win.pad_left = 1, win.pad_bottom = 1, win.pad_right = 1;
  std::vector<float> out(8);
  max_pool_f32(x.data(), 1, 2, 2, 2, win, out.data());
  EXPECT_EQ(out, (std::vector<float>{-1, -10, -1, -10, -1, -10, -1, -10}));
  const std::vector<int8_t> xq = {-1, -10, -2, -20, -3, -30, -4, -40};
  std::vector<int8_t> outq(8);
  max_pool_int8(xq.data(), 1, 2, 2, 2, win, outq.data());
  EXPECT_EQ(outq, (std::vector<int8_t>{-1, -10, -1, -10, -1, -10, -1, -10}));
}

TEST(LitePool, AvgPoolCountsOnlyTheInputsInsideTheWindow) {
  // 1 x 3 x 3 x 1 holding 1..9, 3x3 at stride 1 with one pixel of padding.
  std::vector<float> x(9);
  for (int i = 0; i < 9; ++i) x[i] = static_cast<float>(i + 1);
  Window win;
  win.kh = 3, win.kw = 3, win.pad_top = 1, win.pad_left = 1, win.pad_bottom = 1, win.pad_right = 1;
  std::vector<float> out(9);
  avg_pool_f32(x.data(), 1, 3, 3, 1, win, out.data());
  // Corners average 4 inputs, edges 6, the centre 9.
  EXPECT_EQ(out, (std::vector<float>{3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7}));
}

TEST(LitePool, Int8AvgPoolRoundsHalvesAwayFromZero) {
  // 1 x 2 x 1 x 4, a 2x1 window: sums 3, -3, 1, -1 over 2.
  const std::vector<int8_t> x = {1, -1, 0, -1, 2, -2, 1, 0};
  Window win;
  win.kh = 2;
  std::vector<int8_t> out(4);
  avg_pool_int8(x.data(), 1, 2, 1, 4, win, out.data());
  EXPECT_EQ(out, (std::vector<int8_t>{2, -2, 1, -1}));
  // 1 x 3 x 1 x 1 = [5, 6, 10], 3x1 with one row of padding: (5+6)/2, 21/3, 16/2.
  const std::vector<int8_t> y = {5, 6, 10};
  win.kh = 3, win.pad_top = 1, win.pad_bottom = 1;
  std::vector<int8_t> outy(3);
  avg_pool_int8(y.data(), 1, 3, 1, 1, win, outy.data());
  EXPECT_EQ(outy, (std::vector<int8_t>{6, 7, 8}));
  // Sums past int8: -127.5 rounds to -128.
  const std::vector<int8_t> z = {-127, -128, 127, 127};  // 1 x 2 x 2 x 1
  win = Window();
  win.kh = 1, win.kw = 2;
  std::vector<int8_t> outz(2);
  avg_pool_int8(z.data(), 1, 2, 2, 1, win, outz.data());
  EXPECT_EQ(outz, (std::vector<int8_t>{-128, 127}));
}

TEST(LitePool, BatchesAndChannelsPoolIndependently) {
  std::mt19937 rng(9);
  const int64_t n = 3, h = 5, w = 4, c = 6;
  const std::vector<int8_t> x = random_int8(rng, n * h * w * c);
  Window win;
  win.kh = 2, win.kw = 3, win.stride_h = 2, win.stride_w = 1, win.pad_right = 1;
  const int64_t oh = win.out_h(h), ow = win.out_w(w);
  std::vector<int8_t> out(n * oh * ow * c);
  max_pool_int8(x.data(), n, h, w, c, win, out.data());
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        for (int64_t ch = 0; ch < c; ++ch) {
          int want = -129;
          for (int64_t y = oy * 2; y < std::min(oy * 2 + 2, h); ++y) {
            for (int64_t xx = ox; xx < std::min(ox + 3, w); ++xx) {
              want = std::max<int>(want, x[((b * h + y) * w + xx) * c + ch]);
            }
          }
          ASSERT_EQ(out[((b * oh + oy) * ow + ox) * c + ch], want);
        }
      }
    }
  }
}

TEST(LiteSoftmax, RowsSumToOneAndMatchADoubleReference) {
  std::mt19937 rng(10);
  const int64_t rows = 17, cols = 10;
  const std::vector<float> x = random_floats(rng, rows * cols, -20, 20);
  std::vector<float> out(rows * cols);
  softmax_f32(x.data(), rows, cols, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0, want_total = 0;
    for (int64_t c = 0; c < cols; ++c) want_total += std::exp(double{x[r * cols + c]});
    for (int64_t c = 0; c < cols; ++c) {
      total += out[r * cols + c];
      EXPECT_NEAR(out[r * cols + c], std::exp(double{x[r * cols + c]}) / want_total, 1e-6);
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
  }
}

TEST(LiteSoftmax, LargeInputsDoNotOverflow) {
  const std::vector<float> x = {1000.0f, 1000.0f, -1000.0f, 89.0f, 90.0f, 88.0f};
  std::vector<float> out(6);
  softmax_f32(x.data(), 2, 3, out.data());
  EXPECT_FLOAT_EQ(out[0], 0.5f);
  EXPECT_FLOAT_EQ(out[1], 0.5f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_NEAR(out[4], 1.0 / (1.0 + std::exp(-1.0) + std::exp(-2.0)), 1e-6);
}

TEST(LiteQuantize, RoundTripsWithinHalfAScale) {
  std::mt19937 rng(11);
  const float scale = 0.037f;
  const int32_t zp = -17;
  // The representable range, [scale * (-128 - zp), scale * (127 - zp)].
  const std::vector<float> x = random_floats(rng, 10000, scale * -111.0f, scale * 144.0f);
  std::vector<int8_t> q(x.size());
  std::vector<float> back(x.size());
  quantize_f32(x.data(), static_cast<int64_t>(x.size()), scale, zp, q.data());
  dequantize_int8(q.data(), static_cast<int64_t>(q.size()), scale, zp, back.data());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_LE(std::abs(back[i] - x[i]), scale / 2 * (1 + 1e-5f)) << x[i];
  }
}

TEST(LiteQuantize, RoundsHalvesAwayFromZeroAndClamps) {
  const std::vector<float> x = {1.25f,  -1.25f, 0.75f,         -0.25f,  1000.0f,
                                -1e30f, 64.0f,  std::nanf(""), INFINITY};
  std::vector<int8_t> q(x.size());
  quantize_f32(x.data(), static_cast<int64_t>(x.size()), 0.5f, 3, q.data());
  // 2.5 -> 3, -2.5 -> -3, 1.5 -> 2, -0.5 -> -1, then + 3; 128 + 3 clamps to 127; NaN gives the
  // zero point.
  EXPECT_EQ(q, (std::vector<int8_t>{6, 0, 5, 2, 127, -128, 127, 3, 127}));
  std::vector<float> back(3);
  const std::vector<int8_t> values = {-128, 3, 127};
  dequantize_int8(values.data(), 3, 0.5f, 3, back.data());
  EXPECT_EQ(back, (std::vector<float>{-65.5f, 0.0f, 62.0f}));
}

}  // namespace
}  // namespace kiln::lite::kernels

namespace kiln::lite::kernels {
namespace {

// A window of at most max_k x max_k, strides up to 3, each pad smaller than the window.
Window random_window(std::mt19937& rng, int max_k) {
  auto pick = [&](int lo, int hi) { return static_cast<int64_t>(lo + rng() % (hi - lo + 1)); };
  Window win;
  win.kh = pick(1, max_k);
  win.kw = pick(1, max_k);
  win.stride_h = pick(1, 3);
  win.stride_w = pick(1, 3);
  win.pad_top = pick(0, win.kh - 1);
  win.pad_bottom = pick(0, win.kh - 1);
  win.pad_left = pick(0, win.kw - 1);
  win.pad_right = pick(0, win.kw - 1);
  return win;
}

// Every patch element, by definition: the input at (oy*sh - pt + ky, ox*sw - pl + kx), or the
// pad value outside it. Over random windows, strides, pads and channel counts (the fast copies
// of the interior and the edges' slow path both).
TEST(LiteIm2col, EveryPatchElementIsTheInputUnderTheWindowOrThePad) {
  std::mt19937 rng(21);
  auto pick = [&](int lo, int hi) { return static_cast<int64_t>(lo + rng() % (hi - lo + 1)); };
  for (int trial = 0; trial < 300; ++trial) {
    const Window win = random_window(rng, 4);
    const int64_t n = pick(1, 2), h = pick(win.kh, 9), w = pick(win.kw, 9), c = pick(1, 5);
    const int64_t oh = win.out_h(h), ow = win.out_w(w), row = win.kh * win.kw * c;
    std::vector<int8_t> x(n * h * w * c);
    for (int8_t& v : x) v = static_cast<int8_t>(rng() % 255 - 127);
    std::vector<int8_t> patches(n * oh * ow * row, 99);
    const int8_t pad = -7;
    im2col_int8(x.data(), n, h, w, c, win, pad, patches.data());
    std::vector<float> xf(x.begin(), x.end()), pf(patches.size(), 99.f);
    im2col_f32(xf.data(), n, h, w, c, win, pf.data());
    for (int64_t b = 0; b < n; ++b)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox)
          for (int64_t ky = 0; ky < win.kh; ++ky)
            for (int64_t kx = 0; kx < win.kw; ++kx)
              for (int64_t ci = 0; ci < c; ++ci) {
                const int64_t y = oy * win.stride_h - win.pad_top + ky;
                const int64_t xx = ox * win.stride_w - win.pad_left + kx;
                const bool in = y >= 0 && y < h && xx >= 0 && xx < w;
                const int64_t at = ((b * oh + oy) * ow + ox) * row + (ky * win.kw + kx) * c + ci;
                const int8_t want = in ? x[((b * h + y) * w + xx) * c + ci] : pad;
                ASSERT_EQ(patches[at], want) << "trial " << trial << " at " << at;
                ASSERT_EQ(pf[at], in ? static_cast<float>(want) : 0.f) << "trial " << trial;
              }
  }
}

// Pooled order: row ((b * ph + py) * pw + px) * pool_h * pool_w + dy * pool_w + dx is the
// plain patch row of output (py * pool_h + dy, px * pool_w + dx); positions past the last
// whole pool window are left out.
TEST(LiteIm2col, PooledOrderHoldsThePlainRowsOfEachPoolWindow) {
  std::mt19937 rng(34);
  auto pick = [&](int lo, int hi) { return static_cast<int64_t>(lo + rng() % (hi - lo + 1)); };
  for (int trial = 0; trial < 300; ++trial) {
    const Window win = random_window(rng, 4);
    const int64_t n = pick(1, 2), h = pick(win.kh, 11), w = pick(win.kw, 11), c = pick(1, 5);
    const int64_t pool_h = pick(1, 3), pool_w = pick(1, 3);
    const int64_t oh = win.out_h(h), ow = win.out_w(w), row = win.kh * win.kw * c;
    const int64_t ph = oh / pool_h, pw = ow / pool_w;
    std::vector<int8_t> x(n * h * w * c);
    for (int8_t& v : x) v = static_cast<int8_t>(rng() % 255 - 127);
    std::vector<int8_t> plain(n * oh * ow * row), pooled(n * ph * pw * pool_h * pool_w * row, 99);
    im2col_int8(x.data(), n, h, w, c, win, -5, plain.data());
    im2col_int8(x.data(), n, h, w, c, win, -5, pooled.data(), pool_h, pool_w);
    std::vector<float> xf(x.begin(), x.end()), plain_f(plain.size()), pooled_f(pooled.size());
    im2col_f32(xf.data(), n, h, w, c, win, plain_f.data());
    im2col_f32(xf.data(), n, h, w, c, win, pooled_f.data(), pool_h, pool_w);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t py = 0; py < ph; ++py)
        for (int64_t px = 0; px < pw; ++px)
          for (int64_t dy = 0; dy < pool_h; ++dy)
            for (int64_t dx = 0; dx < pool_w; ++dx) {
              const int64_t at =
                  (((b * ph + py) * pw + px) * pool_h * pool_w + dy * pool_w + dx) * row;
              const int64_t from = ((b * oh + py * pool_h + dy) * ow + px * pool_w + dx) * row;
              ASSERT_TRUE(
                  std::equal(plain.begin() + from, plain.begin() + from + row, pooled.begin() + at))
                  << "trial " << trial << " pooled row " << at / row;
              ASSERT_TRUE(std::equal(plain_f.begin() + from, plain_f.begin() + from + row,
                                     pooled_f.begin() + at))
                  << "trial " << trial;
            }
  }
}

}  // namespace
}  // namespace kiln::lite::kernels

namespace kiln::lite::kernels {
namespace {

// The depthwise convolution's channel-vector path against the plain loop: int8 bit for bit
// (with requant corners: ties, left shifts, tiny multipliers), float within rounding; over
// random windows, strides, pads, multipliers 1-3 and zero points; and the int8 sums against a
// direct definition at one output.
TEST(LiteDepthwise, TheChannelPathEqualsThePlainLoop) {
  std::mt19937 rng(51);
  auto pick = [&](int lo, int hi) { return static_cast<int64_t>(lo + rng() % (hi - lo + 1)); };
  for (int trial = 0; trial < 200; ++trial) {
    const Window win = random_window(rng, 4);
    const int64_t n = pick(1, 2), h = pick(win.kh, 9), w = pick(win.kw, 9), c = pick(1, 40);
    const int64_t mult = pick(1, 3), m = c * mult;
    const int64_t oh = win.out_h(h), ow = win.out_w(w);
    const std::vector<int8_t> x = random_int8(rng, n * h * w * c);
    const std::vector<int8_t> wt = random_int8(rng, win.kh * win.kw * m);
    std::vector<int32_t> bias(m);
    std::vector<Requant> requant(m);
    for (int64_t o = 0; o < m; ++o) {
      bias[o] = static_cast<int32_t>(rng() % 20001) - 10000;
      const int kind = static_cast<int>(rng() % 4);
      requant[o] = kind == 0   ? quantize_multiplier(std::ldexp(1.0, -8))
                   : kind == 1 ? quantize_multiplier(1.5)
                   : kind == 2 ? quantize_multiplier(1e-7)
                               : quantize_multiplier(0.001 + 0.01 * (rng() % 100) / 100.0);
    }
    QuantGemmParams p;
    p.a_zero_point = static_cast<int32_t>(pick(0, 255)) - 128;
    p.out_zero_point = static_cast<int32_t>(pick(0, 255)) - 128;
    if (trial % 3 == 1) p.out_min = p.out_zero_point;
    p.bias = bias.data();
    p.requant = requant.data();
    std::vector<int8_t> want(n * oh * ow * m, 99), got(want.size(), 98);
    depthwise_conv_int8(x.data(), n, h, w, c, win, wt.data(), m, p, Path::kReference, want.data());
    depthwise_conv_int8(x.data(), n, h, w, c, win, wt.data(), m, p, Path::kGeneric, got.data());
    ASSERT_EQ(got, want) << "trial " << trial;
    // One output by definition: the last channel of the last position.
    const int64_t o = m - 1, oy = oh - 1, ox = ow - 1, b = n - 1;
    int32_t acc = bias[o];
    for (int64_t ky = 0; ky < win.kh; ++ky)
      for (int64_t kx = 0; kx < win.kw; ++kx) {
        const int64_t y = oy * win.stride_h - win.pad_top + ky,
                      xx = ox * win.stride_w - win.pad_left + kx;
        if (y < 0 || y >= h || xx < 0 || xx >= w) continue;
        acc += (x[((b * h + y) * w + xx) * c + o / mult] - p.a_zero_point) *
               wt[(ky * win.kw + kx) * m + o];
      }
    const int32_t q =
        std::clamp<int32_t>(multiply_by_quantized_multiplier(acc, requant[o]) + p.out_zero_point,
                            std::max(p.out_min, -128), 127);
    ASSERT_EQ(want.back(), q) << "trial " << trial;

    const std::vector<float> xf = random_floats(rng, x.size()), wf = random_floats(rng, wt.size()),
                             bf = random_floats(rng, m);
    std::vector<float> fwant(want.size()), fgot(want.size());
    depthwise_conv_f32(xf.data(), n, h, w, c, win, wf.data(), m, bf.data(), Activation::kRelu,
                       Path::kReference, fwant.data());
    depthwise_conv_f32(xf.data(), n, h, w, c, win, wf.data(), m, bf.data(), Activation::kRelu,
                       Path::kGeneric, fgot.data());
    for (size_t i = 0; i < fwant.size(); ++i) ASSERT_NEAR(fgot[i], fwant[i], 1e-5) << trial;
  }
}

// int8 max pooling (the AVX-512 path where the CPU has it) against its definition, over random
// windows and channel counts that are and are not multiples of 64.
TEST(LitePool, Int8MaxPoolIsTheLargestInputUnderTheWindow) {
  std::mt19937 rng(22);
  auto pick = [&](int lo, int hi) { return static_cast<int64_t>(lo + rng() % (hi - lo + 1)); };
  for (int trial = 0; trial < 100; ++trial) {
    const Window win = random_window(rng, 3);
    const int64_t h = pick(win.kh, 7), w = pick(win.kw, 7), c = pick(1, 130);
    const int64_t oh = win.out_h(h), ow = win.out_w(w);
    std::vector<int8_t> x(h * w * c), out(oh * ow * c);
    for (int8_t& v : x) v = static_cast<int8_t>(rng() % 256 - 128);
    max_pool_int8(x.data(), 1, h, w, c, win, out.data());
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox)
        for (int64_t ch = 0; ch < c; ++ch) {
          int want = -128;
          for (int64_t ky = 0; ky < win.kh; ++ky)
            for (int64_t kx = 0; kx < win.kw; ++kx) {
              const int64_t y = oy * win.stride_h - win.pad_top + ky;
              const int64_t xx = ox * win.stride_w - win.pad_left + kx;
              if (y >= 0 && y < h && xx >= 0 && xx < w) {
                want = std::max<int>(want, x[(y * w + xx) * c + ch]);
              }
            }
          ASSERT_EQ(out[(oy * ow + ox) * c + ch], want) << "trial " << trial;
        }
  }
}

}  // namespace
}  // namespace kiln::lite::kernels
