// README example: kiln::function traces a C++ function once per input signature and runs it
// compiled: fused, vectorised LLVM kernels. Variables it reads and assigns stay in sync.
#include <iostream>

#include "kiln/kiln.h"

int main() {
  kiln::Variable w(kiln::Tensor::from_list<float>({0, 0, 0}), "w");
  auto sgd_step = kiln::function([&](const kiln::Tensor& x, const kiln::Tensor& y) {
    kiln::Tensor err = kiln::sum(x * w.value(), {1}) - y;  // a linear model
    kiln::Tensor loss = kiln::mean(err * err);
    w.assign(w.value() - kiln::gradients(loss, {w.value()})[0] * 0.1);
    return loss;
  });

  kiln::Tensor x = kiln::random_normal({64, 3}, /*seed=*/1);
  kiln::Tensor y = kiln::sum(x * kiln::Tensor::from_list<float>({1, -2, 0.5}), {1});
  for (int i = 0; i < 100; ++i) sgd_step(x, y);  // traced and compiled on the first call
  std::cout << "loss " << sgd_step(x, y).item<float>() << ", w " << w.value() << "\n";
  std::cout << "traces: " << sgd_step.stats().traces << "\n";  // 1: one signature
  return sgd_step(x, y).item<float>() < 1e-3 ? 0 : 1;
}
