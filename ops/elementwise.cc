// Elementwise primitives: unary math, binary arithmetic and comparisons (NumPy broadcasting,
// equal dtypes), select, clamp and convert, with their gradient rules; and the public
// functions that promote dtypes and mix in scalars before calling them.
#include <cmath>
#include <iomanip>
#include <limits>
#include <numbers>
#include <sstream>

#include "kiln/ops.h"
#include "ops/approximations.h"
#include "ops/kernel_util.h"
#include "ops/max_min.h"
#include "src/core/cpu_isa.h"
#include "src/core/float16_rounding.h"

namespace kiln {
namespace ops {
namespace {

// ---- shape functions --------------------------------------------------------------------

ShapeFn unary_shape(TypeSet set, bool bool_out = false) {
  return [set, bool_out](const InferContext& ctx) {
    require_dtype_in(ctx, 0, set);
    const TensorType& x = ctx.input(0);
    return std::vector<TensorType>{{bool_out ? bool_ : x.dtype, x.shape}};
  };
}

ShapeFn nary_shape(TypeSet set, bool bool_out = false) {
  return [set, bool_out](const InferContext& ctx) {
    require_same_dtype(ctx);
    require_dtype_in(ctx, 0, set);
    Shape shape = ctx.input(0).shape;
    for (int i = 1; i < ctx.num_inputs(); ++i)
      shape = broadcast_shapes(ctx, shape, ctx.input(i).shape);
    return std::vector<TensorType>{{bool_out ? bool_ : ctx.input(0).dtype, shape}};
  };
}

// ---- kernels ----------------------------------------------------------------------------

template <TypeSet S, bool kBoolOut = false, class F>
KernelFn unary_kernel(F f) {
  return [f](KernelContext& ctx) {
    visit_in<S>(ctx, ctx.input(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      using Out = std::conditional_t<kBoolOut, bool, T>;
      const T* x = in_ptr<T>(ctx, 0);
      Out* y = out_ptr<Out>(ctx.allocate_output(0));
      runtime::parallel_for(ctx.input(0).size(), 1 << 14, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y[i] = static_cast<Out>(f(static_cast<C>(x[i])));
      });
    });
  };
}

template <TypeSet S, bool kBoolOut = false, class F>
KernelFn binary_kernel(F f) {
  return [f](KernelContext& ctx) {
    visit_in<S>(ctx, ctx.input(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ComputeType<T>;
      using Out = std::conditional_t<kBoolOut, bool, T>;
      const T* a = in_ptr<T>(ctx, 0);
      const T* b = in_ptr<T>(ctx, 1);
      Tensor& out = ctx.allocate_output(0);
      Out* y = out_ptr<Out>(out);
      for_each_broadcast<2>(out.shape(), {ctx.input(0).shape(), ctx.input(1).shape()},
                            [&](int64_t i, const std::array<int64_t, 2>& o) {
                              y[i] = static_cast<Out>(f(static_cast<C>(a[o[0]]),
                                                        static_cast<C>(b[o[1]])));
                            });
    });
  };
}

// f32 computes with the approximation `f32_fn` the code generator also emits
// (ops/approximations.h), so small eager tensors, the interpreter, large eager tensors (JIT'd)
// and compiled graphs give the same bits; f64, f16 and bf16 with `fn` (the std:: function).
template <class F, class F32>
KernelFn approximated_kernel(F fn, F32 f32_fn) {
  KernelFn others = unary_kernel<TypeSet::kFloat>(fn);
  return [others, f32_fn](KernelContext& ctx) {
    if (ctx.input(0).dtype() != f32) return others(ctx);
    const float* x = in_ptr<float>(ctx, 0);
    float* y = out_ptr<float>(ctx.allocate_output(0));
    // Dispatched: on x86-64-v3 and up std::fma is one instruction rather than a libm call
    // (the baseline build has no fma); the bits are the same (elementwise.cc is compiled
    // without fp contraction, and fma rounds once either way).
    runtime::parallel_for(ctx.input(0).size(), 1 << 14, [&](int64_t b, int64_t e) {
      cpu::dispatch([&] {
        for (int64_t i = b; i < e; ++i) y[i] = f32_fn(x[i]);
      });
    });
  };
}

template <class T>
T logistic_of(T x) {
  if (x >= 0) return T(1) / (T(1) + std::exp(-x));
  T e = std::exp(x);
  return e / (T(1) + e);
}

// std::fabs for floats: |-0.0| is +0.0, as the compiled path's llvm.fabs gives (x < 0 ? -x : x
// kept -0.0, and an atan2 or a division downstream told the two modes apart).
template <class T>
T abs_of(T x) {
  if constexpr (std::is_floating_point_v<T>) return std::fabs(x);
  return x < T(0) ? static_cast<T>(-x) : x;
}

template <class T>
T sign_of(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x)) return x;
  }
  if constexpr (std::is_unsigned_v<T>) return x > 0 ? T(1) : T(0);
  return static_cast<T>((x > T(0)) - (x < T(0)));
}

// Integer division and remainder never trap: x / 0 is -1 (all ones for unsigned), x % 0 is
// x, and MIN / -1 wraps to MIN with remainder 0 (XLA's semantics).
template <class T>
T safe_div(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return a / b;
  } else {
    if (b == 0) return static_cast<T>(-1);
    if constexpr (std::is_signed_v<T>) {
      if (a == std::numeric_limits<T>::min() && b == T(-1)) return a;
    }
    return static_cast<T>(a / b);
  }
}

template <class T>
T safe_rem(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::fmod(a, b);
  } else {
    if (b == 0) return a;
    if constexpr (std::is_signed_v<T>) {
      if (b == T(-1)) return 0;
    }
    return static_cast<T>(a % b);
  }
}

template <class T>
T power(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::pow(a, b);
  } else {
    T result = 1;
    using U = std::make_unsigned_t<T>;
    U ua = static_cast<U>(a), ur = 1;  // wrap around like C unsigned arithmetic
    for (auto e = static_cast<std::make_unsigned_t<T>>(b); e; e >>= 1) {
      if (e & 1) ur = static_cast<U>(ur * ua);
      ua = static_cast<U>(ua * ua);
    }
    result = static_cast<T>(ur);
    return result;
  }
}

}  // namespace

// ---- registrations ----------------------------------------------------------------------

#define KILN_UNARY_OP(name, prim, set, expr)                                                \
  KILN_REGISTER_OP(name).input("x").elemental(Prim::prim).shape_fn(unary_shape(set));     \
  KILN_REGISTER_KERNEL(name).dtypes(dtypes_of(set)).fn(unary_kernel<set>([](auto x) {       \
    using C = decltype(x);                                                                   \
    (void)sizeof(C);                                                                         \
    return expr;                                                                             \
  }))

#define KILN_APPROXIMATED_OP(name, prim, expr)                                               \
  KILN_REGISTER_OP(name).input("x").elemental(Prim::prim).shape_fn(unary_shape(TypeSet::kFloat)); \
  KILN_REGISTER_KERNEL(name).dtypes(dtypes_of(TypeSet::kFloat)).fn(approximated_kernel(     \
      [](auto x) { return expr; }, [](float x) { return name##_f32(x); }))

#define KILN_BINARY_OP(name, prim, set, expr)                                                    \
  KILN_REGISTER_OP(name).input("x").input("y").elemental(Prim::prim).shape_fn(nary_shape(set));  \
  KILN_REGISTER_KERNEL(name).dtypes(dtypes_of(set)).fn(binary_kernel<set>([](auto x, auto y) {   \
    using C = decltype(x);                                                                        \
    (void)sizeof(C);                                                                              \
    return expr;                                                                                  \
  }))

#define KILN_COMPARE_OP(name, prim, expr)                                                    \
  KILN_REGISTER_OP(name)                                                                     \
      .input("x")                                                                            \
      .input("y")                                                                            \
      .elemental(Prim::prim)                                                                 \
      .non_differentiable()                                                                  \
      .shape_fn(nary_shape(TypeSet::kAll, /*bool_out=*/true));                               \
  KILN_REGISTER_KERNEL(name).fn(                                                             \
      binary_kernel<TypeSet::kAll, /*kBoolOut=*/true>([](auto x, auto y) { return expr; }))

constexpr TypeSet kF = TypeSet::kFloat;
constexpr TypeSet kN = TypeSet::kNumeric;
constexpr TypeSet kB = TypeSet::kBool;

KILN_UNARY_OP(neg, kNeg, kN, static_cast<C>(-x));
KILN_UNARY_OP(abs, kAbs, kN, abs_of(x));
KILN_APPROXIMATED_OP(exp, kExp, std::exp(x));
KILN_APPROXIMATED_OP(log, kLog, std::log(x));
KILN_UNARY_OP(log1p, kLog1p, kF, std::log1p(x));
KILN_UNARY_OP(expm1, kExpm1, kF, std::expm1(x));
KILN_UNARY_OP(sqrt, kSqrt, kF, std::sqrt(x));
KILN_UNARY_OP(rsqrt, kRsqrt, kF, C(1) / std::sqrt(x));
KILN_APPROXIMATED_OP(tanh, kTanh, std::tanh(x));
KILN_APPROXIMATED_OP(logistic, kLogistic, logistic_of(x));
KILN_UNARY_OP(sin, kSin, kF, std::sin(x));
KILN_UNARY_OP(cos, kCos, kF, std::cos(x));
KILN_UNARY_OP(tan, kTan, kF, std::tan(x));
KILN_APPROXIMATED_OP(erf, kErf, std::erf(x));
KILN_UNARY_OP(sign, kSign, kN, sign_of(x));
KILN_UNARY_OP(floor, kFloor, kF, std::floor(x));
KILN_UNARY_OP(ceil, kCeil, kF, std::ceil(x));
KILN_UNARY_OP(round, kRound, kF, std::nearbyint(x));  // default rounding mode: half to even
KILN_REGISTER_OP(logical_not)
    .input("x")
    .elemental(Prim::kNot)
    .non_differentiable()
    .shape_fn(unary_shape(kB));
KILN_REGISTER_KERNEL(logical_not).dtypes({bool_}).fn(unary_kernel<kB>([](bool x) { return !x; }));

KILN_REGISTER_OP(is_finite)
    .input("x")
    .elemental(Prim::kIsFinite)
    .non_differentiable()
    .shape_fn(unary_shape(kF, /*bool_out=*/true));
KILN_REGISTER_KERNEL(is_finite)
    .dtypes(dtypes_of(kF))
    .fn(unary_kernel<kF, /*kBoolOut=*/true>([](auto x) { return std::isfinite(x); }));

KILN_BINARY_OP(add, kAdd, kN, static_cast<C>(x + y));
KILN_BINARY_OP(sub, kSub, kN, static_cast<C>(x - y));
KILN_BINARY_OP(mul, kMul, kN, static_cast<C>(x * y));
KILN_BINARY_OP(div, kDiv, kN, safe_div(x, y));
// Integer pow refuses a negative exponent at run time, as NumPy does ("integers to negative
// integer powers are not allowed"), rather than returning 0 or +-1. Integer pow is never fused
// (the CPU codegen emits pow for floats only), so compiled code runs this kernel and refuses too.
KILN_REGISTER_OP(pow).input("x").input("y").elemental(Prim::kPow).shape_fn(nary_shape(kN));
KILN_REGISTER_KERNEL(pow).dtypes(dtypes_of(kN)).fn([](KernelContext& ctx) {
  visit_in<kN>(ctx, ctx.input(1).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      const Tensor& a = ctx.input(0);
      const Tensor& b = ctx.input(1);
      const T* e = in_ptr<T>(ctx, 1);
      const T* x = in_ptr<T>(ctx, 0);
      for (int64_t i = 0; i < b.size(); ++i) {
        if (e[i] >= 0) continue;
        // The base it meets, when the shapes match (a broadcast exponent meets many).
        std::string base = a.shape() == b.shape() ? " base " + std::to_string(int64_t{x[i]}) : "";
        ctx.fail(std::string("integers to negative integer powers are not allowed: ") +
                 dtype_name(b.dtype()) + base + " raised to negative exponent " +
                 std::to_string(int64_t{e[i]}) + "; convert to a float dtype first");
      }
    }
  });
  binary_kernel<kN>([](auto x, auto y) { return power(x, y); })(ctx);
});
KILN_BINARY_OP(max, kMax, kN, max_of(x, y));
KILN_BINARY_OP(min, kMin, kN, min_of(x, y));
KILN_BINARY_OP(rem, kRem, kN, safe_rem(x, y));
KILN_BINARY_OP(atan2, kAtan2, kF, std::atan2(x, y));
KILN_REGISTER_OP(logical_and)
    .input("x")
    .input("y")
    .elemental(Prim::kAnd)
    .non_differentiable()
    .shape_fn(nary_shape(kB));
KILN_REGISTER_KERNEL(logical_and).dtypes({bool_}).fn(binary_kernel<kB>([](bool x, bool y) {
  return x && y;
}));
KILN_REGISTER_OP(logical_or)
    .input("x")
    .input("y")
    .elemental(Prim::kOr)
    .non_differentiable()
    .shape_fn(nary_shape(kB));
KILN_REGISTER_KERNEL(logical_or).dtypes({bool_}).fn(binary_kernel<kB>([](bool x, bool y) {
  return x || y;
}));
KILN_COMPARE_OP(eq, kEq, x == y);
KILN_COMPARE_OP(ne, kNe, x != y);
KILN_COMPARE_OP(lt, kLt, x < y);
KILN_COMPARE_OP(le, kLe, x <= y);
KILN_COMPARE_OP(gt, kGt, x > y);
KILN_COMPARE_OP(ge, kGe, x >= y);

// select(pred, on_true, on_false): all three broadcast; pred is bool.
KILN_REGISTER_OP(select)
    .input("pred")
    .input("on_true")
    .input("on_false")
    .elemental(Prim::kSelect)
    .shape_fn([](const InferContext& ctx) {
      if (ctx.input(0).dtype != bool_) ctx.fail("pred must be bool, got " + ctx.input(0).str());
      if (ctx.input(1).dtype != ctx.input(2).dtype) {
        ctx.fail("dtype mismatch: on_true is " + ctx.input(1).str() + ", on_false is " +
                 ctx.input(2).str());
      }
      Shape s = broadcast_shapes(ctx, ctx.input(0).shape, ctx.input(1).shape);
      s = broadcast_shapes(ctx, s, ctx.input(2).shape);
      return std::vector<TensorType>{{ctx.input(1).dtype, s}};
    });
KILN_REGISTER_KERNEL(select).fn([](KernelContext& ctx) {
  visit_dtype(ctx.input(1).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool* p = in_ptr<bool>(ctx, 0);
    const T* a = in_ptr<T>(ctx, 1);
    const T* b = in_ptr<T>(ctx, 2);
    Tensor& out = ctx.allocate_output(0);
    T* y = out_ptr<T>(out);
    for_each_broadcast<3>(out.shape(),
                          {ctx.input(0).shape(), ctx.input(1).shape(), ctx.input(2).shape()},
                          [&](int64_t i, const std::array<int64_t, 3>& o) {
                            y[i] = p[o[0]] ? a[o[1]] : b[o[2]];
                          });
  });
});

// clamp(x, low, high) = min(max(x, low), high); all three broadcast.
KILN_REGISTER_OP(clamp)
    .input("x")
    .input("low")
    .input("high")
    .elemental(Prim::kClamp)
    .shape_fn(nary_shape(kN));
KILN_REGISTER_KERNEL(clamp).dtypes(dtypes_of(kN)).fn([](KernelContext& ctx) {
  visit_in<kN>(ctx, ctx.input(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ComputeType<T>;
    const T* x = in_ptr<T>(ctx, 0);
    const T* lo = in_ptr<T>(ctx, 1);
    const T* hi = in_ptr<T>(ctx, 2);
    Tensor& out = ctx.allocate_output(0);
    T* y = out_ptr<T>(out);
    for_each_broadcast<3>(out.shape(),
                          {ctx.input(0).shape(), ctx.input(1).shape(), ctx.input(2).shape()},
                          [&](int64_t i, const std::array<int64_t, 3>& o) {
                            y[i] = static_cast<T>(min_of(max_of(static_cast<C>(x[o[0]]),
                                                                static_cast<C>(lo[o[1]])),
                                                         static_cast<C>(hi[o[2]])));
                          });
  });
});

// convert: any dtype to any dtype. Float to integer truncates toward zero and saturates;
// NaN becomes 0; anything non-zero becomes true.
namespace {
template <class To, class From>
To convert_value(From v) {
  using C = ComputeType<From>;
  C c = static_cast<C>(v);
  if constexpr (std::is_same_v<To, bool>) {
    return c != C(0);
  } else if constexpr (kIsFloat<To>) {
    return float_cast<To>(v);  // once, from v itself (not through float for half/bfloat16)
  } else if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(c)) return 0;
    if (c <= static_cast<C>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (c >= static_cast<C>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(c);
  } else {
    return static_cast<To>(c);  // integer to integer wraps, like C
  }
}
}  // namespace

KILN_REGISTER_OP(convert)
    .input("x")
    .elemental([](ElementalBuilder& b, const std::vector<int>& x, const Attrs& attrs) {
      return b.apply(Prim::kConvert, x, attrs.get_dtype("dtype"));
    })
    .shape_fn([](const InferContext& ctx) {
      return std::vector<TensorType>{{ctx.attrs().get_dtype("dtype"), ctx.input(0).shape}};
    });
KILN_REGISTER_KERNEL(convert).fn([](KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() == ctx.output_type(0).dtype) {
    ctx.set_output(0, x);
    return;
  }
  Tensor& out = ctx.allocate_output(0);
  visit_dtype(x.dtype(), [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    visit_dtype(out.dtype(), [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      const From* src = static_cast<const From*>(x.raw_data());
      To* dst = out_ptr<To>(out);
      runtime::parallel_for(x.size(), 1 << 14, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = convert_value<To>(src[i]);
      });
    });
  });
});

// ---- gradient rules ---------------------------------------------------------------------
// One rule per differentiable primitive, composed from the public ops: x (and y) are the
// inputs, z the output, dz the gradient flowing into z. Binary rules sum the broadcast
// dimensions back out with unbroadcast. Rules returning Tensor() contribute no gradient:
// sign, floor, ceil and round are piecewise constant (derivative zero almost everywhere).
// Only floating-point values carry gradients, so integer uses of these ops never reach a rule.
// Ties: max and min split dz equally between equal inputs (as JAX does); clamp gives dz to x
// when x equals a bound.

namespace {

using Grads = std::vector<Tensor>;
Tensor zero(const Tensor& like) { return scalar_like(0, like); }

// dz where `wins`, half of dz where `tie`, else 0.
Tensor share(const Tensor& wins, const Tensor& tie, const Tensor& dz) {
  return where(wins, dz, where(tie, dz * 0.5, zero(dz)));
}

// Each rule is a named function: KILN_REGISTER_GRADIENT's macro arguments split at the commas
// of a lambda body.
#define KILN_UNARY_GRAD(name, expr)                        \
  Grads name##_gradient(const GradContext& ctx) {          \
    const Tensor &x = ctx.inputs[0], &z = ctx.outputs[0]; \
    const Tensor& dz = ctx.output_grads[0];                \
    (void)x, (void)z, (void)dz;                            \
    return {expr};                                         \
  }                                                        \
  KILN_REGISTER_GRADIENT(name, name##_gradient)

#define KILN_BINARY_GRAD(name, dx, dy)                                        \
  Grads name##_gradient(const GradContext& ctx) {                             \
    const Tensor &x = ctx.inputs[0], &y = ctx.inputs[1], &z = ctx.outputs[0]; \
    const Tensor& dz = ctx.output_grads[0];                                   \
    (void)x, (void)y, (void)z;                                                \
    return {unbroadcast(dx, x.shape()), unbroadcast(dy, y.shape())};          \
  }                                                                           \
  KILN_REGISTER_GRADIENT(name, name##_gradient)

// clang-format off
KILN_UNARY_GRAD(neg, -dz);
KILN_UNARY_GRAD(abs, dz * sign(x));
KILN_UNARY_GRAD(exp, dz * z);
KILN_UNARY_GRAD(log, dz / x);
KILN_UNARY_GRAD(log1p, dz / (x + 1.0));
KILN_UNARY_GRAD(expm1, dz * (z + 1.0));
KILN_UNARY_GRAD(sqrt, dz * 0.5 / z);
KILN_UNARY_GRAD(rsqrt, dz * -0.5 * z * z * z);
KILN_UNARY_GRAD(tanh, dz * (1.0 - z * z));
KILN_UNARY_GRAD(logistic, dz * z * (1.0 - z));
KILN_UNARY_GRAD(sin, dz * cos(x));
KILN_UNARY_GRAD(cos, -dz * sin(x));
KILN_UNARY_GRAD(tan, dz * (1.0 + z * z));
KILN_UNARY_GRAD(erf, dz * (2 * std::numbers::inv_sqrtpi) * exp(-x * x));
KILN_UNARY_GRAD(sign, Tensor());
KILN_UNARY_GRAD(floor, Tensor());
KILN_UNARY_GRAD(ceil, Tensor());
KILN_UNARY_GRAD(round, Tensor());

KILN_BINARY_GRAD(add, dz, dz);
KILN_BINARY_GRAD(sub, dz, -dz);
KILN_BINARY_GRAD(mul, dz * y, dz * x);
KILN_BINARY_GRAD(div, dz / y, -(dz * z) / y);
// d/dy x^y = x^y log x, taken as 0 where x <= 0 (log of 1 there keeps NaN out of the graph).
KILN_BINARY_GRAD(pow, dz * y * pow(x, y - 1.0),
                 dz * where(x > zero(x), z * log(where(x > zero(x), x, zero(x) + 1.0)), zero(z)));
KILN_BINARY_GRAD(max, share(x > y, x == y, dz), share(y > x, x == y, dz));
KILN_BINARY_GRAD(min, share(x < y, x == y, dz), share(y < x, x == y, dz));
// fmod(x, y) = x - trunc(x / y) * y, and trunc(x / y) = (x - z) / y up to rounding.
KILN_BINARY_GRAD(rem, dz, -dz * round((x - z) / y));
KILN_BINARY_GRAD(atan2, dz * y / (x * x + y * y), -dz * x / (x * x + y * y));
// clang-format on

Grads select_gradient(const GradContext& ctx) {
  const Tensor &pred = ctx.inputs[0], &dz = ctx.output_grads[0];
  return {Tensor(), unbroadcast(where(pred, dz, zero(dz)), ctx.inputs[1].shape()),
          unbroadcast(where(pred, zero(dz), dz), ctx.inputs[2].shape())};
}
KILN_REGISTER_GRADIENT(select, select_gradient);

// clamp(x, lo, hi) = min(max(x, lo), hi): the result is hi where max(x, lo) > hi, else lo
// where x < lo, else x.
Grads clamp_gradient(const GradContext& ctx) {
  const Tensor &x = ctx.inputs[0], &lo = ctx.inputs[1], &hi = ctx.inputs[2];
  const Tensor& dz = ctx.output_grads[0];
  Tensor is_hi = maximum(x, lo) > hi;
  Tensor is_lo = !is_hi && x < lo;
  return {unbroadcast(where(is_hi || is_lo, zero(dz), dz), x.shape()),
          unbroadcast(where(is_lo, dz, zero(dz)), lo.shape()),
          unbroadcast(where(is_hi, dz, zero(dz)), hi.shape())};
}
KILN_REGISTER_GRADIENT(clamp, clamp_gradient);

// Back to the input's dtype; an integer or bool input has no gradient.
Grads convert_gradient(const GradContext& ctx) {
  DType from = ctx.inputs[0].dtype();
  return {is_floating(from) ? convert(ctx.output_grads[0], from) : Tensor()};
}
KILN_REGISTER_GRADIENT(convert, convert_gradient);

}  // namespace

}  // namespace ops

// ---- public functions -------------------------------------------------------------------
namespace {

Tensor call1(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {}) {
  return call_op(op, inputs, attrs)[0];
}

// Float-only math on an integer or bool tensor computes in f32 (like NumPy and JAX).
Tensor as_float(const Tensor& x) { return is_floating(x.dtype()) ? x : convert(x, f32); }

std::pair<Tensor, Tensor> promoted(const Tensor& a, const Tensor& b) {
  DType t = promote_types(a.dtype(), b.dtype());
  return {convert(a, t), convert(b, t)};
}

Tensor arith(const std::string& op, const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a, b);
  return call1(op, {x, y});
}

}  // namespace

Tensor convert(const Tensor& x, DType dtype) {
  if (x.defined() && x.dtype() == dtype) return x;
  return call1("convert", {x}, {{"dtype", dtype}});
}

Tensor scalar_like(double value, const Tensor& like) {
  return convert(Tensor::scalar(value), like.dtype());
}

namespace {
// A plain number mixed with a tensor takes the tensor's dtype. For an integer dtype it must be
// a whole number in range: JAX raises for these too, where a conversion would saturate or
// truncate silently (u8 250 + 300 gave 249).
Tensor scalar_operand(const char* op, double value, const Tensor& like) {
  DType t = like.dtype();
  if (is_floating(t) || t == bool_) return scalar_like(value, like);
  bool fits = false;
  visit_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      // [min, max + 1) as doubles: both bounds are 0 or powers of two, so exact.
      fits = value == std::trunc(value) &&
             value >= static_cast<double>(std::numeric_limits<T>::min()) &&
             value < 2.0 * static_cast<double>(std::numeric_limits<T>::max() / 2 + 1);
    }
  });
  if (!fits) {
    std::ostringstream v;
    v << std::setprecision(17) << value;
    throw Error(ErrorCode::kInvalidArgument,
                std::string(op) + ": the number " + v.str() + " does not fit " + dtype_name(t) +
                    ", the dtype of the tensor it is combined with; convert the tensor first");
  }
  return scalar_like(value, like);
}
}  // namespace

Tensor neg(const Tensor& x) { return call1("neg", {x}); }
Tensor abs(const Tensor& x) { return call1("abs", {x}); }
Tensor exp(const Tensor& x) { return call1("exp", {as_float(x)}); }
Tensor log(const Tensor& x) { return call1("log", {as_float(x)}); }
Tensor log1p(const Tensor& x) { return call1("log1p", {as_float(x)}); }
Tensor expm1(const Tensor& x) { return call1("expm1", {as_float(x)}); }
Tensor sqrt(const Tensor& x) { return call1("sqrt", {as_float(x)}); }
Tensor rsqrt(const Tensor& x) { return call1("rsqrt", {as_float(x)}); }
Tensor tanh(const Tensor& x) { return call1("tanh", {as_float(x)}); }
Tensor logistic(const Tensor& x) { return call1("logistic", {as_float(x)}); }
Tensor sin(const Tensor& x) { return call1("sin", {as_float(x)}); }
Tensor cos(const Tensor& x) { return call1("cos", {as_float(x)}); }
Tensor tan(const Tensor& x) { return call1("tan", {as_float(x)}); }
Tensor erf(const Tensor& x) { return call1("erf", {as_float(x)}); }
Tensor sign(const Tensor& x) { return call1("sign", {x}); }
Tensor floor(const Tensor& x) { return is_floating(x.dtype()) ? call1("floor", {x}) : x; }
Tensor ceil(const Tensor& x) { return is_floating(x.dtype()) ? call1("ceil", {x}) : x; }
Tensor round(const Tensor& x) { return is_floating(x.dtype()) ? call1("round", {x}) : x; }
Tensor logical_not(const Tensor& x) { return call1("logical_not", {x}); }
Tensor is_finite(const Tensor& x) {
  return is_floating(x.dtype()) ? call1("is_finite", {x}) : ones_like(x).to(bool_);
}
Tensor square(const Tensor& x) { return mul(x, x); }

Tensor add(const Tensor& a, const Tensor& b) { return arith("add", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return arith("sub", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return arith("mul", a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return arith("div", a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return arith("pow", a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return arith("max", a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return arith("min", a, b); }
Tensor rem(const Tensor& a, const Tensor& b) { return arith("rem", a, b); }
Tensor atan2(const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a, b);
  return call1("atan2", {as_float(x), as_float(y)});
}
Tensor logical_and(const Tensor& a, const Tensor& b) { return call1("logical_and", {a, b}); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return call1("logical_or", {a, b}); }
Tensor equal(const Tensor& a, const Tensor& b) { return arith("eq", a, b); }
Tensor not_equal(const Tensor& a, const Tensor& b) { return arith("ne", a, b); }
Tensor less(const Tensor& a, const Tensor& b) { return arith("lt", a, b); }
Tensor less_equal(const Tensor& a, const Tensor& b) { return arith("le", a, b); }
Tensor greater(const Tensor& a, const Tensor& b) { return arith("gt", a, b); }
Tensor greater_equal(const Tensor& a, const Tensor& b) { return arith("ge", a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a, b);
  return call1("select", {cond, x, y});
}

Tensor clamp(const Tensor& x, const Tensor& low, const Tensor& high) {
  DType t = promote_types(x.dtype(), promote_types(low.dtype(), high.dtype()));
  return call1("clamp", {convert(x, t), convert(low, t), convert(high, t)});
}
Tensor clamp(const Tensor& x, double low, double high) {
  return clamp(x, scalar_operand("clamp", low, x), scalar_operand("clamp", high, x));
}

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, scalar_operand("add", b, a)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_operand("sub", b, a)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_operand("mul", b, a)); }
Tensor operator/(const Tensor& a, double b) { return div(a, scalar_operand("div", b, a)); }
Tensor operator+(double a, const Tensor& b) { return add(scalar_operand("add", a, b), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_operand("sub", a, b), b); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_operand("mul", a, b), b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_operand("div", a, b), b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return equal(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return not_equal(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return less(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return less_equal(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return greater(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return greater_equal(a, b); }
Tensor operator!(const Tensor& x) { return logical_not(x); }
Tensor operator&&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
Tensor operator||(const Tensor& a, const Tensor& b) { return logical_or(a, b); }

}  // namespace kiln
