// ONNX's elementwise, reduction and matrix ops as Kiln ops.
#include <cmath>
#include <limits>

#include "interop/onnx_converters.h"
#include "interop/onnx_tensor.h"
#include "kiln/error.h"

namespace kiln::onnx::internal {

int64_t normalize_axis(const NodeContext& c, int64_t axis, int64_t rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    c.invalid("axis " + std::to_string(axis) + " is out of range for rank " +
              std::to_string(rank));
  }
  return a;
}

Tensor scalar_of(double value, DType dtype) { return full(Shape{}, value, dtype); }

const Shape& static_shape(const NodeContext& c, const Tensor& x) {
  for (int64_t d : x.shape()) {
    if (d == kUnknownDim) {
      c.unsupported("the shape " + TensorType{x.dtype(), x.shape()}.str() +
                    " has dimensions known only at run time (give them in "
                    "ImportOptions::input_shapes)");
    }
  }
  return x.shape();
}

namespace {

using Vec = std::vector<Tensor>;

Tensor one(const Tensor& like) { return scalar_of(1, like.dtype()); }
Tensor zero(const Tensor& like) { return scalar_of(0, like.dtype()); }

void require_float(const NodeContext& c, const Tensor& x) {
  if (!is_floating(x.dtype())) c.unsupported(std::string("dtype ") + dtype_name(x.dtype()));
}

// Reduction axes from the `axes` attribute (all when absent).
Axes attr_axes(const NodeContext& c, int64_t rank) {
  Axes axes = c.attr_ints("axes");
  for (int64_t& a : axes) a = normalize_axis(c, a, rank);
  return axes;
}

// The reduction's axes: the attribute before ReduceSum-13, the optional input after it.
Axes reduce_axes(const NodeContext& c, bool from_input, bool* noop) {
  const int64_t rank = c.input(0).rank();
  *noop = false;
  if (!from_input) return attr_axes(c, rank);
  Axes axes;
  if (c.has_input(1)) axes = c.ints_input(1, "axes");
  if (axes.empty() && c.attr_int("noop_with_empty_axes", 0)) *noop = true;
  for (int64_t& a : axes) a = normalize_axis(c, a, rank);
  return axes;
}

template <class F>
Vec reduce(const NodeContext& c, bool from_input, F f) {
  bool noop = false;
  Axes axes = reduce_axes(c, from_input, &noop);
  const Tensor& x = c.input(0);
  if (noop) return {x};
  if (axes.empty())
    for (int64_t i = 0; i < x.rank(); ++i) axes.push_back(i);
  return {f(x, axes, c.attr_int("keepdims", 1) != 0)};
}

Tensor fold(const Vec& xs, Tensor (*f)(const Tensor&, const Tensor&)) {
  Tensor r = xs.at(0);
  for (size_t i = 1; i < xs.size(); ++i) r = f(r, xs[i]);
  return r;
}

Vec arg_reduce(const NodeContext& c, Tensor (*f)(const Tensor&, int64_t, bool)) {
  const Tensor& x = c.input(0);
  const int64_t axis = normalize_axis(c, c.attr_int("axis", 0), x.rank());
  const bool keep = c.attr_int("keepdims", 1) != 0;
  if (!c.attr_int("select_last_index", 0)) return {f(x, axis, keep)};
  // The last extreme: the first in the reversed axis, counted back from the end.
  Tensor r = f(reverse(x, {axis}), axis, keep);
  return {sub(scalar_of(static_cast<double>(x.dim(axis) - 1), r.dtype()), r)};
}

}  // namespace

#define KILN_ONNX_UNARY(name, expr)                \
  Vec convert_##name(const NodeContext& c) {       \
    const Tensor& x = c.input(0);                  \
    return {expr};                                 \
  }

KILN_ONNX_UNARY(Abs, abs(x))
KILN_ONNX_UNARY(Neg, neg(x))
KILN_ONNX_UNARY(Exp, exp(x))
KILN_ONNX_UNARY(Log, log(x))
KILN_ONNX_UNARY(Sqrt, sqrt(x))
KILN_ONNX_UNARY(Reciprocal, div(one(x), x))
KILN_ONNX_UNARY(Sin, sin(x))
KILN_ONNX_UNARY(Cos, cos(x))
KILN_ONNX_UNARY(Tan, tan(x))
KILN_ONNX_UNARY(Tanh, tanh(x))
KILN_ONNX_UNARY(Sigmoid, logistic(x))
KILN_ONNX_UNARY(Erf, erf(x))
KILN_ONNX_UNARY(Sign, sign(x))
KILN_ONNX_UNARY(Floor, floor(x))
KILN_ONNX_UNARY(Ceil, ceil(x))
KILN_ONNX_UNARY(Round, round(x))
KILN_ONNX_UNARY(Not, logical_not(x))
KILN_ONNX_UNARY(IsNaN, not_equal(x, x))
KILN_ONNX_UNARY(Identity, x)
// The inverse and hyperbolic functions, from Kiln's primitives.
KILN_ONNX_UNARY(Atan, atan2(x, one(x)))
KILN_ONNX_UNARY(Asin, atan2(x, sqrt(sub(one(x), square(x)))))
KILN_ONNX_UNARY(Acos, atan2(sqrt(sub(one(x), square(x))), x))
KILN_ONNX_UNARY(Sinh, mul(scalar_of(0.5, x.dtype()), sub(exp(x), exp(neg(x)))))
KILN_ONNX_UNARY(Cosh, mul(scalar_of(0.5, x.dtype()), add(exp(x), exp(neg(x)))))
KILN_ONNX_UNARY(Asinh, log(add(x, sqrt(add(square(x), one(x))))))
KILN_ONNX_UNARY(Acosh, log(add(x, sqrt(sub(square(x), one(x))))))
KILN_ONNX_UNARY(Atanh, mul(scalar_of(0.5, x.dtype()), log(div(add(one(x), x), sub(one(x), x)))))
#undef KILN_ONNX_UNARY

Vec convert_IsInf(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const double inf = std::numeric_limits<double>::infinity();
  Tensor pos = equal(x, scalar_of(inf, x.dtype()));
  Tensor neg_inf = equal(x, scalar_of(-inf, x.dtype()));
  const bool want_pos = c.attr_int("detect_positive", 1) != 0;
  const bool want_neg = c.attr_int("detect_negative", 1) != 0;
  if (want_pos && want_neg) return {logical_or(pos, neg_inf)};
  if (want_pos) return {pos};
  if (want_neg) return {neg_inf};
  return {logical_and(pos, neg_inf)};  // all false
}

#define KILN_ONNX_BINARY(name, f) \
  Vec convert_##name(const NodeContext& c) { return {f(c.input(0), c.input(1))}; }
KILN_ONNX_BINARY(Add, add)
KILN_ONNX_BINARY(Sub, sub)
KILN_ONNX_BINARY(Mul, mul)
KILN_ONNX_BINARY(Div, div)
KILN_ONNX_BINARY(And, logical_and)
KILN_ONNX_BINARY(Or, logical_or)
KILN_ONNX_BINARY(Xor, not_equal)
KILN_ONNX_BINARY(Equal, equal)
KILN_ONNX_BINARY(Less, less)
KILN_ONNX_BINARY(LessOrEqual, less_equal)
KILN_ONNX_BINARY(Greater, greater)
KILN_ONNX_BINARY(GreaterOrEqual, greater_equal)
#undef KILN_ONNX_BINARY

Vec convert_Where(const NodeContext& c) { return {where(c.input(0), c.input(1), c.input(2))}; }

// The exponent may have another type than the base; the result has the base's.
Vec convert_Pow(const NodeContext& c) {
  const Tensor& x = c.input(0);
  return {pow(x, convert(c.input(1), x.dtype()))};
}

// fmod = 1: C's fmod (the sign of the dividend); 0: Python's % (the sign of the divisor).
Vec convert_Mod(const NodeContext& c) {
  const Tensor& a = c.input(0);
  const Tensor& b = c.input(1);
  Tensor r = rem(a, b);
  if (c.attr_int("fmod", 0)) return {r};
  if (is_floating(a.dtype())) c.unsupported("fmod = 0 on a floating-point type (ONNX forbids it)");
  if (!is_signed(a.dtype())) return {r};
  Tensor fix = logical_and(not_equal(r, zero(r)), not_equal(less(r, zero(r)), less(b, zero(b))));
  return {where(fix, add(r, b), r)};
}

Vec convert_Max(const NodeContext& c) { return {fold(c.inputs(), maximum)}; }
Vec convert_Min(const NodeContext& c) { return {fold(c.inputs(), minimum)}; }
Vec convert_Sum(const NodeContext& c) { return {fold(c.inputs(), add)}; }
Vec convert_Mean(const NodeContext& c) {
  Tensor s = fold(c.inputs(), add);
  return {div(s, scalar_of(static_cast<double>(c.num_inputs()), s.dtype()))};
}

// numpy.clip: max(x, low) then min(., high), so low > high gives high.
Vec convert_Clip6(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const double inf = std::numeric_limits<double>::infinity();
  Tensor r = maximum(x, scalar_of(c.attr_float("min", -inf), x.dtype()));
  return {minimum(r, scalar_of(c.attr_float("max", inf), x.dtype()))};
}

Vec convert_Clip11(const NodeContext& c) {
  Tensor r = c.input(0);
  if (c.has_input(1)) r = maximum(r, c.input(1));
  if (c.has_input(2)) r = minimum(r, c.input(2));
  return {r};
}

Vec convert_Cast(const NodeContext& c) {
  const int32_t to = static_cast<int32_t>(c.attr_int("to", 0));
  const std::optional<DType> dtype = dtype_from_onnx(to);
  if (!dtype) c.unsupported("Kiln has no dtype for " + onnx_dtype_name(to));
  if (!dtype_from_onnx(onnx_dtype(c.input(0).dtype()))) c.unsupported("the input's dtype");
  return {convert(c.input(0), *dtype)};
}

Vec convert_CastLike(const NodeContext& c) { return {convert(c.input(0), c.input(1).dtype())}; }

Vec convert_MatMul(const NodeContext& c) { return {matmul(c.input(0), c.input(1))}; }

// Y = alpha * A' B' + beta * C, A' and B' transposed when transA / transB.
Vec convert_Gemm(const NodeContext& c) {
  Tensor a = c.input(0);
  Tensor b = c.input(1);
  if (c.attr_int("transA", 0)) a = transpose(a);
  if (c.attr_int("transB", 0)) b = transpose(b);
  Tensor y = matmul(a, b);
  const double alpha = c.attr_float("alpha", 1);
  const double beta = c.attr_float("beta", 1);
  if (alpha != 1) y = mul(y, scalar_of(alpha, y.dtype()));
  if (c.has_input(2)) {
    Tensor bias = c.input(2);
    if (beta != 1) bias = mul(bias, scalar_of(beta, bias.dtype()));
    y = add(y, bias);
  }
  return {y};
}

Vec convert_ReduceSum1(const NodeContext& c) { return reduce(c, false, sum); }
Vec convert_ReduceSum13(const NodeContext& c) { return reduce(c, true, sum); }
Vec convert_ReduceMean(const NodeContext& c) { return reduce(c, false, mean); }
Vec convert_ReduceMax(const NodeContext& c) { return reduce(c, false, max); }
Vec convert_ReduceMin(const NodeContext& c) { return reduce(c, false, min); }
Vec convert_ReduceProd(const NodeContext& c) { return reduce(c, false, prod); }
Vec convert_ReduceL1(const NodeContext& c) {
  return reduce(c, false, [](const Tensor& x, Axes a, bool k) { return sum(abs(x), a, k); });
}
Vec convert_ReduceL2(const NodeContext& c) {
  return reduce(c, false,
                [](const Tensor& x, Axes a, bool k) { return sqrt(sum(square(x), a, k)); });
}
Vec convert_ReduceLogSum(const NodeContext& c) {
  return reduce(c, false, [](const Tensor& x, Axes a, bool k) { return log(sum(x, a, k)); });
}
Vec convert_ReduceLogSumExp(const NodeContext& c) {
  require_float(c, c.input(0));
  return reduce(c, false, logsumexp);
}
Vec convert_ReduceSumSquare(const NodeContext& c) {
  return reduce(c, false, [](const Tensor& x, Axes a, bool k) { return sum(square(x), a, k); });
}

Vec convert_ArgMax(const NodeContext& c) { return arg_reduce(c, argmax); }
Vec convert_ArgMin(const NodeContext& c) { return arg_reduce(c, argmin); }

// A running sum along the axis in log2(n) steps: each adds the sum shifted by 1, 2, 4, ...
// (exact for integers; for floats the order of additions differs from a sequential loop).
Vec convert_CumSum(const NodeContext& c) {
  Tensor x = c.input(0);
  const Shape& shape = static_shape(c, x);
  const std::vector<int64_t> axis_values = c.ints_input(1, "axis");
  if (axis_values.size() != 1) c.invalid("the axis must be one value");
  const int64_t axis = normalize_axis(c, axis_values[0], x.rank());
  const int64_t n = shape[axis];
  const bool rev = c.attr_int("reverse", 0) != 0;
  if (rev) x = reverse(x, {axis});
  const int64_t r = x.rank();
  auto shifted = [&](const Tensor& t, int64_t by) {  // t moved `by` along the axis, zeros in front
    Axes start(r, 0), limit(shape), low(r, 0), high(r, 0);
    limit[axis] = n - by;
    low[axis] = by;
    return pad(slice(t, start, limit), low, high, 0);
  };
  for (int64_t step = 1; step < n; step *= 2) x = add(x, shifted(x, step));
  if (c.attr_int("exclusive", 0) && n > 0) x = shifted(x, 1);
  if (rev) x = reverse(x, {axis});
  return {x};
}

}  // namespace kiln::onnx::internal
