// The fused_conv kernel op (compiler/fused_conv.h): registration, shape function, and the CPU
// kernel, the convolution's own kernel (ops/conv.h: oneDNN's chunks or Kiln's GEMM blocks, so the
// same bits) with the bias and activation applied to each block of output rows as soon as it is
// done. The epilogue is Kiln's, not oneDNN's post-ops: oneDNN's relu turns NaN into 0.
#include "compiler/fused_conv.h"

#include "kiln/op_registry.h"
#include "ops/conv.h"

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
KILN_REGISTER_KERNEL(fused_conv).dtypes({f32, f64}).fn(fused_conv_kernel);

}  // namespace kiln::compiler
