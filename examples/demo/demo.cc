// The smallest tour of Kiln: eager ops, the same ops recorded into a graph, and a run.
#include <iostream>

#include "../common/flags.h"
#include "kiln/kiln.h"

int main(int argc, char** argv) {
  examples::Flags(argc, argv).check();  // no flags: --help says so, any argument is an error
  std::cout << kiln::build_info() << "\n\n";

  // Eager: ops on concrete tensors compute immediately.
  kiln::Tensor x = kiln::Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  kiln::Tensor w = kiln::random_normal({3, 2}, /*seed=*/42);
  kiln::Tensor y = kiln::relu(kiln::matmul(x, w) + 0.5);
  std::cout << "eager  relu(x @ w + 0.5) =\n" << y << "\n\n";

  // Graph: the same functions record nodes when given placeholders.
  kiln::Graph g("demo");
  kiln::Tensor px = g.placeholder(kiln::f32, {kiln::kUnknownDim, 3}, "x");
  kiln::Tensor py;
  {
    auto scope = g.name_scope("dense");
    py = kiln::relu(kiln::matmul(px, w) + 0.5);
  }
  std::cout << g.to_text() << "\n";
  kiln::Tensor out = g.run({{px, x}}, py);
  std::cout << "graph  relu(x @ w + 0.5) =\n" << out << "\n";
  std::cout << "eager and graph agree: " << (kiln::allclose(y, out) ? "yes" : "NO") << "\n";
  return kiln::allclose(y, out) ? 0 : 1;
}
