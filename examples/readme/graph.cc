// README example: record ops into a Graph with a placeholder of unknown batch size, then run it.
#include <iostream>

#include "kiln/kiln.h"

int main() {
  kiln::Graph g("model");
  kiln::Tensor x = g.placeholder(kiln::f32, {kiln::kUnknownDim, 3}, "x");  // any batch size
  kiln::Tensor y;
  {
    auto scope = g.name_scope("layer");
    y = kiln::tanh(x * 2.0 + 1.0);  // records layer/mul, layer/add, layer/tanh
  }
  std::cout << g.to_text();  // one line per node; g.to_dot() for Graphviz

  kiln::Tensor batch = kiln::Tensor::from_list<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  kiln::Tensor out = g.run({{x, batch}}, y);  // the reference interpreter
  std::cout << out << "\n";
}
