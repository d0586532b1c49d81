// ONNX's Resize and Upsample. Shapes are static, so for each resized axis the importer works
// out in plain C++ which input positions and weights make each output position (a table of
// taps); the graph then only gathers and sums, one axis at a time (the filters are separable).
// The arithmetic follows ONNX's reference implementation, which made the conformance data.
#include <algorithm>
#include <cmath>

#include "interop/onnx_converters.h"
#include "kiln/error.h"

namespace kiln::onnx::internal {
namespace {

using Vec = std::vector<Tensor>;

struct Interp {
  std::string mode = "nearest";  // nearest, linear, cubic
  std::string transform = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;
  double extrapolation = 0;
};

// Output position x of an axis in input coordinates. `scale` is the axis's scale, `out` its
// integer output length; [lo, hi] the crop of tf_crop_and_resize.
double source_coord(const Interp& p, int64_t x, int64_t in, int64_t out, double scale, double lo,
                    double hi) {
  // The reference uses the unrounded output length in_size * scale here.
  const double width = scale * static_cast<double>(in);
  const double xd = static_cast<double>(x), last = static_cast<double>(in - 1);
  const std::string& t = p.transform;
  if (t == "half_pixel") return (xd + 0.5) / scale - 0.5;
  if (t == "asymmetric") return xd / scale;
  if (t == "align_corners") return width == 1 ? 0 : xd * last / (width - 1);
  if (t == "pytorch_half_pixel") return width == 1 ? -0.5 : (xd + 0.5) / scale - 0.5;
  if (t == "tf_half_pixel_for_nn") return (xd + 0.5) / scale;
  if (t == "half_pixel_symmetric") {
    const double center = static_cast<double>(in) / 2;
    return center * (1 - static_cast<double>(out) / width) + (xd + 0.5) / scale - 0.5;
  }
  // tf_crop_and_resize
  const double start = lo * last;
  if (width == 1) return start + (hi - lo) * last / 2;
  return start + xd * (hi - lo) * last / (width - 1);
}

double cubic_kernel(double d, double a) {
  d = std::abs(d);
  if (d <= 1) return ((a + 2) * d - (a + 3)) * d * d + 1;
  if (d < 2) return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
  return 0;
}

// The weights of the taps floor(x) + first, ..., floor(x) + first + n - 1 around a source
// coordinate whose fractional part is `ratio` (in (0, 1]: an integer x counts as ratio 1 from
// x - 1). Downscaling with antialias widens the filter by 1 / scale.
std::vector<double> tap_weights(const Interp& p, double ratio, double scale) {
  if (p.mode == "nearest") {
    bool up;  // the tap after floor(x)
    if (ratio == 1 || p.nearest == "ceil")
      up = true;
    else if (p.nearest == "floor")
      up = false;
    else if (p.nearest == "round_prefer_ceil")
      up = ratio >= 0.5;
    else
      up = ratio > 0.5;
    return {up ? 0.0 : 1.0, up ? 1.0 : 0.0};
  }
  const double s = p.antialias ? std::min(scale, 1.0) : 1.0;
  const bool linear = p.mode == "linear";
  const int64_t first = static_cast<int64_t>(std::floor((linear ? -1 : -2) / s)) + 1;
  std::vector<double> w;
  double total = 0;
  for (int64_t i = first; i < 2 - first; ++i) {
    const double d = (static_cast<double>(i) - ratio) * s;
    w.push_back(linear ? std::max(0.0, 1 - std::abs(d)) : cubic_kernel(d, p.cubic_a));
    total += w.back();
  }
  if (p.antialias)
    for (double& v : w) v /= total;
  return w;
}

// For each output position of one axis: n input indices and weights, and whether it falls
// outside the crop (tf_crop_and_resize gives those the extrapolation value).
struct Taps {
  int64_t n = 0;
  std::vector<int64_t> index;  // [out, n]
  std::vector<float> weight;   // [out, n]
  std::vector<uint8_t> outside;
  bool any_outside = false;
};

Taps axis_taps(const Interp& p, int64_t in, int64_t out, double scale, double lo, double hi) {
  Taps t;
  for (int64_t x = 0; x < out; ++x) {
    const double src = source_coord(p, x, in, out, scale, lo, hi);
    const bool outside = p.transform == "tf_crop_and_resize" && (src < 0 || src > in - 1);
    const double ratio = src == std::floor(src) ? 1 : src - std::floor(src);
    std::vector<double> w = tap_weights(p, ratio, scale);
    const int64_t n = static_cast<int64_t>(w.size());
    // The n nearest positions of the input padded by n / 2 edge copies (ties to the lower).
    const int64_t pad = (n + 1) / 2;
    const int64_t start = std::clamp<int64_t>(
        static_cast<int64_t>(std::ceil(src + static_cast<double>(pad) - n / 2.0)), 0,
        in + 2 * pad - n);
    std::vector<int64_t> idx(n);
    for (int64_t j = 0; j < n; ++j) idx[j] = start + j - pad;
    if (p.exclude_outside && p.mode != "nearest") {
      double total = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (idx[j] < 0 || idx[j] >= in) w[j] = 0;
        total += w[j];
      }
      for (double& v : w) v /= total;
    }
    for (int64_t& i : idx) i = std::clamp<int64_t>(i, 0, in - 1);
    if (p.mode == "nearest") {  // one tap: the one weighted 1
      idx = {w[0] == 1 ? idx[0] : idx[1]};
      w = {1};
    }
    t.n = static_cast<int64_t>(w.size());
    t.index.insert(t.index.end(), idx.begin(), idx.end());
    t.weight.insert(t.weight.end(), w.begin(), w.end());
    t.outside.push_back(outside);
    t.any_outside |= outside;
  }
  return t;
}

// Taps that copy the axis unchanged (each output x takes all its weight from input x).
bool is_identity(const Taps& t, int64_t in, int64_t out) {
  if (in != out || t.any_outside) return false;
  for (int64_t x = 0; x < out; ++x) {
    float on = 0;
    for (int64_t j = 0; j < t.n; ++j) {
      const float w = t.weight[x * t.n + j];
      if (t.index[x * t.n + j] == x)
        on += w;
      else if (w != 0)
        return false;
    }
    if (on != 1.0f) return false;
  }
  return true;
}

// x with `axis` resampled by the taps: one gather of [out, n] indices, weighted and summed.
Tensor resample_axis(const Tensor& x, int64_t axis, const Taps& t, double extrapolation) {
  const int64_t out = static_cast<int64_t>(t.outside.size());
  const int64_t r = x.rank();
  Tensor y;
  if (t.n == 1) {
    y = gather(x, Tensor::from_vector(t.index), axis);
  } else {
    Tensor taken = gather(x, Tensor::from_vector(t.index, {out, t.n}), axis);
    Shape wshape(r + 1, 1);
    wshape[axis] = out;
    wshape[axis + 1] = t.n;
    const Tensor w = convert(Tensor::from_vector(t.weight, wshape), x.dtype());
    y = sum(mul(taken, w), {axis + 1});
  }
  if (!t.any_outside) return y;
  Shape mshape(r, 1);
  mshape[axis] = out;
  std::vector<bool> mask(t.outside.begin(), t.outside.end());
  return where(Tensor::from_vector(mask, mshape), scalar_of(extrapolation, y.dtype()), y);
}

struct Target {
  std::vector<double> scales;  // per resized axis; empty when sizes are given
  std::vector<int64_t> sizes;
  std::vector<double> roi;  // starts then ends, per resized axis; may be empty
  Axes axes;                // empty: all
  std::string policy = "stretch";
};

Tensor resize(const NodeContext& c, const Tensor& input, const Interp& p, Target t) {
  const Shape& in = static_shape(c, input);
  const int64_t r = input.rank();
  if (t.axes.empty())
    for (int64_t i = 0; i < r; ++i) t.axes.push_back(i);
  for (int64_t& a : t.axes) a = normalize_axis(c, a, r);
  const size_t na = t.axes.size();
  std::vector<double> scale(r, 1.0), lo(r, 0.0), hi(r, 1.0);
  Shape out(in);
  if (!t.sizes.empty()) {
    if (t.sizes.size() != na) c.invalid("sizes must hold one value per resized axis");
    for (size_t i = 0; i < na; ++i) {
      if (t.sizes[i] <= 0) c.invalid("sizes must be positive");
      scale[t.axes[i]] = static_cast<double>(t.sizes[i]) / static_cast<double>(in[t.axes[i]]);
      out[t.axes[i]] = t.sizes[i];
    }
    if (t.policy != "stretch") {
      if (t.policy != "not_larger" && t.policy != "not_smaller")
        c.invalid("keep_aspect_ratio_policy '" + t.policy + "'");
      double common = scale[t.axes[0]];
      for (int64_t a : t.axes)
        common = t.policy == "not_larger" ? std::min(common, scale[a]) : std::max(common, scale[a]);
      for (int64_t a : t.axes) {
        scale[a] = common;
        out[a] = static_cast<int64_t>(common * static_cast<double>(in[a]) + 0.5);
      }
    }
  } else {
    if (t.scales.size() != na) c.invalid("scales must hold one value per resized axis");
    for (size_t i = 0; i < na; ++i) {
      if (!(t.scales[i] > 0)) c.invalid("scales must be positive");
      scale[t.axes[i]] = t.scales[i];
      out[t.axes[i]] = static_cast<int64_t>(t.scales[i] * static_cast<double>(in[t.axes[i]]));
    }
  }
  if (p.transform == "tf_crop_and_resize") {
    if (t.roi.size() != 2 * na) c.invalid("roi must hold a start and an end per resized axis");
    for (size_t i = 0; i < na; ++i) {
      lo[t.axes[i]] = t.roi[i];
      hi[t.axes[i]] = t.roi[na + i];
    }
  }
  if (p.mode != "nearest" && p.mode != "linear" && p.mode != "cubic")
    c.invalid("mode '" + p.mode + "'");
  // Interpolation computes in floating point; integers truncate back, as the reference's
  // astype does.
  const bool as_float = p.mode != "nearest" && !is_floating(input.dtype());
  const bool widen = p.mode != "nearest" && (input.dtype() == f16 || input.dtype() == bf16);
  Tensor x = as_float || widen ? convert(input, f32) : input;
  // Innermost axis first: the reference interpolates the inner axes of each outer sample,
  // which matters where a crop's outside value meets interpolation.
  for (int64_t a = r - 1; a >= 0; --a) {
    if (in[a] == 0 || out[a] == 0) {
      if (in[a] != out[a]) c.unsupported("resizing an empty dimension");
      continue;
    }
    const Taps taps = axis_taps(p, in[a], out[a], scale[a], lo[a], hi[a]);
    if (is_identity(taps, in[a], out[a])) continue;
    x = resample_axis(x, a, taps, p.extrapolation);
  }
  return x.dtype() == input.dtype() ? x : convert(x, input.dtype());
}

// A float vector input, absent when left out or empty (as Resize allows for roi and scales).
std::vector<double> floats_input(const NodeContext& c, size_t i, const char* what) {
  if (!c.has_input(i) || (c.input(i).rank() == 1 && c.input(i).shape()[0] == 0)) return {};
  return c.constant_input(i, what).to_vector<double>();
}

// Upsample and Resize-10: nearest takes the floor of the asymmetric source coordinate.
Interp legacy_interp(const NodeContext& c) {
  Interp p;
  p.mode = c.attr_string("mode", "nearest");
  if (p.mode == "bilinear") p.mode = "linear";
  if (p.mode != "nearest" && p.mode != "linear") c.invalid("mode '" + p.mode + "'");
  p.transform = "asymmetric";
  p.nearest = "floor";
  return p;
}

}  // namespace

Vec convert_Resize(const NodeContext& c) {
  const Tensor& x = c.input(0);
  if (c.opset() < 11) {
    Target t;
    t.scales = floats_input(c, 1, "scales");
    return {resize(c, x, legacy_interp(c), t)};
  }
  Interp p;
  p.mode = c.attr_string("mode", "nearest");
  p.transform = c.attr_string("coordinate_transformation_mode", "half_pixel");
  p.nearest = c.attr_string("nearest_mode", "round_prefer_floor");
  p.cubic_a = c.attr_float("cubic_coeff_a", -0.75f);
  p.exclude_outside = c.attr_int("exclude_outside", 0) != 0;
  p.antialias = c.attr_int("antialias", 0) != 0;
  p.extrapolation = c.attr_float("extrapolation_value", 0);
  static const char* const kTransforms[] = {
      "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
      "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  if (std::find(std::begin(kTransforms), std::end(kTransforms), p.transform) ==
      std::end(kTransforms))
    c.invalid("coordinate_transformation_mode '" + p.transform + "'");
  static const char* const kNearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                         "ceil"};
  if (std::find(std::begin(kNearest), std::end(kNearest), p.nearest) == std::end(kNearest))
    c.invalid("nearest_mode '" + p.nearest + "'");
  Target t;
  if (p.transform == "tf_crop_and_resize") t.roi = floats_input(c, 1, "roi");
  t.scales = floats_input(c, 2, "scales");
  if (c.has_input(3) && c.input(3).size() > 0) t.sizes = c.ints_input(3, "sizes");
  if (t.scales.empty() == t.sizes.empty()) c.invalid("give exactly one of scales and sizes");
  t.axes = c.attr_ints("axes");
  t.policy = c.attr_string("keep_aspect_ratio_policy", "stretch");
  return {resize(c, x, p, t)};
}

// Upsample-7 takes its scales as an attribute, Upsample-9 as an input.
Vec convert_Upsample(const NodeContext& c) {
  Target t;
  if (c.opset() < 9) {
    for (float s : c.attr_floats("scales")) t.scales.push_back(s);
  } else {
    t.scales = floats_input(c, 1, "scales");
  }
  return {resize(c, c.input(0), legacy_interp(c), t)};
}

}  // namespace kiln::onnx::internal
