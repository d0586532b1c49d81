// Module bookkeeping shared by all passes: purity of a node and the graph Rewriter.
#include "compiler/passes/pass.h"

#include <variant>

#include "kiln/error.h"

namespace kiln::compiler {
namespace {

[[noreturn]] void internal(const std::string& message) {
  throw Error(ErrorCode::kInternal, "compiler: " + message);
}

}  // namespace

const std::vector<detail::Node>& nodes_of(const Graph& graph) { return graph.impl()->nodes; }

std::string module_text(const Module& module) {
  const std::string text = module.graph.to_text();
  if (module.types.empty() && module.fusion_group.empty()) return text;
  // Graph::to_text writes a header line, then node i on line i + 1.
  std::string out;
  size_t line = 0, start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.append(text, start, end - start);
    const size_t id = line - 1;
    if (line > 0 && id < module.types.size() && !module.types[id].empty()) {
      out += "  : ";
      for (size_t o = 0; o < module.types[id].size(); ++o)
        out += (o ? ", " : "") + module.types[id][o].str();
    }
    if (line > 0 && id < module.fusion_group.size() && module.fusion_group[id] >= 0)
      out += "  [fusion " + std::to_string(module.fusion_group[id]) + "]";
    out += '\n';
    start = end + 1;
    ++line;
  }
  return out;
}

bool is_pure(const detail::Node& node) {
  if (node.op == "placeholder" || node.op.rfind("random_", 0) == 0) return false;
  if (node.def != nullptr && node.def->stateful) return false;
  for (const auto& [name, value] : node.attrs.values()) {
    const auto* sub = std::get_if<std::shared_ptr<const SubGraph>>(&value);
    if (sub == nullptr || *sub == nullptr) continue;
    for (const detail::Node& inner : nodes_of((*sub)->graph))
      if (inner.op != "placeholder" && !is_pure(inner)) return false;
  }
  return true;
}

std::string node_label(const std::vector<detail::Node>& nodes, int id) {
  return std::string("%") + std::to_string(id) + " " + nodes[id].name + " (" + nodes[id].op + ")";
}

Readers readers_of(const Module& module) {
  const std::vector<detail::Node>& nodes = nodes_of(module.graph);
  Readers r;
  r.users.resize(nodes.size());
  r.uses.assign(nodes.size(), 0);
  for (int id = 0; id < static_cast<int>(nodes.size()); ++id) {
    for (const ValueRef& in : nodes[id].inputs) {
      ++r.uses[in.node];
      r.users[in.node].push_back(id);
    }
  }
  for (ValueRef v : module.outputs) ++r.uses[v.node];
  return r;
}

detail::Node constant_node(const std::string& name, const Tensor& value) {
  detail::Node node;
  node.name = name;
  node.op = "constant";
  node.def = &OpRegistry::global().find("constant");
  node.attrs.set("value", value);
  node.outputs = {TensorType{value.dtype(), value.shape()}};
  return node;
}

Rewriter::Rewriter(const Module& module)
    : module_(module),
      old_(nodes_of(module.graph)),
      out_(std::make_shared<detail::GraphImpl>(module.graph.name())),
      map_(old_.size()) {}

ValueRef Rewriter::map(ValueRef old) const {
  if (old.node < 0 || old.node >= num_old()) internal("no node %" + std::to_string(old.node));
  const std::vector<ValueRef>& values = map_[old.node];
  if (old.output < 0 || old.output >= static_cast<int>(values.size())) {
    internal("node '" + old_[old.node].name + "' has no rewritten output " +
             std::to_string(old.output));
  }
  return values[old.output];
}

const detail::Node& Rewriter::input_node(int id, int i) const {
  return new_node(map(old_node(id).inputs.at(i)).node);
}

const TensorType& Rewriter::new_type(ValueRef v) const {
  return new_node(v.node).outputs.at(v.output);
}

int Rewriter::keep(int id) {
  detail::Node node = old_.at(id);
  for (ValueRef& in : node.inputs) in = map(in);
  return replace(id, std::move(node));
}

int Rewriter::replace(int id, detail::Node node) {
  if (node.def == nullptr) node.def = &OpRegistry::global().find(node.op);
  int n = static_cast<int>(node.outputs.size());
  int new_id = out_->add_node(std::move(node));
  map_.at(id).clear();
  for (int o = 0; o < n; ++o) map_[id].push_back({new_id, o});
  return new_id;
}

void Rewriter::alias(int id, std::vector<ValueRef> values) {
  const detail::Node& old = old_.at(id);
  if (values.size() != old.outputs.size()) internal("alias of '" + old.name + "': wrong arity");
  for (size_t o = 0; o < values.size(); ++o) {
    if (new_type(values[o]) != old.outputs[o]) {
      internal("alias of '" + old.name + "' changes its type from " + old.outputs[o].str() +
               " to " + new_type(values[o]).str());
    }
  }
  map_[id] = std::move(values);
}

void Rewriter::drop(int id) { map_.at(id).clear(); }

Module Rewriter::finish() const {
  Module next;
  next.graph = Graph(out_);
  for (ValueRef v : module_.outputs) next.outputs.push_back(map(v));
  for (const Module::Placeholder& p : module_.placeholders) {
    ValueRef v = map({p.current, 0});
    if (new_node(v.node).op != "placeholder") {
      internal("placeholder '" + old_[p.current].name + "' was rewritten into a " +
               new_node(v.node).op);
    }
    next.placeholders.push_back({p.original, v.node});
  }
  return next;
}

}  // namespace kiln::compiler
