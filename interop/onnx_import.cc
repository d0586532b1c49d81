// kiln::onnx::import_model: walks an ONNX graph in order and calls each node's converter from the
// op table. Values known while importing (initializers, Constants, shapes) stay concrete tensors,
// so ops on them compute at once and only the rest is recorded into the graph.
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>

#include "compiler/compile_cache.h"
#include "interop/onnx_ops.h"
#include "interop/onnx_tensor.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/onnx.h"
#include "kiln/variable.h"

namespace kiln::onnx {

struct Model::Impl {
  io::ExportedGraph exported;
  std::vector<TensorType> input_types;
  int64_t opset = 0;
  std::string producer;
  mutable compiler::CompileCache programs{8};
};

namespace {

using internal::NodeContext;
using internal::Unsupported;

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }


// A name scope for the node's Kiln ops: its ONNX name with characters other than letters,
// digits, '_', '-' and '.' replaced, or its op type when it has none.
std::string scope_name(const ::onnx::NodeProto& node) {
  std::string s = node.name().empty() ? node.op_type() : node.name();
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
  }
  return s.empty() ? "node" : s;
}

class Importer {
 public:
  Importer(const ::onnx::ModelProto& model, const ImportOptions& options, std::string name,
           std::string dir)
      : model_(model), options_(options), name_(std::move(name)), dir_(std::move(dir)) {}

  Model run() {
    read_opset();
    const ::onnx::GraphProto& graph = model_.graph();
    impl_->exported.model_name = graph.name().empty() ? "onnx_model" : graph.name();
    impl_->exported.graph = Graph(impl_->exported.model_name);
    impl_->opset = opset_;
    impl_->producer = model_.producer_name() +
                      (model_.producer_version().empty() ? "" : " " + model_.producer_version());
    read_initializers(graph);
    read_inputs(graph);
    for (int i = 0; i < graph.node_size(); ++i) convert_node(graph.node(i), i);
    if (!problems_.empty()) {
      std::string msg = "import_model: " + name_ + ": Kiln cannot import " +
                        std::to_string(problems_.size()) + " node" +
                        (problems_.size() == 1 ? "" : "s") + ":";
      for (const std::string& p : problems_) msg += "\n  " + p;
      fail(ErrorCode::kUnimplemented, msg);
    }
    read_outputs(graph);
    return Model(impl_);
  }

 private:
  [[noreturn]] void invalid(const std::string& what) const {
    fail(ErrorCode::kInvalidArgument, "import_model: " + name_ + ": " + what);
  }

  void read_opset() {
    for (const auto& o : model_.opset_import()) {
      if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = o.version();
      else domains_[o.domain()] = o.version();
    }
    if (opset_ == 0 && model_.opset_import_size() == 0) opset_ = 1;  // before IR version 3
  }

  void read_initializers(const ::onnx::GraphProto& graph) {
    if (graph.sparse_initializer_size() > 0)
      fail(ErrorCode::kUnimplemented, "import_model: " + name_ + ": sparse initializers");
    for (const ::onnx::TensorProto& t : graph.initializer()) {
      const std::string where = "import_model: " + name_ + ": initializer '" + t.name() + "'";
      Tensor value = internal::tensor_from_proto(t, dir_, where);
      initializers_.insert(t.name());
      if (options_.initializers_as_variables && is_floating(value.dtype())) {
        Variable v(value, t.name());
        Tensor p = impl_->exported.graph.placeholder(value.dtype(), value.shape(), t.name());
        impl_->exported.variables.push_back({v, p});
        values_[t.name()] = p;
      } else {
        values_[t.name()] = value;
      }
    }
  }

  void read_inputs(const ::onnx::GraphProto& graph) {
    std::set<std::string> graph_inputs;
    for (const ::onnx::ValueInfoProto& in : graph.input()) {
      graph_inputs.insert(in.name());
      if (initializers_.count(in.name())) continue;  // an initializer's default value
      const std::string where = "input '" + in.name() + "'";
      if (!in.type().has_tensor_type())
        fail(ErrorCode::kUnimplemented, "import_model: " + name_ + ": " + where +
                                            " is not a tensor (sequences, maps and optionals "
                                            "are not supported)");
      const auto& tt = in.type().tensor_type();
      const std::optional<DType> dtype = internal::dtype_from_onnx(tt.elem_type());
      if (!dtype) {
        fail(ErrorCode::kUnimplemented, "import_model: " + name_ + ": " + where + " is " +
                                            internal::onnx_dtype_name(tt.elem_type()) +
                                            ", which Kiln has no dtype for");
      }
      if (auto s = options_.static_inputs.find(in.name()); s != options_.static_inputs.end()) {
        if (s->second.dtype() != *dtype || s->second.is_symbolic())
          invalid("static input '" + in.name() + "' must be a concrete " + dtype_name(*dtype) +
                  " tensor");
        values_[in.name()] = s->second;
        continue;
      }
      Shape shape;
      for (const auto& d : tt.shape().dim())
        shape.push_back(d.has_dim_value() ? d.dim_value() : kUnknownDim);
      if (auto o = options_.input_shapes.find(in.name()); o != options_.input_shapes.end()) {
        const bool ranked = tt.has_shape();
        bool fits = !ranked || o->second.size() == shape.size();
        for (size_t i = 0; fits && ranked && i < shape.size(); ++i)
          fits = shape[i] == kUnknownDim || shape[i] == o->second[i];
        if (!fits) {
          invalid("the shape given for " + where + ", " + TensorType{*dtype, o->second}.str() +
                  ", does not fit the model's " + TensorType{*dtype, shape}.str());
        }
        shape = o->second;
      } else if (!tt.has_shape()) {
        invalid(where + " has no shape in the model: give one in ImportOptions::input_shapes");
      }
      Tensor p = impl_->exported.graph.placeholder(*dtype, shape, scope_name_of(in.name()));
      values_[in.name()] = p;
      impl_->exported.inputs.push_back({in.name(), p});
      impl_->input_types.push_back({*dtype, shape});
    }
    for (const auto& [name, value] : options_.static_inputs) {
      if (!graph_inputs.count(name)) invalid("static input '" + name + "' is not a graph input");
    }
  }

  static std::string scope_name_of(const std::string& value_name) {
    ::onnx::NodeProto n;
    n.set_name(value_name);
    return scope_name(n);
  }

  void convert_node(const ::onnx::NodeProto& node, int index) {
    const std::string label = "node " + std::to_string(index) + " '" + node.name() + "' (" +
                              node.op_type() + ", domain " +
                              (node.domain().empty() ? "ai.onnx" : node.domain()) + ", opset ";
    std::vector<Tensor> inputs;
    for (const std::string& in : node.input()) {
      if (in.empty()) {
        inputs.emplace_back();
        continue;
      }
      if (poisoned_.count(in)) return poison(node);  // a node before it was already reported
      auto it = values_.find(in);
      if (it == values_.end())
        invalid(label.substr(0, label.find(" (")) + " uses '" + in + "' before it is produced");
      inputs.push_back(it->second);
    }
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      const auto d = domains_.find(node.domain());
      problems_.push_back(label + (d == domains_.end() ? "?" : std::to_string(d->second)) +
                          "): the domain is not supported");
      return poison(node);
    }
    const std::string where = label + std::to_string(opset_) + ")";
    const internal::OpEntry* entry = internal::find_op(node.op_type(), opset_);
    if (!entry) {
      problems_.push_back(where + ": the op is not supported");
      return poison(node);
    }
    std::string unknown;
    const std::string known = std::string(",") + entry->attrs + ",";
    for (const auto& a : node.attribute()) {
      if (known.find("," + a.name() + ",") == std::string::npos)
        unknown += (unknown.empty() ? "" : ", ") + a.name();
    }
    if (!unknown.empty()) {
      problems_.push_back(where + ": attribute " + unknown + " is not supported");
      return poison(node);
    }
    std::vector<Tensor> outputs;
    try {
      Graph::NameScope scope(impl_->exported.graph, scope_name(node));
      NodeContext ctx(node, opset_, std::move(inputs));
      outputs = entry->convert(ctx);
    } catch (const Unsupported& u) {
      problems_.push_back(where + ": " + u.why);
      return poison(node);
    } catch (const Error& e) {
      fail(e.code(), "import_model: " + name_ + ": " + where + ": " + e.what());
    } catch (const std::exception& e) {
      // A malformed node the converter's own checks missed (an index past a shape's rank):
      // still the model's fault, and never a crash.
      fail(ErrorCode::kInvalidArgument,
           "import_model: " + name_ + ": " + where + ": malformed node (" + e.what() + ")");
    }
    for (int i = 0; i < node.output_size(); ++i) {
      if (node.output(i).empty()) continue;
      if (i >= static_cast<int>(outputs.size()) || !outputs[i].defined()) {
        problems_.push_back(where + ": output " + std::to_string(i) + " ('" + node.output(i) +
                            "') is not supported");
        return poison(node);
      }
      values_[node.output(i)] = outputs[i];
    }
  }

  void poison(const ::onnx::NodeProto& node) {
    for (const std::string& out : node.output()) poisoned_.insert(out);
  }

  void read_outputs(const ::onnx::GraphProto& graph) {
    Graph& g = impl_->exported.graph;
    for (const ::onnx::ValueInfoProto& out : graph.output()) {
      auto it = values_.find(out.name());
      if (it == values_.end()) invalid("output '" + out.name() + "' is never produced");
      Tensor t = it->second;
      if (!t.is_symbolic()) t = g.constant(t, scope_name_of(out.name()));
      if (out.type().has_tensor_type() && out.type().tensor_type().elem_type() != 0) {
        const int32_t declared = out.type().tensor_type().elem_type();
        if (internal::onnx_dtype(t.dtype()) != declared) {
          invalid("output '" + out.name() + "' is " + dtype_name(t.dtype()) +
                  ", the model declares " + internal::onnx_dtype_name(declared));
        }
      }
      impl_->exported.outputs.push_back({out.name(), t});
    }
  }

  const ::onnx::ModelProto& model_;
  const ImportOptions& options_;
  std::string name_, dir_;
  int64_t opset_ = 0;
  std::unordered_map<std::string, int64_t> domains_;
  std::shared_ptr<Model::Impl> impl_ = std::make_shared<Model::Impl>();
  std::unordered_map<std::string, Tensor> values_;
  std::set<std::string> initializers_, poisoned_;
  std::vector<std::string> problems_;
};

std::string read_file(const std::string& path, const char* who) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::kNotFound, std::string(who) + ": cannot open " + path);
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) fail(ErrorCode::kDataLoss, std::string(who) + ": cannot read " + path);
  return s.str();
}

}  // namespace

Model import_model_from_string(const std::string& bytes, const ImportOptions& options,
                               const std::string& name) {
  ::onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) {
    fail(ErrorCode::kDataLoss,
         "import_model: " + name + ": not an ONNX model (the ModelProto does not parse)");
  }
  if (!model.has_graph()) fail(ErrorCode::kDataLoss, "import_model: " + name + ": no graph");
  const std::string dir = options.external_data_dir.empty() ? "." : options.external_data_dir;
  return Importer(model, options, name, dir).run();
}

Model import_model(const std::string& path, const ImportOptions& options) {
  ImportOptions o = options;
  if (o.external_data_dir.empty()) {
    o.external_data_dir = std::filesystem::path(path).parent_path().string();
    if (o.external_data_dir.empty()) o.external_data_dir = ".";
  }
  return import_model_from_string(read_file(path, "import_model"), o, path);
}

Tensor read_tensor_proto(const std::string& path) {
  ::onnx::TensorProto proto;
  if (!proto.ParseFromString(read_file(path, "read_tensor_proto")))
    fail(ErrorCode::kDataLoss, "read_tensor_proto: " + path + ": not a TensorProto");
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return internal::tensor_from_proto(proto, dir.empty() ? "." : dir, "read_tensor_proto: " + path);
}

// ---- Model ---------------------------------------------------------------------------------

const io::ExportedGraph& Model::graph() const { return impl_->exported; }
int64_t Model::opset() const { return impl_->opset; }
const std::string& Model::producer() const { return impl_->producer; }
ExecutionMode Model::execution_mode() const { return mode_.value_or(default_execution_mode()); }

std::vector<std::string> Model::input_names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : impl_->exported.inputs) names.push_back(name);
  return names;
}

std::vector<std::string> Model::output_names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : impl_->exported.outputs) names.push_back(name);
  return names;
}

std::vector<Tensor> Model::run(const std::vector<Tensor>& inputs) const {
  const io::ExportedGraph& e = impl_->exported;
  if (inputs.size() != e.inputs.size()) {
    fail(ErrorCode::kInvalidArgument, "onnx::Model::run: the model takes " +
                                          std::to_string(e.inputs.size()) + " inputs, got " +
                                          std::to_string(inputs.size()));
  }
  FeedList feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorType& want = impl_->input_types[i];
    const Tensor& x = inputs[i];
    bool fits = x.defined() && !x.is_symbolic() && x.dtype() == want.dtype &&
                x.shape().size() == want.shape.size();
    for (size_t d = 0; fits && d < want.shape.size(); ++d)
      fits = want.shape[d] == kUnknownDim || want.shape[d] == x.shape()[d];
    if (!fits) {
      fail(ErrorCode::kInvalidArgument,
           "onnx::Model::run: input '" + e.inputs[i].first + "' must be a concrete " +
               want.str() + ", got " +
               (x.defined() ? TensorType{x.dtype(), x.shape()}.str() : "no tensor"));
    }
    feeds.push_back({e.inputs[i].second, x});
  }
  for (const auto& [var, placeholder] : e.variables) feeds.push_back({placeholder, var.value()});
  std::vector<Tensor> fetches;
  for (const auto& [name, t] : e.outputs) fetches.push_back(t);
  if (execution_mode() == ExecutionMode::kInterpreted) return e.graph.run(feeds, fetches);
  return impl_->programs.run(e.graph, fetches, feeds);
}

std::map<std::string, Tensor> Model::run(const std::map<std::string, Tensor>& inputs) const {
  std::vector<Tensor> ordered;
  for (const auto& [name, t] : impl_->exported.inputs) {
    auto it = inputs.find(name);
    if (it == inputs.end())
      fail(ErrorCode::kInvalidArgument, "onnx::Model::run: input '" + name + "' is missing");
    ordered.push_back(it->second);
  }
  if (inputs.size() != ordered.size()) {
    for (const auto& [name, t] : inputs) {
      bool known = false;
      for (const auto& in : impl_->exported.inputs) known = known || in.first == name;
      if (!known)
        fail(ErrorCode::kInvalidArgument, "onnx::Model::run: the model has no input '" + name +
                                              "'");
    }
  }
  std::vector<Tensor> outs = run(ordered);
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < outs.size(); ++i) named[impl_->exported.outputs[i].first] = outs[i];
  return named;
}

}  // namespace kiln::onnx
