// A user-defined op, registered from the user's own translation unit exactly as Kiln's
// built-in ops are: scaled_softsign(x; scale) = scale * x / (1 + |x|). It runs eagerly and
// inside a graph; the program fails if the two disagree.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "../common/flags.h"
#include "kiln/kiln.h"

namespace {

// 1. The op: its inputs, attributes (read in the shape function) and output type.
KILN_REGISTER_OP(scaled_softsign).input("x").shape_fn([](const kiln::InferContext& ctx) {
  const kiln::TensorType& x = ctx.input(0);
  if (x.dtype != kiln::f32 && x.dtype != kiln::f64) {
    ctx.fail("x must be f32 or f64, got " + x.str());
  }
  ctx.attrs().get_float("scale");  // required: fails early, naming the attribute
  return std::vector<kiln::TensorType>{x};
});

// 2. Its CPU kernel, for the dtypes it supports.
template <class T>
void scaled_softsign_kernel(kiln::KernelContext& ctx) {
  const T scale = static_cast<T>(ctx.attrs().get_float("scale"));
  auto x = ctx.input(0).data<T>();
  auto y = ctx.allocate_output(0).mutable_data<T>();
  for (size_t i = 0; i < x.size(); ++i) y[i] = scale * x[i] / (T(1) + std::abs(x[i]));
}

KILN_REGISTER_KERNEL(scaled_softsign).dtypes({kiln::f32}).fn(scaled_softsign_kernel<float>);
KILN_REGISTER_KERNEL(scaled_softsign).dtypes({kiln::f64}).fn(scaled_softsign_kernel<double>);

// 3. Its gradient, composed from other ops: dy/dx = scale / (1 + |x|)^2. Reverse-mode
// autodiff (kiln::gradients) picks it up from the registry.
KILN_REGISTER_GRADIENT(scaled_softsign, [](const kiln::GradContext& g) {
  const kiln::Tensor& x = g.inputs[0];
  double scale = g.attrs().get_float("scale");
  kiln::Tensor d = kiln::square(1.0 + kiln::abs(x));
  return std::vector<kiln::Tensor>{g.output_grads[0] * scale / d};
});

// 4. A public function, like those of kiln/ops.h: eager or recorded, decided by call_op.
kiln::Tensor scaled_softsign(const kiln::Tensor& x, double scale) {
  return kiln::call_op("scaled_softsign", {x}, {{"scale", scale}})[0];
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags(argc, argv).check();  // no flags: --help says so, any argument is an error
  try {
    kiln::Tensor x = kiln::Tensor::from_list<float>({-3, -1, 0, 0.5, 4, 9}, {2, 3});

    kiln::Tensor eager = scaled_softsign(x, 2.0);
    std::cout << "eager: " << eager << "\n";

    kiln::Graph g("custom_op");
    kiln::Tensor px = g.placeholder(kiln::f32, {kiln::kUnknownDim, 3}, "x");
    kiln::Tensor py = scaled_softsign(px, 2.0);
    std::cout << g.to_text();
    kiln::Tensor graph = g.run({{px, x}}, py);
    std::cout << "graph: " << graph << "\n";

    auto a = eager.to_vector<float>();
    auto b = graph.to_vector<float>();
    auto xs = x.to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) {
      float expected = 2.0f * xs[i] / (1.0f + std::fabs(xs[i]));
      if (a[i] != b[i] || std::fabs(a[i] - expected) > 1e-6f) {
        std::fprintf(stderr, "mismatch at %zu: eager %g, graph %g, expected %g\n", i, a[i], b[i],
                     expected);
        return 1;
      }
    }
    std::cout << "eager and graph agree\n";
    return 0;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
