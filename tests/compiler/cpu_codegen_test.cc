// The CPU loop-fusion codegen (compiler/cpu): each compiled kernel is compared with the
// reference interpreter running the same ops as a kiln::Graph, per op and dtype, with
// broadcasting, long chains, odd and zero sizes, [begin, end) splits, special values and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "compiler/cpu/fused_kernel.h"
#include "compiler/cpu/fusion_target.h"
#include "kiln/kiln.h"

namespace kiln::compiler::cpu {
namespace {

using testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Tol {
  double rtol = 0;
  double atol = 0;
};
constexpr Tol kExact{0, 0};
// The inline f32 approximations (exp, log, tanh, logistic, erf): measured max relative error is
// below 1e-6 (ApproximationError); 2e-6 leaves room for the input's rounding.
constexpr Tol kApproxF32{2e-6, 1e-37};
// libm calls from the kernel: the same functions the interpreter calls.
constexpr Tol kLibm{1e-15, 0};

Tensor random_tensor(DType t, const Shape& s, double lo, double hi, uint32_t seed) {
  std::mt19937 gen(seed);
  int64_t n = num_elements(s);
  std::vector<double> v(n);
  if (t == bool_) {
    std::bernoulli_distribution d(0.5);
    for (auto& x : v) x = d(gen);
  } else if (t == i32 || t == i64 || t == u8 || t == i8) {
    std::uniform_int_distribution<int64_t> d(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
    for (auto& x : v) x = static_cast<double>(d(gen));
  } else {
    std::uniform_real_distribution<double> d(lo, hi);
    for (auto& x : v) x = d(gen);
  }
  return Tensor::from_vector(v, s).to(t);
}

// Builds the same computation as a FusedSubgraph and as a recorded Graph, then compares.
struct Case {
  FusedSubgraph sg;
  Graph g{"reference"};
  std::vector<Tensor> syms, values, placeholders;
  std::vector<Tensor> fetches;

  int input(Tensor value) {
    int id = sg.add_input(value.dtype(), value.shape());
    Tensor p = g.placeholder(value.dtype(), value.shape(), "in" + std::to_string(id));
    placeholders.push_back(p);
    syms.push_back(p);
    values.push_back(value);
    return id;
  }
  int input(DType t, Shape s, double lo = -4, double hi = 4, uint32_t seed = 1) {
    return input(random_tensor(t, s, lo, hi, seed + 7919 * static_cast<uint32_t>(values.size())));
  }
  int op(EltOp op, std::vector<int> args, DType to = f32) {
    std::vector<Tensor> a;
    for (int i : args) a.push_back(syms[i]);
    syms.push_back(reference(op, a, to));
    return sg.add(op, std::move(args), to);
  }
  void output(int v) {
    sg.add_output(v);
    fetches.push_back(syms[v]);
  }

  static Tensor reference(EltOp op, const std::vector<Tensor>& a, DType to) {
    switch (op) {
      case EltOp::kNeg: return kiln::neg(a[0]);
      case EltOp::kAbs: return kiln::abs(a[0]);
      case EltOp::kExp: return kiln::exp(a[0]);
      case EltOp::kLog: return kiln::log(a[0]);
      case EltOp::kLog1p: return kiln::log1p(a[0]);
      case EltOp::kExpm1: return kiln::expm1(a[0]);
      case EltOp::kSqrt: return kiln::sqrt(a[0]);
      case EltOp::kRsqrt: return kiln::rsqrt(a[0]);
      case EltOp::kTanh: return kiln::tanh(a[0]);
      case EltOp::kLogistic: return kiln::logistic(a[0]);
      case EltOp::kSin: return kiln::sin(a[0]);
      case EltOp::kCos: return kiln::cos(a[0]);
      case EltOp::kErf: return kiln::erf(a[0]);
      case EltOp::kSign: return kiln::sign(a[0]);
      case EltOp::kFloor: return kiln::floor(a[0]);
      case EltOp::kCeil: return kiln::ceil(a[0]);
      case EltOp::kRound: return kiln::round(a[0]);
      case EltOp::kConvert: return kiln::convert(a[0], to);
      case EltOp::kAdd: return kiln::add(a[0], a[1]);
      case EltOp::kSub: return kiln::sub(a[0], a[1]);
      case EltOp::kMul: return kiln::mul(a[0], a[1]);
      case EltOp::kDiv: return kiln::div(a[0], a[1]);
      case EltOp::kPow: return kiln::pow(a[0], a[1]);
      case EltOp::kMax: return kiln::maximum(a[0], a[1]);
      case EltOp::kMin: return kiln::minimum(a[0], a[1]);
      case EltOp::kEq: return kiln::equal(a[0], a[1]);
      case EltOp::kNe: return kiln::not_equal(a[0], a[1]);
      case EltOp::kLt: return kiln::less(a[0], a[1]);
      case EltOp::kLe: return kiln::less_equal(a[0], a[1]);
      case EltOp::kGt: return kiln::greater(a[0], a[1]);
      case EltOp::kGe: return kiln::greater_equal(a[0], a[1]);
      case EltOp::kSelect: return kiln::where(a[0], a[1], a[2]);
      case EltOp::kClamp: return kiln::clamp(a[0], a[1], a[2]);
    }
    return {};
  }

  std::vector<Tensor> expected() const {
    FeedList feeds;
    for (size_t i = 0; i < values.size(); ++i) feeds.push_back({placeholders[i], values[i]});
    return g.run(feeds, fetches);
  }

  // Compiles, runs on the pool and compares every output with the interpreter.
  FusedKernel check(Tol tol, const std::string& what = "") {
    FusedKernel k = compile_elementwise(sg);
    std::vector<Tensor> got = k.run(values);
    std::vector<Tensor> want = expected();
    for (size_t o = 0; o < got.size(); ++o) compare(got[o], want[o], tol, what);
    return k;
  }

  static void compare(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    ASSERT_EQ(got.shape(), want.shape()) << what;
    std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
    int bad = 0;
    for (size_t i = 0; i < g.size() && bad < 5; ++i) {
      bool ok;
      if (std::isnan(w[i])) {
        ok = std::isnan(g[i]);
      } else if (std::isinf(w[i])) {
        ok = g[i] == w[i];
      } else {
        ok = std::abs(g[i] - w[i]) <= tol.atol + tol.rtol * std::abs(w[i]);
      }
      if (!ok) {
        ++bad;
        ADD_FAILURE() << what << " element " << i << ": got " << g[i] << ", want " << w[i]
                      << " (rel err " << std::abs(g[i] - w[i]) / std::abs(w[i]) << ")";
      }
    }
  }
};

bool is_approximated(EltOp op) {
  return op == EltOp::kExp || op == EltOp::kLog || op == EltOp::kTanh ||
         op == EltOp::kLogistic || op == EltOp::kErf;
}

Tol unary_tol(EltOp op, DType t) {
  if (t == f32 && is_approximated(op)) return kApproxF32;
  switch (op) {
    case EltOp::kExp: case EltOp::kLog: case EltOp::kTanh: case EltOp::kLogistic:
    case EltOp::kErf: case EltOp::kSin: case EltOp::kCos: case EltOp::kLog1p:
    case EltOp::kExpm1:
      return kLibm;
    default:
      return kExact;
  }
}

std::pair<double, double> unary_range(EltOp op) {
  switch (op) {
    case EltOp::kLog: case EltOp::kSqrt: case EltOp::kRsqrt: return {1e-3, 50};
    case EltOp::kLog1p: return {-0.99, 20};
    case EltOp::kExp: case EltOp::kExpm1: return {-30, 30};
    case EltOp::kTanh: case EltOp::kLogistic: return {-12, 12};
    default: return {-5, 5};
  }
}

const EltOp kFloatUnary[] = {EltOp::kNeg,  EltOp::kAbs,   EltOp::kExp,  EltOp::kLog,
                             EltOp::kLog1p, EltOp::kExpm1, EltOp::kSqrt, EltOp::kRsqrt,
                             EltOp::kTanh, EltOp::kLogistic, EltOp::kSin, EltOp::kCos,
                             EltOp::kErf,  EltOp::kSign,  EltOp::kFloor, EltOp::kCeil,
                             EltOp::kRound};

TEST(CpuCodegen, OpNames) {
  EXPECT_STREQ(elt_op_name(EltOp::kMax), "max");
  EXPECT_EQ(prim_from_name("logistic"), EltOp::kLogistic);
  EXPECT_EQ(prim_from_name("select"), EltOp::kSelect);
  EXPECT_FALSE(prim_from_name("dot").has_value());
  EXPECT_EQ(elt_op_arity(EltOp::kClamp), 3);
}

TEST(CpuCodegen, UnaryFloatOps) {
  for (DType t : {f32, f64}) {
    for (EltOp op : kFloatUnary) {
      Case c;
      auto [lo, hi] = unary_range(op);
      int x = c.input(t, {3, 37}, lo, hi);
      c.output(c.op(op, {x}));
      c.check(unary_tol(op, t), std::string(elt_op_name(op)) + " " + dtype_name(t));
    }
  }
}

TEST(CpuCodegen, UnaryIntegerOps) {
  for (DType t : {i32, i64}) {
    for (EltOp op : {EltOp::kNeg, EltOp::kAbs, EltOp::kSign}) {
      Case c;
      int x = c.input(t, {5, 19}, -100, 100);
      c.output(c.op(op, {x}));
      c.check(kExact, std::string(elt_op_name(op)) + " " + dtype_name(t));
    }
  }
}

// Special values through every f32/f64 unary op: NaN, infinities, signed zeros, subnormals,
// overflow and underflow of exp.
TEST(CpuCodegen, UnarySpecialValues) {
  std::vector<double> v = {0.0, -0.0, 1.0, -1.0, kInf, -kInf, kNaN, 1e-40, -1e-40, 0.5, 2.5,
                           -2.5, 88.5, 89.0, -87.0, -100.0, -104.5, 200.0, -200.0, 1e30,
                           0.625, -0.625, 4.0, -4.0, 9.0, 3e-5};
  for (DType t : {f32, f64}) {
    for (EltOp op : kFloatUnary) {
      Case c;
      int x = c.input(Tensor::from_vector(v).to(t));
      c.output(c.op(op, {x}));
      c.check(unary_tol(op, t), std::string("special ") + elt_op_name(op) + " " + dtype_name(t));
    }
  }
}

// The properties asked of the approximations, stated directly (not against the interpreter).
TEST(CpuCodegen, ApproximationsAtTheEdges) {
  auto run1 = [](EltOp op, std::vector<float> xs) {
    FusedSubgraph sg;
    int x = sg.add_input(f32, {static_cast<int64_t>(xs.size())});
    sg.add_output(sg.add(op, {x}));
    return compile_elementwise(sg).run({Tensor::from_vector(xs)})[0].to_vector<float>();
  };
  auto e = run1(EltOp::kExp, {100.f, 89.f, -200.f, 0.f, INFINITY, -INFINITY, NAN});
  EXPECT_EQ(e[0], INFINITY);
  EXPECT_EQ(e[1], INFINITY);
  EXPECT_EQ(e[2], 0.f);
  EXPECT_EQ(e[3], 1.f);
  EXPECT_EQ(e[4], INFINITY);
  EXPECT_EQ(e[5], 0.f);
  EXPECT_TRUE(std::isnan(e[6]));
  auto l = run1(EltOp::kLog, {0.f, -0.f, -1.f, INFINITY, 1.f, NAN, 1e-45f});
  EXPECT_EQ(l[0], -INFINITY);
  EXPECT_EQ(l[1], -INFINITY);
  EXPECT_TRUE(std::isnan(l[2]));
  EXPECT_EQ(l[3], INFINITY);
  EXPECT_EQ(l[4], 0.f);
  EXPECT_TRUE(std::isnan(l[5]));
  EXPECT_NEAR(l[6], std::log(static_cast<double>(1e-45f)), 1e-4);  // the smallest subnormal
  auto th = run1(EltOp::kTanh, {20.f, -20.f, INFINITY, -INFINITY, 0.f, NAN});
  EXPECT_EQ(th[0], 1.f);
  EXPECT_EQ(th[1], -1.f);
  EXPECT_EQ(th[2], 1.f);
  EXPECT_EQ(th[3], -1.f);
  EXPECT_EQ(th[4], 0.f);
  EXPECT_TRUE(std::isnan(th[5]));
  auto lg = run1(EltOp::kLogistic, {INFINITY, -INFINITY, 0.f, 100.f, -100.f, NAN});
  EXPECT_EQ(lg[0], 1.f);
  EXPECT_EQ(lg[1], 0.f);
  EXPECT_EQ(lg[2], 0.5f);
  EXPECT_EQ(lg[3], 1.f);
  EXPECT_NEAR(lg[4], std::exp(-100.0), 1.5e-45);  // a subnormal: within one ulp
  EXPECT_TRUE(std::isnan(lg[5]));
  auto er = run1(EltOp::kErf, {INFINITY, -INFINITY, 0.f, 10.f, NAN});
  EXPECT_NEAR(er[0], 1.f, 1e-7);
  EXPECT_NEAR(er[1], -1.f, 1e-7);
  EXPECT_EQ(er[2], 0.f);
  EXPECT_NEAR(er[3], 1.f, 1e-7);
  EXPECT_TRUE(std::isnan(er[4]));
}

// Max relative error of the inline f32 approximations against double-precision libm over a
// dense sweep (printed; this is the documented accuracy).
TEST(CpuCodegen, ApproximationError) {
  struct Sweep {
    EltOp op;
    double lo, hi;
    double (*ref)(double);
  };
  const Sweep sweeps[] = {
      {EltOp::kExp, -87, 88.5, [](double x) { return std::exp(x); }},
      {EltOp::kLog, 1e-30, 1e30, [](double x) { return std::log(x); }},
      {EltOp::kTanh, -10, 10, [](double x) { return std::tanh(x); }},
      {EltOp::kLogistic, -80, 80, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {EltOp::kErf, -5, 5, [](double x) { return std::erf(x); }},
  };
  const int n = 1 << 20;
  for (const Sweep& s : sweeps) {
    std::vector<float> xs(n);
    for (int i = 0; i < n; ++i) {
      double u = static_cast<double>(i) / (n - 1);
      xs[i] = s.op == EltOp::kLog ? static_cast<float>(std::exp(std::log(s.lo) +
                                                                u * (std::log(s.hi) - std::log(s.lo))))
                                  : static_cast<float>(s.lo + u * (s.hi - s.lo));
    }
    FusedSubgraph sg;
    int x = sg.add_input(f32, {n});
    sg.add_output(sg.add(s.op, {x}));
    std::vector<float> y = compile_elementwise(sg).run({Tensor::from_vector(xs)})[0].to_vector<float>();
    double worst = 0, at = 0;
    for (int i = 0; i < n; ++i) {
      double r = s.ref(xs[i]);
      if (r == 0) continue;
      double err = std::abs(y[i] - r) / std::abs(r);
      if (err > worst) worst = err, at = xs[i];
    }
    std::printf("  %-8s on [%g, %g]: max relative error %.3g (at x = %.9g)\n", elt_op_name(s.op),
                s.lo, s.hi, worst, at);
    EXPECT_LT(worst, 1.5e-6) << elt_op_name(s.op);
  }
}

TEST(CpuCodegen, BinaryOpsWithBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 37}, {3, 37}}, {{3, 37}, {37}},      {{3, 1}, {1, 37}},       {{}, {3, 37}},
      {{4, 1, 5}, {3, 1}}, {{2, 3, 4, 5}, {3, 1, 1}}, {{5, 1, 3}, {5, 1, 1}}, {{2, 4, 3}, {2, 1, 3}}};
  const EltOp float_ops[] = {EltOp::kAdd, EltOp::kSub, EltOp::kMul, EltOp::kDiv,
                             EltOp::kPow, EltOp::kMax, EltOp::kMin};
  for (DType t : {f32, f64, i32, i64}) {
    bool fp = t == f32 || t == f64;
    for (EltOp op : float_ops) {
      if (!fp && op == EltOp::kPow) continue;
      for (const auto& [sa, sb] : shapes) {
        Case c;
        double lo = op == EltOp::kPow ? 0.1 : -6, hi = op == EltOp::kPow ? 3 : 6;
        int a = c.input(t, sa, lo, hi, 11);
        int b = c.input(t, sb, op == EltOp::kPow ? -3 : lo, hi, 12);
        c.output(c.op(op, {a, b}));
        c.check(op == EltOp::kPow ? kLibm : kExact, std::string(elt_op_name(op)) + " " +
                                                        dtype_name(t) + " " + shape_str(sa) +
                                                        " " + shape_str(sb));
      }
    }
  }
}

TEST(CpuCodegen, IntegerDivisionNeverTraps) {
  for (DType t : {i32, i64}) {
    Case c;
    int64_t mn = t == i32 ? std::numeric_limits<int32_t>::min()
                          : std::numeric_limits<int64_t>::min();
    int a = c.input(Tensor::from_vector(std::vector<int64_t>{7, -7, 0, mn, mn, 5, -9}).to(t));
    int b = c.input(Tensor::from_vector(std::vector<int64_t>{2, 2, 0, -1, 1, 0, -4}).to(t));
    c.output(c.op(EltOp::kDiv, {a, b}));
    c.check(kExact, std::string("div ") + dtype_name(t));
  }
}

TEST(CpuCodegen, CompareOps) {
  std::vector<double> va = {1, 2, 3, kNaN, kInf, -0.0, 5, kNaN};
  std::vector<double> vb = {1, 1, 4, 1, kInf, 0.0, kNaN, kNaN};
  for (DType t : {f32, f64, i32, i64}) {
    bool fp = t == f32 || t == f64;
    for (EltOp op : {EltOp::kEq, EltOp::kNe, EltOp::kLt, EltOp::kLe, EltOp::kGt, EltOp::kGe}) {
      {  // ties and broadcasting
        Case c;
        int a = c.input(t, {4, 9}, -2, 2, 3);
        int b = c.input(t, {9}, -2, 2, 4);
        int ar = fp ? c.op(EltOp::kRound, {a}) : a;
        int br = fp ? c.op(EltOp::kRound, {b}) : b;
        c.output(c.op(op, {ar, br}));
        c.check(kExact, std::string(elt_op_name(op)) + " " + dtype_name(t));
      }
      if (fp) {  // NaN, inf, signed zeros
        Case c;
        int a = c.input(Tensor::from_vector(va).to(t));
        int b = c.input(Tensor::from_vector(vb).to(t));
        c.output(c.op(op, {a, b}));
        c.check(kExact, std::string("special ") + elt_op_name(op) + " " + dtype_name(t));
      }
    }
  }
}

TEST(CpuCodegen, MaxMinPropagateNaN) {
  Case c;
  int a = c.input(Tensor::from_vector(std::vector<float>{1, NAN, 3, -0.f, NAN}));
  int b = c.input(Tensor::from_vector(std::vector<float>{NAN, 2, 1, 0.f, NAN}));
  c.output(c.op(EltOp::kMax, {a, b}));
  c.output(c.op(EltOp::kMin, {a, b}));
  c.check(kExact);
}

TEST(CpuCodegen, SelectAndClamp) {
  for (DType t : {f32, f64, i32, i64}) {
    Case c;
    int x = c.input(t, {6, 11}, -10, 10, 5);
    int y = c.input(t, {11}, -10, 10, 6);
    int pred = c.input(bool_, {6, 1}, 0, 1, 7);
    int lo = c.input(t, {}, -3, -3, 8);
    int hi = c.input(t, {6, 1}, 2, 5, 9);
    int gt = c.op(EltOp::kGt, {x, y});
    c.output(c.op(EltOp::kSelect, {gt, x, y}));
    c.output(c.op(EltOp::kSelect, {pred, x, y}));
    c.output(c.op(EltOp::kClamp, {x, lo, hi}));
    c.output(gt);
    c.check(kExact, std::string("select/clamp ") + dtype_name(t));
  }
}

// Every pair of the emitter's dtypes, and the 8-bit integers it only loads, stores and
// converts (u8 unsigned: 200 -> 200.0, 300.7 -> 255, -3 -> 0, i64 1000 -> 232).
TEST(CpuCodegen, ConvertAllPairs) {
  const DType types[] = {f32, f64, i32, i64, bool_, u8, i8};
  std::vector<double> v = {0.0,  -0.0, 1.5,   -1.5,      2.5, -7.9,  3e9,   -3e9, 1e20,  -1e20,
                           kNaN, kInf, -kInf, 12345.678, 1.0, 200.0, 300.7, -3.0, 127.9, -128.5};
  for (DType from : types) {
    for (DType to : types) {
      Case c;
      const int64_t lo = from == u8 ? 0 : from == i8 ? -128 : -1000;
      const int64_t hi = from == u8 ? 255 : from == i8 ? 127 : 1000;
      Tensor in =
          (from == i32 || from == i64 || from == bool_ || from == u8 || from == i8)
              ? random_tensor(from, {19}, static_cast<double>(lo), static_cast<double>(hi), 2)
              : Tensor::from_vector(v).to(from);
      int x = c.input(in);
      c.output(c.op(EltOp::kConvert, {x}, to));
      c.check(kExact, std::string("convert ") + dtype_name(from) + "->" + dtype_name(to));
    }
  }
}

// A 12-op chain with two outputs, over broadcast inputs (the row loop) and over full-shape
// and scalar inputs (the flat loop), at sizes around the vector widths.
TEST(CpuCodegen, TwelveOpChain) {
  auto build = [](Case& c, const Shape& xs, const Shape& as) {
    int x = c.input(f32, xs, -3, 3, 21);
    int a = c.input(f32, as, 0.5, 1.5, 22);
    int b = c.input(f32, {}, -0.5, 0.5, 23);
    int v1 = c.op(EltOp::kMul, {x, a});                 // 1
    int v2 = c.op(EltOp::kAdd, {v1, b});                // 2
    int v3 = c.op(EltOp::kTanh, {v2});                  // 3
    int v4 = c.op(EltOp::kLogistic, {x});               // 4
    int v5 = c.op(EltOp::kMul, {v3, v4});               // 5
    int v6 = c.op(EltOp::kMul, {x, x});                 // 6
    int v7 = c.op(EltOp::kNeg, {v6});                   // 7
    int v8 = c.op(EltOp::kExp, {v7});                   // 8
    int v9 = c.op(EltOp::kAdd, {v5, v8});               // 9
    int v10 = c.op(EltOp::kMax, {v9, b});               // 10
    int v11 = c.op(EltOp::kErf, {v10});                 // 11
    int v12 = c.op(EltOp::kGt, {v11, b});               // 12
    c.output(v11);
    c.output(v12);
  };
  for (int64_t n : {1, 7, 15, 16, 17, 31, 33, 63, 65, 1000, 100003}) {
    Case flat;
    build(flat, {n}, {n});
    FusedKernel k = flat.check(Tol{1e-5, 1e-6}, "flat chain n=" + std::to_string(n));
    EXPECT_TRUE(k.vectorizable_loop());
  }
  for (const auto& [xs, as] : std::vector<std::pair<Shape, Shape>>{
           {{5, 33}, {33}}, {{7, 3, 17}, {3, 1}}, {{1000, 129}, {129}}}) {
    Case rows;
    build(rows, xs, as);
    FusedKernel k = rows.check(Tol{1e-5, 1e-6}, "broadcast chain " + shape_str(xs));
    EXPECT_FALSE(k.vectorizable_loop());
  }
}

// The compare at the end of the chain above can flip where v11 is within rounding of b; the
// chain's bool output is compared exactly, so make sure it did not: also covered by exact
// arithmetic chains here.
TEST(CpuCodegen, ExactArithmeticChain) {
  for (DType t : {f32, f64, i32, i64}) {
    Case c;
    int x = c.input(t, {9, 45}, -20, 20, 31);
    int y = c.input(t, {45}, -20, 20, 32);
    int z = c.input(t, {9, 1}, 1, 9, 33);
    int v = c.op(EltOp::kMul, {x, y});
    v = c.op(EltOp::kAdd, {v, z});
    v = c.op(EltOp::kSub, {v, x});
    v = c.op(EltOp::kDiv, {v, z});
    v = c.op(EltOp::kAbs, {v});
    v = c.op(EltOp::kMax, {v, y});
    v = c.op(EltOp::kMin, {v, z});
    v = c.op(EltOp::kNeg, {v});
    v = c.op(EltOp::kSign, {v});
    v = c.op(EltOp::kMul, {v, x});
    int p = c.op(EltOp::kLt, {v, y});
    v = c.op(EltOp::kSelect, {p, v, y});
    c.output(v);
    c.output(c.op(EltOp::kConvert, {v}, f64));
    c.check(kExact, std::string("arith chain ") + dtype_name(t));
  }
}

TEST(CpuCodegen, ZeroSize) {
  for (const auto& [xs, ys] :
       std::vector<std::pair<Shape, Shape>>{{{0}, {0}}, {{0, 5}, {5}}, {{3, 0}, {3, 1}}}) {
    Case c;
    int x = c.input(f32, xs);
    int y = c.input(f32, ys);
    c.output(c.op(EltOp::kExp, {c.op(EltOp::kAdd, {x, y})}));
    FusedKernel k = c.check(kExact, "zero " + shape_str(xs));
    EXPECT_EQ(k.num_elements(), 0);
  }
}

// Calling the kernel on sub-ranges (as the thread pool does) gives the same result as one call;
// ranges start and end mid-row in the broadcast loop.
TEST(CpuCodegen, BeginEndSplits) {
  for (const auto& [xs, as] : std::vector<std::pair<Shape, Shape>>{
           {{1001}, {1001}}, {{1001}, {}}, {{13, 77}, {77}}, {{13, 77}, {13, 1}},
           {{2, 7, 9, 11}, {7, 1, 1}}, {{11, 1, 91}, {1, 1, 91}}}) {
    FusedSubgraph sg;
    int x = sg.add_input(f32, xs);
    int a = sg.add_input(f32, as);
    int v = sg.add(EltOp::kMul, {x, a});
    sg.add_output(sg.add(EltOp::kExp, {v}));
    sg.add_output(sg.add(EltOp::kLt, {v, x}));
    FusedKernel k = compile_elementwise(sg);
    std::vector<Tensor> in = {random_tensor(f32, xs, -2, 2, 1), random_tensor(f32, as, -2, 2, 2)};
    std::vector<Tensor> whole = k.run(in);
    int64_t n = k.num_elements();
    Tensor o0 = Tensor::empty(f32, k.shape()), o1 = Tensor::empty(bool_, k.shape());
    std::vector<void*> ins = {const_cast<void*>(in[0].raw_data()),
                              const_cast<void*>(in[1].raw_data())};
    std::vector<void*> outs = {o0.raw_mutable_data(), o1.raw_mutable_data()};
    std::vector<int64_t> cuts = {0, 1, 7, 40, 41, 76, 77, 78, 500, 999, n};
    for (size_t i = 0; i + 1 < cuts.size(); ++i) k.fn()(ins.data(), outs.data(), cuts[i], cuts[i + 1]);
    k.fn()(ins.data(), outs.data(), 5, 5);   // empty ranges write nothing
    k.fn()(ins.data(), outs.data(), 9, 3);
    EXPECT_EQ(o0.to_vector<float>(), whole[0].to_vector<float>()) << shape_str(xs);
    EXPECT_EQ(o1.to_vector<int>(), whole[1].to_vector<int>()) << shape_str(xs);
  }
}

// Buffer assignment may write an elementwise result over its input: every iteration reads and
// writes only its own element, so the (vectorized) kernel stays correct in place.
TEST(CpuCodegen, InPlace) {
  for (const auto& [xs, as] :
       std::vector<std::pair<Shape, Shape>>{{{1003}, {}}, {{9, 131}, {131}}}) {
    FusedSubgraph sg;
    int x = sg.add_input(f32, xs);
    int a = sg.add_input(f32, as);
    sg.add_output(sg.add(EltOp::kTanh, {sg.add(EltOp::kMul, {x, a})}));
    FusedKernel k = compile_elementwise(sg);
    std::vector<Tensor> in = {random_tensor(f32, xs, -2, 2, 3), random_tensor(f32, as, -2, 2, 4)};
    std::vector<float> want = k.run(in)[0].to_vector<float>();
    Tensor buf = in[0].to(f64).to(f32);  // a private copy
    std::vector<void*> ins = {buf.raw_mutable_data(), const_cast<void*>(in[1].raw_data())};
    std::vector<void*> outs = {buf.raw_mutable_data()};
    k.fn()(ins.data(), outs.data(), 0, k.num_elements());
    EXPECT_EQ(buf.to_vector<float>(), want) << shape_str(xs);
  }
}

TEST(CpuCodegen, RunWritesIntoGivenOutputs) {
  FusedSubgraph sg;
  int x = sg.add_input(f32, {4});
  sg.add_output(sg.add(EltOp::kNeg, {x}));
  FusedKernel k = compile_elementwise(sg);
  std::vector<Tensor> out = {Tensor::empty(f32, {4})};
  const void* before = out[0].raw_data();
  k.run({Tensor::from_vector(std::vector<float>{1, -2, 3, 0})}, &out);
  EXPECT_EQ(out[0].raw_data(), before);
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{-1, 2, -3, -0.f}));
}

TEST(CpuCodegen, Errors) {
  auto expect_error = [](auto fn, ErrorCode code, const std::string& substr) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected " << substr;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(substr));
    }
  };
  expect_error([] {
    FusedSubgraph sg;
    sg.add(EltOp::kExp, {sg.add_input(i32, {3})});
  }, ErrorCode::kUnimplemented, "exp: needs a floating-point operand, got i32");
  expect_error([] {
    FusedSubgraph sg;
    sg.add(EltOp::kAdd, {sg.add_input(f32, {3}), sg.add_input(f64, {3})});
  }, ErrorCode::kInvalidArgument, "add: dtype mismatch: f32 vs f64");
  expect_error([] {
    FusedSubgraph sg;
    int x = sg.add_input(f32, {3});
    sg.add(EltOp::kSelect, {x, x, x});
  }, ErrorCode::kInvalidArgument, "select: pred must be bool, got f32");
  expect_error([] {
    FusedSubgraph sg;
    sg.add(EltOp::kAdd, {sg.add_input(f32, {3})});
  }, ErrorCode::kInvalidArgument, "add takes 2 args, got 1");
  // What the CPU computes on is the target's question: the subgraph is built (typing only) and
  // compiling it refuses, as the CPU target's SubgraphBuilder refuses to build it.
  expect_error([] {  // 8-bit integers are loaded, stored and converted, not computed on
    FusedSubgraph sg;
    int x = sg.add_input(u8, {3});
    sg.add_output(sg.add(EltOp::kAdd, {x, x}));
    compile_elementwise(sg);
  }, ErrorCode::kUnimplemented, "add: dtype u8 is not supported");
  expect_error([] {  // f64 -> bf16 rounds once from the f64 in its kernel
    FusedSubgraph sg;
    sg.add_output(sg.add(EltOp::kConvert, {sg.add_input(f64, {3})}, bf16));
    compile_elementwise(sg);
  }, ErrorCode::kUnimplemented, "rounds once from the wide value");
  {
    FusedSubgraph sg;
    int x = sg.add_input(u8, {3});
    SubgraphBuilder b(sg, fusion_target());
    EXPECT_EQ(b.apply(EltOp::kAdd, {x, x}), ElementalBuilder::kRefused);
    EXPECT_EQ(b.refusal(), "add: dtype u8 is not supported");
    EXPECT_EQ(b.refusal_code(), ErrorCode::kUnimplemented);
    EXPECT_EQ(sg.nodes.size(), 0u);
    int y = b.apply(EltOp::kConvert, {x}, f32);  // loaded and converted: fine
    EXPECT_EQ(sg.dtype(y), f32);
  }
  expect_error([] {
    FusedSubgraph sg;
    int x = sg.add_input(f32, {3});
    int y = sg.add_input(f32, {4});
    sg.add_output(sg.add(EltOp::kAdd, {x, y}));
    compile_elementwise(sg);
  }, ErrorCode::kInvalidArgument, "input shapes do not broadcast: [3] vs [4]");
  expect_error([] {
    FusedSubgraph sg;
    sg.name = "my_fusion";
    int x = sg.add_input(f32, {3});
    sg.add_output(sg.add(EltOp::kNeg, {x}));
    compile_elementwise(sg).run({Tensor::from_vector(std::vector<float>{1, 2})});
  }, ErrorCode::kInvalidArgument,
     "cpu codegen (my_fusion): run: input 0 is f32[2], the kernel was compiled for f32[3]");
  expect_error([] {
    FusedSubgraph sg;
    sg.add_output(7);
    sg.add_input(f32, {3});
    compile_elementwise(sg);
  }, ErrorCode::kInvalidArgument, "value 7 out of range");
}

// KILN_DUMP writes the IR before and after optimisation and the assembly (of a kernel compiled
// on its own, in a subdirectory of its own); the optimised flat loop is vectorized, exp included
// (no calls in it).
TEST(CpuCodegen, DumpAndVectorization) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kiln_cpu_codegen_dump_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  setenv("KILN_DUMP", dir.c_str(), 1);
  FusedSubgraph sg;
  sg.name = "dumped";
  int x = sg.add_input(f32, {4096});
  int a = sg.add_input(f32, {});
  int v = sg.add(EltOp::kMul, {x, a});
  sg.add_output(sg.add(EltOp::kTanh, {sg.add(EltOp::kExp, {v})}));
  FusedKernel k = compile_elementwise(sg);
  unsetenv("KILN_DUMP");
  std::string ll, opt, s;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    std::string name = e.path().filename().string();
    if (name.ends_with(".opt.ll")) opt = ss.str();
    else if (name.ends_with(".ll")) ll = ss.str();
    else if (name.ends_with(".s")) s = ss.str();
  }
  fs::remove_all(dir);
  EXPECT_THAT(ll, HasSubstr("define void @kernel(ptr"));
  EXPECT_THAT(opt, HasSubstr("x float>"));       // vector types in the optimised loop
  for (const char* libm : {"@expf", "@tanhf", "@exp(", "@tanh("})  // no libm calls
    EXPECT_THAT(opt, testing::Not(HasSubstr(libm)));
  EXPECT_THAT(opt, testing::Not(HasSubstr("memcheck")));  // parallel_accesses: no alias checks
  EXPECT_THAT(s, HasSubstr("kernel:"));
  std::printf("  compile time of a small fused kernel: %.1f ms\n", k.compile_ms());
  EXPECT_LT(k.compile_ms(), 2000);
}

}  // namespace
}  // namespace kiln::compiler::cpu

namespace kiln::compiler::cpu {
namespace {

// Compile time of a small fused kernel (printed; the bound is loose for loaded CI machines).
TEST(CpuCodegen, CompileTime) {
  double best = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    FusedSubgraph sg;
    int x = sg.add_input(f32, {1 << 20});
    int a = sg.add_input(f32, {});
    int v = sg.add(EltOp::kAdd, {sg.add(EltOp::kMul, {x, a}), a});
    sg.add_output(sg.add(EltOp::kMax, {v, a}));
    best = std::min(best, compile_elementwise(sg).compile_ms());
  }
  std::printf("  max(x*a+a, a): best compile time %.1f ms\n", best);
  EXPECT_LT(best, 1000);
}

}  // namespace
}  // namespace kiln::compiler::cpu

// ---- reduction (input) fusion ----------------------------------------------------------------
namespace kiln::compiler::cpu {
namespace {

// Tolerances of fused f32 sums (accumulated in f32, reassociated over vector lanes) against the
// reference kernel (which sums f32 in double), for K positive summands each computed with
// relative error e: recursive summation bounds the relative error by (K - 1) u + e, u = 2^-24.
// Column kernels sum each column in order (K - 1 <= 300 here: 1.8e-5); row kernels split K over
// at least 16 lanes. 3e-5 covers both with the exp approximation (2e-6).
constexpr Tol kSumF32{3e-5, 0};

Tensor reference_reduce(ReduceKind k, const Tensor& x, const std::vector<int64_t>& axes) {
  Axes a(axes.begin(), axes.end());
  if (a.empty()) return call_op(reduce_kind_name(k), {x}, {{"axes", axes}})[0];
  switch (k) {
    case ReduceKind::kSum: return kiln::sum(x, a);
    case ReduceKind::kProd: return kiln::prod(x, a);
    case ReduceKind::kMax: return kiln::max(x, a);
    case ReduceKind::kMin: return kiln::min(x, a);
  }
  return {};
}

int reduce(Case& c, ReduceKind k, int v, std::vector<int64_t> axes) {
  c.syms.push_back(reference_reduce(k, c.syms[v], axes));
  return c.sg.add_reduce(k, v, std::move(axes));
}

// softmax's middle: e = exp(x - m) with m broadcast per row, and sum(e) over the row, one kernel
// with two outputs of different shapes.
TEST(CpuCodegenReduce, RowSumOfExpWithBroadcastAndMultiOutput) {
  for (const auto& [xs, ms] : std::vector<std::pair<Shape, Shape>>{
           {{7, 1000}, {7, 1}}, {{64, 10}, {64, 1}}, {{1, 3}, {1, 1}}, {{5, 33}, {}},
           {{3, 4, 129}, {3, 4, 1}}}) {
    Case c;
    int x = c.input(f32, xs, -4, 4);
    int m = c.input(f32, ms, -1, 1);
    int e = c.op(EltOp::kExp, {c.op(EltOp::kSub, {x, m})});
    c.output(e);
    c.output(reduce(c, ReduceKind::kSum, e, {static_cast<int64_t>(xs.size()) - 1}));
    FusedKernel k = c.check(kSumF32, "row sum " + shape_str(xs));
    EXPECT_EQ(k.output_type(0).shape, xs);
    EXPECT_EQ(k.parallel_size(), num_elements(xs) / xs.back());
    EXPECT_FALSE(k.in_place_safe());
  }
}

// Reductions over outer axes (column kernels) and over a middle run of axes.
TEST(CpuCodegenReduce, ColumnAndMiddleSums) {
  for (const auto& [xs, axes] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{300, 37}, {0}}, {{64, 128}, {0}}, {{3, 50, 17}, {1}}, {{2, 3, 5, 7}, {1, 2}},
           {{4, 1, 6}, {0, 1}}, {{8, 9}, {0, 1}}, {{1000}, {0}}, {{6, 5}, {}}}) {
    Case c;
    int x = c.input(f32, xs, -3, 3);
    int b = c.input(f32, {xs.back()}, -1, 1);  // broadcast along every outer axis
    int v = c.op(EltOp::kExp, {c.op(EltOp::kMul, {x, b})});
    c.output(reduce(c, ReduceKind::kSum, v, axes));
    c.output(v);
    c.check(kSumF32, "sum " + shape_str(xs) + " over " + shape_str(axes));
  }
}

TEST(CpuCodegenReduce, MaxMinProdPropagateNaNAndAreExact) {
  for (const auto& [xs, axes] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{9, 200}, {1}}, {{200, 9}, {0}}, {{4, 5, 6}, {1}}}) {
    for (ReduceKind kind : {ReduceKind::kMax, ReduceKind::kMin}) {
      Tensor xv = random_tensor(f32, xs, -50, 50, 5);
      std::vector<float> data = xv.to_vector<float>();
      data[3] = std::numeric_limits<float>::quiet_NaN();  // one NaN in the first output
      data[data.size() - 1] = -std::numeric_limits<float>::infinity();
      Case c;
      int x = c.input(Tensor::from_vector(data, xs));
      c.output(reduce(c, kind, c.op(EltOp::kAbs, {x}), axes));
      c.output(reduce(c, kind, x, axes));
      c.check(kExact, std::string(reduce_kind_name(kind)) + " " + shape_str(xs));
    }
    Case c;  // products of values near 1 (exactness is not expected: reassociated)
    int x = c.input(f32, xs, 0.99, 1.01);
    c.output(reduce(c, ReduceKind::kProd, x, axes));
    c.check({1e-5, 0}, "prod " + shape_str(xs));
  }
}

TEST(CpuCodegenReduce, IntegerAndF64) {
  {
    Case c;  // i32 sums wrap like the reference (which folds in 64 bits and narrows)
    int x = c.input(i32, {6, 300}, -2000000000, 2000000000);
    c.output(reduce(c, ReduceKind::kSum, x, {1}));
    c.output(reduce(c, ReduceKind::kMax, x, {1}));
    c.check(kExact, "i32 rows");
  }
  {
    Case c;
    int x = c.input(i64, {300, 6}, -1000, 1000);
    c.output(reduce(c, ReduceKind::kMin, c.op(EltOp::kMul, {x, x}), {0}));
    c.check(kExact, "i64 columns");
  }
  {
    Case c;
    int x = c.input(f64, {17, 513}, -1, 1);
    c.output(reduce(c, ReduceKind::kSum, c.op(EltOp::kMul, {x, x}), {1}));
    c.check({1e-13, 0}, "f64 rows");
  }
}

// Empty reductions give the identity; empty outputs write nothing.
TEST(CpuCodegenReduce, ZeroSizes) {
  for (const auto& [xs, axes] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{5, 0}, {1}}, {{0, 5}, {0}}, {{0, 5}, {1}}, {{3, 0, 2}, {1}}}) {
    Case c;
    int x = c.input(f32, xs);
    int e = c.op(EltOp::kExp, {x});
    c.output(reduce(c, ReduceKind::kSum, e, axes));
    c.output(reduce(c, ReduceKind::kMax, e, axes));
    c.check(kExact, "zero " + shape_str(xs));
  }
}

// The thread pool's [begin, end) splits, mid-row for column kernels.
TEST(CpuCodegenReduce, BeginEndSplits) {
  for (const auto& [xs, axes] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{50, 77}, {0}}, {{77, 50}, {1}}, {{3, 20, 33}, {1}}}) {
    FusedSubgraph sg;
    int x = sg.add_input(f32, xs);
    int v = sg.add(EltOp::kExp, {x});
    sg.add_output(sg.add_reduce(ReduceKind::kSum, v, axes));
    sg.add_output(v);
    FusedKernel k = compile_elementwise(sg);
    std::vector<Tensor> in = {random_tensor(f32, xs, -2, 2, 1)};
    std::vector<Tensor> whole = k.run(in);
    Tensor o0 = Tensor::empty(f32, k.output_type(0).shape), o1 = Tensor::empty(f32, xs);
    std::vector<void*> ins = {const_cast<void*>(in[0].raw_data())};
    std::vector<void*> outs = {o0.raw_mutable_data(), o1.raw_mutable_data()};
    int64_t n = k.parallel_size();
    std::vector<int64_t> cuts = {0, 1, 7, 40, 41, n / 2, n - 1, n};
    for (size_t i = 0; i + 1 < cuts.size(); ++i)
      k.fn()(ins.data(), outs.data(), cuts[i], std::max(cuts[i], cuts[i + 1]));
    EXPECT_EQ(o0.to_vector<float>(), whole[0].to_vector<float>()) << shape_str(xs);
    EXPECT_EQ(o1.to_vector<float>(), whole[1].to_vector<float>()) << shape_str(xs);
  }
}

// Few outputs over long reductions: run() splits the outermost reduced dimension into chunks
// folded in parallel and combined in order (the split depends only on the shape).
TEST(CpuCodegenReduce, LongReductionsAreSplitIntoChunks) {
  for (const auto& [xs, axes] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{1 << 20}, {0}}, {{100000, 4}, {0}}, {{3, 50000, 2}, {1}}, {{8, 300, 100}, {1, 2}}}) {
    Case c;
    int x = c.input(f32, xs, 0, 2);
    int e = c.op(EltOp::kExp, {x});
    c.output(reduce(c, ReduceKind::kSum, e, axes));
    c.output(reduce(c, ReduceKind::kMax, e, axes));
    c.output(e);
    // Sums of up to 1M positive terms in f32 (chunked, then lanes or columns): 1e-4 covers
    // (K / chunks) u for the column kernels' in-order folds.
    FusedKernel k = c.check({1e-4, 0}, "split " + shape_str(xs));
    EXPECT_GT(k.split_chunks(), 1) << shape_str(xs);
  }
  {
    Case c;  // integer sums wrap across chunks too; NaN in the last chunk propagates
    int x = c.input(i32, {400000}, -2000000000, 2000000000);
    c.output(reduce(c, ReduceKind::kSum, x, {0}));
    c.output(reduce(c, ReduceKind::kMin, x, {0}));
    EXPECT_GT(c.check(kExact, "i32 split").split_chunks(), 1);
  }
  {
    std::vector<float> v(300000, 1.0f);
    v[299999] = std::numeric_limits<float>::quiet_NaN();
    Case c;
    int x = c.input(Tensor::from_vector(v, {300000}));
    c.output(reduce(c, ReduceKind::kMax, x, {0}));
    c.output(reduce(c, ReduceKind::kMin, x, {0}));
    c.check(kExact, "NaN split");
  }
}

// Random shapes (with size-1 and broadcast dimensions), broadcast patterns of the inputs,
// reduced runs, reductions and output mixes, against the interpreter: the index arithmetic of
// the collapsed row and column loops.
TEST(CpuCodegenReduce, RandomShapesAndBroadcasts) {
  std::mt19937 rng(20261130);
  int checked = 0;
  for (int trial = 0; trial < 80; ++trial) {
    int rank = 1 + static_cast<int>(rng() % 4);
    Shape shape(rank);
    for (int64_t& d : shape) d = rng() % 4 == 0 ? 1 : 2 + static_cast<int64_t>(rng() % 6);
    // A random run of axes (any of them may be size 1).
    int a0 = static_cast<int>(rng() % rank);
    int a1 = a0 + static_cast<int>(rng() % (rank - a0));
    std::vector<int64_t> axes;
    for (int a = a0; a <= a1; ++a) axes.push_back(a);
    if (trial % 7 == 0) axes.clear();  // reducing nothing
    Case c;
    int x = c.input(f32, shape, -2, 2, trial);
    std::vector<int> vals = {x};
    for (int k = 0; k < 2; ++k) {  // broadcast operands: a suffix of the shape, some dims 1
      int r = static_cast<int>(rng() % (rank + 1));
      Shape s(shape.end() - r, shape.end());
      for (int64_t& d : s)
        if (rng() % 2) d = 1;
      vals.push_back(c.input(f32, s, -1, 1, trial * 7 + k));
    }
    int v = c.op(EltOp::kMul, {vals[0], vals[1]});
    v = c.op(EltOp::kAdd, {v, vals[2]});
    int e = c.op(EltOp::kExp, {v});
    ReduceKind kinds[] = {ReduceKind::kSum, ReduceKind::kMax, ReduceKind::kMin};
    c.output(reduce(c, kinds[rng() % 3], e, axes));
    if (rng() % 2) c.output(e);
    c.output(reduce(c, ReduceKind::kSum, v, axes));
    c.check({3e-5, 1e-5}, "random " + shape_str(shape) + " over " + shape_str(axes));
    ++checked;
  }
  EXPECT_EQ(checked, 80);
}

TEST(CpuCodegenReduce, Errors) {
  {
    FusedSubgraph sg;  // kept dimension between reduced ones
    int x = sg.add_input(f32, {2, 3, 4});
    sg.add_output(sg.add_reduce(ReduceKind::kSum, x, {0, 2}));
    try {
      compile_elementwise(sg);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
      EXPECT_THAT(e.what(), HasSubstr("not adjacent"));
    }
  }
  FusedSubgraph sg;
  int x = sg.add_input(f32, {2, 3});
  int r = sg.add_reduce(ReduceKind::kMax, x, {1});
  EXPECT_THROW(sg.add(EltOp::kNeg, {r}), Error);                     // a reduction used inside
  EXPECT_THROW(sg.add_reduce(ReduceKind::kSum, x, {0}), Error);      // other axes
  EXPECT_THROW(sg.add_reduce(ReduceKind::kSum, r, {1}), Error);      // a reduction of one
}

// The row sum and row max loops are vectorised (vector accumulators, no per-element libm).
TEST(CpuCodegenReduce, RowReductionsAreVectorized) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kiln_reduce_dump_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  setenv("KILN_DUMP", dir.c_str(), 1);
  for (ReduceKind kind : {ReduceKind::kSum, ReduceKind::kMax}) {
    FusedSubgraph sg;
    sg.name = std::string("row_") + reduce_kind_name(kind);
    int x = sg.add_input(f32, {64, 1024});
    sg.add_output(sg.add_reduce(kind, sg.add(EltOp::kExp, {x}), {1}));
    compile_elementwise(sg);
  }
  unsetenv("KILN_DUMP");
  int vectorized = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (!name.ends_with(".opt.ll")) continue;
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_THAT(ss.str(), HasSubstr("x float>")) << name;
    EXPECT_THAT(ss.str(), testing::Not(HasSubstr("@expf"))) << name;
    ++vectorized;
  }
  fs::remove_all(dir);
  EXPECT_EQ(vectorized, 2);
}

}  // namespace
}  // namespace kiln::compiler::cpu
