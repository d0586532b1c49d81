// The f32 approximations of transcendental functions, each written once over an arithmetic
// interface `M`: the reference kernels run them on floats (ScalarMath), the CPU code generator
// emits them as LLVM IR (compiler/llvm_ir/elemental_emitter.cc), so every path gives the
// same bits. Bounds and algorithms: docs/numerics.md, "f32 transcendental functions".
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

namespace kiln::ops {

// M provides V (an f32 value), I (an i32 value) and B (a comparison's result), and operations
// that each round once, as IEEE f32 arithmetic: c (a constant, rounded to nearest), fma (fused,
// never split), add, sub, mul, div, neg, abs; the ordered comparisons lt, gt, ge, eq and
// lt_or_nan (true where either is NaN); select; bits and from_bits (bitcasts); ci (an i32
// constant), shl, lshr, and_, or_, add_i, sub_i (i32 arithmetic, wrapping) and to_float
// (signed i32 to f32); inf, neg_inf and nan (the default quiet NaN).

// Plain floats. Products go through std::fma with a -0 addend (exactly the rounded product), so
// that the C++ compiler cannot contract a product and a later addition into one fma (GCC does,
// by default, even in ISO mode), which would round differently from the generated code.
struct ScalarMath {
  using V = float;
  using I = uint32_t;
  using B = bool;
  static V c(double v) { return static_cast<float>(v); }
  static I ci(uint32_t v) { return v; }
  static V fma(V a, V b, V c) { return std::fma(a, b, c); }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return std::fma(a, b, -0.0f); }
  static V div(V a, V b) { return a / b; }
  static V neg(V a) { return -a; }
  static V abs(V a) { return std::fabs(a); }
  static B lt(V a, V b) { return a < b; }
  static B gt(V a, V b) { return a > b; }
  static B ge(V a, V b) { return a >= b; }
  static B eq(V a, V b) { return a == b; }
  static B lt_or_nan(V a, V b) { return !(a >= b); }
  template <class T>
  static T select(B c, T a, T b) {
    return c ? a : b;
  }
  static I bits(V a) { return std::bit_cast<uint32_t>(a); }
  static V from_bits(I a) { return std::bit_cast<float>(a); }
  static I shl(I a, int n) { return a << n; }
  static I lshr(I a, int n) { return a >> n; }
  static I and_(I a, I b) { return a & b; }
  static I or_(I a, I b) { return a | b; }
  static I add_i(I a, I b) { return a + b; }
  static I sub_i(I a, I b) { return a - b; }
  static V to_float(I a) { return static_cast<float>(static_cast<int32_t>(a)); }
  static V inf() { return std::numeric_limits<float>::infinity(); }
  static V neg_inf() { return -std::numeric_limits<float>::infinity(); }
  static V nan() { return std::numeric_limits<float>::quiet_NaN(); }
};

namespace approx {

// Horner: ((c0 x + c1) x + c2) ..., one fma a step.
template <class M>
typename M::V poly(M& m, typename M::V x, std::initializer_list<double> cs) {
  typename M::V p = m.c(*cs.begin());
  for (auto it = cs.begin() + 1; it != cs.end(); ++it) p = m.fma(p, x, m.c(*it));
  return p;
}

// x, but `c` where x < c (NaN stays NaN).
template <class M>
typename M::V at_least(M& m, typename M::V x, double c) {
  return m.select(m.lt(x, m.c(c)), m.c(c), x);
}

// x, but `c` where x > c (NaN stays NaN).
template <class M>
typename M::V at_most(M& m, typename M::V x, double c) {
  return m.select(m.gt(x, m.c(c)), m.c(c), x);
}

}  // namespace approx

// e^x: x = n ln2 + r, |r| <= ln2/2 (Cody-Waite, two fmas); 2 e^r = 2 + r q(r), q of degree 5,
// a Chebyshev fit of (2e^r - 2)/r within 0.2 2^-24 relative (degree 4 was 1.6 2^-24 off, which
// made exp a 2-ulp function; one more fma costs nothing measurable). 2 e^r so that the scale
// 2^(n-1) stays normal up to n = 128. n comes from the "magic number" addition
// t = x log2(e) + (1.5 2^23 + 126): t's low mantissa bits are n + 126, so shifting t's bits
// left by 23 gives the exponent field of 2^(n-1) without a float-to-int conversion.
// Below x = -64 the scale is taken 2^64 higher and the result multiplied by 2^-64 (one
// rounding), so results reach the subnormals; x > 89 overflows to inf; NaN propagates
// through the arithmetic. `non_positive`: the caller knows x <= 0 (or NaN), so no upper clamp
// and no select: the scale is always 2^64 higher and the polynomial's coefficients 2^-64
// lower (exact), and their product rounds once, into the subnormals where it must: the same
// bits as without it.
template <class M>
typename M::V exp_f32(M& m, typename M::V x, bool non_positive = false) {
  auto xc = approx::at_least(m, x, -104.0);
  if (!non_positive) xc = approx::at_most(m, xc, 89.0);
  const double magic = 12582912.0 + 126.0 + (non_positive ? 64 : 0);
  auto t = m.fma(xc, m.c(1.44269504088896341), m.c(magic));
  auto n = m.sub(t, m.c(magic));
  auto r = m.fma(n, m.c(-0.693359375), xc);
  r = m.fma(n, m.c(2.12194440e-4), r);
  const double k = non_positive ? 0x1p-64 : 1.0;
  auto p = m.fma(approx::poly(m, r,
                              {k * 0.0027867282063973402, k * 0.016738296981712694,
                               k * 0.0833329300120801, k * 0.3333301052081625,
                               k * 1.0000000026915454, k * 2.00000002154314}),
                 r, m.c(k * 2.0));
  auto bits = m.bits(t);
  auto scaled = [&](typename M::I b) { return m.mul(p, m.from_bits(m.shl(b, 23))); };
  if (non_positive) return scaled(bits);
  auto tiny = m.lt(xc, m.c(-64.0));
  auto res = scaled(m.select(tiny, m.add_i(bits, m.ci(64)), bits));
  return m.select(tiny, m.mul(res, m.c(0x1p-64)), res);
}

// Cephes logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)); log(m) by a degree-9 polynomial in
// m - 1. Subnormals are scaled by 2^23 first.
template <class M>
typename M::V log_f32(M& m, typename M::V x) {
  auto sub = m.lt(x, m.c(1.17549435e-38));
  auto xs = m.select(sub, m.mul(x, m.c(8388608.0)), x);
  auto bits = m.bits(xs);
  auto e = m.sub_i(m.and_(m.lshr(bits, 23), m.ci(0xff)), m.ci(126));
  e = m.sub_i(e, m.select(sub, m.ci(23), m.ci(0)));
  auto mant = m.from_bits(m.or_(m.and_(bits, m.ci(0x807fffff)), m.ci(0x3f000000)));
  auto small = m.lt(mant, m.c(0.707106781186547524));
  auto ef = m.to_float(e);
  ef = m.select(small, m.sub(ef, m.c(1.0)), ef);
  auto mm = m.select(small, m.sub(m.add(mant, mant), m.c(1.0)), m.sub(mant, m.c(1.0)));
  auto z = m.mul(mm, mm);
  auto y = approx::poly(m, mm,
                        {7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1,
                         1.4249322787E-1, -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1,
                         3.3333331174E-1});
  y = m.mul(m.mul(y, mm), z);
  y = m.fma(ef, m.c(-2.12194440e-4), y);
  y = m.fma(z, m.c(-0.5), y);
  auto r = m.add(mm, y);
  r = m.fma(ef, m.c(0.693359375), r);
  r = m.select(m.eq(x, m.inf()), m.inf(), r);
  r = m.select(m.lt_or_nan(x, m.c(0.0)), m.nan(), r);
  return m.select(m.eq(x, m.c(0.0)), m.neg_inf(), r);
}

// tanh: x P(x^2) / Q(x^2), degrees 5 and 3 in x^2, fitted (relative minimax) on [0, 9]; the
// input is clamped to +-9.5, where the rational exceeds 1, and the result to [-1, 1], so
// tanh saturates to exactly +-1 (as it does in f32 beyond 9.01). -0 and NaN pass through.
// 5.7 ulps. A 1.4-ulp form (a + a^3 P(a^2) below 0.625, 1 - 2/(e^2a + 1) above, both computed
// and one selected) measured 1.27x the time of a compiled 16M-element tanh: not taken.
template <class M>
typename M::V tanh_f32(M& m, typename M::V x) {
  auto xc = approx::at_most(m, approx::at_least(m, x, -9.5), 9.5);
  auto z = m.mul(xc, xc);
  auto p = approx::poly(m, z,
                        {1.8254559986477081e-11, -1.2780241471919135e-8, 9.2673800261003616e-6,
                         0.0029207599788677168, 0.12919228144772925, 0.99999994167737014});
  auto q = approx::poly(m, z,
                        {0.00022809977175573354, 0.023763164983937633, 0.46252512202697823, 1.0});
  auto r = m.div(m.mul(xc, p), q);
  return approx::at_most(m, approx::at_least(m, r, -1.0), 1.0);
}

// 1/(1+e^-x) for x >= 0, e^x/(1+e^x) below: no overflow, accurate tails. One division of the
// selected numerator (1/(1+e) times e rounded once more: 3.9 ulps, against 2.4). What is left
// is exp's error: where e^x sits just above a power of two and the result just below it, an ulp
// of e^x is two of the result.
template <class M>
typename M::V logistic_f32(M& m, typename M::V x) {
  auto e = exp_f32(m, m.neg(m.abs(x)), /*non_positive=*/true);
  return m.div(m.select(m.ge(x, m.c(0.0)), m.c(1.0), e), m.add(m.c(1.0), e));  // 1 + e in [1, 2]
}

// Eigen's generic_fast_erf_float rational, x p(x^2)/q(x^2) on [-4, 4] (erf is +-1 in f32
// outside). 7.5 ulps. A 1-ulp form (a + a R(a^2) below 1, 1 - e^(-a^2 + P(a)) from 1 to 4)
// measured 1.59x the time of a compiled 16M-element erf: not taken.
template <class M>
typename M::V erf_f32(M& m, typename M::V x) {
  auto xc = approx::at_most(m, approx::at_least(m, x, -4.0), 4.0);
  auto x2 = m.mul(xc, xc);
  auto p = approx::poly(m, x2,
                        {-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                         -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                         -1.60960333262415e-02});
  auto q = approx::poly(m, x2,
                        {-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                         -7.37332916720468e-03, -1.42647390514189e-02});
  // x (p/q), not (x p)/q: x p would lose bits for tiny x (a subnormal product).
  return m.mul(xc, m.div(p, q));
}

// The scalar instances, as the reference kernels call them.
inline float exp_f32(float x) {
  ScalarMath m;
  return exp_f32(m, x);
}
inline float log_f32(float x) {
  ScalarMath m;
  return log_f32(m, x);
}
inline float tanh_f32(float x) {
  ScalarMath m;
  return tanh_f32(m, x);
}
inline float logistic_f32(float x) {
  ScalarMath m;
  return logistic_f32(m, x);
}
inline float erf_f32(float x) {
  ScalarMath m;
  return erf_f32(m, x);
}

}  // namespace kiln::ops
