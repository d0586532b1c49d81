// Graph walks (src/core/graph_walk.h).
#include "src/core/graph_walk.h"

namespace kiln::detail {

std::vector<bool> ancestors(const std::vector<Node>& nodes, const std::vector<int>& roots) {
  std::vector<bool> needed(nodes.size(), false);
  std::vector<int> stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (needed[id]) continue;
    needed[id] = true;
    for (const ValueRef& in : nodes[id].inputs) stack.push_back(in.node);
  }
  return needed;
}

}  // namespace kiln::detail
