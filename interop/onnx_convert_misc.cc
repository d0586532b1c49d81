// ONNX ops with no Kiln primitive of their own, built from others: the spectral windows
// (computed while importing), BitShift, ReverseSequence, TopK (a rank by pairwise comparison,
// as Kiln has no sort) and Det (LU with partial pivoting, unrolled).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>

#include "interop/onnx_converters.h"
#include "interop/onnx_tensor.h"
#include "kiln/error.h"

namespace kiln::onnx::internal {
namespace {

using Vec = std::vector<Tensor>;

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= s[i];
  return n;
}

// a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N the size (periodic) or the size less one.
Vec window(const NodeContext& c, double a0, double a1, double a2) {
  const std::vector<int64_t> size = c.ints_input(0, "window size");
  if (size.size() != 1 || c.input(0).rank() > 1) c.invalid("the size must be a scalar");
  if (size[0] < 0) c.invalid("the size " + std::to_string(size[0]) + " is negative");
  const int32_t type = static_cast<int32_t>(c.attr_int("output_datatype", 1));
  const std::optional<DType> dtype = dtype_from_onnx(type);
  if (!dtype) c.unsupported("Kiln has no dtype for " + onnx_dtype_name(type));
  const int64_t n = size[0];
  // A symmetric window of one value would divide by zero; it is that one value, at n = 0.
  const double denom =
      static_cast<double>(c.attr_int("periodic", 1) ? n : std::max<int64_t>(n - 1, 1));
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) {
    const double x = 2 * std::numbers::pi * static_cast<double>(i) / denom;
    v[i] = a0 - a1 * std::cos(x) + a2 * std::cos(2 * x);
  }
  return {convert(Tensor::from_vector(v), *dtype)};
}

// Rows of x2 [M, n] (M = the other axes, the axis moved last) back in x's layout with `k`
// along `axis`.
Tensor from_rows(const Tensor& rows, const Shape& xs, int64_t axis, int64_t k) {
  const int64_t r = static_cast<int64_t>(xs.size());
  Shape moved;
  Axes back(r);
  for (int64_t d = 0; d < r; ++d)
    if (d != axis) moved.push_back(xs[d]);
  moved.push_back(k);
  for (int64_t d = 0, j = 0; d < r; ++d) back[d] = d == axis ? r - 1 : j++;
  return transpose(reshape(rows, moved), back);
}

Tensor to_rows(const Tensor& x, int64_t axis) {
  const int64_t r = x.rank();
  Axes perm;
  for (int64_t d = 0; d < r; ++d)
    if (d != axis) perm.push_back(d);
  perm.push_back(axis);
  const Shape& xs = x.shape();
  return reshape(transpose(x, perm),
                 {product(xs, 0, xs.size()) / std::max<int64_t>(xs[axis], 1), xs[axis]});
}

// The pairwise comparison holds m * n * n values; past these it is refused.
constexpr int64_t kMaxTopKAxis = 4096;
constexpr int64_t kMaxTopKPairs = int64_t{1} << 27;

Vec top_k(const NodeContext& c, int64_t k) {
  const Tensor& x = c.input(0);
  const Shape& xs = static_shape(c, x);
  if (xs.empty()) c.invalid("the input must have rank 1 or more");
  const int64_t axis = normalize_axis(c, c.attr_int("axis", -1), x.rank());
  const int64_t n = xs[axis];
  if (k < 0 || k > n)
    c.invalid("k " + std::to_string(k) + " is outside [0, " + std::to_string(n) + "]");
  const int64_t m = n == 0 ? 0 : product(xs, 0, xs.size()) / n;
  if (n > kMaxTopKAxis || m * n * n > kMaxTopKPairs) {
    c.unsupported("TopK over an axis of " + std::to_string(n) + " in " + std::to_string(m) +
                  " slices (Kiln has no sort; ranking compares every pair, up to an axis of " +
                  std::to_string(kMaxTopKAxis) + ")");
  }
  const bool largest = c.attr_int("largest", 1) != 0;
  const Tensor rows = to_rows(x, axis);  // [M, n]
  // rank[i] counts the j that come before i: better values, or equal ones at a lower index.
  const Tensor xi = reshape(rows, {m, n, 1}), xj = reshape(rows, {m, 1, n});
  const Tensor better = largest ? greater(xj, xi) : less(xj, xi);
  const Tensor earlier = less(iota({1, n, n}, 2, i64), iota({1, n, n}, 1, i64));
  const Tensor before = logical_or(better, logical_and(equal(xj, xi), earlier));
  const Tensor rank = reshape(sum(convert(before, i32), {2}), {m, 1, n});
  // Position p holds the i whose rank is p.
  const Tensor at = equal(rank, iota({1, k, 1}, 1, i32));  // [M, k, n]
  const Tensor idx = argmax(convert(at, i32), 2);          // [M, k]
  const Tensor offs = add(mul(iota({m, k}, 0, i64), Tensor::scalar<int64_t>(n)), idx);
  const Tensor values = gather(reshape(rows, {m * n}), offs, 0);
  return {from_rows(values, xs, axis, k), from_rows(idx, xs, axis, k)};
}

}  // namespace

// Coefficients as ONNX defines them (Hamming's are 25/46 and 21/46, not 0.54 and 0.46).
Vec convert_HannWindow(const NodeContext& c) { return window(c, 0.5, 0.5, 0); }
Vec convert_HammingWindow(const NodeContext& c) { return window(c, 25.0 / 46, 21.0 / 46, 0); }
Vec convert_BlackmanWindow(const NodeContext& c) { return window(c, 0.42, 0.5, 0.08); }

// Shifts as products with powers of two; shifts of the whole width or more give zero.
Vec convert_BitShift(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Tensor& y = c.input(1);
  if (x.dtype() != y.dtype()) c.invalid("X and Y must have one dtype");
  // Kiln's only unsigned integer dtype; ONNX's uint16/32/64 have no Kiln dtype to arrive in.
  if (x.dtype() != u8) c.unsupported(std::string("dtype ") + dtype_name(x.dtype()));
  const std::string dir = c.attr_string("direction", "");
  if (dir != "LEFT" && dir != "RIGHT") c.invalid("direction '" + dir + "' (LEFT or RIGHT)");
  const Tensor wide = convert(x, i64);
  const Tensor by = minimum(convert(y, i64), Tensor::scalar<int64_t>(8));
  const Tensor scale = pow(Tensor::scalar<int64_t>(2), by);
  const Tensor out =
      dir == "LEFT" ? rem(mul(wide, scale), Tensor::scalar<int64_t>(256)) : div(wide, scale);
  return {convert(out, u8)};
}

// Each batch entry's time steps below its length read from length - 1 - t; one gather of
// rows from x viewed as [B * T, rest].
Vec convert_ReverseSequence(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Shape& xs = static_shape(c, x);
  if (xs.size() < 2) c.invalid("the input must have rank 2 or more");
  const int64_t batch_axis = c.attr_int("batch_axis", 1), time_axis = c.attr_int("time_axis", 0);
  if (!((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0)))
    c.invalid("batch_axis and time_axis must be 0 and 1, one each");
  const int64_t b = xs[batch_axis], t = xs[time_axis];
  const Tensor& lens_in = c.input(1);
  if (static_shape(c, lens_in) != Shape{b} || !is_integer(lens_in.dtype()))
    c.invalid("sequence_lens must be " + std::to_string(b) + " integers, one per batch entry");
  const Tensor lens = reshape(convert(lens_in, i64), {b, 1});
  if (!lens.is_symbolic()) {
    for (int64_t v : lens.to_vector<int64_t>())
      if (v < 0 || v > t)
        c.invalid("sequence length " + std::to_string(v) + " is outside [0, " + std::to_string(t) +
                  "]");
  }
  const Tensor steps = iota({b, t}, 1, i64);
  const Tensor src =
      where(less(steps, lens), sub(sub(lens, Tensor::scalar<int64_t>(1)), steps), steps);
  const Tensor rows = add(mul(iota({b, t}, 0, i64), Tensor::scalar<int64_t>(t)), src);
  Axes perm{batch_axis, time_axis};
  for (int64_t d = 2; d < x.rank(); ++d) perm.push_back(d);  // swaps 0 and 1, or keeps them
  const int64_t rest = product(xs, 2, xs.size());
  const Tensor bt = reshape(transpose(x, perm), {b * t, rest});
  Shape moved{b, t};
  moved.insert(moved.end(), xs.begin() + 2, xs.end());
  return {transpose(reshape(gather(bt, reshape(rows, {b * t}), 0), moved), perm)};
}

Vec convert_TopK1(const NodeContext& c) { return top_k(c, c.attr_int("k", -1)); }
Vec convert_TopK10(const NodeContext& c) {
  const std::vector<int64_t> k = c.ints_input(1, "k");
  if (k.size() != 1) c.invalid("k must hold one value");
  return top_k(c, k[0]);
}

// Gaussian elimination with partial pivoting, a step per column: the row with the largest
// magnitude swapped in by a permutation matmul, the rows below eliminated; the determinant is
// the product of the pivots, negated per swap.
constexpr int64_t kMaxDetSize = 8;

Vec convert_Det(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Shape& xs = static_shape(c, x);
  const int64_t r = x.rank();
  if (r < 2 || xs[r - 1] != xs[r - 2])
    c.invalid("the input " + shape_str(xs) + " is not a batch of square matrices");
  if (!is_floating(x.dtype())) c.unsupported(std::string("dtype ") + dtype_name(x.dtype()));
  const int64_t n = xs[r - 1];
  if (n > kMaxDetSize)
    c.unsupported("matrices of " + std::to_string(n) + " rows (Det is unrolled up to " +
                  std::to_string(kMaxDetSize) + ")");
  const Shape batch(xs.begin(), xs.end() - 2);
  const int64_t m = product(xs, 0, batch.size());
  const DType dt = x.dtype();
  if (n == 0) return {ones(batch, dt)};
  Tensor a = reshape(x, {m, n, n});
  Tensor sign = ones({m}, dt);
  const Tensor row = iota({1, n}, 1, i64);  // row numbers, to mask and to build swaps
  const Tensor eye = convert(equal(iota({n, n}, 0, i64), iota({n, n}, 1, i64)), dt);
  for (int64_t k = 0; k < n; ++k) {
    const Tensor col = reshape(slice(a, {0, 0, k}, {m, n, k + 1}), {m, n});
    const Tensor below = greater_equal(row, Tensor::scalar<int64_t>(k));          // [1, n]
    const Tensor p = argmax(where(below, abs(col), scalar_of(-1, dt)), 1, true);  // [m, 1]
    // The swap of rows k and p: I - e_k e_k' - e_p e_p' + e_k e_p' + e_p e_k'.
    const Tensor ek = convert(equal(row, Tensor::scalar<int64_t>(k)), dt);  // [1, n]
    const Tensor ep = convert(equal(row, p), dt);                           // [m, n]
    const Tensor d = sub(ep, ek);
    const Tensor swap = sub(eye, mul(reshape(d, {m, n, 1}), reshape(d, {m, 1, n})));
    a = matmul(swap, a);
    sign = where(equal(reshape(p, {m}), Tensor::scalar<int64_t>(k)), sign, neg(sign));
    // Rows below k less their multiple of row k; a zero pivot leaves a zero column below it.
    const Tensor pivot_row = slice(a, {0, k, 0}, {m, k + 1, n});  // [m, 1, n]
    const Tensor pivot = slice(a, {0, k, k}, {m, k + 1, k + 1});  // [m, 1, 1]
    const Tensor safe = where(equal(pivot, scalar_of(0, dt)), scalar_of(1, dt), pivot);
    const Tensor factor =
        mul(div(slice(a, {0, 0, k}, {m, n, k + 1}), safe),  // [m, n, 1]
            convert(reshape(greater(row, Tensor::scalar<int64_t>(k)), {1, n, 1}), dt));
    a = sub(a, mul(factor, pivot_row));
  }
  const Tensor diag = mul(a, reshape(eye, {1, n, n}));
  return {reshape(mul(sign, prod(sum(diag, {2}), {1})), batch)};
}

}  // namespace kiln::onnx::internal
