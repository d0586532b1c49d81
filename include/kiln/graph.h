// kiln::Graph: a DAG of op nodes. Record into it with placeholders and the ordinary op
// functions, inspect and dump it, and run it with the reference interpreter.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/tensor.h"

namespace kiln {

struct TensorType {
  DType dtype = f32;
  Shape shape;
  bool operator==(const TensorType&) const = default;
  std::string str() const;  // "f32[2,3]"
};

// One input of a node: output `output` of node `node`.
struct ValueRef {
  int node = -1;
  int output = 0;
  bool operator==(const ValueRef&) const = default;
};

// A read-only view of one recorded node.
struct NodeInfo {
  int id;
  std::string name;  // unique, with scopes: "dense_1/MatMul"
  std::string op;
  std::vector<ValueRef> inputs;
  Attrs attrs;
  std::vector<TensorType> outputs;
};

using FeedList = std::vector<std::pair<Tensor, Tensor>>;  // (placeholder, value)

class Graph {
 public:
  explicit Graph(std::string name = "graph");

  // A value supplied at run time. kUnknownDim dimensions take any size.
  Tensor placeholder(DType dtype, Shape shape, const std::string& name = "placeholder");
  Tensor constant(const Tensor& value, const std::string& name = "constant");

  // While the guard lives, op functions called on concrete tensors on this thread record into
  // this graph (their concrete inputs become constants) instead of computing eagerly.
  class DefaultGuard {
   public:
    explicit DefaultGuard(Graph graph);
    ~DefaultGuard();
    DefaultGuard(const DefaultGuard&) = delete;
    DefaultGuard& operator=(const DefaultGuard&) = delete;

   private:
    std::shared_ptr<detail::GraphImpl> previous_;
  };
  [[nodiscard]] DefaultGuard as_default() const { return DefaultGuard(*this); }

  // Nodes recorded while the guard lives are named "<scope>/<op>"; scopes nest.
  class NameScope {
   public:
    NameScope(Graph graph, const std::string& scope);
    ~NameScope();
    NameScope(const NameScope&) = delete;
    NameScope& operator=(const NameScope&) = delete;

   private:
    std::shared_ptr<detail::GraphImpl> graph_;
  };
  [[nodiscard]] NameScope name_scope(const std::string& scope) const {
    return NameScope(*this, scope);
  }

  // Runs the graph with the reference interpreter: computes `fetches` from `feeds`.
  std::vector<Tensor> run(const FeedList& feeds, const std::vector<Tensor>& fetches) const;
  Tensor run(const FeedList& feeds, const Tensor& fetch) const {
    return run(feeds, std::vector<Tensor>{fetch})[0];
  }

  const std::string& name() const;
  int num_nodes() const;
  NodeInfo node(int id) const;
  // The node with this unique name; throws kNotFound.
  NodeInfo node(const std::string& name) const;
  // The symbolic tensor for output `output` of node `id`.
  Tensor value(int id, int output = 0) const;

  std::string to_text() const;  // one line per node: %3 = dense/MatMul = dot(%1, %2) {...}
  std::string to_dot() const;   // Graphviz

  bool operator==(const Graph& other) const { return impl_ == other.impl_; }

  // Internal.
  explicit Graph(std::shared_ptr<detail::GraphImpl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<detail::GraphImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<detail::GraphImpl> impl_;
};

// A function traced into a graph of its own: a branch of cond, the body of while_loop or scan
// (kiln/control_flow.h). The node holding it feeds `params` from its inputs, in order, and
// takes its outputs from `results`. Params after the function's own arguments stand for the
// values of enclosing graphs the function used (its captures), which the node takes as its
// last inputs. Immutable once traced; nodes share it through attributes.
struct SubGraph {
  Graph graph;
  std::vector<Tensor> params;   // placeholders of `graph`
  std::vector<Tensor> results;  // values of `graph`

  std::vector<TensorType> param_types() const;
  std::vector<TensorType> result_types() const;
  // The graph as text, its nested sub-graphs indented under the nodes holding them.
  std::string to_text() const;
};

}  // namespace kiln
