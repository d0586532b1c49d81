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
#include "tests/testing/lowp.h"
#include "tests/testing/onednn.h"

namespace kiln {
namespace {

using testing::stored;

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

// Element (bi, i, j) of the product in f64: its value, sum |a b| and sum (|a| + |b|) (the
// inputs of error_bound).
struct ExactDot {
  double value = 0, sum_abs_products = 0, sum_abs = 0;
};

ExactDot exact_dot(const Case& c, const Operands& o, int64_t bi, int64_t i, int64_t j) {
  ExactDot d;
  for (int64_t kk = 0; kk < c.k; ++kk) {
    const double x = o.a[(bi * c.m + i) * c.k + kk], z = o.b[(bi * c.k + kk) * c.n + j];
    d.value += x * z;
    d.sum_abs_products += std::abs(x * z);
    d.sum_abs += std::abs(x) + std::abs(z);
  }
  return d;
}

Operands random_operands(const Case& c, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Operands o{std::vector<float>(c.batch * c.m * c.k), std::vector<float>(c.batch * c.k * c.n)};
  for (float& v : o.a) v = dist(rng);
  for (float& v : o.b) v = dist(rng);
  return o;
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
        const auto [exact, s, sum_abs] = exact_dot(c, o, bi, i, j);
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

// ---- bf16 fused_dot (compiler/cpu/fused_dot.h): the matmul, its bias and its activation in one
// oneDNN kernel, which adds the bias to the f32 sum s and applies the activation before the one
// rounding; the unfused ops round s, then the sum with the bias, then the activation.
// The bound, against r = act(exact + bias) in f64, with B the dot's bound above (it already
// holds a final rounding, so it over-covers s), x = exact + bias, L the activation's Lipschitz
// constant (1; logistic 1/4) and a its f32 approximation error (2^-20 for tanh and logistic,
// whose values are at most 1; none for relu):
//   fused pre-activation:   |s + bias (f32) - x| <= B + u32 (|x| + B)
//   unfused pre-activation: |round(round(s) + bias) - x| <= B + (u + u32)(|x| + B) + e
//   after the activation and its rounding: L pre + a + u (|r| + L pre + a) + e.
// Two results each within that of r are within the sum of their bounds of each other.

enum class Bias { kNone, kScalar, kVector, kFull };
struct FusedCase {
  Case gemm;
  Bias bias;
  std::string act;  // "none", "relu", "tanh", "logistic"
  std::string str() const {
    const char* b[] = {"no bias", "scalar bias", "vector bias", "full bias"};
    return gemm.str() + ", " + b[static_cast<int>(bias)] + ", " + act;
  }
};

double activation_f64(const std::string& act, double x) {
  if (act == "relu") return x <= 0 ? 0 : x;
  if (act == "tanh") return std::tanh(x);
  if (act == "logistic") return 1 / (1 + std::exp(-x));
  return x;
}

double activation_bound(const std::string& act, double pre, double r) {
  const double u = unit_roundoff(bf16), e = half_subnormal(bf16);
  const double lipschitz = act == "logistic" ? 0.25 : 1.0;
  const double approx = act == "tanh" || act == "logistic" ? std::ldexp(1.0, -20) : 0.0;
  const double post = lipschitz * pre + approx;
  return post + u * (std::abs(r) + post) + e;
}

struct FusedResult {
  std::vector<float> fused, unfused;
};

// fused_dot on the bf16 operands, and dot, add, activation as separate ops (eagerly, the
// reference kernels); bias values drawn from [-8, 8], about the size of the products.
FusedResult fused_and_unfused(const FusedCase& f, const Operands& o, const Tensor& bias) {
  const Case& c = f.gemm;
  Tensor a = stored(o.a, c.batch, c.m, c.k, c.a_transposed, bf16);
  Tensor b = stored(o.b, c.batch, c.k, c.n, c.b_transposed, bf16);
  std::vector<Tensor> in = {a, b};
  if (f.bias != Bias::kNone) in.push_back(bias);
  const Attrs attrs = {{"lhs_contract", std::vector<int64_t>{c.a_transposed ? 1 : 2}},
                       {"rhs_contract", std::vector<int64_t>{c.b_transposed ? 2 : 1}},
                       {"lhs_batch", std::vector<int64_t>{0}},
                       {"rhs_batch", std::vector<int64_t>{0}},
                       {"activation", f.act}};
  Tensor fused = call_op("fused_dot", in, attrs)[0];
  EXPECT_EQ(fused.dtype(), bf16);
  Tensor y = dot(a, b, {c.a_transposed ? 1 : 2}, {c.b_transposed ? 2 : 1}, {0}, {0});
  if (f.bias != Bias::kNone) y = y + bias;
  if (f.act == "relu") y = relu(y);
  if (f.act == "tanh") y = tanh(y);
  if (f.act == "logistic") y = logistic(y);
  return {fused.to_vector<float>(), y.to_vector<float>()};
}

Tensor random_bias(const FusedCase& f, std::mt19937& rng) {
  const Case& c = f.gemm;
  const Shape shape = f.bias == Bias::kFull     ? Shape{c.batch, c.m, c.n}
                      : f.bias == Bias::kVector ? Shape{c.n}
                                                : Shape{1};
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  std::vector<float> v(num_elements(shape));
  for (float& x : v) x = dist(rng);
  return convert(Tensor::from_vector(v, shape), bf16);
}

// Checks the fused and unfused results against act(exact + bias); returns the worst error over
// bound of the fused one.
double check_fused(const FusedCase& f, const Operands& o, const Tensor& bias, const FusedResult& r,
                   const std::string& path) {
  const Case& c = f.gemm;
  const std::vector<float> bv =
      f.bias == Bias::kNone ? std::vector<float>{0.0f} : convert(bias, f32).to_vector<float>();
  const double u = unit_roundoff(bf16), e = half_subnormal(bf16), u32 = std::ldexp(1.0, -24);
  double worst = 0;
  int reported = 0;
  for (int64_t bi = 0; bi < c.batch; ++bi)
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        const auto [exact, s, sum_abs] = exact_dot(c, o, bi, i, j);
        const int64_t at = (bi * c.m + i) * c.n + j;
        const double b = f.bias == Bias::kFull ? bv[at] : f.bias == Bias::kVector ? bv[j] : bv[0];
        const double x = exact + b, want = activation_f64(f.act, x);
        const double dot_bound = error_bound(bf16, c.k, s, sum_abs);
        const double pre_fused = dot_bound + u32 * (std::abs(x) + dot_bound);
        const double pre_unfused = dot_bound + (u + u32) * (std::abs(x) + dot_bound) + e;
        const double fused_bound = activation_bound(f.act, pre_fused, want);
        const double unfused_bound = activation_bound(f.act, pre_unfused, want);
        const double fused_err = std::abs(r.fused[at] - want);
        const double apart = std::abs(r.fused[at] - r.unfused[at]);
        worst = std::max(worst, fused_err / fused_bound);
        if ((fused_err > fused_bound || apart > fused_bound + unfused_bound ||
             std::abs(r.unfused[at] - want) > unfused_bound) &&
            reported++ < 3) {
          ADD_FAILURE() << f.str() << " on " << path << ": element " << at << " fused "
                        << r.fused[at] << ", unfused " << r.unfused[at] << ", f64 reference "
                        << want << "; bounds " << fused_bound << " (fused), " << unfused_bound
                        << " (unfused)";
        }
      }
  return worst;
}

std::vector<FusedCase> fused_cases() {
  const Case gemms[] = {{1, 257, 784, 128},
                        {1, 70, 200, 45, true, false},
                        {2, 33, 17, 24, false, true},
                        {1, 5, 1, 3},
                        {1, 64, 300, 10, true, true}};
  std::vector<FusedCase> out;
  for (const Case& c : gemms)
    for (Bias b : {Bias::kNone, Bias::kScalar, Bias::kVector, Bias::kFull})
      for (const char* act : {"none", "relu", "tanh", "logistic"}) {
        if (b == Bias::kNone && std::string(act) == "none") continue;  // no epilogue
        out.push_back({c, b, act});
      }
  return out;
}

// On a host with a bf16 unit the fused matmul runs in one oneDNN kernel (with a scalar or vector
// bias; a full one, which oneDNN 2.6's bf16 matmul declines and the epilogue pass never fuses,
// takes the fallback) within the bound of the unfused ops; switched off, the fallback gives the
// unfused ops' bits.
TEST(LowpMatmul, Bf16FusedDotWithinBoundOfUnfusedOps) {
  std::mt19937 rng(23);
  const bool onednn = expect_onednn(bf16);
  double worst = 0, worst_fallback = 0;
  int in_one_kernel = 0, cases = 0;
  for (const FusedCase& f : fused_cases()) {
    const Operands o = random_operands(f.gemm, rng);
    const Tensor bias = random_bias(f, rng);
    const int64_t before = ops::onednn::fused_matmul_count();
    const FusedResult r = fused_and_unfused(f, o, bias);
    const bool one_kernel = ops::onednn::fused_matmul_count() == before + 1;
    ++cases;
    in_one_kernel += one_kernel;
    EXPECT_EQ(one_kernel, onednn && f.bias != Bias::kFull) << f.str();
    worst = std::max(worst, check_fused(f, o, bias, r, one_kernel ? "oneDNN" : "the fallback"));
    const FusedResult off = with_onednn(false, [&] { return fused_and_unfused(f, o, bias); });
    EXPECT_EQ(off.fused, off.unfused)
        << f.str() << ": the fallback differs from dot, add, " << f.act;
    worst_fallback =
        std::max(worst_fallback, check_fused(f, o, bias, off, "the fallback (switched off)"));
  }
  std::cout << "[ path     ] bf16 fused_dot: " << in_one_kernel << " of " << cases
            << " cases in one oneDNN kernel (" << ops::onednn::matmul_path(bf16)
            << "); worst error / bound " << worst << ", fallback " << worst_fallback << "\n";
}

// Compiled, a bf16 dense layer relu(x w + b) becomes one fused_dot kernel thunk, served by one
// oneDNN matmul where the host has a bf16 unit, within the bound of the interpreter's dot, add
// and relu.
TEST(LowpMatmul, CompiledBf16DenseLayerIsOneKernel) {
  std::mt19937 rng(29);
  const FusedCase f{{1, 96, 784, 128}, Bias::kVector, "relu"};
  const Operands o = random_operands(f.gemm, rng);
  const Tensor bias = random_bias(f, rng);
  Graph g("bf16_dense");
  Tensor px = g.placeholder(bf16, {96, 784}, "x"), pw = g.placeholder(bf16, {784, 128}, "w");
  Tensor pb = g.placeholder(bf16, {128}, "b");
  Tensor y = relu(matmul(px, pw) + pb);
  const FeedList feeds = {{px, reshape(stored(o.a, 1, 96, 784, false, bf16), {96, 784})},
                          {pw, reshape(stored(o.b, 1, 784, 128, false, bf16), {784, 128})},
                          {pb, bias}};
  const std::vector<float> interpreted = convert(g.run(feeds, y), f32).to_vector<float>();
  compiler::Executable exe = compiler::compile(g, {y}, feeds);
  std::string thunks;
  for (const std::string& t : exe.thunk_descriptions()) thunks += t + "\n";
  EXPECT_NE(thunks.find("kernel fused_dot"), std::string::npos) << thunks;
  const int64_t before = ops::onednn::fused_matmul_count();
  const std::vector<float> compiled = convert(exe.run(feeds)[0], f32).to_vector<float>();
  EXPECT_EQ(ops::onednn::fused_matmul_count() - before, expect_onednn(bf16) ? 1 : 0);
  check_fused(f, o, bias, {compiled, interpreted}, "compiled");
}

}  // namespace
}  // namespace kiln
