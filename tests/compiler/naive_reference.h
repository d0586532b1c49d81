// Naive references for the kernel-kind ops (OpKind::kKernel) that random graphs produce: direct
// loops in f64, written from each op's definition (no plans, im2col, GEMMs or separable passes),
// so that the random tests' oracle for these ops is not the code under test. A reference also
// counts, per output element, the terms it summed and the sum of their magnitudes, from which
// within_rounding() bounds what a kernel summing in its own dtype, in any order, may differ by.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::compiler::testing {

// A reference result in f64; per element, the number of terms summed into it and sum |term|.
struct Reference {
  Shape shape;
  std::vector<double> value, terms, magnitude;

  explicit Reference(Shape s, double init = 0)
      : shape(std::move(s)),
        value(num_elements(shape), init),
        terms(value.size(), 0),
        magnitude(value.size(), 0) {}
  void add(int64_t i, double term) {
    value[i] += term;
    terms[i] += 1;
    magnitude[i] += std::abs(term);
  }
};

namespace naive_detail {

using Index = std::vector<int64_t>;

inline std::vector<double> values(const Tensor& t) { return convert(t, f64).to_vector<double>(); }

// The attribute `name`, or `n` copies of `fallback` when the node has none.
inline Axes ints(const Attrs& attrs, const char* name, size_t n, int64_t fallback) {
  return attrs.has(name) ? attrs.get_ints(name) : Axes(n, fallback);
}

inline int64_t flat(const Shape& shape, const Index& idx) {
  int64_t f = 0;
  for (size_t i = 0; i < shape.size(); ++i) f = f * shape[i] + idx[i];
  return f;
}

// Calls f(index) for every multi-index of `shape` in row-major order (once for a scalar).
template <class F>
void for_each_index(const Shape& shape, F&& f) {
  if (num_elements(shape) == 0) return;
  Index idx(shape.size(), 0);
  while (true) {
    f(idx);
    size_t i = shape.size();
    while (i > 0 && ++idx[i - 1] == shape[i - 1]) idx[--i] = 0;
    if (i == 0) return;
  }
}

// ---- dot ----

inline Reference dot(const Tensor& a, const Tensor& b, const Attrs& attrs) {
  const Axes ab = ints(attrs, "lhs_batch", 0, 0), bb = ints(attrs, "rhs_batch", 0, 0);
  const Axes& ac = attrs.get_ints("lhs_contract");
  const Axes& bc = attrs.get_ints("rhs_contract");
  auto free_dims = [](int64_t rank, const Axes& batch, const Axes& contract) {
    Axes f;
    for (int64_t d = 0; d < rank; ++d)
      if (std::count(batch.begin(), batch.end(), d) +
              std::count(contract.begin(), contract.end(), d) ==
          0)
        f.push_back(d);
    return f;
  };
  const Axes af = free_dims(a.rank(), ab, ac), bf = free_dims(b.rank(), bb, bc);
  Shape out, contracted;
  for (int64_t d : ab) out.push_back(a.shape()[d]);
  for (int64_t d : af) out.push_back(a.shape()[d]);
  for (int64_t d : bf) out.push_back(b.shape()[d]);
  for (int64_t d : ac) contracted.push_back(a.shape()[d]);
  const std::vector<double> av = values(a), bv = values(b);
  Reference r(out);
  for_each_index(out, [&](const Index& o) {
    Index ai(a.rank()), bi(b.rank());
    size_t k = 0;
    for (size_t i = 0; i < ab.size(); ++i, ++k) ai[ab[i]] = bi[bb[i]] = o[k];
    for (int64_t d : af) ai[d] = o[k++];
    for (int64_t d : bf) bi[d] = o[k++];
    for_each_index(contracted, [&](const Index& c) {
      for (size_t i = 0; i < ac.size(); ++i) ai[ac[i]] = bi[bc[i]] = c[i];
      r.add(flat(out, o), av[flat(a.shape(), ai)] * bv[flat(b.shape(), bi)]);
    });
  });
  return r;
}

// ---- convolution: y[n, o..., co] = sum over taps t and channels c of the co's group
//      x'[n, o * stride - padding_low + t * dilation ..., c] * k[t..., c, co]
//      where x' is x dilated by lhs_dilation and padded, its holes and padding zeros (which
//      are multiplied like any element: 0 * inf is NaN) ----

// The convolution's output shape for an `x`-shaped input and a `k`-shaped kernel.
inline Shape conv_output(const Shape& x, const Shape& k, const Attrs& attrs) {
  const size_t d = k.size() - 2;
  const Axes stride = ints(attrs, "strides", d, 1), low = ints(attrs, "padding_low", d, 0),
             high = ints(attrs, "padding_high", d, 0), dil = ints(attrs, "dilation", d, 1),
             lhs = ints(attrs, "lhs_dilation", d, 1);
  Shape y = {x[0]};
  for (size_t i = 0; i < d; ++i) {
    const int64_t n = x[i + 1];
    const int64_t padded = (n == 0 ? 0 : (n - 1) * lhs[i] + 1) + low[i] + high[i];
    y.push_back(padded == 0 ? 0 : (padded - (k[i] - 1) * dil[i] - 1) / stride[i] + 1);
  }
  y.push_back(k.back());
  return y;
}

// Calls f(x_flat, k_flat, y_flat) for every product term of the convolution of an x-shaped
// input with a k-shaped kernel giving y; x_flat is -1 where the tap reads a zero of padding or
// of a hole of the dilated input.
template <class F>
void for_each_conv_term(const Shape& x, const Shape& k, const Shape& y, const Attrs& attrs, F&& f) {
  const size_t d = k.size() - 2;
  const Axes stride = ints(attrs, "strides", d, 1), low = ints(attrs, "padding_low", d, 0),
             dil = ints(attrs, "dilation", d, 1), lhs = ints(attrs, "lhs_dilation", d, 1);
  const int64_t groups = attrs.get_int("groups", 1), cg_in = k[d], cg_out = k[d + 1] / groups;
  const Shape taps(k.begin(), k.begin() + d);
  for_each_index(y, [&](const Index& yi) {
    Index xi(x.size()), ki(k.size());
    xi[0] = yi[0];
    ki[d + 1] = yi.back();
    const int64_t group = yi.back() / cg_out;
    for_each_index(taps, [&](const Index& t) {
      bool zero = false;
      for (size_t i = 0; i < d; ++i) {
        const int64_t pos = yi[i + 1] * stride[i] - low[i] + t[i] * dil[i];
        zero |= pos < 0 || pos % lhs[i] != 0 || pos / lhs[i] >= x[i + 1];
        xi[i + 1] = pos / lhs[i];
        ki[i] = t[i];
      }
      for (int64_t c = 0; c < cg_in; ++c) {
        xi.back() = group * cg_in + c;
        ki[d] = c;
        f(zero ? -1 : flat(x, xi), flat(k, ki), flat(y, yi));
      }
    });
  });
}

inline Reference convolution(const Tensor& x, const Tensor& k, const Attrs& attrs) {
  const std::vector<double> xv = values(x), kv = values(k);
  Reference y(conv_output(x.shape(), k.shape(), attrs));
  for_each_conv_term(x.shape(), k.shape(), y.shape, attrs, [&](int64_t xi, int64_t ki, int64_t yi) {
    y.add(yi, (xi < 0 ? 0 : xv[xi]) * kv[ki]);
  });
  return y;
}

// dx[x] = sum of dy[y] * k[k] over the terms that read x[x] (not its padding or holes).
inline Reference convolution_input_grad(const Tensor& dy, const Tensor& k, const Attrs& attrs) {
  const Axes& spatial = attrs.get_ints("input_spatial");
  Shape x = {dy.shape()[0]};
  x.insert(x.end(), spatial.begin(), spatial.end());
  x.push_back(k.shape()[k.rank() - 2] * attrs.get_int("groups", 1));
  const std::vector<double> dv = values(dy), kv = values(k);
  Reference dx(x);
  for_each_conv_term(x, k.shape(), dy.shape(), attrs, [&](int64_t xi, int64_t ki, int64_t yi) {
    if (xi >= 0) dx.add(xi, dv[yi] * kv[ki]);
  });
  return dx;
}

// dk[k] = sum of x'[x] * dy[y] over the terms that read k[k] (zeros of x' included).
inline Reference convolution_kernel_grad(const Tensor& x, const Tensor& dy, const Attrs& attrs) {
  Shape k = attrs.get_ints("kernel_spatial");
  k.push_back(x.shape().back() / attrs.get_int("groups", 1));
  k.push_back(dy.shape().back());
  const std::vector<double> xv = values(x), dv = values(dy);
  Reference dk(k);
  for_each_conv_term(x.shape(), k, dy.shape(), attrs, [&](int64_t xi, int64_t ki, int64_t yi) {
    dk.add(ki, (xi < 0 ? 0 : xv[xi]) * dv[yi]);
  });
  return dk;
}

// conv_pool_kernel_grad(x, taps, dp): convolution_kernel_grad(x, dz) where dz, of the
// convolution's output shape, is dp[pooled element] at the output its tap names in its
// [ph, pw] window (none where relu_mask and the tap byte's 0x80 flag is set), 0 elsewhere.
inline Reference conv_pool_kernel_grad(const Tensor& x, const Tensor& taps, const Tensor& dp,
                                       const Attrs& attrs) {
  Shape k = attrs.get_ints("kernel_spatial");
  k.push_back(x.shape().back());
  k.push_back(dp.shape().back());
  Shape y = conv_output(x.shape(), k, attrs);
  const Axes& pool = attrs.get_ints("pool");
  const bool relu_mask = attrs.get_bool("relu_mask", false);
  const std::vector<double> tv = values(taps), dv = values(dp);
  std::vector<double> dz(num_elements(y), 0);
  for_each_index(dp.shape(), [&](const Index& p) {
    const int64_t i = flat(dp.shape(), p), tap = static_cast<int64_t>(tv[i]);
    if (relu_mask && (tap & 0x80) != 0) return;
    const Index yi = {p[0], p[1] * pool[0] + (tap & 0x7f) / pool[1],
                      p[2] * pool[1] + (tap & 0x7f) % pool[1], p[3]};
    dz[flat(y, yi)] += dv[i];
  });
  return convolution_kernel_grad(x, Tensor::from_vector(dz, y), attrs);
}

// ---- window reductions: window y covers x[y * stride - padding_low + t] for taps t ----

inline Shape window_output(const Shape& x, const Attrs& attrs) {
  const Axes& window = attrs.get_ints("window");
  const Axes stride = ints(attrs, "strides", x.size(), 1),
             low = ints(attrs, "padding_low", x.size(), 0),
             high = ints(attrs, "padding_high", x.size(), 0);
  Shape y;
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t padded = x[i] + low[i] + high[i];
    y.push_back(padded == 0 ? 0 : (padded - window[i]) / stride[i] + 1);
  }
  return y;
}

// Calls f(y_flat, x_flat) for every window of y and each of its taps inside x, the taps of a
// window in row-major order.
template <class F>
void for_each_window_tap(const Shape& x, const Shape& y, const Attrs& attrs, F&& f) {
  const Axes& window = attrs.get_ints("window");
  const Axes stride = ints(attrs, "strides", x.size(), 1),
             low = ints(attrs, "padding_low", x.size(), 0);
  for_each_index(y, [&](const Index& yi) {
    for_each_index(window, [&](const Index& t) {
      Index xi(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        xi[i] = yi[i] * stride[i] - low[i] + t[i];
        if (xi[i] < 0 || xi[i] >= x[i]) return;
      }
      f(flat(y, yi), flat(x, xi));
    });
  });
}

// The flat position in x of each window's maximum (the first one in tap order; a NaN wins over
// numbers), or -1 for a window wholly on padding.
inline std::vector<int64_t> window_argmax(const Tensor& x, const Shape& y, const Attrs& attrs) {
  const std::vector<double> xv = values(x);
  std::vector<int64_t> arg(num_elements(y), -1);
  for_each_window_tap(x.shape(), y, attrs, [&](int64_t yi, int64_t xi) {
    const int64_t best = arg[yi];
    if (best < 0 || xv[xi] > xv[best] || (std::isnan(xv[xi]) && !std::isnan(xv[best])))
      arg[yi] = xi;
  });
  return arg;
}

// The identity of max in `dtype`: what a window wholly on padding gives.
inline double lowest(DType dtype) {
  switch (dtype) {
    case i8:
      return std::numeric_limits<int8_t>::lowest();
    case u8:
      return 0;
    case i32:
      return std::numeric_limits<int32_t>::lowest();
    case i64:
      return static_cast<double>(std::numeric_limits<int64_t>::lowest());
    default:
      return -INFINITY;
  }
}

inline Reference reduce_window_max(const Tensor& x, const Attrs& attrs) {
  Reference y(window_output(x.shape(), attrs), lowest(x.dtype()));
  const std::vector<double> xv = values(x);
  const std::vector<int64_t> arg = window_argmax(x, y.shape, attrs);
  for (size_t i = 0; i < arg.size(); ++i)
    if (arg[i] >= 0) y.value[i] = xv[arg[i]];
  return y;
}

inline Reference reduce_window_sum(const Tensor& x, const Attrs& attrs) {
  Reference y(window_output(x.shape(), attrs));
  const std::vector<double> xv = values(x);
  for_each_window_tap(x.shape(), y.shape, attrs,
                      [&](int64_t yi, int64_t xi) { y.add(yi, xv[xi]); });
  return y;
}

// dx[argmax of window y] += dy[y].
// With relu_mask, a window whose maximum is <= 0 passes nothing.
inline Reference reduce_window_max_grad(const Tensor& x, const Tensor& dy, const Attrs& attrs) {
  Reference dx(x.shape());
  const std::vector<double> dv = values(dy), xv = values(x);
  const bool relu_mask = attrs.get_bool("relu_mask", false);
  const std::vector<int64_t> arg = window_argmax(x, dy.shape(), attrs);
  for (size_t i = 0; i < arg.size(); ++i)
    if (arg[i] >= 0 && !(relu_mask && xv[arg[i]] <= 0)) dx.add(arg[i], dv[i]);
  return dx;
}

// y[window] = v[argmax of the window of x], 0 for a window wholly on padding.
inline Reference reduce_window_max_select(const Tensor& x, const Tensor& v, const Attrs& attrs) {
  Reference y(window_output(x.shape(), attrs));
  const std::vector<double> vv = values(v);
  const std::vector<int64_t> arg = window_argmax(x, y.shape, attrs);
  for (size_t i = 0; i < arg.size(); ++i)
    if (arg[i] >= 0) y.value[i] = vv[arg[i]];
  return y;
}

// dx[x] = sum of dy over the windows covering x.
inline Reference reduce_window_sum_grad(const Tensor& dy, const Attrs& attrs) {
  Reference dx(attrs.get_ints("operand_shape"));
  const std::vector<double> dv = values(dy);
  for_each_window_tap(dx.shape, dy.shape(), attrs,
                      [&](int64_t yi, int64_t xi) { dx.add(xi, dv[yi]); });
  return dx;
}

// ---- gather / scatter_add along `axis`: x seen as [outer, dim, inner] ----

struct Take {
  int64_t outer = 1, dim = 1, inner = 1, count = 1;
  std::vector<int64_t> index;
};

inline Take take(const Tensor& x, const Tensor& indices, const Attrs& attrs) {
  Take t;
  int64_t axis = attrs.get_int("axis", 0);
  if (axis < 0) axis += x.rank();
  for (int64_t d = 0; d < x.rank(); ++d)
    (d < axis ? t.outer : d > axis ? t.inner : t.dim) *= x.shape()[d];
  for (double i : values(indices)) t.index.push_back(static_cast<int64_t>(i));
  t.count = static_cast<int64_t>(t.index.size());
  return t;
}

inline Shape taken_shape(const Tensor& x, const Tensor& indices, const Attrs& attrs) {
  int64_t axis = attrs.get_int("axis", 0);
  if (axis < 0) axis += x.rank();
  Shape s(x.shape().begin(), x.shape().begin() + axis);
  s.insert(s.end(), indices.shape().begin(), indices.shape().end());
  s.insert(s.end(), x.shape().begin() + axis + 1, x.shape().end());
  return s;
}

// out[o, j, i] = x[o, index[j], i].
inline Reference gather(const Tensor& x, const Tensor& indices, const Attrs& attrs) {
  const Take t = take(x, indices, attrs);
  const std::vector<double> xv = values(x);
  Reference y(taken_shape(x, indices, attrs));
  for (int64_t o = 0; o < t.outer; ++o)
    for (int64_t j = 0; j < t.count; ++j)
      for (int64_t i = 0; i < t.inner; ++i)
        y.value[(o * t.count + j) * t.inner + i] = xv[(o * t.dim + t.index[j]) * t.inner + i];
  return y;
}

// y = x; y[o, index[j], i] += updates[o, j, i].
inline Reference scatter_add(const Tensor& x, const Tensor& indices, const Tensor& updates,
                             const Attrs& attrs) {
  const Take t = take(x, indices, attrs);
  const std::vector<double> xv = values(x), uv = values(updates);
  Reference y(x.shape());
  for (size_t i = 0; i < xv.size(); ++i) y.add(static_cast<int64_t>(i), xv[i]);
  for (int64_t o = 0; o < t.outer; ++o)
    for (int64_t j = 0; j < t.count; ++j)
      for (int64_t i = 0; i < t.inner; ++i)
        y.add((o * t.dim + t.index[j]) * t.inner + i, uv[(o * t.count + j) * t.inner + i]);
  return y;
}

// ---- the compiler's fused ops: the dot or convolution, + bias (broadcast from the right),
//      then the activation ----

inline Reference epilogue(Reference r, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  if (inputs.size() > 2) {
    const Tensor& bias = inputs[2];
    const std::vector<double> bv = values(bias);
    const int64_t lead = static_cast<int64_t>(r.shape.size()) - bias.rank();
    for_each_index(r.shape, [&](const Index& o) {
      int64_t b = 0;  // the bias element under o, dimensions aligned from the right
      for (int64_t i = 0; i < bias.rank(); ++i) {
        const int64_t n = bias.shape()[i];
        b = b * n + (n == 1 || lead + i < 0 ? 0 : o[lead + i]);
      }
      r.add(flat(r.shape, o), bv[b]);
    });
  }
  const std::string act = attrs.has("activation") ? attrs.get_string("activation") : "none";
  for (double& v : r.value) {
    if (act == "relu") v = v <= 0 ? 0 : v;
    if (act == "tanh") v = std::tanh(v);
    if (act == "logistic") v = 1 / (1 + std::exp(-v));
  }
  return r;
}

// fused_conv_pool's output 1: the max of each disjoint ph x pw window of the epilogue's
// reference r (NHWC, the rows and columns left over dropped), the first NaN winning. A window's
// maximum may come from another of its elements in the kernel's rounding than in the
// reference's, so it takes the largest terms and magnitude of its window: it is within that
// bound of either element.
inline Reference max_pooled(const Reference& r, const std::vector<int64_t>& pool) {
  const Shape& s = r.shape;
  Reference y({s[0], s[1] / pool[0], s[2] / pool[1], s[3]});
  for_each_index(y.shape, [&](const Index& o) {
    const int64_t yi = flat(y.shape, o);
    bool first = true;
    for (int64_t u = 0; u < pool[0]; ++u) {
      for (int64_t v = 0; v < pool[1]; ++v) {
        const int64_t xi = flat(s, {o[0], o[1] * pool[0] + u, o[2] * pool[1] + v, o[3]});
        const double x = r.value[xi], m = y.value[yi];
        if (first || (x > m) || (std::isnan(x) && !std::isnan(m))) y.value[yi] = x;
        y.terms[yi] = std::max(y.terms[yi], r.terms[xi]);
        y.magnitude[yi] = std::max(y.magnitude[yi], r.magnitude[xi]);
        first = false;
      }
    }
  });
  return y;
}

}  // namespace naive_detail

// The output of a kernel node that its naive reference describes: output 0, or a fused_conv_pool's
// pool (output 1) where it does not write its convolution's output ("conv_output" false).
inline int referenced_output(const std::string& op, const Attrs& attrs) {
  return op == "fused_conv_pool" && !attrs.get_bool("conv_output", true) ? 1 : 0;
}

// The naive reference of the kernel op `op` on concrete inputs with the node's attributes.
using NaiveFn = std::function<Reference(const std::vector<Tensor>&, const Attrs&)>;

// The naive reference of every kernel op random graphs produce, by name; also of reduce_window
// max and sum (codegen ops, but the pooling the gradient ops mirror).
inline const std::map<std::string, NaiveFn>& naive_references() {
  namespace n = naive_detail;
  using In = const std::vector<Tensor>&;
  static const std::map<std::string, NaiveFn> kRefs = {
      {"dot", [](In x, const Attrs& a) { return n::dot(x[0], x[1], a); }},
      {"fused_dot", [](In x, const Attrs& a) { return n::epilogue(n::dot(x[0], x[1], a), x, a); }},
      {"convolution", [](In x, const Attrs& a) { return n::convolution(x[0], x[1], a); }},
      {"fused_conv",
       [](In x, const Attrs& a) { return n::epilogue(n::convolution(x[0], x[1], a), x, a); }},
      // Output 0, or output 1 where it writes no output 0 (referenced_output; op_modes_test
      // compares both).
      {"fused_conv_pool",
       [](In x, const Attrs& a) {
         Reference y = n::epilogue(n::convolution(x[0], x[1], a), x, a);
         return a.get_bool("conv_output", true) ? y : n::max_pooled(y, a.get_ints("pool"));
       }},
      {"convolution_input_grad",
       [](In x, const Attrs& a) { return n::convolution_input_grad(x[0], x[1], a); }},
      {"convolution_kernel_grad",
       [](In x, const Attrs& a) { return n::convolution_kernel_grad(x[0], x[1], a); }},
      {"conv_pool_kernel_grad",
       [](In x, const Attrs& a) { return n::conv_pool_kernel_grad(x[0], x[1], x[2], a); }},
      {"reduce_window_max", [](In x, const Attrs& a) { return n::reduce_window_max(x[0], a); }},
      {"reduce_window_sum", [](In x, const Attrs& a) { return n::reduce_window_sum(x[0], a); }},
      {"reduce_window_max_grad",
       [](In x, const Attrs& a) { return n::reduce_window_max_grad(x[0], x[1], a); }},
      {"reduce_window_max_select",
       [](In x, const Attrs& a) { return n::reduce_window_max_select(x[0], x[1], a); }},
      {"reduce_window_sum_grad",
       [](In x, const Attrs& a) { return n::reduce_window_sum_grad(x[0], a); }},
      {"gather", [](In x, const Attrs& a) { return n::gather(x[0], x[1], a); }},
      {"scatter_add", [](In x, const Attrs& a) { return n::scatter_add(x[0], x[1], x[2], a); }},
  };
  return kRefs;
}

// "" when a kernel's output `got` is within rounding of the reference `want`, else the first
// elements that are not. Integers, bools, infinities and elements that sum nothing (gathered,
// selected, maxima) must match exactly (NaN matches NaN). A floating-point element that sums
// n >= 1 terms may differ by
//   2 (n + 1) u sum|term|  +  8 u |want|  +  2 (n + 1) tiny,
// u being the unit roundoff of got's dtype: a sum of n rounded products in any order is within
// n u sum|term| of the exact one (Higham's gamma_n; the factor 2 covers the f64 reference's own
// rounding and the bias add), an activation rounds once more (a few ulp of the result), and
// subnormal results round in absolute terms.
inline std::string within_rounding(const Tensor& got, const Reference& want) {
  if (got.shape() != want.shape)
    return "shape " + shape_str(got.shape()) + ", the reference's is " + shape_str(want.shape);
  const std::vector<double> g = naive_detail::values(got);
  const bool fp = is_floating(got.dtype());
  const double u = got.dtype() == f64 ? 0x1p-53 : 0x1p-24;
  const double tiny = got.dtype() == f64 ? 0x1p-1074 : 0x1p-149;
  std::string out;
  int shown = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double w = want.value[i], n = want.terms[i];
    const double tol =
        n == 0 ? 0 : 2 * (n + 1) * u * want.magnitude[i] + 8 * u * std::abs(w) + 2 * (n + 1) * tiny;
    const bool ok = g[i] == w || (std::isnan(g[i]) && std::isnan(w)) ||
                    (fp && std::isfinite(w) && std::abs(g[i] - w) <= tol);
    if (ok) continue;
    if (shown++ < 4) {
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "element %zu: %.9g, the reference %.9g (%g terms, sum|term| %g)", i, g[i], w, n,
                    want.magnitude[i]);
      out += (out.empty() ? "" : "; ") + std::string(buf);
    }
  }
  if (shown > 4) out += "; ... (" + std::to_string(shown) + " elements differ)";
  return out;
}

}  // namespace kiln::compiler::testing
