// The fused_conv kernel op (compiler/cpu/fused_conv.h): registration, shape function, and the CPU
// kernel. f32/f64: the convolution's own kernel (ops/conv.h: oneDNN's chunks or Kiln's GEMM
// blocks, so the same bits) with Kiln's bias and activation applied to each block of output rows
// as soon as it is done (not oneDNN's post-ops: oneDNN's relu turns NaN into 0). bf16: one oneDNN
// convolution with the bias and activation in its kernel; f16: Kiln's widened GEMM blocks with
// the epilogue applied to the f32 sums before their one rounding.
#include "compiler/cpu/fused_conv.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <vector>

#include "compiler/cpu/lowp_epilogue.h"
#include "kiln/op_registry.h"
#include "ops/conv.h"
#include "ops/kernel_util.h"
#include "ops/window_util.h"
#include "runtime/execute.h"
#include "runtime/thread_pool.h"
#include "src/core/cpu_isa.h"

namespace kiln::compiler {

namespace {

// The convolution's output type for ctx's inputs 0 and 1 and its attributes.
TensorType conv_output_type(const InferContext& ctx) {
  const OpDef& conv = OpRegistry::global().find("convolution");
  std::vector<TensorType> operands = {ctx.input(0), ctx.input(1)};
  return conv.shape_fn(InferContext(ctx.op(), ctx.node_name(), operands, ctx.attrs())).at(0);
}

std::vector<TensorType> fused_conv_shape(const InferContext& ctx) {
  std::vector<TensorType> out = {conv_output_type(ctx)};
  check_epilogue(ctx, out[0], 2, /*allow_full_bias=*/false);
  return out;
}

// fused_conv's output, then its max pool's.
std::vector<TensorType> fused_conv_pool_shape(const InferContext& ctx) {
  std::vector<TensorType> out = fused_conv_shape(ctx);
  if (!ctx.attrs().has("pool")) ctx.fail("needs the attribute pool: [window rows, window columns]");
  const std::vector<int64_t>& pool = ctx.attrs().get_ints("pool");
  const Shape& y = out[0].shape;
  if (pool.size() != 2 || pool[0] < 1 || pool[1] < 1 || y.size() != 4) {
    ctx.fail("pool " + ops::ints_str(pool) + " must be two window sizes of at least 1 over the " +
             "spatial dimensions of a 4-d output (the output is " + out[0].str() + ")");
  }
  if (out[0].dtype != f32 && out[0].dtype != f64) {
    ctx.fail("pool: the fused max pool takes f32 and f64 outputs, not " + out[0].str());
  }
  Shape pooled = y;
  for (int i = 0; i < 2; ++i) {
    if (y[1 + i] == kUnknownDim) continue;
    if (y[1 + i] < pool[i]) {
      ctx.fail("pool " + ops::ints_str(pool) + " is larger than the output " + out[0].str());
    }
    pooled[1 + i] = y[1 + i] / pool[i];
  }
  out.push_back({out[0].dtype, pooled});
  if (!ctx.attrs().get_bool("conv_output", true)) out[0].shape = {0};
  if (ctx.attrs().get_bool("taps", false)) {
    if (pool[0] * pool[1] > kMaxPoolTaps)
      ctx.fail("taps: a pool of " + ops::ints_str(pool) + " has more than " +
               std::to_string(kMaxPoolTaps) + " taps to number in a byte");
    out.push_back({u8, pooled});
  }
  return out;
}

// pool_image's loops over one image, with every size a parameter (a value the taps' byte stores
// cannot alias, as they could a lambda's captures, which would keep the loops scalar).
template <class T>
inline void pool_windows(const T* image, T* out, uint8_t* taps, int32_t* scratch, int64_t ph,
                         int64_t pw, int64_t ow, int64_t c, int64_t wh, int64_t ww) {
  for (int64_t i = 0; i < ph; ++i) {
    for (int64_t j = 0; j < pw; ++j) {
      T* __restrict d = out + (i * pw + j) * c;
      const T* first = image + (i * wh * ow + j * ww) * c;
      for (int64_t k = 0; k < c; ++k) d[k] = first[k];
      for (int64_t u = 0; u < wh; ++u) {
        for (int64_t v = u == 0 ? 1 : 0; v < ww; ++v) {
          const T* __restrict row = first + (u * ow + v) * c;
          for (int64_t k = 0; k < c; ++k) d[k] = ops::takes_max(row[k], d[k]) ? row[k] : d[k];
        }
      }
      if (taps == nullptr) continue;
      // The tap of the maximum: the first tap holding it (the max takes only greater values, or
      // the first NaN), found scanning the taps from the last to the first, in 32-bit lanes like
      // the values' (byte lanes beside float ones keep a loop scalar).
      int32_t* __restrict tk = scratch;
      for (int64_t k = 0; k < c; ++k) tk[k] = 0;
      for (int64_t tap = wh * ww - 1; tap >= 0; --tap) {
        const T* __restrict row = first + ((tap / ww) * ow + tap % ww) * c;
        const int32_t tv = static_cast<int32_t>(tap);
        for (int64_t k = 0; k < c; ++k) {
          const T v = row[k], m = d[k];
          tk[k] = (v == m) | ((v != v) & (m != m)) ? tv : tk[k];
        }
      }
      for (int64_t k = 0; k < c; ++k) tk[k] |= d[k] <= T(0) ? int32_t{kTapNonPositive} : 0;
      uint8_t* __restrict t = taps + (i * pw + j) * c;
      for (int64_t k = 0; k < c; ++k) t[k] = static_cast<uint8_t>(tk[k]);
    }
  }
}

// Output 1 of a fused_conv with "pool" [ph, pw]: the max of each disjoint, unpadded ph x pw
// window of output 0 image `b` (NHWC), by reduce_window_max's rule (the first NaN in row-major
// window order wins), so the same bits as that op on output 0. With `taps` (output 2), also
// each maximum's tap as reduce_window_max_grad finds it (ops/pool.cc: window_argmax, the first
// of equal values in row-major window order), with kTapNonPositive where the maximum is <= 0.
template <class T>
void pool_image(const T* y, T* pooled, uint8_t* taps, const Shape& ys,
                const std::vector<int64_t>& pool, int64_t b) {
  const int64_t oh = ys[1], ow = ys[2], c = ys[3], wh = pool[0], ww = pool[1];
  const int64_t ph = oh / wh, pw = ow / ww;
  thread_local std::vector<int32_t> scratch;
  if (taps != nullptr && static_cast<int64_t>(scratch.size()) < c) scratch.resize(c);
  const T* image = y + b * oh * ow * c;
  T* out = pooled + b * ph * pw * c;
  uint8_t* image_taps = taps == nullptr ? nullptr : taps + b * ph * pw * c;
  int32_t* tk = scratch.data();
  cpu::dispatch([&] { pool_windows(image, out, image_taps, tk, ph, pw, ow, c, wh, ww); });
}

// bf16: the convolution, its bias and its activation as one oneDNN kernel where the host has a
// bf16 unit (the bias added and the activation applied to the f32 sums, rounded once; a scalar
// bias spread over the channels); otherwise the convolution's kernel, then the epilogue with the
// reference kernels' roundings (the same bits as convolution, add and the activation run apart).
void fused_conv_bf16(KernelContext& ctx) {
  const Epilogue<bfloat16> e = epilogue_of<bfloat16>(ctx, 2, /*allow_full_bias=*/false);
  std::vector<bfloat16> channels;  // a scalar bias, one per output channel
  ops::onednn::BiasActivation fused{e.bias, onednn_activation(e.act)};
  if (e.bias != nullptr && e.kind == BiasKind::kScalar) {
    channels.assign(e.bias_len, e.bias[0]);
    fused.bias = channels.data();
  }
  if (ops::conv_forward_bf16_fused(ctx, fused)) return;
  const Tensor d = runtime::run_kernel(OpRegistry::global().find("convolution"), ctx.node_name(),
                                       {ctx.input(0), ctx.input(1)}, ctx.attrs())[0];
  apply_rounded_epilogue(e, static_cast<const bfloat16*>(d.raw_data()),
                         ops::out_ptr<bfloat16>(ctx.allocate_output(0)), d.size());
}

// f16 (no f16 convolution in oneDNN 2.6): the convolution's widened kernel, the bias and the
// activation applied to each block of f32 sums before its one rounding to f16.
void fused_conv_f16(KernelContext& ctx) {
  const Epilogue<half> e = epilogue_of<half>(ctx, 2, /*allow_full_bias=*/false);
  std::vector<float> bias;
  const Epilogue<float> wide =
      widened_epilogue(e, ctx.num_inputs() > 2 ? ctx.input(2).size() : 0, &bias);
  ops::conv_forward<half>(ctx, [&](float* block, int64_t row0, int64_t rows) {
    wide.apply(block, row0, rows, wide.bias_len);
  });
}

// fused_conv_pool with "conv_output" false: outputs 1 and 2 only, output 0 left empty. f32 on
// the direct kernels where they serve (a few input channels, a 2 x 2 pool, no activation or
// relu: each window's pixels summed together in registers, the convolution's output never
// stored); otherwise the op with its convolution output, which is then dropped.
void fused_conv_pool_only(KernelContext& ctx) {
  ctx.allocate_output(0);
  const Tensor &x = ctx.input(0), &k = ctx.input(1);
  const Activation act = *activation_from_name(ctx.attrs().get_string("activation"));
  const std::vector<int64_t>& pool = ctx.attrs().get_ints("pool");
  if (x.dtype() == f32 && (act == Activation::kNone || act == Activation::kRelu)) {
    const std::vector<TensorType> operands = {{x.dtype(), x.shape()}, {k.dtype(), k.shape()}};
    const Shape ys =
        conv_output_type(InferContext(ctx.op(), ctx.node_name(), operands, ctx.attrs())).shape;
    const std::optional<ops::direct_conv::Geometry> g =
        ops::direct_geometry(ctx, x.shape(), k.shape(), ys);
    ops::direct_conv::PoolEpilogue p;
    p.relu = act == Activation::kRelu;
    p.pool_h = pool[0], p.pool_w = pool[1];
    std::vector<float> bias;  // a scalar bias, one per channel
    bool bias_fits = true;
    if (ctx.num_inputs() > 2) {
      const Tensor& b = ctx.input(2);
      std::string why;
      const std::optional<BiasKind> kind = bias_kind(b.shape(), ys, false, &why);
      if (!kind) ctx.fail("bias " + shape_str(b.shape()) + ": " + why);
      p.bias = b.data<float>().data();
      if (*kind == BiasKind::kScalar) {
        bias.assign(static_cast<size_t>(ys.back()), p.bias[0]);
        p.bias = bias.data();
      } else {
        bias_fits = b.size() == ys.back();
      }
    }
    if (g && bias_fits && ops::direct_conv::serves_pool(*g, p)) {
      const float* xp = x.data<float>().data();
      const float* w = k.data<float>().data();
      float* pooled = ops::out_ptr<float>(ctx.allocate_output(1));
      uint8_t* taps =
          ctx.outputs().size() > 2 ? ops::out_ptr<uint8_t>(ctx.allocate_output(2)) : nullptr;
      runtime::parallel_for(g->batch, 1, [&](int64_t begin, int64_t end) {
        ops::direct_conv::forward_pool(*g, xp, w, p, pooled, taps, begin, end);
      });
      return;
    }
  }
  Attrs attrs = ctx.attrs();
  attrs.set("conv_output", true);
  std::vector<Tensor> in;
  for (int i = 0; i < ctx.num_inputs(); ++i) in.push_back(ctx.input(i));
  std::vector<Tensor> out =
      runtime::run_kernel(OpRegistry::global().find(ctx.op()), ctx.node_name(), in, attrs);
  for (size_t i = 1; i < out.size(); ++i) ctx.set_output(static_cast<int>(i), std::move(out[i]));
}

void fused_conv_kernel(KernelContext& ctx) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const Epilogue<T> e = epilogue_of<T>(ctx, 2, /*allow_full_bias=*/false);
    const int64_t c_out = e.bias_len;  // the output's last dimension
    if (ctx.outputs().size() == 1) {
      ops::conv_forward<T>(
          ctx, [&](T* block, int64_t row0, int64_t rows) { e.apply(block, row0, rows, c_out); });
      return;
    }
    // With a fused max pool, each image is pooled by the thread whose block completes its rows,
    // right after the epilogue, while they are in cache: the pool does not read the whole
    // output back from memory (blocks are whole images on oneDNN's path, row ranges on Kiln's).
    const Shape& ys = ctx.output_type(0).shape;
    const std::vector<int64_t>& pool = ctx.attrs().get_ints("pool");
    T* pooled = ops::out_ptr<T>(ctx.allocate_output(1));
    uint8_t* taps =
        ctx.outputs().size() > 2 ? ops::out_ptr<uint8_t>(ctx.allocate_output(2)) : nullptr;
    const int64_t image_rows = ys[1] * ys[2];
    std::vector<std::atomic<int64_t>> rows_done(static_cast<size_t>(ys[0]));
    ops::conv_forward<T>(ctx, [&](T* block, int64_t row0, int64_t rows) {
      e.apply(block, row0, rows, c_out);
      // Every row comes exactly once, each block in the buffer that holds the whole output then.
      const T* y = block - row0 * c_out;
      for (int64_t b = row0 / image_rows; b * image_rows < row0 + rows; ++b) {
        const int64_t n =
            std::min(row0 + rows, (b + 1) * image_rows) - std::max(row0, b * image_rows);
        if (rows_done[b].fetch_add(n) + n == image_rows) pool_image(y, pooled, taps, ys, pool, b);
      }
    });
  };
  if (!ctx.attrs().get_bool("conv_output", true)) return fused_conv_pool_only(ctx);
  const DType t = ctx.input(0).dtype();
  if (t == f32) {
    run(float{});
  } else if (t == f64) {
    run(double{});
  } else if (t == bf16) {
    fused_conv_bf16(ctx);
  } else if (t == f16) {
    fused_conv_f16(ctx);
  } else {
    ctx.fail(std::string("dtype ") + dtype_name(t) + " is not supported");
  }
}

}  // namespace

KILN_REGISTER_OP(fused_conv)
    .input("input")
    .input("kernel")
    .optional_input("bias")
    .kind(OpKind::kKernel)
    .non_differentiable()
    .shape_fn(fused_conv_shape);
KILN_REGISTER_KERNEL(fused_conv).dtypes({f32, f64, bf16, f16}).fn(fused_conv_kernel);

KILN_REGISTER_OP(fused_conv_pool)
    .input("input")
    .input("kernel")
    .optional_input("bias")
    .variadic_outputs()
    .kind(OpKind::kKernel)
    .non_differentiable()
    .shape_fn(fused_conv_pool_shape);
KILN_REGISTER_KERNEL(fused_conv_pool).dtypes({f32, f64}).fn(fused_conv_kernel);

}  // namespace kiln::compiler
