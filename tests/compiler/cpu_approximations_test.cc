// Accuracy of the f32 approximations as the CPU code generator emits them (exp, log, tanh,
// logistic, erf: ops/approximations.h, instantiated over LLVM IR): each is run over a dense sweep
// of float bit patterns (every input magnitude from the subnormals up, so around 0, near overflow and into
// the subnormal results) and compared with the std:: function in double. The bounds are stated
// per function: max error in ulps of the correctly rounded f32 result (subnormal results
// included) and max relative error over normal results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "compiler/cpu/fused_kernel.h"
#include "kiln/kiln.h"

namespace kiln::compiler::cpu {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Every `stride`-th float in [lo, hi] (by bit pattern: as dense in relative terms near 0 as far
// from it), both ends included.
std::vector<float> sweep(float lo, float hi, uint32_t stride) {
  std::vector<float> xs = {lo, hi, 0.0f, -0.0f};
  auto walk = [&](float a, float b) {  // 0 <= a <= b, walk magnitudes
    uint32_t ua, ub;
    std::memcpy(&ua, &a, 4);
    std::memcpy(&ub, &b, 4);
    for (uint64_t u = ua; u <= ub; u += stride) xs.push_back(from_bits(static_cast<uint32_t>(u)));
  };
  if (hi > 0) walk(std::max(lo, 0.0f), hi);
  if (lo < 0) {
    size_t first = xs.size();
    walk(std::max(-hi, 0.0f), -lo);
    for (size_t i = first; i < xs.size(); ++i) xs[i] = -xs[i];
  }
  return xs;
}

// The spacing of floats at |v| (v a float value): 2^-149 among the subnormals.
double ulp_of(float v) {
  float a = std::abs(v);
  if (a < std::numeric_limits<float>::min()) return std::ldexp(1.0, -149);
  int e;
  std::frexp(a, &e);
  return std::ldexp(1.0, e - 24);
}

struct Measured {
  double max_ulp = 0, max_rel = 0, ulp_at = 0, rel_at = 0;
};

// op(x), or with `gaussian` e^(-(x*x)) (the emitter's exp for arguments known to be <= 0).
Measured measure(EltOp op, const std::vector<float>& xs, double (*ref)(double),
                 bool gaussian = false) {
  FusedSubgraph sg;
  int x = sg.add_input(f32, {static_cast<int64_t>(xs.size())});
  sg.add_output(gaussian ? sg.add(op, {sg.add(EltOp::kNeg, {sg.add(EltOp::kMul, {x, x})})})
                         : sg.add(op, {x}));
  std::vector<float> y =
      compile_elementwise(sg).run({Tensor::from_vector(xs)})[0].to_vector<float>();
  Measured m;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double r = ref(xs[i]);
    const float rf = static_cast<float>(r);
    if (std::isnan(r)) {
      EXPECT_TRUE(std::isnan(y[i])) << elt_op_name(op) << "(" << xs[i] << ")";
      continue;
    }
    if (std::isinf(rf)) {  // overflowed in f32: so must the approximation
      EXPECT_EQ(y[i], rf) << elt_op_name(op) << "(" << xs[i] << ")";
      continue;
    }
    const double err = std::abs(static_cast<double>(y[i]) - r);
    const double ulps = err / ulp_of(rf);
    if (ulps > m.max_ulp) m.max_ulp = ulps, m.ulp_at = xs[i];
    if (std::abs(rf) >= std::numeric_limits<float>::min()) {
      const double rel = err / std::abs(r);
      if (rel > m.max_rel) m.max_rel = rel, m.rel_at = xs[i];
    }
  }
  return m;
}

TEST(CpuApproximations, MaxErrorOverDenseSweeps) {
  struct Case {
    EltOp op;
    float lo, hi;
    double (*ref)(double);
    double ulp_bound, rel_bound;
    bool gaussian = false;
  };
  // Bounds: the measured maxima (printed) with a little room; the exhaustive sweeps of
  // tests/ops/approximations_test.cc assert docs/numerics.md's bounds.
  const Case cases[] = {
      // Down to the subnormal results and the underflow to 0 (-104), up to the overflow to inf.
      {EltOp::kExp, -110.0f, 90.0f, [](double x) { return std::exp(x); }, 1, 1e-7},
      // Every positive float, subnormals included; negatives give NaN.
      {EltOp::kLog, -1.0f, std::numeric_limits<float>::max(), [](double x) { return std::log(x); },
       4, 2e-7},
      {EltOp::kTanh, -12.0f, 12.0f, [](double x) { return std::tanh(x); }, 8, 5e-7},
      // Tails into the subnormals (e^x below -87.3).
      {EltOp::kLogistic, -110.0f, 110.0f, [](double x) { return 1 / (1 + std::exp(-x)); }, 2.5,
       2e-7},
      {EltOp::kErf, -6.0f, 6.0f, [](double x) { return std::erf(x); }, 8, 5e-7},
      // e^(-x^2) down to the subnormals; the reference rounds x*x to f32 first, as the kernel.
      {EltOp::kExp, -11.0f, 11.0f,
       [](double x) { return std::exp(-static_cast<double>(static_cast<float>(x * x))); }, 1,
       1e-7, /*gaussian=*/true},
  };
  for (const Case& c : cases) {
    Measured m = measure(c.op, sweep(c.lo, c.hi, 97), c.ref, c.gaussian);
    std::printf("  %-8s%s on [%g, %g]: max %.2f ulp (at x = %.9g), max relative %.3g (at x = %.9g)\n",
                elt_op_name(c.op), c.gaussian ? "(-x*x)" : "", c.lo, c.hi, m.max_ulp, m.ulp_at, m.max_rel, m.rel_at);
    EXPECT_LE(m.max_ulp, c.ulp_bound) << elt_op_name(c.op);
    EXPECT_LE(m.max_rel, c.rel_bound) << elt_op_name(c.op);
  }
}

}  // namespace
}  // namespace kiln::compiler::cpu
