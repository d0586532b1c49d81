// ONNX's activations, convolutions, pooling, normalizations and losses as Kiln ops. ONNX is
// channels-first (NCHW, kernels OIHW); Kiln's convolution is channels-last (NHWC, HWIO), so a
// Conv transposes around it and the compiler folds what it can.
#include <algorithm>
#include <cmath>
#include <limits>

#include "interop/onnx_converters.h"
#include "kiln/error.h"

namespace kiln::onnx::internal {
namespace {

using Vec = std::vector<Tensor>;

Tensor s(double v, const Tensor& like) { return scalar_of(v, like.dtype()); }

// Softmax-like ops before opset 13 work on x coerced to 2-d at `axis` (default 1).
template <class F>
Vec coerced(const NodeContext& c, F f) {
  const Tensor& x = c.input(0);
  const Shape& shape = static_shape(c, x);
  const int64_t r = x.rank();
  int64_t axis = c.attr_int("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) c.invalid("axis out of range");
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? outer : inner) *= shape[i];
  return {reshape(f(reshape(x, {outer, inner}), 1), shape)};
}

Tensor hardmax(const Tensor& x, int64_t axis) {
  Tensor first = argmax(x, axis, true);
  return convert(equal(iota(x.shape(), axis, i64), first), x.dtype());
}

// Channels-first <-> channels-last permutations for rank r.
Axes to_last(int64_t r) {
  Axes p{0};
  for (int64_t i = 2; i < r; ++i) p.push_back(i);
  p.push_back(1);
  return p;
}
Axes to_first(int64_t r) {
  Axes p{0, r - 1};
  for (int64_t i = 1; i < r - 1; ++i) p.push_back(i);
  return p;
}

struct Window {
  Axes kernel, strides, dilations, low, high;
};

// The spatial window of a Conv or pool: kernel, strides, dilations and padding (explicit pads or
// auto_pad), for `in` spatial sizes.
Window window_of(const NodeContext& c, const Shape& in, const Axes& kernel) {
  const size_t n = in.size();
  Window w;
  w.kernel = kernel;
  w.strides = c.attr_ints("strides", Axes(n, 1));
  w.dilations = c.attr_ints("dilations", Axes(n, 1));
  const Axes pads = c.attr_ints("pads", Axes(2 * n, 0));
  if (w.strides.size() != n || w.dilations.size() != n || pads.size() != 2 * n)
    c.invalid("strides, dilations or pads do not match the spatial rank");
  w.low.assign(pads.begin(), pads.begin() + n);
  w.high.assign(pads.begin() + n, pads.end());
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "VALID") {
    w.low.assign(n, 0);
    w.high.assign(n, 0);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < n; ++i) {
      const int64_t out = (in[i] + w.strides[i] - 1) / w.strides[i];
      const int64_t k = (kernel[i] - 1) * w.dilations[i] + 1;
      const int64_t total = std::max<int64_t>(0, (out - 1) * w.strides[i] + k - in[i]);
      const int64_t small = total / 2;
      w.low[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      w.high[i] = total - w.low[i];
    }
  } else if (auto_pad != "NOTSET") {
    c.invalid("auto_pad '" + auto_pad + "'");
  }
  return w;
}

Axes spatial(const Shape& s) { return Axes(s.begin() + 2, s.end()); }

// Input i, a per-channel (C) vector of x = input 0 (N, C, ...), as (C, 1, ..., 1).
Tensor channel_param(const NodeContext& c, int i) {
  const Tensor& x = c.input(0);
  const Tensor& p = c.input(i);
  if (x.rank() < 2 || p.rank() != 1 || p.dim(0) != x.dim(1)) {
    c.invalid("input " + std::to_string(i) + " is " + shape_str(p.shape()) +
              ", not one value per channel of input 0, " + shape_str(x.shape()));
  }
  Shape shape{p.dim(0)};
  for (int64_t d = 2; d < x.rank(); ++d) shape.push_back(1);
  return reshape(p, shape);
}

// Negative log-likelihood of `logp` (N, C, d...) at `target` (N, d...), weighted and reduced.
Tensor nll(const NodeContext& c, const Tensor& logp, const Tensor& target, const Tensor& weight) {
  const int64_t classes = static_shape(c, logp)[1];
  const int64_t r = logp.rank();
  Tensor t = target;
  Tensor keep;
  if (c.has_attr("ignore_index")) {
    keep = not_equal(t, scalar_of(static_cast<double>(c.attr_int("ignore_index", 0)), t.dtype()));
    t = where(keep, t, scalar_of(0, t.dtype()));
  }
  Tensor hot = one_hot(t, classes, logp.dtype());  // (N, d..., C)
  if (r > 2) hot = transpose(hot, to_first(r));
  Tensor loss = neg(sum(mul(logp, hot), {1}));
  Tensor w = weight.defined() ? gather(weight, t) : ones_like(loss);
  if (keep.defined()) w = mul(w, convert(keep, w.dtype()));
  loss = mul(loss, w);
  const std::string reduction = c.attr_string("reduction", "mean");
  if (reduction == "none") return loss;
  if (reduction == "sum") return sum(loss);
  if (reduction != "mean") c.invalid("reduction '" + reduction + "'");
  return div(sum(loss), sum(w));
}

}  // namespace

Vec convert_Relu(const NodeContext& c) { return {relu(c.input(0))}; }
Vec convert_LeakyRelu(const NodeContext& c) {
  const Tensor& x = c.input(0);
  return {where(less(x, s(0, x)), mul(x, s(c.attr_float("alpha", 0.01f), x)), x)};
}
Vec convert_Elu(const NodeContext& c) {
  const Tensor& x = c.input(0);
  return {where(less(x, s(0, x)), mul(s(c.attr_float("alpha", 1), x), expm1(x)), x)};
}
Vec convert_Selu(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const double alpha = c.attr_float("alpha", 1.67326319217681884765625f);
  const double gamma = c.attr_float("gamma", 1.05070102214813232421875f);
  Tensor neg_part = mul(s(alpha, x), expm1(x));
  return {mul(s(gamma, x), where(less_equal(x, s(0, x)), neg_part, x))};
}
Vec convert_Celu(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const double alpha = c.attr_float("alpha", 1);
  Tensor e = mul(s(alpha, x), expm1(div(x, s(alpha, x))));
  return {add(maximum(x, s(0, x)), minimum(e, s(0, x)))};
}
Vec convert_HardSigmoid(const NodeContext& c) {
  const Tensor& x = c.input(0);
  Tensor y = add(mul(x, s(c.attr_float("alpha", 0.2f), x)), s(c.attr_float("beta", 0.5f), x));
  return {minimum(maximum(y, s(0, x)), s(1, x))};
}
Vec convert_HardSwish(const NodeContext& c) {
  const Tensor& x = c.input(0);
  Tensor y = add(mul(x, s(1.0 / 6, x)), s(0.5, x));
  return {mul(x, minimum(maximum(y, s(0, x)), s(1, x)))};
}
Vec convert_Softplus(const NodeContext& c) { return {softplus(c.input(0))}; }
Vec convert_Softsign(const NodeContext& c) {
  const Tensor& x = c.input(0);
  return {div(x, add(s(1, x), abs(x)))};
}
Vec convert_ThresholdedRelu(const NodeContext& c) {
  const Tensor& x = c.input(0);
  return {where(greater(x, s(c.attr_float("alpha", 1), x)), x, s(0, x))};
}
Vec convert_PRelu(const NodeContext& c) {
  const Tensor& x = c.input(0);
  return {where(less(x, s(0, x)), mul(x, c.input(1)), x)};
}
Vec convert_Shrink(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const double bias = c.attr_float("bias", 0), lambd = c.attr_float("lambd", 0.5f);
  Tensor y = where(less(x, s(-lambd, x)), add(x, s(bias, x)), s(0, x));
  return {where(greater(x, s(lambd, x)), sub(x, s(bias, x)), y)};
}

Vec convert_Softmax1(const NodeContext& c) {
  return coerced(c, [](const Tensor& x, int64_t a) { return softmax(x, a); });
}
Vec convert_LogSoftmax1(const NodeContext& c) {
  return coerced(c, [](const Tensor& x, int64_t a) { return log_softmax(x, a); });
}
Vec convert_Hardmax1(const NodeContext& c) { return coerced(c, hardmax); }
Vec convert_Softmax13(const NodeContext& c) {
  return {softmax(c.input(0), c.attr_int("axis", -1))};
}
Vec convert_LogSoftmax13(const NodeContext& c) {
  return {log_softmax(c.input(0), c.attr_int("axis", -1))};
}
Vec convert_Hardmax13(const NodeContext& c) {
  const Tensor& x = c.input(0);
  return {hardmax(x, normalize_axis(c, c.attr_int("axis", -1), x.rank()))};
}

// NC... input, (M, C/group, k...) kernel, optional (M) bias.
Vec convert_Conv(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Tensor& w = c.input(1);
  const Shape& xs = static_shape(c, x);
  const Shape& ws = static_shape(c, w);
  const int64_t r = x.rank();
  if (r < 3 || w.rank() != r) c.invalid("input and kernel ranks");
  const Window win = window_of(c, spatial(xs), c.attr_ints("kernel_shape", spatial(ws)));
  ConvOptions o;
  o.strides = win.strides;
  o.dilation = win.dilations;
  o.padding_low = win.low;
  o.padding_high = win.high;
  o.groups = c.attr_int("group", 1);
  Axes kperm;  // (M, C/g, k...) -> (k..., C/g, M)
  for (int64_t i = 2; i < r; ++i) kperm.push_back(i);
  kperm.push_back(1);
  kperm.push_back(0);
  Tensor y = conv(transpose(x, to_last(r)), transpose(w, kperm), o);
  if (c.has_input(2)) y = add(y, c.input(2));  // channels last: the bias broadcasts
  return {transpose(y, to_first(r))};
}

// The gradient of a convolution as a convolution: the input dilated by the strides, padded by
// the kernel's extent less the pads, and the kernel flipped with its channel axes swapped.
Vec convert_ConvTranspose(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Tensor& w = c.input(1);
  const Shape& xs = static_shape(c, x);
  const Shape& ws = static_shape(c, w);
  const int64_t r = x.rank();
  const int64_t n = r - 2;
  if (r < 3 || w.rank() != r) c.invalid("input and kernel ranks");
  const int64_t groups = c.attr_int("group", 1);
  const Axes kernel = c.attr_ints("kernel_shape", spatial(ws));
  const Axes strides = c.attr_ints("strides", Axes(n, 1));
  const Axes dil = c.attr_ints("dilations", Axes(n, 1));
  Axes out_pad = c.attr_ints("output_padding", Axes(n, 0));
  Axes pads = c.attr_ints("pads", Axes(2 * n, 0));
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (strides.size() != static_cast<size_t>(n) || dil.size() != static_cast<size_t>(n) ||
      out_pad.size() != static_cast<size_t>(n) || pads.size() != static_cast<size_t>(2 * n))
    c.invalid("strides, dilations, output_padding or pads do not match the spatial rank");
  const Axes out_shape = c.attr_ints("output_shape");
  if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t want = out_shape.empty() ? xs[2 + i] * strides[i]
                                             : out_shape[out_shape.size() - n + i];
      const int64_t total =
          strides[i] * (xs[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1 - want;
      if (total < 0) {
        out_pad[i] -= total;  // more output than the pads allow: extend the end
        pads[i] = pads[n + i] = 0;
        continue;
      }
      const bool upper = auto_pad != "SAME_LOWER";
      pads[i] = upper ? total / 2 : total - total / 2;
      pads[n + i] = total - pads[i];
    }
  } else if (auto_pad == "VALID") {
    pads.assign(2 * n, 0);
  }
  ConvOptions o;
  o.lhs_dilation = strides;
  o.dilation = dil;
  o.groups = groups;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t extent = (kernel[i] - 1) * dil[i];
    o.padding_low.push_back(extent - pads[i]);
    o.padding_high.push_back(extent - pads[n + i] + out_pad[i]);
    if (o.padding_low.back() < 0 || o.padding_high.back() < 0)
      c.unsupported("pads larger than the kernel's extent");
  }
  // (C, M/g, k...) -> (g, C/g, M/g, k...) -> (k..., C/g, g, M/g) -> (k..., C/g, M).
  const int64_t cin = ws[0], mg = ws[1];
  if (cin % groups) c.invalid("channels do not divide into groups");
  Shape split{groups, cin / groups, mg};
  Axes perm, flip;
  for (int64_t i = 0; i < n; ++i) {
    split.push_back(ws[2 + i]);
    perm.push_back(3 + i);
    flip.push_back(i);
  }
  perm.insert(perm.end(), {1, 0, 2});
  Shape kshape(ws.begin() + 2, ws.end());
  kshape.insert(kshape.end(), {cin / groups, groups * mg});
  Tensor k = reverse(reshape(transpose(reshape(w, split), perm), kshape), flip);
  Tensor y = conv(transpose(x, to_last(r)), k, o);
  if (c.has_input(2)) y = add(y, c.input(2));
  return {transpose(y, to_first(r))};
}

namespace {

// A pool's window over the whole NC... operand, with ceil_mode's extra rows at the end.
WindowOptions pool_window(const NodeContext& c, const Shape& xs, Axes* explicit_high) {
  const Axes kernel = c.attr_ints("kernel_shape");
  if (kernel.size() + 2 != xs.size()) c.invalid("kernel_shape does not match the input's rank");
  const Window w = window_of(c, spatial(xs), kernel);
  for (int64_t d : w.dilations)
    if (d != 1) c.unsupported("dilations");
  WindowOptions o{{1, 1}, {1, 1}, {0, 0}, {0, 0}};
  *explicit_high = {0, 0};
  for (size_t i = 0; i < kernel.size(); ++i) {
    const int64_t in = xs[2 + i] + w.low[i] + w.high[i];
    int64_t high = w.high[i];
    if (c.attr_int("ceil_mode", 0)) {
      const int64_t out = (in - kernel[i] + w.strides[i] - 1) / w.strides[i] + 1;
      // A last window must start inside the input or its low padding.
      const int64_t last = (out - 1) * w.strides[i] < xs[2 + i] + w.low[i] ? out : out - 1;
      high = std::max(high, (last - 1) * w.strides[i] + kernel[i] - xs[2 + i] - w.low[i]);
    }
    o.window.push_back(kernel[i]);
    o.strides.push_back(w.strides[i]);
    o.padding_low.push_back(w.low[i]);
    o.padding_high.push_back(high);
    explicit_high->push_back(w.high[i]);
  }
  return o;
}

}  // namespace

namespace {

// The lowest value of x's dtype, which padding never wins a max with.
double lowest(DType dt) {
  switch (dt) {
    case DType::u8:
      return 0;
    case DType::i8:
      return std::numeric_limits<int8_t>::min();
    case DType::i32:
      return std::numeric_limits<int32_t>::min();
    case DType::i64:
      return static_cast<double>(std::numeric_limits<int64_t>::min());
    default:
      return -std::numeric_limits<double>::infinity();
  }
}

// MaxPool with dilations or indices, which reduce_window_max lacks: a strided slice of the
// padded input per kernel offset, folded in window order. The first maximum wins (a later
// offset must be strictly greater), as in ONNX's reference; an index is the flat position in
// x, row-major, or with storage_order 1 column-major over the spatial dimensions.
Vec max_pool_by_offsets(const NodeContext& c, const Tensor& x) {
  const Shape& xs = static_shape(c, x);
  const Axes kernel = c.attr_ints("kernel_shape");
  if (kernel.size() + 2 != xs.size()) c.invalid("kernel_shape does not match the input's rank");
  const int64_t storage_order = c.attr_int("storage_order", 0);
  if (storage_order != 0 && storage_order != 1)
    c.invalid("storage_order " + std::to_string(storage_order));
  const Window w = window_of(c, spatial(xs), kernel);
  const size_t n = kernel.size();
  Axes out(n), low{0, 0}, high{0, 0};
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = xs[2 + i], s = w.strides[i];
    const int64_t extent = (kernel[i] - 1) * w.dilations[i] + 1;
    const int64_t span = in + w.low[i] + w.high[i] - extent;
    if (kernel[i] < 1 || s < 1 || w.dilations[i] < 1 || span < 0)
      c.invalid("the window " + shape_str(kernel) + " does not fit the input " + shape_str(xs));
    out[i] = span / s + 1;
    if (c.attr_int("ceil_mode", 0)) {
      out[i] = (span + s - 1) / s + 1;
      if ((out[i] - 1) * s >= in + w.low[i]) --out[i];  // a window must start inside
    }
    low.push_back(w.low[i]);
    high.push_back(std::max(w.high[i], (out[i] - 1) * s + extent - in - w.low[i]));
  }
  const Tensor padded = pad(x, low, high, lowest(x.dtype()));
  // Spatial strides of the flat index.
  Axes place(n);
  int64_t plane = 1;
  for (size_t j = 0; j < n; ++j) {
    const size_t i = storage_order ? j : n - 1 - j;
    place[i] = plane;
    plane *= xs[2 + i];
  }
  Shape out_shape{1, 1};
  out_shape.insert(out_shape.end(), out.begin(), out.end());
  const bool indices = c.wants_output(1);
  Tensor best, index, seen;
  for (Axes off(n, 0);;) {
    Axes start{0, 0}, limit{xs[0], xs[1]}, step{1, 1};
    Tensor at = zeros(out_shape, i64), inside = full(out_shape, 1, bool_);
    for (size_t i = 0; i < n; ++i) {
      const int64_t first = off[i] * w.dilations[i];
      start.push_back(first);
      limit.push_back(first + (out[i] - 1) * w.strides[i] + 1);
      step.push_back(w.strides[i]);
      if (!indices) continue;
      const Tensor pos = sub(add(mul(iota(out_shape, 2 + i, i64), Tensor::scalar(w.strides[i])),
                                 Tensor::scalar(first)),
                             Tensor::scalar(w.low[i]));
      at = add(at, mul(pos, Tensor::scalar(place[i])));
      inside = logical_and(inside, logical_and(greater_equal(pos, Tensor::scalar<int64_t>(0)),
                                               less(pos, Tensor::scalar(xs[2 + i]))));
    }
    const Tensor cand = slice(padded, start, limit, step);
    if (!best.defined()) {
      best = cand;
      index = at;
      seen = inside;
    } else if (indices) {
      // Padding is never picked, even where the input holds the dtype's lowest value.
      const Tensor take = logical_and(inside, logical_or(greater(cand, best), logical_not(seen)));
      best = where(take, cand, best);
      index = where(take, at, index);
      seen = logical_or(seen, inside);
    } else {
      best = maximum(best, cand);
    }
    size_t i = n;
    while (i > 0 && ++off[i - 1] == kernel[i - 1]) off[--i] = 0;
    if (i == 0) break;
  }
  if (!indices) return {best};
  const Tensor image = mul(iota({xs[0], xs[1]}, 0, i64), Tensor::scalar(xs[1]));
  const Tensor base = mul(add(image, iota({xs[0], xs[1]}, 1, i64)), Tensor::scalar(plane));
  Shape base_shape{xs[0], xs[1]};
  base_shape.insert(base_shape.end(), n, 1);
  return {best, add(reshape(base, base_shape), index)};
}

}  // namespace

Vec convert_MaxPool(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Axes dilations = c.attr_ints("dilations");
  const bool dilated =
      std::any_of(dilations.begin(), dilations.end(), [](int64_t d) { return d != 1; });
  if (dilated || c.wants_output(1)) return max_pool_by_offsets(c, x);
  Axes explicit_high;
  return {reduce_window_max(x, pool_window(c, static_shape(c, x), &explicit_high))};
}

// The window sums over the count of what each window covers: the input, and the explicit pads
// too with count_include_pad (never ceil_mode's extra rows).
Vec convert_AveragePool(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Shape& xs = static_shape(c, x);
  Axes explicit_high;
  const WindowOptions o = pool_window(c, xs, &explicit_high);
  Tensor total = reduce_window_sum(x, o);
  Shape one_image{1, 1};
  for (size_t i = 2; i < xs.size(); ++i) one_image.push_back(xs[i]);
  Tensor ones_in = ones(one_image, x.dtype());
  WindowOptions count_window = o;
  if (c.attr_int("count_include_pad", 0)) {
    ones_in = pad(ones_in, o.padding_low, explicit_high, 1);
    count_window.padding_low.assign(xs.size(), 0);
    for (size_t i = 0; i < xs.size(); ++i)
      count_window.padding_high[i] = o.padding_high[i] - explicit_high[i];
  }
  return {div(total, reduce_window_sum(ones_in, count_window))};
}

Vec convert_GlobalAveragePool(const NodeContext& c) {
  const Tensor& x = c.input(0);
  Axes axes;
  for (int64_t i = 2; i < x.rank(); ++i) axes.push_back(i);
  return {mean(x, axes, true)};
}

Vec convert_GlobalMaxPool(const NodeContext& c) {
  const Tensor& x = c.input(0);
  Axes axes;
  for (int64_t i = 2; i < x.rank(); ++i) axes.push_back(i);
  return {max(x, axes, true)};
}

// Inference: (x - mean) / sqrt(var + epsilon) * scale + B, per channel (axis 1).
Vec convert_BatchNormalization(const NodeContext& c) {
  if (c.attr_int("training_mode", 0) || c.wants_output(1) || c.wants_output(2))
    c.unsupported("training mode (batch statistics)");
  const Tensor& x = c.input(0);
  Tensor scale = channel_param(c, 1), bias = channel_param(c, 2);
  Tensor m = channel_param(c, 3), v = channel_param(c, 4);
  Tensor inv = rsqrt(add(v, s(c.attr_float("epsilon", 1e-5f), v)));
  return {add(mul(mul(sub(x, m), inv), scale), bias)};
}

Vec convert_InstanceNormalization(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const int64_t r = x.rank();
  Axes axes;
  for (int64_t i = 2; i < r; ++i) axes.push_back(i);
  Tensor m = mean(x, axes, true);
  Tensor centered = sub(x, m);
  Tensor var = mean(square(centered), axes, true);
  Tensor y = mul(centered, rsqrt(add(var, s(c.attr_float("epsilon", 1e-5f), x))));
  return {add(mul(y, channel_param(c, 1)), channel_param(c, 2))};
}

// Normalizes over the axes from `axis` to the end; Mean and InvStdDev keep those axes as 1s.
Vec convert_LayerNormalization(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const int64_t r = x.rank();
  const int64_t axis = normalize_axis(c, c.attr_int("axis", -1), r);
  Axes axes;
  for (int64_t i = axis; i < r; ++i) axes.push_back(i);
  const DType stash = c.attr_int("stash_type", 1) == 1 ? f32 : x.dtype();
  Tensor xf = convert(x, is_floating(x.dtype()) && x.dtype() != f64 ? stash : x.dtype());
  Tensor m = mean(xf, axes, true);
  Tensor centered = sub(xf, m);
  Tensor inv = rsqrt(add(mean(square(centered), axes, true),
                         scalar_of(c.attr_float("epsilon", 1e-5f), xf.dtype())));
  Tensor y = convert(mul(centered, inv), x.dtype());
  y = mul(y, c.input(1));
  if (c.has_input(2)) y = add(y, c.input(2));
  return {y, m, inv};
}

// y = x / (bias + alpha / size * the sum of squares over `size` neighbouring channels)^beta.
Vec convert_LRN(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const int64_t size = c.attr_int("size", 0);
  if (size <= 0) c.invalid("size must be positive");
  WindowOptions o;
  o.window.assign(x.rank(), 1);
  o.window[1] = size;
  o.strides.assign(x.rank(), 1);
  o.padding_low.assign(x.rank(), 0);
  o.padding_high.assign(x.rank(), 0);
  o.padding_low[1] = (size - 1) / 2;
  o.padding_high[1] = size - 1 - (size - 1) / 2;
  Tensor sq = reduce_window_sum(square(x), o);
  Tensor base = add(s(c.attr_float("bias", 1), x),
                    mul(s(c.attr_float("alpha", 1e-4f) / size, x), sq));
  return {div(x, pow(base, s(c.attr_float("beta", 0.75f), x)))};
}

Vec convert_MeanVarianceNormalization(const NodeContext& c) {
  const Tensor& x = c.input(0);
  Axes axes = c.attr_ints("axes", {0, 2, 3});
  for (int64_t& a : axes) a = normalize_axis(c, a, x.rank());
  Tensor centered = sub(x, mean(x, axes, true));
  return {div(centered, sqrt(mean(square(centered), axes, true)))};
}

Vec convert_NegativeLogLikelihoodLoss(const NodeContext& c) {
  return {nll(c, c.input(0), c.input(1), c.has_input(2) ? c.input(2) : Tensor())};
}

Vec convert_SoftmaxCrossEntropyLoss(const NodeContext& c) {
  Tensor logp = log_softmax(c.input(0), 1);
  return {nll(c, logp, c.input(1), c.has_input(2) ? c.input(2) : Tensor()), logp};
}

}  // namespace kiln::onnx::internal
