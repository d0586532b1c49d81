// The pass interface of the graph compiler: a Module (the graph being optimized and the values
// that must survive) and a Pass that rewrites it. Rewriter is the one way passes build graphs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "src/core/tensor_impl.h"

namespace kiln::compiler {

// A graph under optimization. `outputs` are the values the caller asked for; every placeholder
// of the original graph survives every pass (a caller may feed it), tracked from its original
// node id to its current one.
struct Module {
  Graph graph;
  std::vector<ValueRef> outputs;
  struct Placeholder {
    int original;
    int current;
  };
  std::vector<Placeholder> placeholders;

  // Set by the compile driver once shapes are concrete (empty while optimizing): every node's
  // output types, and whether it is computed at all.
  std::vector<std::vector<TensorType>> types;
  std::vector<bool> needed;
  // Set by the fusion pass (compiler/passes/fusion.h): each node's fusion group, or -1.
  std::vector<int> fusion_group;
};

// The module's graph as text (Graph::to_text), each node annotated with its concrete types and
// fusion group where the module has them: what the pass dumps show.
std::string module_text(const Module& module);

// A named Graph -> Graph transformation. run returns whether it changed the module.
class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string name() const = 0;
  virtual bool run(Module& module) = 0;
  // Whether every value of the rewritten graph is bit-identical to the original's when both run
  // on the reference kernels. A pass that may round differently (reassociating a sum, changing
  // the layout a GEMM reads) says false; Rewrites::kExact pipelines leave it out.
  virtual bool exact() const { return true; }

  // Why the last run declined to act where it might have, one line each (shown in the dump).
  const std::vector<std::string>& notes() const { return notes_; }
  void clear_notes() { notes_.clear(); }

 protected:
  void note(std::string line) { notes_.push_back(std::move(line)); }

 private:
  std::vector<std::string> notes_;
};

// The nodes of a graph (read-only).
const std::vector<detail::Node>& nodes_of(const Graph& graph);

// False for placeholders, random ops, ops registered stateful, and nodes holding a sub-graph
// with any of those (a placeholder of a sub-graph is its param): their results may not be
// computed at compile time nor shared between two nodes.
bool is_pure(const detail::Node& node);

// Builds the next version of a module in one forward sweep over its nodes. Every old node is
// either kept (its inputs remapped), replaced by a node emitted in its place, or aliased to
// values that already exist in the new graph. Nodes an old node no longer uses stay until DCE.
class Rewriter {
 public:
  explicit Rewriter(const Module& module);

  int num_old() const { return static_cast<int>(old_.size()); }
  const detail::Node& old_node(int id) const { return old_.at(id); }
  const detail::Node& new_node(int id) const { return out_->nodes.at(id); }
  // The new-graph value standing for an old value (of a node already visited).
  ValueRef map(ValueRef old) const;
  // The new-graph node producing the new value of old input `i` of old node `id`.
  const detail::Node& input_node(int id, int i) const;
  const TensorType& new_type(ValueRef v) const;
  // The graph being built: a pass may record ops into it (with it as the default graph) and
  // alias old nodes to the values they give.
  Graph graph() const { return Graph(out_); }

  // Copies old node `id` with its inputs remapped; returns its new id.
  int keep(int id);
  // Appends `node` (whose inputs already refer to the new graph) in place of old node `id`.
  int replace(int id, detail::Node node);
  // Old node `id`'s outputs become these new values. Their types must match.
  void alias(int id, std::vector<ValueRef> values);
  // Drops old node `id`; nothing may refer to it afterwards.
  void drop(int id);

  // The rewritten module (throws if a placeholder or output was dropped).
  Module finish() const;

 private:
  const Module& module_;
  const std::vector<detail::Node>& old_;
  std::shared_ptr<detail::GraphImpl> out_;
  std::vector<std::vector<ValueRef>> map_;  // per old node, per output
};

// Who reads each node of a module: `users[id]` lists the nodes reading node id (once per input
// that reads it), `uses[id]` counts those inputs and the module outputs that are node id's.
struct Readers {
  std::vector<std::vector<int>> users;
  std::vector<int> uses;
};
Readers readers_of(const Module& module);

// "%id name (op)": how the passes' notes name a node.
std::string node_label(const std::vector<detail::Node>& nodes, int id);

// A node with a fresh concrete value, named `name`.
detail::Node constant_node(const std::string& name, const Tensor& value);

}  // namespace kiln::compiler
