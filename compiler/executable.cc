// The compiled execution path: optimize, plan fusion for concrete shapes, JIT each group once,
// and order fused-kernel and reference-kernel thunks into one flat sequence.
#include "compiler/executable.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <unordered_map>

#include "compiler/lowering.h"
#include "runtime/execute.h"
#include "src/core/tensor_impl.h"

namespace kiln::compiler {

struct Executable::Impl {
  struct Thunk {
    int node = -1;                    // kernel thunk: the node it runs
    int fused = -1;                   // fused thunk: index into kernels
    std::vector<ValueRef> inputs;     // fused thunk: its kernel's inputs
    std::vector<int> outputs;         // fused thunk: the nodes its outputs stand for
    std::vector<int> release;         // nodes whose values no later thunk needs
    std::string description;
  };
  CompiledGraph cg;
  std::vector<detail::Node> nodes;
  std::vector<std::vector<TensorType>> types;
  std::vector<int> placeholders;  // needed placeholder node ids
  std::vector<cpu::FusedKernel> kernels;
  std::vector<Thunk> thunks;
  std::string fusion_log;
};

namespace {

bool shape_matches(const Shape& want, const Shape& got) {
  if (want.size() != got.size()) return false;
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] != kUnknownDim && want[i] != got[i]) return false;
  return true;
}

bool fully_known(const Shape& s) {
  for (int64_t d : s)
    if (d < 0) return false;
  return true;
}

// Maps feeds keyed by the original graph onto the optimized graph's node ids, checking each.
std::unordered_map<int, Tensor> map_feeds(const CompiledGraph& cg,
                                          const std::vector<detail::Node>& nodes,
                                          const FeedList& feeds, const char* what) {
  std::unordered_map<int, Tensor> fed;
  for (const auto& [key, value] : feeds) {
    int id = cg.placeholder(key).impl()->node;
    const detail::Node& node = nodes[id];
    if (!value.defined() || value.is_symbolic()) {
      throw Error(ErrorCode::kInvalidArgument, std::string(what) +
                                                   ": the value fed to placeholder '" +
                                                   node.name + "' must be concrete");
    }
    const TensorType& want = node.outputs[0];
    if (value.dtype() != want.dtype || !shape_matches(want.shape, value.shape())) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(what) + ": feed for placeholder '" + node.name + "' is " +
                      TensorType{value.dtype(), value.shape()}.str() + ", expected " +
                      want.str());
    }
    fed[id] = value;
  }
  return fed;
}

}  // namespace

Executable compile(const Graph& graph, const std::vector<Tensor>& outputs, const FeedList& feeds) {
  auto impl = std::make_shared<Executable::Impl>();
  impl->cg = optimize(graph, outputs);
  const CompiledGraph& cg = impl->cg;
  impl->nodes = nodes_of(cg.graph);
  const auto& nodes = impl->nodes;
  const int n = static_cast<int>(nodes.size());
  std::unordered_map<int, Tensor> fed = map_feeds(cg, nodes, feeds, "compile");

  std::vector<ValueRef> fetched;
  std::vector<bool> needed(n, false);
  std::vector<int> stack;
  for (const Tensor& t : cg.outputs) {
    fetched.push_back({t.impl()->node, t.impl()->output});
    stack.push_back(t.impl()->node);
  }
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    if (needed[id]) continue;
    needed[id] = true;
    for (const ValueRef& in : nodes[id].inputs) stack.push_back(in.node);
  }

  // Concrete types for every needed node.
  impl->types.resize(n);
  for (int id = 0; id < n; ++id) {
    if (!needed[id]) continue;
    const detail::Node& node = nodes[id];
    if (node.op == "placeholder") {
      impl->placeholders.push_back(id);
      if (auto it = fed.find(id); it != fed.end()) {
        impl->types[id] = {TensorType{it->second.dtype(), it->second.shape()}};
      } else if (fully_known(node.outputs[0].shape)) {
        impl->types[id] = node.outputs;
      } else {
        throw Error(ErrorCode::kInvalidArgument,
                    "compile: placeholder '" + node.name + "' (" + node.outputs[0].str() +
                        ") has unknown dimensions: feed an example value to compile for");
      }
      continue;
    }
    if (node.inputs.empty()) {
      impl->types[id] = node.outputs;
      continue;
    }
    std::vector<TensorType> in_types;
    for (const ValueRef& in : node.inputs) in_types.push_back(impl->types[in.node][in.output]);
    impl->types[id] = runtime::infer_types(*node.def, node.name, in_types, node.attrs);
  }

  FusionPlan plan = plan_fusion(nodes, impl->types, needed, fetched);
  impl->fusion_log = plan.log();

  // One unit per group and per other needed non-placeholder node; JIT each group.
  std::vector<int> unit_of(n, -1);
  std::vector<Executable::Impl::Thunk> units;
  for (int gi = 0; gi < static_cast<int>(plan.groups.size()); ++gi) {
    const FusionGroup& group = plan.groups[gi];
    Executable::Impl::Thunk t;
    try {
      LoweredFusion lowered = lower_fusion_group(gi, plan, nodes, impl->types);
      lowered.subgraph.name = "fused_" + std::to_string(impl->kernels.size());
      impl->kernels.push_back(compile_lowered(lowered));
      t.fused = static_cast<int>(impl->kernels.size()) - 1;
      t.inputs = std::move(lowered.inputs);
      t.outputs = std::move(lowered.outputs);
      t.description = "fused(" + lowered.ops + ") -> " + std::to_string(t.outputs.size()) +
                      " output" + (t.outputs.size() == 1 ? "" : "s");
    } catch (const Error& e) {
      impl->fusion_log += "group of %" + std::to_string(group.nodes[0]) +
                          " left to the reference kernels: " + e.what() + "\n";
      continue;  // its nodes get kernel thunks below
    }
    for (int m : group.nodes) unit_of[m] = static_cast<int>(units.size());
    units.push_back(std::move(t));
  }
  for (int id = 0; id < n; ++id) {
    if (!needed[id] || nodes[id].op == "placeholder" || unit_of[id] >= 0) continue;
    Executable::Impl::Thunk t;
    t.node = id;
    t.description = "kernel " + nodes[id].op;
    for (const ValueRef& in : nodes[id].inputs) t.inputs.push_back(in);
    unit_of[id] = static_cast<int>(units.size());
    units.push_back(std::move(t));
  }

  // Order the units topologically (Kahn; the fusion plan keeps the unit graph acyclic).
  const int u = static_cast<int>(units.size());
  std::vector<std::vector<int>> users(u);
  std::vector<int> pending(u, 0);
  for (int i = 0; i < u; ++i) {
    std::vector<int> deps;
    for (const ValueRef& in : units[i].inputs) {
      int d = unit_of[in.node];
      if (d >= 0 && d != i && std::find(deps.begin(), deps.end(), d) == deps.end())
        deps.push_back(d);
    }
    pending[i] = static_cast<int>(deps.size());
    for (int d : deps) users[d].push_back(i);
  }
  std::vector<int> ready, order;
  for (int i = u - 1; i >= 0; --i)
    if (pending[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    int i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (int j : users[i])
      if (--pending[j] == 0) ready.push_back(j);
  }
  if (static_cast<int>(order.size()) != u) {
    throw Error(ErrorCode::kInternal, "compile: the fusion plan has a cycle (a bug)");
  }

  // Free each value after its last use (fetched values are kept).
  std::vector<int> last_use(n, -1);
  for (int k = 0; k < u; ++k)
    for (const ValueRef& in : units[order[k]].inputs) last_use[in.node] = k;
  for (const ValueRef& f : fetched) last_use[f.node] = -2;
  for (int id = 0; id < n; ++id)
    if (last_use[id] >= 0) units[order[last_use[id]]].release.push_back(id);
  for (int k : order) impl->thunks.push_back(std::move(units[k]));

  if (const char* dir = std::getenv("KILN_DUMP"); dir && *dir) {
    std::ofstream(std::string(dir) + "/fusion.txt") << impl->fusion_log;
  }
  return Executable(std::move(impl));
}

std::vector<Tensor> Executable::run(const FeedList& feeds) const {
  const Impl& im = *impl_;
  std::vector<std::vector<Tensor>> values(im.nodes.size());
  for (auto& [id, value] : map_feeds(im.cg, im.nodes, feeds, "run")) {
    if (im.types[id].empty()) continue;  // a placeholder the outputs do not need
    if (TensorType{value.dtype(), value.shape()} != im.types[id][0]) {
      throw Error(ErrorCode::kInvalidArgument,
                  "run: feed for placeholder '" + im.nodes[id].name + "' is " +
                      TensorType{value.dtype(), value.shape()}.str() +
                      ", but the executable was compiled for " + im.types[id][0].str() +
                      " (compile again for this shape)");
    }
    values[id] = {value};
  }
  for (int id : im.placeholders) {
    if (values[id].empty()) {
      throw Error(ErrorCode::kFailedPrecondition,
                  "run: missing feed for placeholder '" + im.nodes[id].name + "' (" +
                      im.nodes[id].outputs[0].str() + ") in graph '" + im.cg.graph.name() + "'");
    }
  }
  std::vector<Tensor> inputs;
  for (const Impl::Thunk& t : im.thunks) {
    inputs.clear();
    for (const ValueRef& in : t.inputs) inputs.push_back(values[in.node].at(in.output));
    if (t.fused >= 0) {
      std::vector<Tensor> outs = im.kernels[t.fused].run(inputs);
      for (size_t k = 0; k < t.outputs.size(); ++k) values[t.outputs[k]] = {outs[k]};
    } else {
      const detail::Node& node = im.nodes[t.node];
      values[t.node] = runtime::run_kernel(*node.def, node.name, inputs, node.attrs);
    }
    for (int id : t.release) values[id].clear();
  }
  std::vector<Tensor> out;
  out.reserve(im.cg.outputs.size());
  for (const Tensor& f : im.cg.outputs) out.push_back(values[f.impl()->node].at(f.impl()->output));
  return out;
}

int Executable::num_thunks() const { return static_cast<int>(impl_->thunks.size()); }

int Executable::num_fused_thunks() const {
  int k = 0;
  for (const auto& t : impl_->thunks) k += t.fused >= 0;
  return k;
}

std::vector<std::string> Executable::thunk_descriptions() const {
  std::vector<std::string> d;
  for (const auto& t : impl_->thunks) d.push_back(t.description);
  return d;
}

const std::string& Executable::fusion_log() const { return impl_->fusion_log; }
const CompiledGraph& Executable::optimized() const { return impl_->cg; }

}  // namespace kiln::compiler
