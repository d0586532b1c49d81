// Ops for gradients: stop_gradient (identity whose gradient is zero) and unbroadcast, which
// gradient rules of broadcasting ops use to sum a gradient back to an input's shape.
#include <string>

#include "kiln/op_registry.h"
#include "kiln/ops.h"

namespace kiln {

KILN_REGISTER_OP(stop_gradient)
    .input("x")
    .kind(OpKind::kCodegen)
    .non_differentiable()
    .shape_fn([](const InferContext& ctx) { return std::vector<TensorType>{ctx.input(0)}; });
KILN_REGISTER_KERNEL(stop_gradient).fn([](KernelContext& ctx) { ctx.set_output(0, ctx.input(0)); });

Tensor stop_gradient(const Tensor& x) { return call_op("stop_gradient", {x})[0]; }

Tensor unbroadcast(const Tensor& grad, const Shape& shape) {
  const Shape& from = grad.shape();
  const int64_t lead = static_cast<int64_t>(from.size()) - static_cast<int64_t>(shape.size());
  auto fail = [&] {
    throw Error(ErrorCode::kInvalidArgument, "unbroadcast: a gradient of shape " + shape_str(from) +
                                                 " cannot come from shape " + shape_str(shape) +
                                                 " by broadcasting");
  };
  if (lead < 0) fail();
  Axes leading, stretched;
  for (int64_t i = 0; i < lead; ++i) leading.push_back(i);
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    int64_t want = shape[i], have = from[lead + i];
    if (want == 1 && have != 1) stretched.push_back(lead + i);
    if (want != 1 && want != kUnknownDim && have != kUnknownDim && want != have) fail();
  }
  Tensor out = grad;
  if (!stretched.empty()) out = sum(out, stretched, /*keepdims=*/true);
  if (!leading.empty()) out = sum(out, leading);
  return out;
}

}  // namespace kiln
