// README example: a custom op with its kernel and gradient, registered from user code.
#include <iostream>

#include "kiln/kiln.h"

KILN_REGISTER_OP(cube).input("x").shape_fn([](const kiln::InferContext& ctx) {
  return std::vector<kiln::TensorType>{ctx.input(0)};  // same dtype and shape as x
});

KILN_REGISTER_KERNEL(cube).dtypes({kiln::f32}).fn([](kiln::KernelContext& ctx) {
  auto x = ctx.input(0).data<float>();
  auto y = ctx.allocate_output(0).mutable_data<float>();
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * x[i] * x[i];
});

KILN_REGISTER_GRADIENT(cube, [](const kiln::GradContext& g) {  // built from other ops
  return std::vector<kiln::Tensor>{g.output_grads[0] * 3.0 * kiln::square(g.inputs[0])};
});

int main() {
  kiln::Tensor x = kiln::Tensor::from_list<float>({1, 2, 3});
  std::cout << kiln::call_op("cube", {x})[0] << "\n";  // tensor([ 1.,  8., 27.], dtype=f32)
}
