// ONNX's linear quantization: QuantizeLinear and DequantizeLinear, per tensor or per axis, to and
// from 8-bit integers (Kiln has no float8 or 16-bit integer dtypes), and DynamicQuantizeLinear.
#include "interop/onnx_converters.h"
#include "kiln/error.h"

namespace kiln::onnx::internal {
namespace {

using Vec = std::vector<Tensor>;

// A scale or zero point shaped to broadcast against x: a scalar, or a vector along `axis`.
Tensor along_axis(const NodeContext& c, const Tensor& t, const Tensor& x, const char* what) {
  const Shape& s = static_shape(c, t);
  if (s.empty() || (s.size() == 1 && s[0] == 1)) return reshape(t, Shape{});
  const int64_t axis = normalize_axis(c, c.attr_int("axis", 1), x.rank());
  if (s.size() != 1 || s[0] != static_shape(c, x)[axis]) {
    c.invalid(std::string("the ") + what + " " + shape_str(s) + " must be a scalar or hold one " +
              "value per element of axis " + std::to_string(axis) + " of " + shape_str(x.shape()));
  }
  Shape shape(x.rank(), 1);
  shape[axis] = s[0];
  return reshape(t, shape);
}

Tensor zero_point(const NodeContext& c, const Tensor& x, DType fallback) {
  if (!c.has_input(2)) return scalar_of(0, fallback);
  return along_axis(c, c.input(2), x, "zero point");
}

}  // namespace

// round_half_to_even(x / scale) + zero_point, saturated to the zero point's dtype (u8 when it
// is left out).
Vec convert_QuantizeLinear(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Tensor zp = zero_point(c, x, u8);
  const DType to = zp.dtype();
  if (to != u8 && to != i8) c.unsupported(std::string("quantizing to ") + dtype_name(to));
  const DType f = x.dtype() == f64 ? f64 : f32;
  const Tensor scale = convert(along_axis(c, c.input(1), x, "scale"), f);
  Tensor q = add(round(div(convert(x, f), scale)), convert(zp, f));
  q = to == u8 ? clamp(q, 0, 255) : clamp(q, -128, 127);
  return {convert(q, to)};
}

// (x - zero_point) * scale, in the scale's dtype.
Vec convert_DequantizeLinear(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Tensor scale = along_axis(c, c.input(1), x, "scale");
  if (!is_floating(scale.dtype())) c.invalid("the scale must be a float");
  const DType f = scale.dtype();
  const Tensor zp = zero_point(c, x, x.dtype());
  if (zp.dtype() != x.dtype()) c.invalid("the zero point must have the dtype of x");
  return {mul(sub(convert(x, f), convert(zp, f)), scale)};
}

// u8 quantization over x's range widened to include 0: scale (max - min) / 255 and the zero
// point that maps min to 0.
Vec convert_DynamicQuantizeLinear(const NodeContext& c) {
  const Tensor x = convert(c.input(0), f32);
  const Tensor zero = scalar_of(0, f32);
  const Tensor lo = minimum(min(x), zero), hi = maximum(max(x), zero);
  const Tensor scale = div(sub(hi, lo), scalar_of(255, f32));
  const Tensor zp = clamp(round(neg(div(lo, scale))), 0, 255);
  const Tensor q = clamp(add(round(div(x, scale)), zp), 0, 255);
  return {convert(q, u8), scale, convert(zp, u8)};
}

}  // namespace kiln::onnx::internal
