// Graph recording: unique scoped names, placeholders, constants, inspection and dumps.
#include <sstream>
#include <utility>
#include <variant>

#include "kiln/graph.h"
#include "kiln/op_registry.h"
#include "src/core/host_allocator.h"
#include "src/core/tensor_impl.h"

namespace kiln {
namespace detail {

std::string GraphImpl::unique_name(const std::string& base) {
  std::string prefix;
  for (const auto& s : scopes) prefix += s + "/";
  std::string name = prefix + base;
  for (int i = 1; by_name.count(name); ++i) name = prefix + base + "_" + std::to_string(i);
  return name;
}

int GraphImpl::add_node(Node node) {
  int id = static_cast<int>(nodes.size());
  by_name[node.name] = id;
  nodes.push_back(std::move(node));
  return id;
}

Tensor GraphImpl::value(int node, int output) {
  auto impl = make_pooled<TensorImpl>();
  const TensorType& type = nodes.at(node).outputs.at(output);
  impl->dtype = type.dtype;
  impl->shape = type.shape;
  impl->node = node;
  impl->output = output;
  return Tensor(std::move(impl));  // graph pointer set by the caller, who owns the shared_ptr
}

std::shared_ptr<GraphImpl>& default_graph() {
  thread_local std::shared_ptr<GraphImpl> graph;
  return graph;
}

bool encloses(const GraphImpl* ancestor, const GraphImpl* g) {
  for (const GraphImpl* p = g->parent.get(); p; p = p->parent.get())
    if (p == ancestor) return true;
  return false;
}

Tensor capture(const std::shared_ptr<GraphImpl>& g, const Tensor& outer) {
  const auto& from = outer.impl()->graph;
  if (from == g) return outer;
  if (!g->parent || !encloses(from.get(), g.get())) {
    throw Error(ErrorCode::kFailedPrecondition,
                "a value of graph '" + from->name + "' is used in graph '" + g->name +
                    "', which it does not enclose");
  }
  Tensor in_parent = capture(g->parent, outer);
  const ValueRef ref{in_parent.impl()->node, in_parent.impl()->output};
  for (const auto& [value, placeholder] : g->captures) {
    if (value.impl()->node == ref.node && value.impl()->output == ref.output) return placeholder;
  }
  std::string name;
  {
    std::lock_guard lock(g->parent->mu);
    name = "captured_" + g->parent->nodes.at(ref.node).name;
  }
  for (char& c : name)
    if (c == '/') c = '.';
  auto scopes = std::exchange(g->scopes, {});
  Tensor p = Graph(g).placeholder(in_parent.dtype(), in_parent.shape(), name);
  g->scopes = std::move(scopes);
  g->captures.emplace_back(in_parent, p);
  return p;
}

}  // namespace detail

std::string TensorType::str() const { return std::string(dtype_name(dtype)) + shape_str(shape); }

Graph::Graph(std::string name) : impl_(std::make_shared<detail::GraphImpl>(std::move(name))) {}

Tensor Graph::placeholder(DType dtype, Shape shape, const std::string& name) {
  for (int64_t d : shape) {
    if (d < kUnknownDim) {
      throw Error(ErrorCode::kInvalidArgument,
                  "placeholder '" + name + "': invalid shape " + shape_str(shape) +
                      " (dimensions are sizes >= 0, or kUnknownDim)");
    }
  }
  detail::Node node;
  node.op = "placeholder";
  node.def = &OpRegistry::global().find("placeholder");
  node.attrs.set("dtype", dtype).set("shape", shape);
  node.outputs = {{dtype, shape}};
  std::lock_guard lock(impl_->mu);
  node.name = impl_->unique_name(name);
  int id = impl_->add_node(std::move(node));
  Tensor t = impl_->value(id, 0);
  t.impl()->graph = impl_;
  return t;
}

Tensor Graph::constant(const Tensor& value, const std::string& name) {
  if (!value.defined() || value.is_symbolic()) {
    throw Error(ErrorCode::kInvalidArgument,
                "constant '" + name + "': the value must be a concrete tensor");
  }
  detail::Node node;
  node.op = "constant";
  node.def = &OpRegistry::global().find("constant");
  node.attrs.set("value", value);
  node.outputs = {{value.dtype(), value.shape()}};
  std::lock_guard lock(impl_->mu);
  node.name = impl_->unique_name(name);
  int id = impl_->add_node(std::move(node));
  Tensor t = impl_->value(id, 0);
  t.impl()->graph = impl_;
  return t;
}

Graph::DefaultGuard::DefaultGuard(Graph graph) : previous_(detail::default_graph()) {
  detail::default_graph() = graph.impl();
}
Graph::DefaultGuard::~DefaultGuard() { detail::default_graph() = previous_; }

Graph::NameScope::NameScope(Graph graph, const std::string& scope) : graph_(graph.impl()) {
  if (scope.empty() || scope.find('/') != std::string::npos) {
    throw Error(ErrorCode::kInvalidArgument,
                "name_scope: scope name '" + scope + "' must be non-empty and contain no '/'");
  }
  std::lock_guard lock(graph_->mu);
  graph_->scopes.push_back(scope);
}
Graph::NameScope::~NameScope() {
  std::lock_guard lock(graph_->mu);
  graph_->scopes.pop_back();
}

const std::string& Graph::name() const { return impl_->name; }

int Graph::num_nodes() const {
  std::lock_guard lock(impl_->mu);
  return static_cast<int>(impl_->nodes.size());
}

NodeInfo Graph::node(int id) const {
  std::lock_guard lock(impl_->mu);
  if (id < 0 || id >= static_cast<int>(impl_->nodes.size())) {
    throw Error(ErrorCode::kOutOfRange, "graph '" + impl_->name + "' has no node " +
                                            std::to_string(id) + " (it has " +
                                            std::to_string(impl_->nodes.size()) + ")");
  }
  const detail::Node& n = impl_->nodes[id];
  return {id, n.name, n.op, n.inputs, n.attrs, n.outputs};
}

NodeInfo Graph::node(const std::string& name) const {
  int id;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->by_name.find(name);
    if (it == impl_->by_name.end()) {
      throw Error(ErrorCode::kNotFound,
                  "graph '" + impl_->name + "' has no node named '" + name + "'");
    }
    id = it->second;
  }
  return node(id);
}

Tensor Graph::value(int id, int output) const {
  NodeInfo info = node(id);
  if (output < 0 || output >= static_cast<int>(info.outputs.size())) {
    throw Error(ErrorCode::kOutOfRange, "node '" + info.name + "' has no output " +
                                            std::to_string(output));
  }
  std::lock_guard lock(impl_->mu);
  Tensor t = impl_->value(id, output);
  t.impl()->graph = impl_;
  return t;
}

namespace {

void append_text(std::ostringstream& os, const detail::GraphImpl& g, const std::string& indent) {
  std::lock_guard lock(g.mu);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const detail::Node& n = g.nodes[i];
    os << indent << "  %" << i << " = " << n.name << " = " << n.op << "(";
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      os << (j ? ", " : "") << "%" << n.inputs[j].node;
      if (n.inputs[j].output) os << ":" << n.inputs[j].output;
    }
    os << ")";
    std::string attrs = n.attrs.str();
    if (!attrs.empty()) os << " {" << attrs << "}";
    os << " -> ";
    for (size_t j = 0; j < n.outputs.size(); ++j) os << (j ? ", " : "") << n.outputs[j].str();
    os << "\n";
    for (const auto& [name, value] : n.attrs.values()) {
      const auto* sub = std::get_if<std::shared_ptr<const SubGraph>>(&value);
      if (!sub || !*sub) continue;
      const SubGraph& body = **sub;
      os << indent << "    " << name << ": graph " << body.graph.name() << "(";
      for (size_t k = 0; k < body.params.size(); ++k)
        os << (k ? ", " : "") << "%" << body.params[k].impl()->node;
      os << ") -> (";
      for (size_t k = 0; k < body.results.size(); ++k) {
        os << (k ? ", " : "") << "%" << body.results[k].impl()->node;
        if (body.results[k].impl()->output) os << ":" << body.results[k].impl()->output;
      }
      os << ") {\n";
      append_text(os, *body.graph.impl(), indent + "    ");
      os << indent << "    }\n";
    }
  }
}

}  // namespace

std::string Graph::to_text() const {
  std::ostringstream os;
  os << "graph " << impl_->name << " {\n";
  append_text(os, *impl_, "");
  os << "}\n";
  return os.str();
}

std::vector<TensorType> SubGraph::param_types() const {
  std::vector<TensorType> out;
  for (const Tensor& p : params) out.push_back({p.dtype(), p.shape()});
  return out;
}

std::vector<TensorType> SubGraph::result_types() const {
  std::vector<TensorType> out;
  for (const Tensor& r : results) out.push_back({r.dtype(), r.shape()});
  return out;
}

std::string SubGraph::to_text() const { return graph.to_text(); }

std::string Graph::to_dot() const {
  std::lock_guard lock(impl_->mu);
  auto quote = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    return q + "\"";
  };
  std::ostringstream os;
  os << "digraph " << quote(impl_->name) << " {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (size_t i = 0; i < impl_->nodes.size(); ++i) {
    const detail::Node& n = impl_->nodes[i];
    // Escape each part, then join with Graphviz's line break.
    std::string label = quote(n.name);
    label = label.substr(0, label.size() - 1) + "\\n" + quote(n.op).substr(1);
    for (const auto& t : n.outputs)
      label = label.substr(0, label.size() - 1) + "\\n" + t.str() + "\"";
    os << "  n" << i << " [label=" << label << "];\n";
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      const TensorType& t = impl_->nodes[n.inputs[j].node].outputs[n.inputs[j].output];
      os << "  n" << n.inputs[j].node << " -> n" << i << " [label=" << quote(t.str()) << "];\n";
    }
  }
  os << "}\n";
  return os.str();
}

}  // namespace kiln
