// The reference interpreter: runs a graph node by node with the registered CPU kernels.
// It is the oracle that every faster execution path is tested against.
#include <unordered_map>

#include "kiln/graph.h"
#include "runtime/execute.h"
#include "runtime/feeds.h"
#include "src/core/tensor_impl.h"

namespace kiln {

std::vector<Tensor> Graph::run(const FeedList& feeds, const std::vector<Tensor>& fetches) const {
  // Snapshot the nodes so recording on another thread cannot move them under us.
  std::vector<detail::Node> nodes;
  {
    std::lock_guard lock(impl_->mu);
    nodes = impl_->nodes;
  }
  const std::string& gname = impl_->name;

  std::unordered_map<int, Tensor> fed;
  for (const auto& [key, value] : feeds) {
    if (!key.defined() || !key.is_symbolic() || key.impl()->graph != impl_) {
      throw Error(ErrorCode::kFailedPrecondition,
                  "run: a feed key is not a placeholder of graph '" + gname + "'" +
                      (key.defined() && key.is_symbolic()
                           ? " (it belongs to graph '" + key.impl()->graph->name + "')"
                           : ""));
    }
    const detail::Node& node = nodes[key.impl()->node];
    if (node.op != "placeholder") {
      throw Error(ErrorCode::kInvalidArgument,
                  "run: feed key '" + node.name + "' is a " + node.op + ", not a placeholder");
    }
    runtime::check_feed("run", node.name, node.outputs[0], value);
    fed[key.impl()->node] = value;
  }

  // Which nodes the fetches need, and how many times each value is used.
  std::vector<int> uses(nodes.size(), 0);
  std::vector<bool> needed(nodes.size(), false);
  std::vector<int> stack;
  for (size_t i = 0; i < fetches.size(); ++i) {
    const Tensor& f = fetches[i];
    if (!f.defined() || !f.is_symbolic() || f.impl()->graph != impl_) {
      throw Error(ErrorCode::kFailedPrecondition,
                  "run: fetch " + std::to_string(i) + " is not a value of graph '" + gname + "'" +
                      (f.defined() && f.is_symbolic()
                           ? " (it belongs to graph '" + f.impl()->graph->name + "')"
                       : f.defined() ? " (it is a concrete tensor)"
                                     : " (it is undefined)"));
    }
    if (f.impl()->node >= static_cast<int>(nodes.size())) {
      throw Error(ErrorCode::kFailedPrecondition,
                  "run: fetch " + std::to_string(i) + " was recorded after run() began");
    }
    ++uses[f.impl()->node];
    stack.push_back(f.impl()->node);
  }
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    if (needed[id]) continue;
    needed[id] = true;
    if (fed.count(id)) continue;
    for (const ValueRef& in : nodes[id].inputs) {
      ++uses[in.node];
      stack.push_back(in.node);
    }
  }

  std::vector<std::vector<Tensor>> values(nodes.size());
  for (size_t id = 0; id < nodes.size(); ++id) {
    if (!needed[id]) continue;
    const detail::Node& node = nodes[id];
    if (auto it = fed.find(static_cast<int>(id)); it != fed.end()) {
      values[id] = {it->second};
      continue;
    }
    if (node.op == "placeholder") {
      throw Error(ErrorCode::kFailedPrecondition, "run: missing feed for placeholder '" +
                                                      node.name + "' (" + node.outputs[0].str() +
                                                      ") in graph '" + gname + "'");
    }
    std::vector<Tensor> inputs;
    inputs.reserve(node.inputs.size());
    for (const ValueRef& in : node.inputs) {
      inputs.push_back(values[in.node][in.output]);
      if (--uses[in.node] == 0) values[in.node].clear();  // free what no one needs any more
    }
    values[id] = runtime::run_kernel(*node.def, node.name, inputs, node.attrs);
  }

  std::vector<Tensor> out;
  out.reserve(fetches.size());
  for (const Tensor& f : fetches) out.push_back(values[f.impl()->node].at(f.impl()->output));
  return out;
}

}  // namespace kiln
