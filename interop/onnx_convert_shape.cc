// ONNX's shape, layout and creation ops as Kiln ops. Shapes, starts, axes and repeats must be
// known while importing (Kiln's graphs have static shapes); ops on known values compute at once.
#include <algorithm>
#include <cmath>

#include "interop/onnx_converters.h"
#include "interop/onnx_tensor.h"
#include "kiln/error.h"

namespace kiln::onnx::internal {
namespace {

using Vec = std::vector<Tensor>;

Tensor ints_tensor(const std::vector<int64_t>& v) { return Tensor::from_vector(v); }

Vec squeeze_axes(const NodeContext& c, Axes axes) {
  const Tensor& x = c.input(0);
  if (axes.empty()) {
    const Shape& s = static_shape(c, x);
    for (int64_t i = 0; i < x.rank(); ++i)
      if (s[i] == 1) axes.push_back(i);
  }
  for (int64_t& a : axes) a = normalize_axis(c, a, x.rank());
  return {squeeze(x, axes)};
}

Vec unsqueeze_axes(const NodeContext& c, Axes axes) {
  Tensor x = c.input(0);
  const int64_t out_rank = x.rank() + static_cast<int64_t>(axes.size());
  for (int64_t& a : axes) a = normalize_axis(c, a, out_rank);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) c.invalid("repeated axes");
  for (int64_t a : axes) x = expand_dims(x, a);
  return {x};
}

Vec split_sizes(const NodeContext& c, std::vector<int64_t> sizes) {
  const Tensor& x = c.input(0);
  const int64_t axis = normalize_axis(c, c.attr_int("axis", 0), x.rank());
  const Shape& shape = static_shape(c, x);
  const int64_t n = c.num_outputs();
  if (sizes.empty()) {
    if (n == 0 || shape[axis] % n != 0) {
      c.invalid("dimension " + std::to_string(shape[axis]) + " does not split into " +
                std::to_string(n) + " equal parts");
    }
    sizes.assign(n, shape[axis] / n);
  }
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (total != shape[axis] || static_cast<int64_t>(sizes.size()) != n)
    c.invalid("the split sizes do not add up to dimension " + std::to_string(shape[axis]));
  Vec outs;
  int64_t at = 0;
  for (int64_t s : sizes) {
    Axes start(x.rank(), 0), limit(shape);
    start[axis] = at;
    limit[axis] = at + s;
    outs.push_back(slice(x, start, limit));
    at += s;
  }
  return outs;
}

// ONNX's Slice on static dims: starts and ends clamped, negative steps by reversing the axis.
Tensor slice_onnx(const NodeContext& c, const Tensor& input, const std::vector<int64_t>& starts,
                  const std::vector<int64_t>& ends, std::vector<int64_t> axes,
                  std::vector<int64_t> steps) {
  Tensor x = input;
  const Shape& shape = static_shape(c, x);
  const int64_t r = x.rank();
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    c.invalid("starts, ends, axes and steps differ in length");
  Axes lo(r, 0), hi(shape), st(r, 1), flip;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = normalize_axis(c, axes[i], r);
    const int64_t dim = shape[axis];
    const int64_t step = steps[i];
    if (step == 0) c.invalid("a step is 0");
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      // In the reversed axis, index i is dim - 1 - i.
      flip.push_back(axis);
      s = dim - 1 - s;
      e = dim - 1 - e;
    }
    const int64_t abs_step = step > 0 ? step : -step;
    lo[axis] = s;
    hi[axis] = std::max(s, e);
    st[axis] = abs_step;
  }
  if (!flip.empty()) x = reverse(x, flip);
  return slice(x, lo, hi, st);
}

}  // namespace

Vec convert_Reshape(const NodeContext& c) {
  const Tensor& x = c.input(0);
  std::vector<int64_t> shape = c.ints_input(1, "shape");
  const bool allow_zero = c.attr_int("allowzero", 0) != 0;
  int unknown = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (static_cast<int64_t>(i) >= x.rank()) c.invalid("a 0 beyond the input's rank");
      shape[i] = x.shape()[i];
    }
    if (shape[i] < -1) c.invalid("dimension " + std::to_string(shape[i]));
    unknown += shape[i] == -1;
  }
  if (unknown > 1) c.unsupported("more than one dimension inferred at run time");
  return {reshape(x, shape)};
}

Vec convert_Flatten(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const int64_t r = x.rank();
  int64_t axis = c.attr_int("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) c.invalid("axis out of range");
  int64_t outer = 1, inner = 1;
  bool outer_known = true, inner_known = true;
  for (int64_t i = 0; i < r; ++i) {
    const int64_t d = x.shape()[i];
    bool& known = i < axis ? outer_known : inner_known;
    if (d == kUnknownDim) known = false;
    else (i < axis ? outer : inner) *= d;
  }
  if (!outer_known && !inner_known) static_shape(c, x);
  return {reshape(x, {outer_known ? outer : -1, inner_known ? inner : -1})};
}

Vec convert_Squeeze1(const NodeContext& c) { return squeeze_axes(c, c.attr_ints("axes")); }
Vec convert_Squeeze13(const NodeContext& c) {
  return squeeze_axes(c, c.has_input(1) ? c.ints_input(1, "axes") : Axes{});
}
Vec convert_Unsqueeze1(const NodeContext& c) { return unsqueeze_axes(c, c.attr_ints("axes")); }
Vec convert_Unsqueeze13(const NodeContext& c) {
  return unsqueeze_axes(c, c.ints_input(1, "axes"));
}

Vec convert_Transpose(const NodeContext& c) {
  const Tensor& x = c.input(0);
  if (!c.has_attr("perm")) return {transpose(x)};
  return {transpose(x, c.attr_ints("perm"))};
}

Vec convert_Concat(const NodeContext& c) {
  const int64_t axis = normalize_axis(c, c.attr_int("axis", 0), c.input(0).rank());
  return {concatenate(c.inputs(), axis)};
}

Vec convert_Split2(const NodeContext& c) { return split_sizes(c, c.attr_ints("split")); }
Vec convert_Split13(const NodeContext& c) {
  return split_sizes(c, c.has_input(1) ? c.ints_input(1, "split") : std::vector<int64_t>{});
}

Vec convert_Slice1(const NodeContext& c) {
  return {slice_onnx(c, c.input(0), c.attr_ints("starts"), c.attr_ints("ends"),
                     c.attr_ints("axes"), {})};
}

Vec convert_Slice10(const NodeContext& c) {
  return {slice_onnx(c, c.input(0), c.ints_input(1, "starts"), c.ints_input(2, "ends"),
                     c.has_input(3) ? c.ints_input(3, "axes") : std::vector<int64_t>{},
                     c.has_input(4) ? c.ints_input(4, "steps") : std::vector<int64_t>{})};
}

// Negative indices count from the end of the axis.
Vec convert_Gather(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const int64_t axis = normalize_axis(c, c.attr_int("axis", 0), x.rank());
  Tensor idx = c.input(1);
  const int64_t dim = static_shape(c, x)[axis];
  idx = where(less(idx, scalar_of(0, idx.dtype())), add(idx, scalar_of(dim, idx.dtype())), idx);
  return {gather(x, idx, axis)};
}

// Broadcasts both ways: the output has the larger of each pair of dimensions.
Vec convert_Expand(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Shape& in = static_shape(c, x);
  std::vector<int64_t> want = c.ints_input(1, "shape");
  const size_t r = std::max(in.size(), want.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t a = i + in.size() >= r ? in[i + in.size() - r] : 1;
    const int64_t b = i + want.size() >= r ? want[i + want.size() - r] : 1;
    if (a != b && a != 1 && b != 1)
      c.invalid("shape " + TensorType{x.dtype(), in}.str() + " does not broadcast");
    out[i] = a == 1 ? b : a;
  }
  return {broadcast_to(x, out)};
}

// x tiled: each dimension d becomes (repeats, d), then the pairs merge.
Vec convert_Tile(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Shape& in = static_shape(c, x);
  const std::vector<int64_t> repeats = c.ints_input(1, "repeats");
  if (static_cast<int64_t>(repeats.size()) != x.rank()) c.invalid("one repeat per dimension");
  Shape wide, out;
  Axes dims;
  for (size_t i = 0; i < in.size(); ++i) {
    if (repeats[i] < 0) c.invalid("a negative repeat");
    wide.push_back(repeats[i]);
    dims.push_back(static_cast<int64_t>(wide.size()));
    wide.push_back(in[i]);
    out.push_back(repeats[i] * in[i]);
  }
  return {reshape(broadcast_in_dim(x, wide, dims), out)};
}

Vec convert_Shape(const NodeContext& c) {
  const Shape& s = static_shape(c, c.input(0));
  const int64_t r = static_cast<int64_t>(s.size());
  auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  const int64_t start = clampi(c.attr_int("start", 0));
  const int64_t end = clampi(c.attr_int("end", r));
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(s[i]);
  return {ints_tensor(dims)};
}

Vec convert_Size(const NodeContext& c) {
  static_shape(c, c.input(0));
  return {Tensor::scalar<int64_t>(c.input(0).size())};
}

Vec convert_ConstantOfShape(const NodeContext& c) {
  const std::vector<int64_t> shape = c.ints_input(0, "shape");
  Tensor value = c.has_attr("value") ? c.attr_tensor("value") : scalar_of(0, f32);
  if (value.size() != 1) c.invalid("value must hold one element");
  return {broadcast_to(reshape(value, Shape{}), Shape(shape.begin(), shape.end()))};
}

Vec convert_Constant(const NodeContext& c) {
  if (c.has_attr("value")) return {c.attr_tensor("value")};
  if (c.has_attr("value_float")) return {scalar_of(c.attr_float("value_float", 0), f32)};
  if (c.has_attr("value_int")) return {Tensor::scalar<int64_t>(c.attr_int("value_int", 0))};
  if (c.has_attr("value_floats")) return {Tensor::from_vector(c.attr_floats("value_floats"))};
  if (c.has_attr("value_ints")) return {ints_tensor(c.attr_ints("value_ints"))};
  c.unsupported("a Constant without a tensor, float or int value (sparse or string values)");
}

// Known start, limit and delta: ceil((limit - start) / delta) values start + i * delta.
Vec convert_Range(const NodeContext& c) {
  const Tensor& start = c.constant_input(0, "start");
  const double s = start.item<double>();
  const double l = c.constant_input(1, "limit").item<double>();
  const double d = c.constant_input(2, "delta").item<double>();
  if (d == 0) c.invalid("delta is 0");
  const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((l - s) / d)));
  Tensor i = iota(Shape{n}, 0, start.dtype());
  return {add(scalar_of(s, start.dtype()), mul(i, scalar_of(d, start.dtype())))};
}

// NCHW: (N, C, H, W) -> (N, C / b^2, H b, W b), depth in DCR (default) or CRD order.
Vec convert_DepthToSpace(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Shape& s = static_shape(c, x);
  if (s.size() != 4) c.unsupported("rank " + std::to_string(s.size()));
  const int64_t b = c.attr_int("blocksize", 0);
  if (b <= 0 || s[1] % (b * b)) c.invalid("bad blocksize");
  const int64_t n = s[0], ch = s[1] / (b * b), h = s[2], w = s[3];
  Tensor t;
  if (c.attr_string("mode", "DCR") == "CRD") {
    t = transpose(reshape(x, {n, ch, b, b, h, w}), {0, 1, 4, 2, 5, 3});
  } else {
    t = transpose(reshape(x, {n, b, b, ch, h, w}), {0, 3, 4, 1, 5, 2});
  }
  return {reshape(t, {n, ch, h * b, w * b})};
}

Vec convert_SpaceToDepth(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Shape& s = static_shape(c, x);
  if (s.size() != 4) c.unsupported("rank " + std::to_string(s.size()));
  const int64_t b = c.attr_int("blocksize", 0);
  if (b <= 0 || s[2] % b || s[3] % b) c.invalid("bad blocksize");
  const int64_t n = s[0], ch = s[1], h = s[2] / b, w = s[3] / b;
  Tensor t = transpose(reshape(x, {n, ch, h, b, w, b}), {0, 3, 5, 1, 2, 4});
  return {reshape(t, {n, ch * b * b, h, w})};
}

// The upper (col - row >= k) or lower (col - row <= k) triangle of the last two dimensions.
Vec convert_Trilu(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Shape& s = static_shape(c, x);
  if (s.size() < 2) c.invalid("the input needs two dimensions");
  int64_t k = 0;
  if (c.has_input(1)) k = c.ints_input(1, "k").at(0);
  const int64_t r = x.rank();
  Tensor diff = sub(iota(s, r - 1, i64), iota(s, r - 2, i64));
  Tensor keep = c.attr_int("upper", 1) ? greater_equal(diff, Tensor::scalar<int64_t>(k))
                                       : less_equal(diff, Tensor::scalar<int64_t>(k));
  return {where(keep, x, scalar_of(0, x.dtype()))};
}

Vec convert_EyeLike(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Shape& s = static_shape(c, x);
  if (s.size() != 2) c.invalid("the input must be 2-d");
  DType dtype = x.dtype();
  if (c.has_attr("dtype")) {
    const auto d = dtype_from_onnx(static_cast<int32_t>(c.attr_int("dtype", 0)));
    if (!d) c.unsupported("the dtype");
    dtype = *d;
  }
  Tensor diag = equal(sub(iota(s, 1, i64), iota(s, 0, i64)),
                      Tensor::scalar<int64_t>(c.attr_int("k", 0)));
  return {convert(diag, dtype)};
}

// values[1] where the (wrapped) index is the class, values[0] elsewhere; the class axis at
// `axis` of the output.
Vec convert_OneHot(const NodeContext& c) {
  Tensor idx = c.input(0);
  const double depth_value = c.constant_input(1, "depth").item<double>();
  const int64_t depth = static_cast<int64_t>(depth_value);
  if (depth < 1) c.invalid("depth must be positive");
  const Tensor& values = c.input(2);
  if (values.size() != 2) c.invalid("values must hold two elements");
  if (!is_integer(idx.dtype())) idx = convert(idx, i64);
  idx = where(less(idx, scalar_of(0, idx.dtype())), add(idx, scalar_of(depth, idx.dtype())), idx);
  Tensor hot = one_hot(idx, depth, bool_);  // classes on the last axis
  const int64_t out_rank = idx.rank() + 1;
  const int64_t axis = normalize_axis(c, c.attr_int("axis", -1), out_rank);
  if (axis != out_rank - 1) {
    Axes perm;
    for (int64_t i = 0; i < out_rank - 1; ++i) {
      if (i == axis) perm.push_back(out_rank - 1);
      perm.push_back(i);
    }
    hot = transpose(hot, perm);
  }
  Tensor off = reshape(slice(values, {0}, {1}), Shape{});
  Tensor on = reshape(slice(values, {1}, {2}), Shape{});
  return {where(hot, on, off)};
}

// `len` elements of the sequence that repeats y (period `period` along `axis`) from `start`.
Tensor periodic_window(const Tensor& y, int64_t axis, int64_t period, int64_t start, int64_t len) {
  std::vector<Tensor> pieces;
  const Shape& s = y.shape();
  for (start %= period; len > 0; start = 0) {
    const int64_t take = std::min(len, period - start);
    Axes lo(s.size(), 0), hi(s);
    lo[axis] = start;
    hi[axis] = start + take;
    pieces.push_back(slice(y, lo, hi));
    len -= take;
  }
  return pieces.size() == 1 ? pieces[0] : concatenate(pieces, axis);
}

// Pads one axis by repeating the edge, reflecting without the edge, or wrapping around; the
// reflected and wrapped extensions are periodic, so pads of any length are slices of repeats.
Tensor pad_axis(const NodeContext& c, const Tensor& x, int64_t axis, int64_t low, int64_t high,
                const std::string& mode) {
  if (low == 0 && high == 0) return x;
  const int64_t n = x.shape()[axis];
  if (n == 0) c.invalid("mode '" + mode + "' cannot pad an empty dimension");
  Tensor y = x;  // one period of the extension
  int64_t period = n;
  if (mode == "edge" || (mode == "reflect" && n == 1)) {
    Shape one(x.shape());
    Axes lo(one.size(), 0), hi(one);
    lo[axis] = n - 1;
    const Tensor last = slice(x, lo, hi);
    lo[axis] = 0;
    hi[axis] = 1;
    const Tensor first = slice(x, lo, hi);
    std::vector<Tensor> parts;
    one[axis] = low;
    if (low > 0) parts.push_back(broadcast_to(first, one));
    parts.push_back(x);
    one[axis] = high;
    if (high > 0) parts.push_back(broadcast_to(last, one));
    return concatenate(parts, axis);
  }
  if (mode == "reflect") {  // x, then x reversed without its ends: period 2n - 2
    Axes lo(x.rank(), 0), hi(x.shape());
    lo[axis] = 1;
    hi[axis] = n - 1;
    y = concatenate({x, slice(reverse(x, {axis}), lo, hi)}, axis);
    period = 2 * n - 2;
  }
  std::vector<Tensor> parts;
  if (low > 0) parts.push_back(periodic_window(y, axis, period, period - low % period, low));
  parts.push_back(x);
  if (high > 0) parts.push_back(periodic_window(y, axis, period, n, high));
  return concatenate(parts, axis);
}

Vec pad_with(const NodeContext& c, const std::vector<int64_t>& pads, double value) {
  const Tensor& x = c.input(0);
  const int64_t r = x.rank();
  if (static_cast<int64_t>(pads.size()) != 2 * r) c.invalid("pads must hold 2 * rank values");
  const std::string mode = c.attr_string("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "wrap")
    c.invalid("mode '" + mode + "'");
  Axes low(pads.begin(), pads.begin() + r), high(pads.begin() + r, pads.end());
  Tensor y = x;
  // Negative pads crop.
  Axes start(r, 0), limit(r, kUnknownDim);
  bool crop = false;
  for (int64_t i = 0; i < r; ++i) {
    if (low[i] < 0 || high[i] < 0) {
      const int64_t dim = static_shape(c, x)[i];
      start[i] = low[i] < 0 ? -low[i] : 0;
      limit[i] = high[i] < 0 ? dim + high[i] : dim;
      low[i] = std::max<int64_t>(low[i], 0);
      high[i] = std::max<int64_t>(high[i], 0);
      crop = true;
    }
  }
  if (crop) {
    for (int64_t i = 0; i < r; ++i)
      if (limit[i] == kUnknownDim) limit[i] = static_shape(c, x)[i];
    y = slice(y, start, limit);
  }
  if (mode == "constant") return {pad(y, low, high, value)};
  static_shape(c, y);
  for (int64_t i = 0; i < r; ++i) y = pad_axis(c, y, i, low[i], high[i], mode);
  return {y};
}

Vec convert_Pad2(const NodeContext& c) {
  return pad_with(c, c.attr_ints("pads"), c.attr_float("value", 0));
}

// Opset 18 adds `axes`: the pads then name only those axes.
Vec convert_Pad11(const NodeContext& c) {
  double value = 0;
  if (c.has_input(2)) value = c.constant_input(2, "constant_value").item<double>();
  std::vector<int64_t> pads = c.ints_input(1, "pads");
  if (!c.has_input(3)) return pad_with(c, pads, value);
  const std::vector<int64_t> axes = c.ints_input(3, "axes");
  const int64_t r = c.input(0).rank();
  const size_t na = axes.size();
  if (pads.size() != 2 * na) c.invalid("pads must hold 2 values per axis in axes");
  std::vector<int64_t> full(2 * r, 0);
  for (size_t i = 0; i < na; ++i) {
    const int64_t a = normalize_axis(c, axes[i], r);
    full[a] = pads[i];
    full[r + a] = pads[na + i];
  }
  return pad_with(c, full, value);
}

// Inference: the identity, and a mask of trues. Training mode (random masks) is not imported.
Vec convert_Dropout(const NodeContext& c) {
  const Tensor& x = c.input(0);
  bool training = false;
  if (c.has_input(2)) training = c.constant_input(2, "training_mode").item<double>() != 0;
  double ratio = c.attr_float("ratio", 0.5);
  if (c.has_input(1)) ratio = c.constant_input(1, "ratio").item<double>();
  if (training && ratio != 0) c.unsupported("training mode (a random mask)");
  Vec outs{x};
  if (c.wants_output(1)) outs.push_back(broadcast_to(Tensor::scalar<bool>(true), x.shape()));
  return outs;
}

}  // namespace kiln::onnx::internal
