// bf16 and f16 matmul (ops/linalg.cc's dot kernel) on oneDNN's low-precision path
// (ops/onednn_matmul.h) and on the widening fallback, against an f64 reference computed from the
// f32 operands before they were rounded, on random shapes (skinny, transposed, batched). Every
// case says which path served it, and checks that it was the path the host should take.
//
// The bound. u is the narrow type's unit roundoff (bf16 2^-8, f16 2^-11), e half its smallest
// subnormal (bf16 2^-134, f16 2^-25: rounding to it is x (1 + d) + h, |d| <= u, |h| <= e),
// u32 = 2^-24, and over the K terms of one output S = sum |a| |b|, T = sum (|a| + |b|).
// - Rounding the operands once: a' = a (1 + x) + h, b' = b (1 + y) + h', so
//   sum |a'b' - ab| <= (2u + u^2) S + e (1 + u) T + K e^2 =: P, and S' = sum |a'||b'| <= S + P.
// - A product of two 8-bit (bf16) or 11-bit (f16) significands fits f32's 24 bits: exact.
// - Both paths add the K products in f32, in some order (vdpbf16ps rounds each of its adds to
//   f32): |s - sum a'b'| <= g S', g = K u32 / (1 - K u32).
// - The result is rounded once to the narrow type: |c - s| <= u (1 + g) S' + e.
// So |c - sum ab| <= P + (g + u (1 + g)) S' + e, about (3u + K u32) S for operands of normal
// size. The K term carries f32's roundoff, not the narrow type's: a kernel that summed in bf16
// (K u S) fails it from K of a few hundred on. The e terms matter for f16, whose subnormals start
// at 2^-14 (products of two operands below 2^-7). oneDNN's bf16 instructions also flush subnormal
// inputs, products and partial sums to zero, each flush moving the sum by under 2^-126, at most
// 3K of them; that term and the f64 reference's own error (K 2^-53 S) are added as well.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "ops/onednn_conv.h"
#include "ops/onednn_matmul.h"
#include "tests/testing/onednn.h"

namespace kiln {
namespace {

double unit_roundoff(DType t) { return t == bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }
double half_subnormal(DType t) { return t == bf16 ? std::ldexp(1.0, -134) : std::ldexp(1.0, -25); }

// The bound above, per output element, for reduction length k, S = sum |a||b| and
// T = sum (|a| + |b|).
double error_bound(DType t, int64_t k, double s, double sum_abs) {
  const double u = unit_roundoff(t), e = half_subnormal(t), u32 = std::ldexp(1.0, -24);
  const double g = k * u32 / (1 - k * u32);
  const double p = (2 * u + u * u) * s + e * (1 + u) * sum_abs + k * e * e;
  return p + (g + u * (1 + g)) * (s + p) + e + k * std::ldexp(1.0, -53) * s +
         3.0 * k * std::ldexp(1.0, -126);
}

using testing::with_onednn;

// One GEMM case: `batch` products of [m, k] x [k, n], each operand stored as itself or as its
// transpose (read in place by the dot kernel), or as matmul's [batch, m, k] x [k, n].
struct Case {
  int64_t batch = 1, m = 1, k = 1, n = 1;
  bool a_transposed = false, b_transposed = false;
  std::string str() const {
    return std::to_string(batch) + " x [" + std::to_string(m) + "," + std::to_string(k) + "] x [" +
           std::to_string(k) + "," + std::to_string(n) + "]" +
           (a_transposed ? ", a stored [k,m]" : "") + (b_transposed ? ", b stored [n,k]" : "");
  }
};

struct Operands {
  std::vector<float> a, b;  // logical [batch, m, k] and [batch, k, n], f32 before rounding
};

Operands random_operands(const Case& c, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Operands o{std::vector<float>(c.batch * c.m * c.k), std::vector<float>(c.batch * c.k * c.n)};
  for (float& v : o.a) v = dist(rng);
  for (float& v : o.b) v = dist(rng);
  return o;
}

// x [batch, rows, cols] stored as itself or as [batch, cols, rows], rounded to `t`.
Tensor stored(const std::vector<float>& x, int64_t batch, int64_t rows, int64_t cols,
              bool transposed, DType t) {
  if (!transposed) return convert(Tensor::from_vector(x, {batch, rows, cols}), t);
  std::vector<float> y(x.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        y[(b * cols + j) * rows + i] = x[(b * rows + i) * cols + j];
  return convert(Tensor::from_vector(y, {batch, cols, rows}), t);
}

// The product in type t through the dot kernel, as f32 values [batch, m, n].
std::vector<float> lowp_product(const Case& c, const Operands& o, DType t) {
  Tensor a = stored(o.a, c.batch, c.m, c.k, c.a_transposed, t);
  Tensor b = stored(o.b, c.batch, c.k, c.n, c.b_transposed, t);
  Tensor y = dot(a, b, {c.a_transposed ? 1 : 2}, {c.b_transposed ? 2 : 1}, {0}, {0});
  EXPECT_EQ(y.dtype(), t);
  return y.to_vector<float>();
}

// Checks every element against the f64 reference; returns the largest error over its bound.
double worst_error_over_bound(const Case& c, const Operands& o, const std::vector<float>& y,
                              DType t, const std::string& path) {
  double worst = 0;
  int reported = 0;
  for (int64_t bi = 0; bi < c.batch; ++bi)
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double exact = 0, s = 0, sum_abs = 0;
        for (int64_t kk = 0; kk < c.k; ++kk) {
          const double x = o.a[(bi * c.m + i) * c.k + kk], z = o.b[(bi * c.k + kk) * c.n + j];
          exact += x * z;
          s += std::abs(x * z);
          sum_abs += std::abs(x) + std::abs(z);
        }
        const double err = std::abs(y[(bi * c.m + i) * c.n + j] - exact);
        const double bound = error_bound(t, c.k, s, sum_abs);
        worst = std::max(worst, err / bound);
        if (err > bound && reported++ < 3) {
          ADD_FAILURE() << dtype_name(t) << " " << c.str() << " on " << path << ": element (" << bi
                        << "," << i << "," << j << ") = " << y[(bi * c.m + i) * c.n + j]
                        << ", f64 reference " << exact << ", error " << err << " > bound " << bound
                        << " (sum|a||b| = " << s << ")";
        }
      }
  return worst;
}

std::vector<Case> cases(std::mt19937& rng) {
  std::vector<Case> out = {{1, 1, 1, 1},    {1, 1, 4097, 3},   {1, 3, 17, 1},     {1, 1, 300, 257},
                           {1, 257, 1, 33}, {1, 64, 1000, 64}, {1, 33, 2049, 17}, {1, 128, 64, 1},
                           {3, 5, 70, 9},   {1, 200, 300, 100}};
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int i = 0; i < 6; ++i)
    out.push_back({pick(1, 3), pick(1, 150), pick(1, 1200), pick(1, 150)});
  // Every layout of every case: in place, a transposed, b transposed, both.
  std::vector<Case> all;
  for (const Case& c : out)
    for (int layout = 0; layout < 4; ++layout) {
      Case v = c;
      v.a_transposed = layout & 1;
      v.b_transposed = layout & 2;
      all.push_back(v);
    }
  return all;
}

// Whether this host should run `t` on oneDNN: a build with it, switched on, and a unit for the
// type in the ISA oneDNN dispatches to (bf16: AVX512-BF16 or AMX; oneDNN 2.6 has no f16 matmul).
bool expect_onednn(DType t) {
  if (!ops::onednn::built() || !ops::onednn::enabled()) return false;
  const std::string isa = ops::onednn::cpu_isa();
  return t == bf16 && (isa == "avx512_core_bf16" || isa == "avx512_core_amx");
}

// Every case on the path the host takes, then (when that was oneDNN) on the fallback.
void check_type(DType t) {
  std::mt19937 rng(t == bf16 ? 16 : 17);
  const bool onednn = expect_onednn(t);
  std::cout << "[ path     ] " << dtype_name(t) << ": " << ops::onednn::matmul_path(t) << "\n";
  double worst_fast = 0, worst_fallback = 0;
  for (const Case& c : cases(rng)) {
    const Operands o = random_operands(c, rng);
    const int64_t before = ops::onednn::matmul_count();
    const std::vector<float> y = lowp_product(c, o, t);
    const bool ran_onednn = ops::onednn::matmul_count() == before + 1;
    EXPECT_EQ(ran_onednn, onednn) << dtype_name(t) << " " << c.str() << " ran on "
                                  << (ran_onednn ? "oneDNN" : "the f32 fallback");
    const std::string path = ran_onednn ? "oneDNN" : "the f32 fallback";
    (ran_onednn ? worst_fast : worst_fallback) = std::max(ran_onednn ? worst_fast : worst_fallback,
                                                          worst_error_over_bound(c, o, y, t, path));
    if (!ran_onednn) continue;
    const std::vector<float> z = with_onednn(false, [&] { return lowp_product(c, o, t); });
    EXPECT_EQ(ops::onednn::matmul_count(), before + 1) << "switched off, yet oneDNN ran";
    worst_fallback = std::max(worst_fallback, worst_error_over_bound(c, o, z, t, "the fallback"));
  }
  std::cout << "[ path     ] " << dtype_name(t) << " worst error / bound: oneDNN " << worst_fast
            << (onednn ? "" : " (not run)") << ", f32 fallback " << worst_fallback << "\n";
}

TEST(LowpMatmul, PathFollowsHostAndSwitch) {
  const char* env = std::getenv("KILN_ONEDNN");
  const bool switched_off = env != nullptr && std::string(env) == "0";
  std::cout << "[ path     ] oneDNN built " << ops::onednn::built() << ", enabled "
            << ops::onednn::enabled() << ", ISA " << ops::onednn::cpu_isa()
            << "; host cpuid avx512_bf16 " << __builtin_cpu_supports("avx512bf16") << "\n";
  if (switched_off) EXPECT_FALSE(ops::onednn::enabled()) << "KILN_ONEDNN=0 is set";
  for (DType t : {bf16, f16}) {
    const std::string path = ops::onednn::matmul_path(t);
    EXPECT_EQ(path.rfind(expect_onednn(t) ? "onednn " : "widen to f32: ", 0), 0u)
        << dtype_name(t) << ": " << path;
    EXPECT_EQ(ops::onednn::lowp_matmul_supported(t), expect_onednn(t)) << dtype_name(t);
  }
  // oneDNN can only see a bf16 unit that cpuid reports.
  if (expect_onednn(bf16)) EXPECT_TRUE(__builtin_cpu_supports("avx512bf16"));
}

TEST(LowpMatmul, Bf16WithinRoundoffBoundOfF32Reference) { check_type(bf16); }

TEST(LowpMatmul, F16WithinRoundoffBoundOfF32Reference) { check_type(f16); }

// The fallback is the f32 kernel on the widened operands, rounded once: the same bits.
TEST(LowpMatmul, FallbackIsTheWidenedF32ProductRoundedOnce) {
  std::mt19937 rng(5);
  const Case c{1, 70, 300, 45, true, false};
  const Operands o = random_operands(c, rng);
  for (DType t : {bf16, f16}) {
    const int64_t before = ops::onednn::matmul_count();
    const std::vector<float> y = with_onednn(false, [&] { return lowp_product(c, o, t); });
    EXPECT_EQ(ops::onednn::matmul_count(), before);
    // The fallback copies a bf16 or f16 operand into the [m, k] layout as it widens it. The f32
    // kernel runs with the same switch: it may hand f32 blocks to oneDNN when switched on.
    Tensor a = convert(stored(o.a, 1, c.m, c.k, false, t), f32);
    Tensor b = convert(stored(o.b, 1, c.k, c.n, false, t), f32);
    const std::vector<float> want = with_onednn(false, [&] {
      return convert(convert(dot(a, b, {2}, {1}, {0}, {0}), t), f32).to_vector<float>();
    });
    EXPECT_EQ(y, want) << dtype_name(t);
  }
}

// A bf16 dot in a graph, compiled and interpreted, runs the same kernel on the same path as
// eagerly: the same bits, and oneDNN serves each where the host has a bf16 unit.
TEST(LowpMatmul, CompiledAndInterpretedGraphsTakeTheSamePath) {
  std::mt19937 rng(7);
  const Case c{2, 40, 300, 24, false, true};
  const Operands o = random_operands(c, rng);
  Tensor a = stored(o.a, c.batch, c.m, c.k, c.a_transposed, bf16);
  Tensor b = stored(o.b, c.batch, c.k, c.n, c.b_transposed, bf16);
  Graph g("lowp_matmul");
  Tensor pa = g.placeholder(bf16, a.shape(), "a"), pb = g.placeholder(bf16, b.shape(), "b");
  Tensor y = dot(pa, pb, {2}, {2}, {0}, {0});
  const FeedList feeds = {{pa, a}, {pb, b}};
  const std::vector<float> eager = dot(a, b, {2}, {2}, {0}, {0}).to_vector<float>();
  const int64_t expected = expect_onednn(bf16) ? 1 : 0;
  int64_t before = ops::onednn::matmul_count();
  const std::vector<float> interpreted = g.run(feeds, y).to_vector<float>();
  EXPECT_EQ(ops::onednn::matmul_count() - before, expected) << "interpreted";
  compiler::Executable exe = compiler::compile(g, {y}, feeds);
  before = ops::onednn::matmul_count();
  const std::vector<float> compiled = exe.run(feeds)[0].to_vector<float>();
  EXPECT_EQ(ops::onednn::matmul_count() - before, expected) << "compiled";
  EXPECT_EQ(interpreted, eager);
  EXPECT_EQ(compiled, eager);
}

TEST(LowpMatmul, NanInAnOperandReachesItsOutputs) {
  for (bool on : {true, false}) {
    for (DType t : {bf16, f16}) {
      std::vector<float> a(4 * 64, 0.5f), b(64 * 3, 0.25f);
      a[2 * 64 + 7] = NAN;  // row 2 of a
      Tensor y = with_onednn(on, [&] {
        return convert(matmul(convert(Tensor::from_vector(a, {4, 64}), t),
                              convert(Tensor::from_vector(b, {64, 3}), t)),
                       f32);
      });
      const std::vector<float> v = y.to_vector<float>();
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 3; ++j)
          EXPECT_EQ(std::isnan(v[i * 3 + j]), i == 2) << dtype_name(t) << " oneDNN " << on << " ("
                                                      << i << "," << j << ") = " << v[i * 3 + j];
    }
  }
}

}  // namespace
}  // namespace kiln
