// README example: eager ops compute as soon as they are called.
#include <iostream>

#include "kiln/kiln.h"

int main() {
  kiln::Tensor x = kiln::Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  kiln::Tensor w = kiln::Tensor::from_list<float>({0.5, -1, 1, 0, -0.5, 2}, {3, 2});
  kiln::Tensor y = kiln::relu(kiln::matmul(x, w) + 1.0);  // computed now: [[2, 6], [5, 9]]
  std::cout << y << "\n";
}
