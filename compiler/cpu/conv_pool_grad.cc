// The conv_pool_kernel_grad kernel op (compiler/fused_ops.h): a convolution's kernel and bias
// gradients through its max pool, read from the pool's taps (fused_conv_pool's output 2), for
// the CPU. The gradient the pool passes back reaches one convolution output per pooled element
// (its window's maximum, which the taps name), so the [batch, OH, OW, C] gradient in between is
// formed from the taps a few images at a time, in cache, and never for the whole batch: for the
// Fashion-MNIST CNN's first layer at batch 128 it would be 11 MB, written by the pool's gradient
// (after reading the convolution's whole output for the argmax) and read back by the kernel's
// gradient and the bias's.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "compiler/fused_ops.h"
#include "kiln/op_registry.h"
#include "ops/conv.h"
#include "ops/kernel_util.h"
#include "runtime/execute.h"
#include "runtime/thread_pool.h"
#include "src/core/cpu_isa.h"

namespace kiln::compiler {

static_assert(kTapNonPositive == ops::direct_conv::kNonPositive);

namespace {

// A 2-d attribute of the convolution: two values of at least `min`, `fallback` when absent.
std::vector<int64_t> pair_attr(const InferContext& ctx, const char* name, int64_t fallback,
                               int64_t min) {
  if (!ctx.attrs().has(name)) return {fallback, fallback};
  const std::vector<int64_t>& v = ctx.attrs().get_ints(name);
  if (v.size() != 2 || v[0] < min || v[1] < min)
    ctx.fail(std::string(name) + " " + ops::ints_str(v) + " must be two values of at least " +
             std::to_string(min) + " (a 2-d convolution)");
  return v;
}

// The geometry of one conv_pool_kernel_grad, from its attributes and operand shapes.
struct Geometry {
  std::vector<int64_t> strides, low, high, dilation, kernel, pool;
};

Geometry geometry(const InferContext& ctx) {
  Geometry g;
  g.strides = pair_attr(ctx, "strides", 1, 1);
  g.low = pair_attr(ctx, "padding_low", 0, 0);
  g.high = pair_attr(ctx, "padding_high", 0, 0);
  g.dilation = pair_attr(ctx, "dilation", 1, 1);
  if (!ctx.attrs().has("kernel_spatial")) ctx.fail("needs the attribute kernel_spatial");
  if (!ctx.attrs().has("pool")) ctx.fail("needs the attribute pool");
  g.kernel = pair_attr(ctx, "kernel_spatial", 1, 1);
  g.pool = pair_attr(ctx, "pool", 1, 1);
  if (g.pool[0] * g.pool[1] > kMaxPoolTaps)
    ctx.fail("pool " + ops::ints_str(g.pool) + " has more than " + std::to_string(kMaxPoolTaps) +
             " taps");
  if (pair_attr(ctx, "lhs_dilation", 1, 1) != std::vector<int64_t>{1, 1})
    ctx.fail("lhs_dilation " + ops::ints_str(ctx.attrs().get_ints("lhs_dilation")) +
             " is not supported (a transposed convolution)");
  if (ctx.attrs().has("groups") && ctx.attrs().get_int("groups") != 1)
    ctx.fail("groups " + std::to_string(ctx.attrs().get_int("groups")) + " is not supported");
  return g;
}

// The convolution's output size along spatial dimension i for n input elements.
int64_t conv_extent(const Geometry& g, int64_t n, int i) {
  const int64_t span = (g.kernel[i] - 1) * g.dilation[i] + 1, padded = n + g.low[i] + g.high[i];
  return padded < span ? 0 : (padded - span) / g.strides[i] + 1;
}

// conv_pool_kernel_grad(input [B, H, W, Cin], taps u8 [B, PH, PW, C], pool_grad [B, PH, PW, C])
// -> kernel gradient [KH, KW, Cin, C], bias gradient [C]. PH and PW are the pooled sizes of the
// convolution's output (its rows and columns left over dropped).
std::vector<TensorType> conv_pool_kernel_grad_shape(const InferContext& ctx) {
  const TensorType &x = ctx.input(0), &taps = ctx.input(1), &dp = ctx.input(2);
  if (x.dtype != f32 && x.dtype != f64) ctx.fail("takes f32 and f64 inputs, not " + x.str());
  if (taps.dtype != u8) ctx.fail("taps must be u8, not " + taps.str());
  if (dp.dtype != x.dtype)
    ctx.fail("pool_grad " + dp.str() + " must have the input's dtype (" + ops::types_str(ctx) +
             ")");
  if (x.shape.size() != 4 || taps.shape.size() != 4 || !ops::shapes_agree(taps.shape, dp.shape))
    ctx.fail("expects a 4-d NHWC input and taps and pool_grad of one 4-d shape (" +
             ops::types_str(ctx) + ")");
  const Geometry g = geometry(ctx);
  for (int i = 0; i < 2; ++i) {
    const int64_t n = x.shape[1 + i], pooled = dp.shape[1 + i];
    if (n == kUnknownDim || pooled == kUnknownDim) continue;
    const int64_t out = conv_extent(g, n, i);
    if (pooled != out / g.pool[i])
      ctx.fail("pool_grad " + dp.str() + " is not the " + ops::ints_str(g.pool) +
               " pool of the convolution's output (" + std::to_string(out) + " along spatial " +
               "dimension " + std::to_string(i) + ", for input " + x.str() + ")");
  }
  if (x.shape[0] != kUnknownDim && dp.shape[0] != kUnknownDim && x.shape[0] != dp.shape[0])
    ctx.fail("batch mismatch (" + ops::types_str(ctx) + ")");
  const int64_t c = dp.shape[3];
  return {{x.dtype, {g.kernel[0], g.kernel[1], x.shape[3], c}}, {x.dtype, {c}}};
}

// Images per task: each task sums its images into a partial gradient of its own, and the
// partials are added in task order, so the bits do not depend on the thread count.
constexpr int64_t kImagesPerTask = 8;

// The sizes of one conv_pool_kernel_grad, as plain values (the loops below take them as
// parameters: values that no store can alias, so the loops vectorize).
struct Sizes {
  int64_t oh, ow, ph, pw, c, wh, ww;
  int32_t keep;  // the tap bits a tap byte is compared with (relu_mask: the flag too)
};

// Image b's gradient of the convolution's output, dz [oh, ow, c], from its pool's gradient dp
// [ph, pw, c] and taps: each window's tap rows get the gradient of the channels whose maximum
// is there, 0 elsewhere; the rows and columns the pool dropped get 0. Adds the bias's terms
// (the same gradients) to db [c].
template <class T>
inline void scatter_image(const uint8_t* taps, const T* dp, T* dz, T* db, int32_t* tk,
                          const Sizes z) {
  const int64_t c = z.c, row = z.ow * c;
  std::fill(dz + z.ph * z.wh * row, dz + z.oh * row, T(0));
  for (int64_t py = 0; py < z.ph; ++py) {
    for (int64_t u = 0; u < z.wh; ++u) {
      T* line = dz + (py * z.wh + u) * row;
      std::fill(line + z.pw * z.ww * c, line + row, T(0));
    }
    for (int64_t px = 0; px < z.pw; ++px) {
      const int64_t at = (py * z.pw + px) * c;
      const T* __restrict gp = dp + at;
      int32_t* __restrict tt = tk;
      for (int64_t k = 0; k < c; ++k) tt[k] = taps[at + k] & z.keep;
      T* __restrict bias = db;
      for (int64_t k = 0; k < c; ++k) bias[k] += (tt[k] & kTapNonPositive) != 0 ? T(0) : gp[k];
      for (int64_t u = 0; u < z.wh; ++u) {
        for (int64_t v = 0; v < z.ww; ++v) {
          const int32_t t = static_cast<int32_t>(u * z.ww + v);
          T* __restrict d = dz + (py * z.wh + u) * row + (px * z.ww + v) * c;
          for (int64_t k = 0; k < c; ++k) d[k] = tt[k] == t ? gp[k] : T(0);
        }
      }
    }
  }
}

// The largest tap of n tap bytes, the flag masked off: a byte max, which the compiler vectorizes
// (the values are locals and parameters, which no byte store can alias).
inline uint8_t largest_tap(const uint8_t* __restrict taps, int64_t n) {
  uint8_t worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t t = taps[i] & static_cast<uint8_t>(~kTapNonPositive);
    worst = t > worst ? t : worst;
  }
  return worst;
}

// dw [n_w] and db [c], the tasks' partial gradients (each n_w + c values) added in task order.
template <class T>
void add_partials(const std::vector<T>& partial, int64_t tasks, int64_t n_w, int64_t c, T* dw,
                  T* db) {
  if (tasks == 0) {  // an empty batch
    std::fill(dw, dw + n_w, T(0));
    std::fill(db, db + c, T(0));
    return;
  }
  std::copy(partial.begin(), partial.begin() + n_w, dw);
  std::copy(partial.begin() + n_w, partial.begin() + n_w + c, db);
  for (int64_t task = 1; task < tasks; ++task) {
    const T* p = partial.data() + task * (n_w + c);
    for (int64_t i = 0; i < n_w; ++i) dw[i] += p[i];
    for (int64_t k = 0; k < c; ++k) db[k] += p[n_w + k];
  }
}

// The kernel gradient is the convolution's own kernel-gradient kernel (oneDNN's, or Kiln's
// im2col GEMM) run on a few images at a time, their dz formed from the taps in a buffer that
// stays in cache. Unfused, dz is formed for the whole batch (from the convolution's whole
// output, read back for the argmax) and read back from memory by that kernel and the bias's sum.
template <class T>
void conv_pool_kernel_grad_kernel(KernelContext& ctx, const Geometry& g) {
  const Tensor &x = ctx.input(0), &taps_t = ctx.input(1), &dp_t = ctx.input(2);
  const Shape& xs = x.shape();
  const int64_t batch = xs[0];
  Sizes z;
  z.ph = dp_t.shape()[1], z.pw = dp_t.shape()[2], z.c = dp_t.shape()[3];
  z.wh = g.pool[0], z.ww = g.pool[1];
  z.oh = conv_extent(g, xs[1], 0), z.ow = conv_extent(g, xs[2], 1);
  // With relu_mask, a tap byte with kTapNonPositive set matches no tap and adds nothing.
  z.keep = ctx.attrs().get_bool("relu_mask", false) ? 0xff : ~int32_t{kTapNonPositive} & 0xff;
  const int64_t n_w = num_elements(ctx.output_type(0).shape), c = z.c;
  const uint8_t* taps = taps_t.data<uint8_t>().data();
  const T* dp = dp_t.data<T>().data();
  const int64_t num_taps = z.wh * z.ww;
  // A tap outside the window is a corrupt taps operand: report the first.
  const int64_t num_bytes = taps_t.size();
  std::atomic<bool> corrupt = false;
  runtime::parallel_for(num_bytes, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    uint8_t worst = 0;
    cpu::dispatch([&] { worst = largest_tap(taps + begin, end - begin); });
    if (worst >= num_taps) corrupt = true;
  });
  for (int64_t i = 0; corrupt && i < num_bytes; ++i) {
    if ((taps[i] & ~kTapNonPositive) >= num_taps)
      ctx.fail("taps: element " + std::to_string(i) + " is " + std::to_string(taps[i]) +
               ", not a tap of a " + ops::ints_str(g.pool) + " window");
  }
  const int64_t tasks = (batch + kImagesPerTask - 1) / kImagesPerTask;
  std::vector<T> partial(static_cast<size_t>(tasks * (n_w + c)), T(0));
  if constexpr (std::is_same_v<T, float>) {
    // A few input channels and a 2 x 2 pool: dz formed in registers, window by window.
    const std::optional<ops::direct_conv::Geometry> dg =
        ops::direct_geometry(ctx, xs, {g.kernel[0], g.kernel[1], xs[3], c}, {batch, z.oh, z.ow, c});
    ops::direct_conv::PoolEpilogue p;
    p.pool_h = z.wh, p.pool_w = z.ww;
    if (dg && ops::direct_conv::serves_pool(*dg, p)) {
      const float* xp = x.data<float>().data();
      runtime::parallel_for(tasks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
          float* dw = partial.data() + task * (n_w + c);
          ops::direct_conv::pool_kernel_grad_add(
              *dg, xp, taps, dp, static_cast<uint8_t>(z.keep), dw, dw + n_w,
              task * kImagesPerTask, std::min(batch, (task + 1) * kImagesPerTask));
        }
      });
      add_partials(partial, tasks, n_w, c, ops::out_ptr<T>(ctx.allocate_output(0)),
                   ops::out_ptr<T>(ctx.allocate_output(1)));
      return;
    }
  }
  const OpDef& kernel_grad = OpRegistry::global().find("convolution_kernel_grad");
  const int64_t image = xs[1] * xs[2] * xs[3], pooled = z.ph * z.pw * c;
  const int64_t out_image = z.oh * z.ow * c;
  runtime::parallel_for(tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> tk(static_cast<size_t>(c));  // 32-bit lanes, like the values'
    Tensor in, dz;                                    // this range's buffers, reused by its tasks
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b0 = task * kImagesPerTask, nb = std::min(batch, b0 + kImagesPerTask) - b0;
      if (!in.defined() || in.shape()[0] != nb) {
        in = Tensor::empty(x.dtype(), {nb, xs[1], xs[2], xs[3]});
        dz = Tensor::empty(x.dtype(), {nb, z.oh, z.ow, c});
      }
      std::copy_n(x.data<T>().data() + b0 * image, nb * image,
                  static_cast<T*>(in.raw_mutable_data()));
      T* dzs = static_cast<T*>(dz.raw_mutable_data());
      T* dw = partial.data() + task * (n_w + c);
      for (int64_t b = 0; b < nb; ++b) {
        cpu::dispatch([&] {
          scatter_image(taps + (b0 + b) * pooled, dp + (b0 + b) * pooled, dzs + b * out_image,
                        dw + n_w, tk.data(), z);
        });
      }
      const Tensor w = runtime::run_kernel(kernel_grad, ctx.node_name(), {in, dz}, ctx.attrs())[0];
      std::copy_n(w.data<T>().data(), n_w, dw);
    }
  });
  add_partials(partial, tasks, n_w, c, ops::out_ptr<T>(ctx.allocate_output(0)),
               ops::out_ptr<T>(ctx.allocate_output(1)));
}

void conv_pool_kernel_grad(KernelContext& ctx) {
  const std::vector<TensorType> operands = {{ctx.input(0).dtype(), ctx.input(0).shape()},
                                            {ctx.input(1).dtype(), ctx.input(1).shape()},
                                            {ctx.input(2).dtype(), ctx.input(2).shape()}};
  const Geometry g = geometry(InferContext(ctx.op(), ctx.node_name(), operands, ctx.attrs()));
  if (ctx.input(0).dtype() == f32) {
    conv_pool_kernel_grad_kernel<float>(ctx, g);
  } else {
    conv_pool_kernel_grad_kernel<double>(ctx, g);
  }
}

}  // namespace

KILN_REGISTER_OP(conv_pool_kernel_grad)
    .input("input")
    .input("taps")
    .input("pool_grad")
    .outputs(2)
    .kind(OpKind::kKernel)
    .non_differentiable()
    .shape_fn(conv_pool_kernel_grad_shape);
KILN_REGISTER_KERNEL(conv_pool_kernel_grad).dtypes({f32, f64}).fn(conv_pool_kernel_grad);

}  // namespace kiln::compiler
