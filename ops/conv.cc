// Convolution: the N-d primitive (NHWC input, HWIO kernel; strides, padding, kernel and input
// dilation, feature groups) and its input and kernel gradient ops, with im2col/col2im + Eigen
// GEMM kernels behind oneDNN's where it serves the case (f32 or bf16, 1-d or 2-d, no input
// dilation);
// the public conv and Keras-style conv2d.
// GCC 12 reports false "may be used uninitialized" warnings inside Eigen's AVX-512 packing.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "ops/conv.h"

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <type_traits>

#include "kiln/ops.h"
#include "ops/conv_direct.h"
#include "ops/kernel_util.h"
#include "ops/onednn_conv.h"
#include "ops/window_util.h"

namespace kiln {
namespace ops {

namespace {

struct ConvParams {
  int64_t groups = 1;
  Axes strides, padding_low, padding_high, dilation, lhs_dilation;
};

template <class Ctx>
Axes spatial_attr(const Ctx& ctx, const char* name, size_t d, int64_t fallback, int64_t min) {
  return per_dim_attr(ctx, name, d, fallback, min, "spatial dimension (" + std::to_string(d) + ")");
}

template <class Ctx>
ConvParams conv_params(const Ctx& ctx, size_t d) {
  ConvParams p;
  p.groups = ctx.attrs().get_int("groups", 1);
  if (p.groups < 1 || p.groups > kMaxAttr) {
    ctx.fail("groups must be >= 1, got " + std::to_string(p.groups));
  }
  p.strides = spatial_attr(ctx, "strides", d, 1, 1);
  p.padding_low = spatial_attr(ctx, "padding_low", d, 0, 0);
  p.padding_high = spatial_attr(ctx, "padding_high", d, 0, 0);
  p.dilation = spatial_attr(ctx, "dilation", d, 1, 1);
  p.lhs_dilation = spatial_attr(ctx, "lhs_dilation", d, 1, 1);
  return p;
}

std::vector<TensorType> conv_shape(const InferContext& ctx) {
  const TensorType& in = ctx.input(0);
  const TensorType& k = ctx.input(1);
  const std::string both = " (input " + in.str() + ", kernel " + k.str() + ")";
  if (in.dtype != k.dtype) ctx.fail("dtype mismatch" + both);
  if (!is_floating(in.dtype)) ctx.fail("expects floating-point tensors" + both);
  if (k.shape.size() < 2) {
    ctx.fail("the kernel must be [spatial..., in_channels/groups, out_channels]" + both);
  }
  if (in.shape.size() != k.shape.size()) {
    ctx.fail(
        "the input must be [batch, spatial..., channels] with as many spatial dimensions "
        "as the kernel" +
        both);
  }
  const size_t d = k.shape.size() - 2;
  ConvParams p = conv_params(ctx, d);
  const int64_t c_in = in.shape.back(), k_in = k.shape[d], c_out = k.shape[d + 1];
  if (c_in != kUnknownDim && k_in != kUnknownDim && c_in != k_in * p.groups) {
    std::string expects = std::to_string(k_in * p.groups);
    if (p.groups > 1) {
      expects +=
          " (" + std::to_string(k_in) + " per group x " + std::to_string(p.groups) + " groups)";
    }
    ctx.fail("input has " + std::to_string(c_in) + " channels but the kernel expects " + expects +
             both);
  }
  if (c_in != kUnknownDim && c_in % p.groups != 0) {
    ctx.fail("input channels (" + std::to_string(c_in) + ") are not divisible by groups (" +
             std::to_string(p.groups) + ")" + both);
  }
  if (c_out != kUnknownDim && c_out % p.groups != 0) {
    ctx.fail("output channels (" + std::to_string(c_out) + ") are not divisible by groups (" +
             std::to_string(p.groups) + ")" + both);
  }
  Shape out(in.shape.size());
  out.front() = in.shape.front();
  out.back() = c_out;
  for (size_t i = 0; i < d; ++i) {
    const int64_t n = in.shape[i + 1], kk = k.shape[i];
    if (kk == 0) ctx.fail("kernel spatial dimension " + std::to_string(i) + " is 0" + both);
    if (n == kUnknownDim || kk == kUnknownDim) {
      out[i + 1] = kUnknownDim;
      continue;
    }
    // In 128 bits: a placeholder's dimensions can be arbitrarily large.
    __int128 k_dilated = static_cast<__int128>(kk - 1) * p.dilation[i] + 1;
    __int128 padded = (n == 0 ? 0 : static_cast<__int128>(n - 1) * p.lhs_dilation[i] + 1) +
                      p.padding_low[i] + p.padding_high[i];
    if (padded == 0) {  // nothing to slide over: an empty dimension stays empty
      out[i + 1] = 0;
      continue;
    }
    if (padded < k_dilated) {
      ctx.fail("in spatial dimension " + std::to_string(i) + " the dilated kernel (" +
               std::to_string(static_cast<int64_t>(k_dilated)) +
               ") is larger than the padded input (" +
               std::to_string(static_cast<int64_t>(padded)) + ")" + both);
    }
    __int128 size = (padded - k_dilated) / p.strides[i] + 1;
    if (size > (int64_t{1} << 48)) ctx.fail("the output is too large" + both);
    out[i + 1] = static_cast<int64_t>(size);
  }
  return {{in.dtype, out}};
}

// ---- kernel -----------------------------------------------------------------------------

// Everything the kernel needs, with sizes flattened. For spatial dimension i, tables[i] maps
// (output position o, kernel tap k) at [o * kernel[i] + k] to the input index, or -1 where the
// tap falls on padding or on a hole of the dilated input (window_table).
struct ConvPlan {
  ConvParams params;
  int64_t batch, c_in, c_out, groups, cg_in, cg_out;
  Shape in_sp, k_sp, out_sp;
  std::vector<int64_t> in_strides;  // element stride of each input spatial dimension
  std::vector<std::vector<int64_t>> tables;
  int64_t out_rows, taps, depth;  // GEMM: [out_rows, depth] x [depth, cg_out], depth = taps*cg_in
};

// The plan of a convolution of an `in`-shaped input with a `k`-shaped kernel giving `out`
// (the forward op and both gradient kernels sweep the same windows).
ConvPlan make_plan(const KernelContext& ctx, const Shape& in, const Shape& k, const Shape& out) {
  const size_t d = k.size() - 2;
  ConvParams p = conv_params(ctx, d);
  ConvPlan plan;
  plan.params = p;
  plan.batch = in[0];
  plan.c_in = in.back();
  plan.c_out = k[d + 1];
  plan.groups = p.groups;
  plan.cg_in = plan.c_in / p.groups;
  plan.cg_out = plan.c_out / p.groups;
  plan.in_sp.assign(in.begin() + 1, in.end() - 1);
  plan.k_sp.assign(k.begin(), k.begin() + d);
  plan.out_sp.assign(out.begin() + 1, out.end() - 1);
  plan.in_strides.assign(d, plan.c_in);
  for (size_t i = d; i-- > 1;) plan.in_strides[i - 1] = plan.in_strides[i] * plan.in_sp[i];
  plan.out_rows = plan.batch;
  plan.taps = 1;
  for (size_t i = 0; i < d; ++i) {
    plan.out_rows *= plan.out_sp[i];
    plan.taps *= plan.k_sp[i];
    plan.tables.push_back(window_table(plan.in_sp[i], plan.out_sp[i], plan.k_sp[i], p.strides[i],
                                       p.padding_low[i], p.dilation[i], p.lhs_dilation[i]));
  }
  plan.depth = plan.taps * plan.cg_in;
  return plan;
}

// The plan as oneDNN's convolution, or nullopt where oneDNN has no equivalent (3 or more spatial
// dimensions, an input dilation). A 1-d convolution becomes a 2-d one of height 1.
std::optional<onednn::ConvShape> onednn_shape(const ConvPlan& plan, bool bf16) {
  const size_t d = plan.k_sp.size();
  if (d < 1 || d > 2) return std::nullopt;
  const ConvParams& p = plan.params;
  for (int64_t l : p.lhs_dilation) {
    if (l != 1) return std::nullopt;
  }
  onednn::ConvShape s;
  s.batch = plan.batch;
  s.c_in = plan.c_in;
  s.c_out = plan.c_out;
  s.groups = plan.groups;
  s.bf16 = bf16;
  s.in = s.kernel = s.out = s.strides = s.dilation = {1, 1};
  const size_t o = 2 - d;
  for (size_t i = 0; i < d; ++i) {
    s.in[o + i] = plan.in_sp[i];
    s.kernel[o + i] = plan.k_sp[i];
    s.out[o + i] = plan.out_sp[i];
    s.strides[o + i] = p.strides[i];
    s.pad_low[o + i] = p.padding_low[i];
    s.pad_high[o + i] = p.padding_high[i];
    s.dilation[o + i] = p.dilation[i];
  }
  return s;
}

// The plan as a direct few-channel convolution (ops/conv_direct.h), where one would serve it: one
// or two spatial dimensions (a 1-d one as 2-d of height 1), one group, no input dilation.
std::optional<direct_conv::Geometry> direct_geometry(const ConvPlan& plan) {
  const size_t d = plan.k_sp.size();
  if (d < 1 || d > 2 || plan.groups != 1) return std::nullopt;
  const ConvParams& p = plan.params;
  for (int64_t l : p.lhs_dilation) {
    if (l != 1) return std::nullopt;
  }
  const size_t h = d - 1;  // the row dimension's index when there are two
  direct_conv::Geometry g;
  g.batch = plan.batch;
  g.c_in = plan.c_in;
  g.c_out = plan.c_out;
  g.in_w = plan.in_sp[h], g.out_w = plan.out_sp[h], g.k_w = plan.k_sp[h];
  g.stride_w = p.strides[h], g.pad_left = p.padding_low[h], g.dil_w = p.dilation[h];
  g.in_h = g.out_h = g.k_h = g.stride_h = g.dil_h = 1;
  g.pad_top = 0;
  if (d == 2) {
    g.in_h = plan.in_sp[0], g.out_h = plan.out_sp[0], g.k_h = plan.k_sp[0];
    g.stride_h = p.strides[0], g.pad_top = p.padding_low[0], g.dil_h = p.dilation[0];
  }
  if (!direct_conv::serves(g)) return std::nullopt;
  return g;
}

// Whether oneDNN may serve a kernel of element type T (ops/onednn_conv.h).
template <class T>
constexpr bool kOnednnType = std::is_same_v<T, float> || std::is_same_v<T, bfloat16>;

// `src` widened to f32 (exactly), in parallel.
std::vector<float> widened(const half* src, int64_t n) {
  std::vector<float> out(n);
  parallel_widen_into(src, n, out.data());
  return out;
}

// An f16 convolution pass on oneDNN's f32 kernels (oneDNN 2.6 has no f16 convolution for
// CPUs): operands a (na elements) and b widened to f32, `pass(a32, b32, out32)` run, and its
// f32 result (n_out elements: f32 sums, as the f16 kernels sum) rounded once into dst. False,
// dst untouched, where oneDNN is off or declines the pass.
template <class Pass>
bool f16_on_onednn(const half* a, int64_t na, const half* b, int64_t nb, half* dst, int64_t n_out,
                   Pass&& pass) {
  if (!onednn::enabled()) return false;
  const std::vector<float> a32 = widened(a, na), b32 = widened(b, nb);
  std::vector<float> out32(n_out);
  if (!pass(a32.data(), b32.data(), out32.data())) return false;
  parallel_round_into(out32.data(), n_out, dst);
  return true;
}

// Calls f(r, t, offset, taps) for patch rows r in [0, rows) (output positions row, row + 1,
// ...) and runs of kernel taps [t, t + taps), where offset is the element offset of the input
// pixel under tap t (channel 0), or -1 (and taps = 1) where the tap falls on padding or on a
// hole of the dilated input. With one group, a run covers the consecutive taps of a kernel row
// whose pixels are adjacent in the input (stride 1 along the last dimension, no dilation), so
// their channels form one contiguous block in the input as in the patch row. The last spatial
// dimension is the inner loop, so the multi-index steps once per kernel row.
template <class F>
void walk_patches(const ConvPlan& plan, int64_t row, int64_t rows, F&& f) {
  const size_t d = plan.k_sp.size();
  const int64_t batch_stride = d ? plan.in_strides[0] * plan.in_sp[0] : plan.c_in;
  if (d == 0) {
    for (int64_t r = 0; r < rows; ++r) f(r, 0, (row + r) * batch_stride, 1);
    return;
  }
  const bool runs = plan.groups == 1;
  std::vector<int64_t> pos(d), tap(d - 1);
  int64_t n = row;  // becomes the batch index
  for (size_t i = d; i-- > 0;) {
    pos[i] = n % plan.out_sp[i];
    n /= plan.out_sp[i];
  }
  const Shape outer_k(plan.k_sp.begin(), plan.k_sp.end() - 1);
  const int64_t k_last = plan.k_sp[d - 1], stride_last = plan.in_strides[d - 1];
  const int64_t kernel_rows = plan.taps / k_last;
  std::vector<const int64_t*> tab(d);
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < d; ++i) tab[i] = plan.tables[i].data() + pos[i] * plan.k_sp[i];
    const int64_t* last = tab[d - 1];
    std::fill(tap.begin(), tap.end(), 0);
    int64_t t = 0;
    for (int64_t kr = 0; kr < kernel_rows; ++kr) {
      int64_t off = n * batch_stride;
      for (size_t i = 0; i + 1 < d && off >= 0; ++i) {
        const int64_t at = tab[i][tap[i]];
        off = at < 0 ? -1 : off + at * plan.in_strides[i];
      }
      for (int64_t k = 0; k < k_last;) {
        if (off < 0 || last[k] < 0) {
          f(r, t, -1, 1);
          ++k, ++t;
          continue;
        }
        int64_t taps = 1;
        while (runs && k + taps < k_last && last[k + taps] == last[k] + taps) ++taps;
        f(r, t, off + last[k] * stride_last, taps);
        k += taps, t += taps;
      }
      next_index(tap, outer_k);
    }
    if (next_index(pos, plan.out_sp)) ++n;
  }
}

// Writes patch rows [row, row + rows) of group g: row r holds, tap by tap, the group's cg_in
// input channels under each kernel tap of output position r (zeros on padding).
template <class T, class C>
void im2col(const ConvPlan& plan, const T* in, int64_t row, int64_t rows, int64_t g, C* patch) {
  const int64_t cg = plan.cg_in;
  walk_patches(plan, row, rows, [&](int64_t r, int64_t t, int64_t off, int64_t taps) {
    C* dst = patch + r * plan.depth + t * cg;
    if (off < 0) {
      std::fill(dst, dst + cg, C(0));
      return;
    }
    const T* src = in + off + g * cg;
    const int64_t n = taps * cg;
    if constexpr (std::is_same_v<T, C>) {
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(C));
    } else {
      for (int64_t c = 0; c < n; ++c) dst[c] = static_cast<C>(src[c]);
    }
  });
}

// The adjoint of im2col: adds each patch entry into the input pixel it was read from.
template <class C>
void col2im(const ConvPlan& plan, const C* patch, int64_t row, int64_t rows, int64_t g, C* in) {
  const int64_t cg = plan.cg_in;
  walk_patches(plan, row, rows, [&](int64_t r, int64_t t, int64_t off, int64_t taps) {
    if (off < 0) return;
    const C* src = patch + r * plan.depth + t * cg;
    C* dst = in + off + g * cg;
    for (int64_t c = 0, n = taps * cg; c < n; ++c) dst[c] += src[c];
  });
}

// The plain convolution: no epilogue, no call.
struct NoEpilogue {};

// `epilogue` (see ops/conv.h) sees each block of output rows as soon as its GEMMs are done, in
// the compute type (f16/bf16: the f32 sums, before their one rounding).
template <class T, class E = NoEpilogue>
void conv_kernel(KernelContext& ctx, const E& epilogue = {}) {
  using C = ComputeType<T>;  // float for f16/bf16
  constexpr bool kHook = !std::is_same_v<E, NoEpilogue>;
  using Mat = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Strided = Eigen::OuterStride<>;
  const ConvPlan plan =
      make_plan(ctx, ctx.input(0).shape(), ctx.input(1).shape(), ctx.output_type(0).shape);
  Tensor& out = ctx.allocate_output(0);
  T* y = out_ptr<T>(out);
  if (plan.out_rows == 0 || plan.c_out == 0) return;
  if (plan.depth == 0) {
    std::vector<C> zeros(plan.out_rows * plan.c_out, C(0));
    if constexpr (kHook) epilogue(zeros.data(), 0, plan.out_rows);
    store_rounded(zeros.data(), plan.out_rows * plan.c_out, y);
    return;
  }
  const T* x = in_ptr<T>(ctx, 0);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, half>) {
    if (const std::optional<direct_conv::Geometry> g = direct_geometry(plan)) {
      // One image per task, its epilogue run while the image is in cache; a small batch cut
      // into bands of rows as well, so that every thread has work. f16: on the widened
      // operands, each band's f32 sums rounded once after the epilogue (as on oneDNN's path).
      const int64_t image_rows = plan.out_rows / plan.batch, row_len = g->out_w * plan.c_out;
      const int64_t bands = std::clamp<int64_t>(16 / plan.batch, 1, g->out_h);
      std::vector<float> x_wide, w_wide;
      const float* x32 = as_compute(x, ctx.input(0).size(), x_wide);
      const float* w32 = as_compute(in_ptr<T>(ctx, 1), ctx.input(1).size(), w_wide);
      const int64_t x_image = ctx.input(0).size() / plan.batch;
      runtime::parallel_for(plan.batch * bands, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> staging;  // f16: one band's f32 sums
        for (int64_t task = begin; task < end; ++task) {
          const int64_t b = task / bands, band = task % bands;
          const int64_t oy0 = g->out_h * band / bands, oy1 = g->out_h * (band + 1) / bands;
          T* image = y + b * image_rows * plan.c_out;
          float* yc;  // the image's output as f32, rows oy0.. at yc + oy0 * row_len
          if constexpr (std::is_same_v<T, float>) {
            yc = image;
          } else {
            staging.resize(g->out_h * row_len);
            yc = staging.data();
          }
          direct_conv::forward(*g, x32 + b * x_image, w32, yc, oy0, oy1);
          float* rows = yc + oy0 * row_len;
          const int64_t n = (oy1 - oy0) * row_len;
          if constexpr (kHook) epilogue(rows, b * image_rows + oy0 * g->out_w, n / plan.c_out);
          if constexpr (!std::is_same_v<T, float>) store_rounded(rows, n, image + oy0 * row_len);
        }
      });
      return;
    }
  }
  if constexpr (kOnednnType<T>) {
    onednn::Epilogue hook;
    if constexpr (kHook) hook = epilogue;
    const std::optional<onednn::ConvShape> s = onednn_shape(plan, !std::is_same_v<T, float>);
    if (s && onednn::forward(ctx, *s, x, in_ptr<T>(ctx, 1), y, hook)) return;
  } else if constexpr (std::is_same_v<T, half>) {
    const std::optional<onednn::ConvShape> s = onednn_shape(plan, /*bf16=*/false);
    onednn::Epilogue hook;
    if constexpr (kHook) hook = epilogue;  // on the f32 sums, before the rounding
    if (s && f16_on_onednn(x, ctx.input(0).size(), in_ptr<T>(ctx, 1), ctx.input(1).size(), y,
                           out.size(), [&](const float* x32, const float* w32, float* y32) {
                             return onednn::forward(ctx, *s, x32, w32, y32, hook);
                           })) {
      return;
    }
  }
  // The kernel as a [depth, c_out] row-major matrix, in the compute type.
  std::vector<C> w_storage;
  const C* w = as_compute(in_ptr<T>(ctx, 1), plan.depth * plan.c_out, w_storage);
  // Rows are processed in blocks whose patch fits in cache (but not so few rows that the
  // GEMM degenerates into matrix-vector products).
  const int64_t block = std::max<int64_t>(64, (int64_t{256} << 10) / (plan.depth * sizeof(C)));
  runtime::parallel_for(plan.out_rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<C> patch(std::min(block, end - begin) * plan.depth);
    std::vector<C> staging;  // output rows in the compute type, for f16/bf16
    for (int64_t r0 = begin; r0 < end; r0 += block) {
      const int64_t rows = std::min(block, end - r0);
      C* yc;
      if constexpr (std::is_same_v<T, C>) {
        yc = y + r0 * plan.c_out;
      } else {
        staging.resize(rows * plan.c_out);
        yc = staging.data();
      }
      for (int64_t g = 0; g < plan.groups; ++g) {
        im2col(plan, x, r0, rows, g, patch.data());
        Eigen::Map<const Mat> p(patch.data(), rows, plan.depth);
        Eigen::Map<const Mat, 0, Strided> wg(w + g * plan.cg_out, plan.depth, plan.cg_out,
                                             Strided(plan.c_out));
        Eigen::Map<Mat, 0, Strided> yg(yc + g * plan.cg_out, rows, plan.cg_out,
                                       Strided(plan.c_out));
        yg.noalias() = p * wg;
      }
      if constexpr (kHook) epilogue(yc, r0, rows);  // while the block is in cache
      if constexpr (!std::is_same_v<T, C>)
        store_rounded(yc, rows * plan.c_out, y + r0 * plan.c_out);
    }
  });
}

// ---- gradients --------------------------------------------------------------------------
// The convolution is one trilinear form T(x, w, dy) = <conv(x, w), dy>; its three partial
// derivatives are three ops sharing one plan: convolution = dT/d(dy),
// convolution_input_grad(dy, w) = dT/dx, convolution_kernel_grad(x, dy) = dT/dw. So each op's
// gradient rule is made of the other two, to any order. Both gradient ops are dedicated
// kernels (col2im, and im2col with a transposed GEMM) rather than convolutions of transposed
// operands: a strided input gradient would multiply the holes of the dilated dy, and the
// kernel gradient would im2col over batch x spatial. Measured on 2 cores (batch 128, 3x3,
// 32->64 channels) they match the forward's time at stride 1, and beat the convolution
// formulation 1.3x (kernel) at stride 1 and 2-4x at stride 2, before its transposes.

// The rows of a GEMM step: enough that the GEMM does not degenerate into matrix-vector
// products, few enough that the patch block stays in cache.
int64_t block_rows(const ConvPlan& plan) {
  return std::max<int64_t>(64, (int64_t{256} << 10) / (std::max<int64_t>(plan.depth, 1) * 4));
}

// Checks that the forward convolution of `in` with `k` (attributes of ctx) gives `dy`'s shape.
void check_forward(const InferContext& ctx, const TensorType& in, const TensorType& k,
                   const TensorType& dy) {
  const Shape out = infer_with(ctx, conv_shape, {in, k})[0].shape;
  if (!shapes_agree(out, dy.shape)) {
    ctx.fail("output_grad is " + dy.str() + ", but the convolution of input " + in.str() +
             " with kernel " + k.str() + " gives " + TensorType{in.dtype, out}.str());
  }
}

// A required attribute of per-spatial-dimension sizes.
Axes required_sizes(const InferContext& ctx, const char* name, size_t d, int64_t min) {
  if (!ctx.attrs().has(name)) ctx.fail(std::string("needs the attribute ") + name);
  return spatial_attr(ctx, name, d, 0, min);
}

void check_pair(const InferContext& ctx, const TensorType& a, const TensorType& b) {
  const std::string both = " (" + types_str(ctx) + ")";
  if (a.dtype != b.dtype) ctx.fail("dtype mismatch" + both);
  if (!is_floating(a.dtype)) ctx.fail("expects floating-point tensors" + both);
  if (a.shape.size() < 3 || a.shape.size() != b.shape.size()) {
    ctx.fail("expects operands of equal rank >= 3" + both);
  }
}

// convolution_input_grad(output_grad, kernel), attribute input_spatial: the input's shape is
// [batch of output_grad, input_spatial..., kernel in-channels x groups].
std::vector<TensorType> conv_input_grad_shape(const InferContext& ctx) {
  const TensorType &dy = ctx.input(0), &k = ctx.input(1);
  check_pair(ctx, dy, k);
  const size_t d = k.shape.size() - 2;
  const Axes spatial = required_sizes(ctx, "input_spatial", d, 0);
  const int64_t groups = conv_params(ctx, d).groups, k_in = k.shape[d];
  Shape in = {dy.shape[0]};
  in.insert(in.end(), spatial.begin(), spatial.end());
  in.push_back(k_in == kUnknownDim ? kUnknownDim : k_in * groups);
  check_forward(ctx, {dy.dtype, in}, k, dy);
  return {{dy.dtype, in}};
}

// convolution_kernel_grad(input, output_grad), attribute kernel_spatial: the kernel's shape
// is [kernel_spatial..., input channels / groups, output_grad channels].
std::vector<TensorType> conv_kernel_grad_shape(const InferContext& ctx) {
  const TensorType &x = ctx.input(0), &dy = ctx.input(1);
  check_pair(ctx, x, dy);
  const size_t d = x.shape.size() - 2;
  const Axes spatial = required_sizes(ctx, "kernel_spatial", d, 1);
  const int64_t groups = conv_params(ctx, d).groups, c_in = x.shape.back();
  if (c_in != kUnknownDim && c_in % groups != 0) {
    ctx.fail("input channels (" + std::to_string(c_in) + ") are not divisible by groups (" +
             std::to_string(groups) + ") (" + types_str(ctx) + ")");
  }
  Shape k(spatial.begin(), spatial.end());
  k.push_back(c_in == kUnknownDim ? kUnknownDim : c_in / groups);
  k.push_back(dy.shape.back());
  check_forward(ctx, x, {x.dtype, k}, dy);
  return {{x.dtype, k}};
}

// dx = col2im(dy x w^T), one group at a time. Each task owns whole images, so the scattered
// additions of different tasks never meet.
template <class T>
void conv_input_grad_kernel(KernelContext& ctx) {
  using C = ComputeType<T>;
  using Mat = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Strided = Eigen::OuterStride<>;
  const Shape& in_shape = ctx.output_type(0).shape;
  const ConvPlan plan = make_plan(ctx, in_shape, ctx.input(1).shape(), ctx.input(0).shape());
  Tensor& out = ctx.allocate_output(0);
  if constexpr (kOnednnType<T>) {
    const std::optional<onednn::ConvShape> s = onednn_shape(plan, !std::is_same_v<T, float>);
    if (s && onednn::input_grad(ctx, *s, in_ptr<T>(ctx, 0), in_ptr<T>(ctx, 1), out_ptr<T>(out))) {
      return;
    }
  } else if constexpr (std::is_same_v<T, half>) {
    const std::optional<onednn::ConvShape> s = onednn_shape(plan, /*bf16=*/false);
    if (s && f16_on_onednn(in_ptr<T>(ctx, 0), ctx.input(0).size(), in_ptr<T>(ctx, 1),
                           ctx.input(1).size(), out_ptr<T>(out), out.size(),
                           [&](const float* dy32, const float* w32, float* dx32) {
                             return onednn::input_grad(ctx, *s, dy32, w32, dx32);
                           })) {
      return;
    }
  }
  ComputeOutput<T> result(out);
  C* dx = result.data();
  std::fill(dx, dx + num_elements(in_shape), C(0));
  if (plan.out_rows > 0 && plan.depth > 0 && plan.cg_out > 0) {
    std::vector<C> w_storage, dy_storage;
    const C* w = as_compute(in_ptr<T>(ctx, 1), plan.depth * plan.c_out, w_storage);
    const C* dy = as_compute(in_ptr<T>(ctx, 0), plan.out_rows * plan.c_out, dy_storage);
    const int64_t per_image = plan.out_rows / plan.batch, block = block_rows(plan);
    const int64_t grain = std::max<int64_t>(1, block / per_image);
    runtime::parallel_for(plan.batch, grain, [&](int64_t begin, int64_t end) {
      const int64_t first = begin * per_image, last = end * per_image;
      std::vector<C> patch(std::min(block, last - first) * plan.depth);
      for (int64_t r0 = first; r0 < last; r0 += block) {
        const int64_t rows = std::min(block, last - r0);
        for (int64_t g = 0; g < plan.groups; ++g) {
          Eigen::Map<Mat> p(patch.data(), rows, plan.depth);
          Eigen::Map<const Mat, 0, Strided> dyg(dy + r0 * plan.c_out + g * plan.cg_out, rows,
                                                plan.cg_out, Strided(plan.c_out));
          Eigen::Map<const Mat, 0, Strided> wg(w + g * plan.cg_out, plan.depth, plan.cg_out,
                                               Strided(plan.c_out));
          p.noalias() = dyg * wg.transpose();
          col2im(plan, patch.data(), r0, rows, g, dx);
        }
      }
    });
  }
  result.store();
}

// dw = sum over output positions of patch^T x dy. The rows are cut into a number of chunks
// that depends on the shapes only, each summed into its own partial gradient, and the
// partials are added in chunk order: the result does not depend on the thread count.
template <class T>
void conv_kernel_grad_kernel(KernelContext& ctx) {
  using C = ComputeType<T>;
  using Mat = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Strided = Eigen::OuterStride<>;
  const ConvPlan plan =
      make_plan(ctx, ctx.input(0).shape(), ctx.output_type(0).shape, ctx.input(1).shape());
  Tensor& out = ctx.allocate_output(0);
  T* dw = out_ptr<T>(out);
  const int64_t n_w = plan.depth * plan.c_out;
  if (n_w == 0) return;
  if (plan.out_rows == 0) {
    std::fill(dw, dw + n_w, T(C(0)));
    return;
  }
  const T* x = in_ptr<T>(ctx, 0);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, half>) {
    if (const std::optional<direct_conv::Geometry> g = direct_geometry(plan)) {
      // Each chunk of images sums into its own partial, the partials added in chunk order: a
      // chunk count that depends on the batch only, so the bits do not depend on the threads.
      // f16: on the widened operands, the f32 result rounded once.
      std::vector<float> x_wide, dy_wide;
      const float* x32 = as_compute(x, ctx.input(0).size(), x_wide);
      const float* dy32 = as_compute(in_ptr<T>(ctx, 1), ctx.input(1).size(), dy_wide);
      const int64_t chunks = std::clamp<int64_t>(plan.batch / 4, 1, 32);
      std::vector<float> partial(chunks * n_w, 0.0f);
      runtime::parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          direct_conv::kernel_grad_add(*g, x32, dy32, partial.data() + c * n_w,
                                       plan.batch * c / chunks, plan.batch * (c + 1) / chunks);
        }
      });
      for (int64_t c = 1; c < chunks; ++c) {
        for (int64_t i = 0; i < n_w; ++i) partial[i] += partial[c * n_w + i];
      }
      store_rounded(partial.data(), n_w, dw);
      return;
    }
  }
  if constexpr (kOnednnType<T>) {
    const std::optional<onednn::ConvShape> s = onednn_shape(plan, !std::is_same_v<T, float>);
    if (s && onednn::kernel_grad(ctx, *s, x, in_ptr<T>(ctx, 1), dw)) return;
  } else if constexpr (std::is_same_v<T, half>) {
    const std::optional<onednn::ConvShape> s = onednn_shape(plan, /*bf16=*/false);
    if (s && f16_on_onednn(x, ctx.input(0).size(), in_ptr<T>(ctx, 1), ctx.input(1).size(), dw, n_w,
                           [&](const float* x32, const float* dy32, float* dw32) {
                             return onednn::kernel_grad(ctx, *s, x32, dy32, dw32);
                           })) {
      return;
    }
  }
  std::vector<C> dy_storage;
  const C* dy = as_compute(in_ptr<T>(ctx, 1), plan.out_rows * plan.c_out, dy_storage);
  const int64_t chunks =
      std::clamp<int64_t>(std::min(plan.out_rows / 1024, (int64_t{1} << 23) / n_w), 1, 32);
  const int64_t block = block_rows(plan);
  std::vector<C> partial(chunks * n_w, C(0));
  runtime::parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<C> patch;
    for (int64_t c = begin; c < end; ++c) {
      const int64_t first = plan.out_rows * c / chunks, last = plan.out_rows * (c + 1) / chunks;
      patch.resize(std::min(block, last - first) * plan.depth);
      C* acc = partial.data() + c * n_w;
      for (int64_t r0 = first; r0 < last; r0 += block) {
        const int64_t rows = std::min(block, last - r0);
        for (int64_t g = 0; g < plan.groups; ++g) {
          im2col(plan, x, r0, rows, g, patch.data());
          Eigen::Map<const Mat> p(patch.data(), rows, plan.depth);
          Eigen::Map<const Mat, 0, Strided> dyg(dy + r0 * plan.c_out + g * plan.cg_out, rows,
                                                plan.cg_out, Strided(plan.c_out));
          Eigen::Map<Mat, 0, Strided> accg(acc + g * plan.cg_out, plan.depth, plan.cg_out,
                                           Strided(plan.c_out));
          accg.noalias() += p.transpose() * dyg;
        }
      }
    }
  });
  runtime::parallel_for(n_w, 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      C total = partial[i];
      for (int64_t c = 1; c < chunks; ++c) total += partial[c * n_w + i];
      dw[i] = static_cast<T>(total);
    }
  });
}

// The convolution attributes of a node (without the gradient ops' size attributes).
Attrs conv_attrs(const Attrs& attrs) {
  return copy_attrs(
      attrs, {"strides", "padding_low", "padding_high", "dilation", "lhs_dilation", "groups"});
}

// The sizes of t's spatial dimensions [from, from + d), which a gradient op records as an
// attribute: they must be known when the gradient is built.
Axes static_sizes(const GradContext& g, const Tensor& t, size_t from, const char* what) {
  const size_t d = t.rank() - 2;
  Axes sizes(t.shape().begin() + from, t.shape().begin() + from + d);
  if (std::find(sizes.begin(), sizes.end(), kUnknownDim) != sizes.end()) {
    throw Error(ErrorCode::kInvalidArgument,
                g.node.op + ": the gradient needs the spatial dimensions of the " + what +
                    ", but it is " + TensorType{t.dtype(), t.shape()}.str() +
                    " when recorded (in " + g.node.name + ")");
  }
  return sizes;
}

Tensor conv_op(const Tensor& x, const Tensor& w, const Attrs& attrs) {
  return call_op("convolution", {x, w}, attrs)[0];
}

std::vector<Tensor> conv_gradient(const GradContext& g) {
  const Tensor &x = g.inputs[0], &w = g.inputs[1], &dy = g.output_grads[0];
  Attrs a = conv_attrs(g.attrs());
  Attrs ai = a, ak = a;
  ai.set("input_spatial", static_sizes(g, x, 1, "input"));
  ak.set("kernel_spatial", static_sizes(g, w, 0, "kernel"));
  return {call_op("convolution_input_grad", {dy, w}, ai)[0],
          call_op("convolution_kernel_grad", {x, dy}, ak)[0]};
}

std::vector<Tensor> conv_input_grad_gradient(const GradContext& g) {
  const Tensor &dy = g.inputs[0], &w = g.inputs[1], &ddx = g.output_grads[0];
  Attrs a = conv_attrs(g.attrs());
  Attrs ak = a;
  ak.set("kernel_spatial", static_sizes(g, w, 0, "kernel"));
  return {conv_op(ddx, w, a), call_op("convolution_kernel_grad", {ddx, dy}, ak)[0]};
}

std::vector<Tensor> conv_kernel_grad_gradient(const GradContext& g) {
  const Tensor &x = g.inputs[0], &dy = g.inputs[1], &ddw = g.output_grads[0];
  Attrs a = conv_attrs(g.attrs());
  Attrs ai = a;
  ai.set("input_spatial", static_sizes(g, x, 1, "input"));
  return {call_op("convolution_input_grad", {dy, ddw}, ai)[0], conv_op(x, ddw, a)};
}

}  // namespace

template <class T>
void conv_forward(KernelContext& ctx, const ConvEpilogue<ComputeType<T>>& epilogue) {
  conv_kernel<T>(ctx, epilogue);
}
template void conv_forward<float>(KernelContext&, const ConvEpilogue<float>&);
template void conv_forward<double>(KernelContext&, const ConvEpilogue<double>&);
template void conv_forward<half>(KernelContext&, const ConvEpilogue<float>&);

std::optional<direct_conv::Geometry> direct_geometry(const KernelContext& ctx, const Shape& in,
                                                     const Shape& kernel, const Shape& out) {
  return direct_geometry(make_plan(ctx, in, kernel, out));
}

bool conv_forward_bf16_fused(KernelContext& ctx, const onednn::BiasActivation& fused) {
  const ConvPlan plan =
      make_plan(ctx, ctx.input(0).shape(), ctx.input(1).shape(), ctx.output_type(0).shape);
  const std::optional<onednn::ConvShape> s = onednn_shape(plan, /*bf16=*/true);
  if (!s || plan.out_rows == 0 || plan.c_out == 0 || plan.depth == 0) return false;
  return onednn::fused_forward(ctx, *s, in_ptr<bfloat16>(ctx, 0), in_ptr<bfloat16>(ctx, 1),
                               out_ptr<bfloat16>(ctx.allocate_output(0)), fused);
}

KILN_REGISTER_OP(convolution)
    .input("input")
    .input("kernel")
    .shape_fn(conv_shape)
    .gradient(conv_gradient);
KILN_REGISTER_TYPED_KERNEL(convolution, TypeSet::kFloat, conv_kernel);

KILN_REGISTER_OP(convolution_input_grad)
    .input("output_grad")
    .input("kernel")
    .shape_fn(conv_input_grad_shape)
    .gradient(conv_input_grad_gradient);
KILN_REGISTER_TYPED_KERNEL(convolution_input_grad, TypeSet::kFloat, conv_input_grad_kernel);

KILN_REGISTER_OP(convolution_kernel_grad)
    .input("input")
    .input("output_grad")
    .shape_fn(conv_kernel_grad_shape)
    .gradient(conv_kernel_grad_gradient);
KILN_REGISTER_TYPED_KERNEL(convolution_kernel_grad, TypeSet::kFloat, conv_kernel_grad_kernel);

}  // namespace ops

// ---- public functions -------------------------------------------------------------------

Tensor conv(const Tensor& input, const Tensor& kernel, const ConvOptions& options) {
  DType t = promote_types(input.dtype(), kernel.dtype());
  const size_t d = kernel.rank() >= 2 ? kernel.rank() - 2 : 0;
  auto or_default = [d](const Axes& v, int64_t fallback) {
    return v.empty() ? Axes(d, fallback) : v;
  };
  Attrs attrs{{"strides", or_default(options.strides, 1)},
              {"padding_low", or_default(options.padding_low, 0)},
              {"padding_high", or_default(options.padding_high, 0)},
              {"dilation", or_default(options.dilation, 1)},
              {"lhs_dilation", or_default(options.lhs_dilation, 1)},
              {"groups", options.groups}};
  return call_op("convolution", {convert(input, t), convert(kernel, t)}, attrs)[0];
}

Tensor conv2d(const Tensor& input, const Tensor& kernel, Axes strides, const std::string& padding) {
  const std::string what = "input " + TensorType{input.dtype(), input.shape()}.str() + ", kernel " +
                           TensorType{kernel.dtype(), kernel.shape()}.str();
  if (input.rank() != 4 || kernel.rank() != 4) {
    throw Error(ErrorCode::kInvalidArgument,
                "conv2d: expects a 4-d NHWC input and a 4-d HWIO kernel (" + what + ")");
  }
  if (strides.size() != 2) {
    throw Error(ErrorCode::kInvalidArgument,
                "conv2d: strides must have 2 values, got " + ops::ints_str(strides));
  }
  ConvOptions options;
  options.strides = strides;
  ops::keras_padding("conv2d", padding, {input.dim(1), input.dim(2)},
                     {kernel.dim(0), kernel.dim(1)}, strides, what, options.padding_low,
                     options.padding_high);
  return conv(input, kernel, options);
}

}  // namespace kiln
