// Windowed reductions (reduce_window_max / reduce_window_sum over every dimension, with
// strides and padding) and the Keras-style pooling functions built on them.
#include <cmath>
#include <limits>
#include <type_traits>

#include "kiln/ops.h"
#include "ops/kernel_util.h"

namespace kiln {
namespace ops {

// Defined in ops/conv.cc: Keras "same"/"valid" padding of a window sweep.
void keras_padding(const std::string& op, const std::string& padding, const Shape& in,
                   const Axes& window, const Axes& strides, const std::string& what, Axes& low,
                   Axes& high);

namespace {

std::string list_str(const Axes& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

constexpr int64_t kMaxAttr = int64_t{1} << 24;  // keeps every size computation in range

struct WindowParams {
  Axes window, strides, padding_low, padding_high;
};

template <class Ctx>
Axes window_attr(const Ctx& ctx, const char* name, size_t rank, int64_t fallback, int64_t min) {
  if (!ctx.attrs().has(name) && fallback >= 0) return Axes(rank, fallback);
  const Axes& v = ctx.attrs().get_ints(name);
  if (v.size() != rank) {
    ctx.fail(std::string(name) + " " + list_str(v) + " must have one value per dimension of the " +
             "operand (rank " + std::to_string(rank) + ")");
  }
  for (int64_t x : v) {
    if (x < min || x > kMaxAttr) {
      ctx.fail(std::string(name) + " " + list_str(v) + " must hold values in [" +
               std::to_string(min) + ", " + std::to_string(kMaxAttr) + "]");
    }
  }
  return v;
}

template <class Ctx>
WindowParams window_params(const Ctx& ctx, size_t rank) {
  return {window_attr(ctx, "window", rank, -1, 1), window_attr(ctx, "strides", rank, 1, 1),
          window_attr(ctx, "padding_low", rank, 0, 0),
          window_attr(ctx, "padding_high", rank, 0, 0)};
}

std::vector<TensorType> reduce_window_shape(const InferContext& ctx) {
  require_dtype_in(ctx, 0, TypeSet::kNumeric);
  const TensorType& x = ctx.input(0);
  WindowParams p = window_params(ctx, x.shape.size());
  Shape out(x.shape.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (x.shape[i] == kUnknownDim) {
      out[i] = kUnknownDim;
      continue;
    }
    __int128 padded = static_cast<__int128>(x.shape[i]) + p.padding_low[i] + p.padding_high[i];
    if (padded == 0) {  // nothing to slide over: an empty dimension stays empty
      out[i] = 0;
      continue;
    }
    if (padded < p.window[i]) {
      ctx.fail("the window " + list_str(p.window) + " is larger than the padded operand in " +
               "dimension " + std::to_string(i) + " (" + std::to_string(p.window[i]) + " > " +
               std::to_string(static_cast<int64_t>(padded)) + "; operand " + x.str() +
               ", padding " + list_str(p.padding_low) + " / " + list_str(p.padding_high) + ")");
    }
    out[i] = static_cast<int64_t>((padded - p.window[i]) / p.strides[i] + 1);
  }
  return {{x.dtype, out}};
}

// ---- kernel -----------------------------------------------------------------------------
// Max and sum are separable: the window reduction is done one dimension at a time. Each
// pass views its source as [outer, len, inner] and reduces contiguous rows of `inner`.

struct MaxOp {
  template <class C>
  static C identity() {
    if constexpr (std::numeric_limits<C>::has_infinity) {
      return -std::numeric_limits<C>::infinity();
    } else {
      return std::numeric_limits<C>::lowest();
    }
  }
  template <class C>
  static C apply(C acc, C v) {  // NaN wins, as in max()
    if constexpr (std::is_floating_point_v<C>) return (v > acc || v != v) ? v : acc;
    return v > acc ? v : acc;
  }
};

struct SumOp {
  template <class C>
  static C identity() {
    return C(0);
  }
  template <class C>
  static C apply(C acc, C v) {
    if constexpr (std::is_integral_v<C>) {  // wraps instead of overflowing
      using U = std::make_unsigned_t<C>;
      return static_cast<C>(static_cast<U>(static_cast<U>(acc) + static_cast<U>(v)));
    } else {
      return acc + v;
    }
  }
};

template <class Op, class C, class S>
void window_pass(const S* src, C* dst, int64_t outer, int64_t len, int64_t inner, int64_t out_len,
                 int64_t window, int64_t stride, int64_t low) {
  // table[o * window + k]: the source index under tap k of output position o, or -1 (padding).
  std::vector<int64_t> table(out_len * window);
  for (int64_t o = 0; o < out_len; ++o) {
    for (int64_t k = 0; k < window; ++k) {
      int64_t at = o * stride - low + k;
      table[o * window + k] = at >= 0 && at < len ? at : -1;
    }
  }
  const int64_t rows = outer * out_len;
  const int64_t grain =
      std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, inner * window));
  runtime::parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / out_len, o = r % out_len;
      C* d = dst + r * inner;
      std::fill(d, d + inner, Op::template identity<C>());
      for (int64_t k = 0; k < window; ++k) {
        const int64_t at = table[o * window + k];
        if (at < 0) continue;
        const S* s = src + (b * len + at) * inner;
        for (int64_t j = 0; j < inner; ++j) d[j] = Op::apply(d[j], static_cast<C>(s[j]));
      }
    }
  });
}

template <class Op, class T>
void reduce_window_kernel(KernelContext& ctx) {
  using C = ComputeType<T>;
  const Tensor& x = ctx.input(0);
  const Shape& in = x.shape();
  const Shape& out_shape = ctx.output_type(0).shape;
  WindowParams p = window_params(ctx, in.size());
  std::vector<size_t> active;  // dimensions where the window does something
  for (size_t i = 0; i < in.size(); ++i) {
    if (p.window[i] != 1 || p.strides[i] != 1 || p.padding_low[i] != 0 || p.padding_high[i] != 0)
      active.push_back(i);
  }
  if (active.empty()) {
    ctx.set_output(0, x);
    return;
  }
  Tensor& out = ctx.allocate_output(0);
  if (num_elements(out_shape) == 0) return;
  // The shape so far: dimensions before the current pass are already reduced.
  Shape cur = in;
  const T* first = in_ptr<T>(ctx, 0);
  std::vector<C> a, b;  // ping-pong buffers in the compute type
  const C* src = nullptr;
  for (size_t n = 0; n < active.size(); ++n) {
    const size_t i = active[n];
    int64_t outer = 1, inner = 1;
    for (size_t j = 0; j < i; ++j) outer *= cur[j];
    for (size_t j = i + 1; j < cur.size(); ++j) inner *= cur[j];
    const int64_t len = cur[i];
    cur[i] = out_shape[i];
    const bool last = n + 1 == active.size();
    C* dst = nullptr;
    if constexpr (std::is_same_v<T, C>) {
      if (last) dst = out_ptr<T>(out);
    }
    std::vector<C>& buf = (n % 2 == 0) ? a : b;
    if (!last || !std::is_same_v<T, C>) {
      buf.resize(outer * cur[i] * inner);
      dst = buf.data();
    }
    if (n == 0) {
      window_pass<Op>(first, dst, outer, len, inner, cur[i], p.window[i], p.strides[i],
                      p.padding_low[i]);
    } else {
      window_pass<Op>(src, dst, outer, len, inner, cur[i], p.window[i], p.strides[i],
                      p.padding_low[i]);
    }
    src = dst;
  }
  if constexpr (!std::is_same_v<T, C>) {
    T* y = out_ptr<T>(out);
    for (int64_t i = 0; i < out.size(); ++i) y[i] = static_cast<T>(src[i]);
  }
}

template <class Op>
KernelFn reduce_window_fn() {
  return [](KernelContext& ctx) {
    visit_in<TypeSet::kNumeric>(ctx, ctx.input(0).dtype(), [&](auto tag) {
      reduce_window_kernel<Op, typename decltype(tag)::type>(ctx);
    });
  };
}

}  // namespace

KILN_REGISTER_OP(reduce_window_max).input("x").kind(OpKind::kCodegen).shape_fn(reduce_window_shape);
KILN_REGISTER_KERNEL(reduce_window_max)
    .dtypes(dtypes_of(TypeSet::kNumeric))
    .fn(reduce_window_fn<MaxOp>());

KILN_REGISTER_OP(reduce_window_sum).input("x").kind(OpKind::kCodegen).shape_fn(reduce_window_shape);
KILN_REGISTER_KERNEL(reduce_window_sum)
    .dtypes(dtypes_of(TypeSet::kNumeric))
    .fn(reduce_window_fn<SumOp>());

}  // namespace ops

// ---- public functions -------------------------------------------------------------------
namespace {

Attrs window_attrs(const Tensor& x, const WindowOptions& o) {
  const size_t rank = x.shape().size();
  return {{"window", o.window},
          {"strides", o.strides.empty() ? Axes(rank, 1) : o.strides},
          {"padding_low", o.padding_low.empty() ? Axes(rank, 0) : o.padding_low},
          {"padding_high", o.padding_high.empty() ? Axes(rank, 0) : o.padding_high}};
}

// The NHWC window of a Keras pooling layer.
WindowOptions pool2d_window(const std::string& op, const Tensor& x, const Axes& pool, Axes strides,
                            const std::string& padding) {
  const std::string what = "input " + TensorType{x.dtype(), x.shape()}.str();
  if (x.rank() != 4) {
    throw Error(ErrorCode::kInvalidArgument, op + ": expects a 4-d NHWC input (" + what + ")");
  }
  if (strides.empty()) strides = pool;
  if (pool.size() != 2 || strides.size() != 2) {
    throw Error(ErrorCode::kInvalidArgument, op + ": pool and strides must have 2 values, got " +
                                                 ops::list_str(pool) + " and " +
                                                 ops::list_str(strides));
  }
  Axes low, high;
  ops::keras_padding(op, padding, {x.dim(1), x.dim(2)}, pool, strides, what, low, high);
  return {{1, pool[0], pool[1], 1},
          {1, strides[0], strides[1], 1},
          {0, low[0], low[1], 0},
          {0, high[0], high[1], 0}};
}

// How many of the window's taps along one dimension land inside [0, n), per output position.
std::vector<double> taps_inside(int64_t n, int64_t window, int64_t stride, int64_t low,
                                int64_t out) {
  std::vector<double> count(out);
  for (int64_t o = 0; o < out; ++o) {
    int64_t start = o * stride - low;
    count[o] = static_cast<double>(std::min(start + window, n) - std::max<int64_t>(start, 0));
  }
  return count;
}

}  // namespace

Tensor reduce_window_max(const Tensor& x, const WindowOptions& options) {
  return call_op("reduce_window_max", {x}, window_attrs(x, options))[0];
}

Tensor reduce_window_sum(const Tensor& x, const WindowOptions& options) {
  return call_op("reduce_window_sum", {x}, window_attrs(x, options))[0];
}

Tensor max_pool2d(const Tensor& x, Axes pool, Axes strides, const std::string& padding) {
  return reduce_window_max(x, pool2d_window("max_pool2d", x, pool, strides, padding));
}

// The mean over the window's taps that fall inside the input: padding is not counted.
Tensor avg_pool2d(const Tensor& x, Axes pool, Axes strides, const std::string& padding) {
  WindowOptions w = pool2d_window("avg_pool2d", x, pool, strides, padding);
  Tensor xf = is_floating(x.dtype()) ? x : convert(x, f32);
  Tensor sum = reduce_window_sum(xf, w);
  if (padding == "valid") return sum / static_cast<double>(pool[0] * pool[1]);
  const int64_t h = x.dim(1), wd = x.dim(2);
  if (h == kUnknownDim || wd == kUnknownDim) {
    return sum / reduce_window_sum(ones_like(xf), w);
  }
  const int64_t oh = sum.dim(1), ow = sum.dim(2);
  std::vector<double> rows = taps_inside(h, w.window[1], w.strides[1], w.padding_low[1], oh);
  std::vector<double> cols = taps_inside(wd, w.window[2], w.strides[2], w.padding_low[2], ow);
  std::vector<double> count(oh * ow);
  for (int64_t i = 0; i < oh; ++i)
    for (int64_t j = 0; j < ow; ++j) count[i * ow + j] = rows[i] * cols[j];
  return sum / convert(Tensor::from_vector(count, {1, oh, ow, 1}), xf.dtype());
}

}  // namespace kiln
