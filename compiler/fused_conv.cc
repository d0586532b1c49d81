// The fused_conv kernel op (compiler/fused_conv.h): registration, shape function, and the CPU
// kernel. f32/f64: the convolution's own kernel (ops/conv.h: oneDNN's chunks or Kiln's GEMM
// blocks, so the same bits) with Kiln's bias and activation applied to each block of output rows
// as soon as it is done (not oneDNN's post-ops: oneDNN's relu turns NaN into 0). bf16: one oneDNN
// convolution with the bias and activation in its kernel; f16: Kiln's widened GEMM blocks with
// the epilogue applied to the f32 sums before their one rounding.
#include "compiler/fused_conv.h"

#include "compiler/lowp_epilogue.h"
#include "kiln/op_registry.h"
#include "ops/conv.h"
#include "ops/kernel_util.h"
#include "runtime/execute.h"

namespace kiln::compiler {

std::string fused_conv_bias_refusal(const TensorType& bias, const TensorType& out) {
  return bias_refusal(bias, out, /*allow_full=*/false);
}

namespace {

std::vector<TensorType> fused_conv_shape(const InferContext& ctx) {
  const OpDef& conv = OpRegistry::global().find("convolution");
  std::vector<TensorType> operands = {ctx.input(0), ctx.input(1)};
  std::vector<TensorType> out =
      conv.shape_fn(InferContext(ctx.op(), ctx.node_name(), operands, ctx.attrs()));
  check_epilogue(ctx, out[0], 2, /*allow_full_bias=*/false);
  return out;
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

void fused_conv_kernel(KernelContext& ctx) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const Epilogue<T> e = epilogue_of<T>(ctx, 2, /*allow_full_bias=*/false);
    const int64_t c_out = e.bias_len;  // the output's last dimension
    ops::conv_forward<T>(
        ctx, [&](T* block, int64_t row0, int64_t rows) { e.apply(block, row0, rows, c_out); });
  };
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

}  // namespace kiln::compiler
