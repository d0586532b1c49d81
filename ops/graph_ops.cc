// The ops every graph has: placeholders (fed at run time) and constants.
#include "ops/kernel_util.h"

namespace kiln::ops {

KILN_REGISTER_OP(placeholder)
    .kind(OpKind::kCodegen)
    .non_differentiable()
    .shape_fn([](const InferContext& ctx) {
      return std::vector<TensorType>{{ctx.attrs().get_dtype("dtype"), ctx.attrs().get_ints("shape")}};
    });

KILN_REGISTER_KERNEL(placeholder).fn([](KernelContext& ctx) {
  ctx.fail("a placeholder must be fed a value", ErrorCode::kFailedPrecondition);
});

KILN_REGISTER_OP(constant)
    .kind(OpKind::kCodegen)
    .non_differentiable()
    .shape_fn([](const InferContext& ctx) {
      const Tensor& v = ctx.attrs().get_tensor("value");
      return std::vector<TensorType>{{v.dtype(), v.shape()}};
    });

KILN_REGISTER_KERNEL(constant).fn([](KernelContext& ctx) {
  ctx.set_output(0, ctx.attrs().get_tensor("value"));
});

}  // namespace kiln::ops
