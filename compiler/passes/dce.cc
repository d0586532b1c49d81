// Keeps the requested outputs, the placeholders, and everything they transitively use.
#include "compiler/passes/dce.h"

namespace kiln::compiler {

bool Dce::run(Module& module) {
  const std::vector<detail::Node>& nodes = nodes_of(module.graph);
  std::vector<bool> live(nodes.size(), false);
  for (ValueRef v : module.outputs) live[v.node] = true;
  for (const Module::Placeholder& p : module.placeholders) live[p.current] = true;
  // Inputs come before their users, so one backward sweep marks everything needed.
  for (int id = static_cast<int>(nodes.size()) - 1; id >= 0; --id) {
    if (!live[id]) continue;
    for (ValueRef in : nodes[id].inputs) live[in.node] = true;
  }
  int removed = 0;
  Rewriter rw(module);
  for (int id = 0; id < rw.num_old(); ++id) {
    if (live[id]) {
      rw.keep(id);
    } else {
      rw.drop(id);
      ++removed;
    }
  }
  if (removed == 0) return false;
  module = rw.finish();
  return true;
}

}  // namespace kiln::compiler
