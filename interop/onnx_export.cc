// kiln::onnx::export_model: a Kiln inference graph as an ONNX ModelProto. A walk over the nodes
// the outputs need calls each one's emitter (the table in interop/onnx_export_ops.cc);
// variables and constants become initializers.
#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_map>

#include "interop/onnx_export.h"
#include "interop/onnx_tensor.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/onnx.h"
#include "kiln/ops.h"
#include "kiln/version.h"
#include "src/api/io/file_io.h"
#include "src/core/graph_walk.h"

namespace kiln::onnx {
namespace {

using export_internal::Builder;
using export_internal::emitters;
using export_internal::NodeEmitter;
using export_internal::Unsupported;

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

// ---- the graph ------------------------------------------------------------------------------

void set_value_info(::onnx::ValueInfoProto* v, const std::string& name, const TensorType& type,
                    const std::vector<std::string>& dim_names) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(internal::onnx_dtype(type.dtype));
  auto* shape = tt->mutable_shape();
  for (size_t i = 0; i < type.shape.size(); ++i) {
    auto* dim = shape->add_dim();
    const std::string& named = i < dim_names.size() ? dim_names[i] : std::string();
    if (!named.empty())
      dim->set_dim_param(named);
    else if (type.shape[i] != kUnknownDim)
      dim->set_dim_value(type.shape[i]);
  }
}

// The dim_params of a graph input or output: the options' names, else for an input "batch" for
// an unknown first dimension and "<input>_<axis>" for other unknown ones.
std::vector<std::string> dim_names_of(const std::string& name, const Shape& shape, bool input,
                                      const ExportOptions& options) {
  std::vector<std::string> names(shape.size());
  auto given = options.dim_names.find(name);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (given != options.dim_names.end() && i < given->second.size() && !given->second[i].empty())
      names[i] = given->second[i];
    else if (input && shape[i] == kUnknownDim)
      names[i] = i == 0 ? "batch" : name + "_" + std::to_string(i);
  }
  return names;
}

int64_t ir_version_for(int64_t opset) { return opset >= 15 ? 8 : 7; }

class Exporter {
 public:
  Exporter(const io::ExportedGraph& graph, const ExportOptions& options)
      : g_(graph), options_(options), b_(model_.mutable_graph(), options.opset) {}

  ::onnx::ModelProto run() {
    if (options_.opset < 13 || options_.opset > 17) {
      fail(ErrorCode::kInvalidArgument, where() + "opset " + std::to_string(options_.opset) +
                                            " is out of range: Kiln exports opsets 13 to 17");
    }
    if (g_.outputs.empty()) fail(ErrorCode::kInvalidArgument, where() + "the graph has no outputs");
    model_.set_ir_version(ir_version_for(options_.opset));
    model_.set_producer_name("kiln");
    model_.set_producer_version(options_.producer_version.empty() ? kiln::version()
                                                                  : options_.producer_version);
    auto* opset = model_.add_opset_import();
    opset->set_domain("");
    opset->set_version(options_.opset);
    model_.mutable_graph()->set_name(g_.model_name.empty() ? "kiln_model" : g_.model_name);

    find_needed();
    name_signature();
    for (int id = 0; id < static_cast<int>(needed_.size()); ++id)
      if (needed_[id]) export_node(g_.graph.node(id));
    if (!problems_.empty()) {
      std::string msg = where() + "Kiln cannot export " + std::to_string(problems_.size()) +
                        " node" + (problems_.size() == 1 ? "" : "s") + " to ONNX:";
      for (const std::string& p : problems_) msg += "\n  " + p;
      fail(ErrorCode::kUnimplemented, msg);
    }
    add_outputs();
    drop_unused_initializers();
    return std::move(model_);
  }

 private:
  std::string where() const { return "export_model: '" + g_.model_name + "': "; }

  static ValueRef ref_of(const Tensor& t) { return {t.impl()->node, t.impl()->output}; }

  void find_needed() {
    std::vector<int> roots;
    for (const auto& [name, t] : g_.outputs) {
      if (!t.defined() || t.impl()->graph != g_.graph.impl())
        fail(ErrorCode::kInvalidArgument,
             where() + "output '" + name + "' is not a value of the graph");
      roots.push_back(t.impl()->node);
    }
    std::lock_guard lock(g_.graph.impl()->mu);
    needed_ = detail::ancestors(g_.graph.impl()->nodes, roots);
  }

  // Inputs and outputs keep their signature names; variables become initializers named after
  // them; an output that is an input, an initializer or another output's value goes through an
  // Identity (ONNX names each value once).
  void name_signature() {
    for (const auto& [name, t] : g_.inputs) claim(name);
    for (const auto& [name, t] : g_.outputs) claim(name);
    for (const auto& [name, t] : g_.inputs) {
      names_[key(ref_of(t))] = name;
      inputs_.insert(t.impl()->node);
      const TensorType type{t.dtype(), t.shape()};
      set_value_info(model_.mutable_graph()->add_input(), name, type,
                     dim_names_of(name, t.shape(), /*input=*/true, options_));
    }
    for (const auto& [var, placeholder] : g_.variables) {
      const int id = placeholder.impl()->node;
      if (id >= static_cast<int>(needed_.size()) || !needed_[id] || inputs_.count(id)) continue;
      const std::string name = b_.unique_value(var.name());
      names_[key(ref_of(placeholder))] = name;
      b_.add_initializer(name, var.value());
      variables_.insert(id);
    }
    for (const auto& [name, t] : g_.outputs) {
      const ValueRef r = ref_of(t);
      const std::string op = g_.graph.node(r.node).op;
      if (names_.count(key(r)) || op == "placeholder" || op == "constant") {
        identities_.emplace_back(r, name);
      } else {
        names_[key(r)] = name;
      }
    }
  }

  void claim(const std::string& name) {
    if (!b_.claim_value(name))
      fail(ErrorCode::kInvalidArgument, where() + "two inputs or outputs are named '" + name + "'");
  }

  static int64_t key(const ValueRef& r) { return (int64_t{r.node} << 20) | r.output; }

  // The ONNX name of a node's output, made on first use.
  std::string name_of(const ValueRef& r, const NodeInfo& node) {
    auto it = names_.find(key(r));
    if (it != names_.end()) return it->second;
    std::string base = node.name;
    if (r.output) base += ':' + std::to_string(r.output);
    return names_[key(r)] = b_.unique_value(base);
  }

  void export_node(const NodeInfo& node) {
    if (node.op == "placeholder") {
      if (!inputs_.count(node.id) && !variables_.count(node.id)) {
        fail(ErrorCode::kInvalidArgument, where() + "the outputs need placeholder '" + node.name +
                                              "', which is neither an input nor a variable");
      }
      return;
    }
    if (node.op == "constant") {
      b_.add_initializer(name_of({node.id, 0}, node), node.attrs.get_tensor("value"));
      return;
    }
    std::vector<std::string> ins;
    std::vector<TensorType> in_types;
    for (const ValueRef& in : node.inputs) {
      const NodeInfo producer = g_.graph.node(in.node);
      ins.push_back(name_of(in, producer));
      in_types.push_back(producer.outputs.at(in.output));
    }
    std::vector<std::string> outs;
    for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o)
      outs.push_back(name_of({node.id, o}, node));
    auto it = emitters().find(node.op);
    if (it == emitters().end()) {
      problems_.push_back("node '" + node.name + "' (" + node.op + "): no ONNX form for op '" +
                          node.op + "'");
      return;
    }
    NodeEmitter e(b_, node, std::move(ins), std::move(in_types), std::move(outs));
    try {
      it->second(e);
    } catch (const Unsupported& u) {
      problems_.push_back("node '" + node.name + "' (" + node.op + "): " + u.why);
    }
  }

  void add_outputs() {
    for (const auto& [r, name] : identities_) {
      const NodeInfo node = g_.graph.node(r.node);
      b_.add_node("Identity", name, {name_of(r, node)}, {name});
    }
    for (const auto& [name, t] : g_.outputs) {
      set_value_info(model_.mutable_graph()->add_output(), name, {t.dtype(), t.shape()},
                     dim_names_of(name, t.shape(), /*input=*/false, options_));
    }
  }

  // Weights an emitter replaced (a convolution's kernel, transposed) and no node reads.
  void drop_unused_initializers() {
    ::onnx::GraphProto* graph = model_.mutable_graph();
    std::set<std::string> used;
    for (const auto& n : graph->node())
      for (const auto& i : n.input()) used.insert(i);
    for (const auto& o : graph->output()) used.insert(o.name());
    auto* inits = graph->mutable_initializer();
    inits->erase(
        std::remove_if(inits->begin(), inits->end(),
                       [&](const ::onnx::TensorProto& t) { return !used.count(t.name()); }),
        inits->end());
  }

  const io::ExportedGraph& g_;
  const ExportOptions& options_;
  ::onnx::ModelProto model_;
  Builder b_;
  std::vector<bool> needed_;
  std::unordered_map<int64_t, std::string> names_;
  std::set<int> inputs_, variables_;
  std::vector<std::pair<ValueRef, std::string>> identities_;
  std::vector<std::string> problems_;
};

}  // namespace

std::string export_model_to_string(const io::ExportedGraph& graph, const ExportOptions& options) {
  const ::onnx::ModelProto model = Exporter(graph, options).run();
  std::string bytes;
  if (!model.SerializeToString(&bytes)) {
    fail(ErrorCode::kInternal, "export_model: '" + graph.model_name +
                                   "': the model does not serialize (over protobuf's 2 GiB?)");
  }
  return bytes;
}

void export_model(const io::ExportedGraph& graph, const std::string& path,
                  const ExportOptions& options) {
  const std::string bytes = export_model_to_string(graph, options);
  io::internal::OutputFile file(path, io::internal::OutputFile::Mode::kAtomic,
                                io::Compression::kNone, "export_model");
  file.write(bytes.data(), bytes.size());
  file.close();
}

}  // namespace kiln::onnx
