// Whole-model save and load: the architecture, compile configuration and every weight and
// optimizer slot as records of one file (src/api/io/proto/whole_model.proto).
#include "kiln/nn/saving.h"

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <variant>

#include "kiln/io/saved_model.h"
#include "kiln/io/tfrecord.h"
#include "kiln/nn/layer_registry.h"
#include "kiln/optim.h"
#include "kiln/version.h"
#include "src/api/nn/model_impl.h"
#include "src/api/io/file_io.h"
#include "src/api/io/file_kind.h"
#include "src/api/io/proto/whole_model.pb.h"
#include "src/api/io/proto_codec.h"

namespace kiln::nn {
namespace {

namespace saved = proto::saved;
using io::internal::FileKind;
using io::internal::Source;

constexpr uint32_t kFormatVersion = 1;
// The layer config entry holding the layer's dtype policy ("mixed_bfloat16").
const std::string kPolicyKey = "dtype_policy";

[[noreturn]] void refuse(const std::string& message) {
  throw Error(ErrorCode::kFailedPrecondition, "save_model: " + message);
}

void set_object(saved::ObjectDef* out, const std::string& class_name, const Attrs& config,
                const std::string& owner) {
  out->set_class_name(class_name);
  for (const auto& [key, value] : config.values())
    io::internal::set_attr(out->add_config(), key, value, owner);
}

// A model's variables under names that depend only on its layers' names and order:
// "<layer>/vars/<i>", and its optimizer's slots "<layer>/vars/<i>/<optimizer>/<slot>".
struct VariableTable {
  std::vector<std::string> keys;
  std::vector<Variable> variables;
};

VariableTable variable_table(const Model::Architecture& arch, optim::Optimizer* optimizer) {
  VariableTable t;
  std::set<std::string> layers_done;
  std::set<const void*> seen;
  for (const LayerPtr& layer : arch.layers) {
    if (!layers_done.insert(layer->name()).second) continue;  // a layer called again
    const std::vector<Variable>& weights = layer->weights();
    for (size_t i = 0; i < weights.size(); ++i) {
      const Variable& v = weights[i];
      if (!seen.insert(v.id()).second) continue;
      const std::string key = layer->name() + "/vars/" + std::to_string(i);
      t.keys.push_back(key);
      t.variables.push_back(v);
      if (!optimizer || !v.trainable()) continue;
      const std::vector<std::string> slot_names = optimizer->slot_names();
      std::vector<Variable>& slots = optimizer->slots(v);
      for (size_t k = 0; k < slots.size(); ++k) {
        t.keys.push_back(key + "/" + optimizer->name() + "/" + slot_names[k]);
        t.variables.push_back(slots[k]);
      }
    }
  }
  return t;
}

saved::ModelDef describe(const Model& model, const Model::Architecture& arch,
                         const Model::CompileConfig& compiled) {
  saved::ModelDef m;
  m.set_format_version(kFormatVersion);
  m.set_kiln_version(kiln::version());
  m.set_name(model.name());
  m.set_functional(arch.functional);
  m.set_seed(arch.seed);
  m.set_outputs_in_compute_dtype(arch.outputs_in_compute_dtype);
  // Layers, each once (by name), checked to be rebuildable from their configs.
  std::map<std::string, int> layer_index;
  for (const LayerPtr& layer : arch.layers) {
    if (layer_index.count(layer->name())) continue;
    Attrs config;
    try {
      config = layer->config();
      layer_from_config(layer->type_name(), config, layer->name());
    } catch (const Error& e) {
      refuse("layer '" + layer->name() + "' (" + layer->type_name() +
             ") cannot be saved: " + e.what());
    }
    layer_index[layer->name()] = m.layers_size();
    saved::LayerDef* def = m.add_layers();
    def->set_name(layer->name());
    // Keras keeps a layer's dtype policy in its config; load_model takes it back out.
    config.set(kPolicyKey, layer->dtype_policy().name());
    set_object(def->mutable_object(), layer->type_name(), config, layer->name());
  }
  for (size_t i = 0; i < arch.input_types.size(); ++i) {
    saved::InputDef* in = m.add_inputs();
    in->set_name(arch.input_names[i]);
    io::internal::set_type(in->mutable_type(), arch.input_types[i]);
  }
  for (const Model::Architecture::Call& call : arch.calls) {
    saved::CallDef* c = m.add_calls();
    c->set_layer(layer_index.at(arch.layers[call.layer]->name()));
    for (const auto& [from, index] : call.inputs) {
      saved::ValueDef* v = c->add_inputs();
      v->set_call(from);
      v->set_index(index);
    }
  }
  for (const auto& [from, index] : arch.outputs) {
    saved::ValueDef* v = m.add_outputs();
    v->set_call(from);
    v->set_index(index);
  }
  if (compiled.optimizer) {
    m.set_compiled(true);
    saved::CompileDef* c = m.mutable_compile();
    Attrs opt_config;
    try {
      opt_config = compiled.optimizer->config();
      optim::optimizer_from_config(compiled.optimizer->name(), opt_config);
    } catch (const Error& e) {
      refuse("the optimizer cannot be saved: " + std::string(e.what()));
    }
    set_object(c->mutable_optimizer(), compiled.optimizer->name(), opt_config, "optimizer");
    for (const auto& loss : compiled.losses) {
      try {
        loss_from_config(loss->name(), loss->config());
      } catch (const Error& e) {
        refuse("the loss cannot be saved: " + std::string(e.what()));
      }
      set_object(c->add_losses(), loss->name(), loss->config(), "loss");
    }
    // Metrics for every output by name ("accuracy"), by output as "<output>/<metric>".
    for (const std::string& metric : compiled.metrics.every_output()) c->add_metrics(metric);
    for (const auto& [output, metrics] : compiled.metrics.by_output())
      for (const std::string& metric : metrics) c->add_metrics(output + "/" + metric);
    for (double w : compiled.loss_weights) c->add_loss_weights(w);
  }
  return m;
}

}  // namespace

void save_model(const Model& model, const std::string& path) { model.save(path); }

void Model::save(const std::string& path) const {
  if (path.empty()) throw Error(ErrorCode::kInvalidArgument, "save_model: the path is empty");
  const Architecture arch = architecture();
  const CompileConfig compiled = compile_config();
  saved::ModelDef m = describe(*this, arch, compiled);
  // The variables, the optimizer's slots, iteration count and own variables, read together
  // between two of fit's steps: fit lends them to each step (even a slot's shape cannot be read
  // meanwhile), so the file holds the state after one whole step. Released under the lock as
  // well: fit's next step may then update their buffers in place (see Impl::Snapshot).
  struct Values {
    std::mutex& mu;
    std::vector<std::pair<std::string, Tensor>> named;
    ~Values() {
      std::lock_guard lock(mu);
      named.clear();
    }
  } values{impl_->mu, {}};
  {
    std::lock_guard lock(impl_->mu);
    VariableTable table = variable_table(arch, compiled.optimizer.get());
    for (size_t i = 0; i < table.keys.size(); ++i)
      values.named.emplace_back(table.keys[i], table.variables[i].value());
    if (compiled.optimizer) {
      values.named.emplace_back("optimizer/iterations",
                                Tensor::scalar<int64_t>(compiled.optimizer->iterations()));
      for (const Variable& v : compiled.optimizer->variables())  // a loss scale
        values.named.emplace_back(v.name(), v.value());
    }
  }
  m.set_num_tensors(static_cast<uint32_t>(values.named.size()));

  io::internal::OutputFile file(path, io::internal::OutputFile::Mode::kAtomic,
                                io::Compression::kNone, "save_model");
  io::internal::write_record(file, m.SerializeAsString());
  for (const auto& [key, value] : values.named) {
    saved::NamedTensor t;
    t.set_name(key);
    io::internal::set_tensor(t.mutable_value(), value);
    io::internal::write_record(file, t.SerializeAsString());
  }
  file.close();
}

// ---- load -------------------------------------------------------------------------------------

namespace {

struct Loader {
  Source src;
  saved::ModelDef& m;
  std::vector<LayerPtr> layers;

  Attrs attrs(const saved::ObjectDef& o, const std::string& where) const {
    return io::internal::attrs_from(o.config(), src, where);
  }

  // Record 0 (the ModelDef, into m), then its num_tensors tensor records, and nothing after
  // them; a file of another kind is named as such (io::internal::file_kind).
  std::map<std::string, Tensor> read_records() {
    const FileKind kind = io::internal::file_kind(src.file);
    if (kind != FileKind::kWholeModel) {
      io::internal::wrong_kind("load_model", src.file, kind, "a Kiln model (.kiln)");
    }
    io::RecordReader reader(src.file);
    std::string record;
    if (!reader.next(record) || !m.ParseFromString(record)) src.corrupt("the file changed");
    if (m.format_version() != kFormatVersion) {
      src.corrupt("unsupported format version " + std::to_string(m.format_version()) +
                  " (this Kiln reads version " + std::to_string(kFormatVersion) + ")");
    }
    std::map<std::string, Tensor> values;
    for (uint32_t r = 1; r <= m.num_tensors(); ++r) {
      if (!reader.next(record)) {
        src.corrupt("truncated: the file ends at offset " + std::to_string(reader.offset()) +
                    " after " + std::to_string(r - 1) + " of the model's " +
                    std::to_string(m.num_tensors()) + " tensor records");
      }
      saved::NamedTensor t;
      const std::string where = "record " + std::to_string(r);
      if (!t.ParseFromString(record)) src.corrupt(where + " is not a tensor");
      if (!values.emplace(t.name(), io::internal::tensor_from(t.value(), src, where)).second)
        src.corrupt(where + ": tensor '" + t.name() + "' appears twice");
    }
    const uint64_t end = reader.offset();
    std::string what;
    try {
      if (!reader.next(record)) return values;
      what = io::internal::record_kind(record) == FileKind::kWholeModel
                 ? "another Kiln model (two files concatenated?)"
                 : "TFRecord records that are not part of it";
    } catch (const Error&) {
      what = "bytes that are not a TFRecord record";
    }
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(src.file, ec);
    src.corrupt("the model ends at offset " + std::to_string(end) + " but " +
                (ec ? std::string("more bytes") : std::to_string(size - end) + " more bytes") +
                " follow: " + what);
  }

  void make_layers() {
    std::set<std::string> names;
    for (int i = 0; i < m.layers_size(); ++i) {
      const saved::LayerDef& def = m.layers(i);
      const std::string where = "layer " + std::to_string(i) + " ('" + def.name() + "')";
      if (def.name().empty() || !names.insert(def.name()).second) {
        src.corrupt(where + ": a missing or repeated layer name");
      }
      Attrs config;
      std::optional<Policy> policy;
      const Attrs saved_config = attrs(def.object(), where);
      for (const auto& [key, value] : saved_config.values()) {
        if (key != kPolicyKey) {
          config.set(key, value);
          continue;
        }
        try {
          policy = Policy(std::get<std::string>(value));
        } catch (const std::exception& e) {
          src.corrupt(where + ": bad " + kPolicyKey + " (" + e.what() + ")");
        }
      }
      layers.push_back(layer_from_config(def.object().class_name(), config, def.name()));
      if (policy) layers.back()->set_dtype_policy(*policy);
    }
  }

  std::unique_ptr<Model> sequential() {
    if (m.inputs_size() > 1 || m.calls_size() || m.outputs_size()) {
      src.corrupt("a Sequential model with functional parts");
    }
    std::vector<LayerRef> refs(layers.begin(), layers.end());
    auto model = std::make_unique<Sequential>(std::move(refs), m.name());
    model->set_seed(m.seed());
    model->set_outputs_in_compute_dtype(m.outputs_in_compute_dtype());
    if (m.inputs_size() == 1) {
      TensorType t = io::internal::type_from(m.inputs(0).type(), src, "input 0");
      if (t.shape.empty()) src.corrupt("input 0 has no batch dimension");
      model->build(Shape(t.shape.begin() + 1, t.shape.end()), t.dtype);
    }
    return model;
  }

  std::unique_ptr<Model> functional() {
    std::vector<Tensor> inputs;
    for (int i = 0; i < m.inputs_size(); ++i) {
      TensorType t = io::internal::type_from(m.inputs(i).type(), src, "input " + std::to_string(i));
      if (t.shape.empty()) src.corrupt("input " + std::to_string(i) + " has no batch dimension");
      inputs.push_back(
          Input(Shape(t.shape.begin() + 1, t.shape.end()), t.dtype, m.inputs(i).name()));
    }
    std::vector<std::vector<Tensor>> outputs_of_calls;
    auto value = [&](const saved::ValueDef& v, const std::string& where) -> Tensor {
      if (v.call() == -1) {
        if (v.index() < 0 || v.index() >= static_cast<int>(inputs.size()))
          src.corrupt(where + " refers to input " + std::to_string(v.index()));
        return inputs[v.index()];
      }
      if (v.call() < 0 || v.call() >= static_cast<int>(outputs_of_calls.size()))
        src.corrupt(where + " refers to call " + std::to_string(v.call()) +
                    " (not an earlier one)");
      const std::vector<Tensor>& outs = outputs_of_calls[v.call()];
      if (v.index() < 0 || v.index() >= static_cast<int>(outs.size()))
        src.corrupt(where + " refers to output " + std::to_string(v.index()) + " of call " +
                    std::to_string(v.call()) + ", which has " + std::to_string(outs.size()));
      return outs[v.index()];
    };
    for (int c = 0; c < m.calls_size(); ++c) {
      const saved::CallDef& call = m.calls(c);
      const std::string where = "call " + std::to_string(c);
      if (call.layer() < 0 || call.layer() >= static_cast<int>(layers.size()))
        src.corrupt(where + " refers to layer " + std::to_string(call.layer()));
      if (call.inputs_size() == 0) src.corrupt(where + " has no inputs");
      std::vector<Tensor> ins;
      for (const saved::ValueDef& v : call.inputs()) ins.push_back(value(v, where));
      outputs_of_calls.push_back(layers[call.layer()]->outputs(ins));
    }
    std::vector<Tensor> outputs;
    for (int o = 0; o < m.outputs_size(); ++o)
      outputs.push_back(value(m.outputs(o), "output " + std::to_string(o)));
    auto model = std::make_unique<Model>(inputs, outputs, m.name());
    model->set_seed(m.seed());
    model->set_outputs_in_compute_dtype(m.outputs_in_compute_dtype());
    return model;
  }

  // The metrics describe() wrote: names for every output, or "<output>/<metric>" by output (an
  // output's name may hold a '/', a metric's never does).
  MetricNames metrics(const saved::CompileDef& c) const {
    std::vector<std::string> every_output;
    MetricNames::ByOutput by_output;
    for (const std::string& entry : c.metrics()) {
      const size_t slash = entry.rfind('/');
      if (slash == std::string::npos) {
        every_output.push_back(entry);
      } else {
        by_output[entry.substr(0, slash)].push_back(entry.substr(slash + 1));
      }
    }
    if (!every_output.empty() && !by_output.empty())
      src.corrupt("the metrics mix names for every output with names by output");
    if (by_output.empty()) return every_output;
    return by_output;
  }

  void compile(Model& model) {
    const saved::CompileDef& c = m.compile();
    std::shared_ptr<optim::Optimizer> opt = optim::optimizer_from_config(
        c.optimizer().class_name(), attrs(c.optimizer(), "the optimizer"));
    std::vector<LossRef> losses;
    for (int i = 0; i < c.losses_size(); ++i) {
      losses.emplace_back(loss_from_config(c.losses(i).class_name(),
                                           attrs(c.losses(i), "loss " + std::to_string(i))));
    }
    LoadingSavedModel loading;  // an older file's misfit metric is a warning, not an error
    model.compile(opt, std::move(losses), metrics(c),
                  {c.loss_weights().begin(), c.loss_weights().end()});
  }
};

// Loads `path` into a model, leaving its ModelDef in `m`.
std::unique_ptr<Model> load(const std::string& path, const LoadOptions& options,
                            saved::ModelDef& m) {
  Loader l{Source{path}, m, {}};
  std::map<std::string, Tensor> saved_values = l.read_records();
  l.make_layers();
  std::unique_ptr<Model> model = l.m.functional() ? l.functional() : l.sequential();
  const bool compile = options.compile && l.m.compiled();
  if (compile) l.compile(*model);

  // Weights (and slots): every variable of the rebuilt model must be in the file.
  std::shared_ptr<optim::Optimizer> opt = compile ? model->compile_config().optimizer : nullptr;
  VariableTable table = variable_table(model->architecture(), opt.get());
  for (size_t i = 0; i < table.keys.size(); ++i) {
    auto it = saved_values.find(table.keys[i]);
    if (it == saved_values.end()) l.src.corrupt("no value for variable '" + table.keys[i] + "'");
    if (it->second.dtype() != table.variables[i].dtype() ||
        it->second.shape() != table.variables[i].shape()) {
      l.src.corrupt("variable '" + table.keys[i] + "' is " + dtype_name(it->second.dtype()) +
                    shape_str(it->second.shape()) + " in the file but the rebuilt model has " +
                    dtype_name(table.variables[i].dtype()) + shape_str(table.variables[i].shape()));
    }
    table.variables[i].assign(it->second);
  }
  if (opt) {
    auto it = saved_values.find("optimizer/iterations");
    if (it == saved_values.end() || it->second.dtype() != i64 || it->second.rank() != 0)
      l.src.corrupt("no i64 scalar 'optimizer/iterations'");
    opt->set_iterations(it->second.item<int64_t>());
    for (const Variable& v : opt->variables()) {
      auto saved_value = saved_values.find(v.name());
      if (saved_value == saved_values.end()) l.src.corrupt("no value for '" + v.name() + "'");
      Variable target = v;
      target.assign(saved_value->second);
    }
  }
  return model;
}

// Each layer's output type (of its last call), found by calling the loaded model's layers
// again on symbolic inputs, as the model calls them; empty before the model is built.
std::map<std::string, TensorType> layer_outputs(const Model::Architecture& arch) {
  std::map<std::string, TensorType> out;
  if (arch.input_types.empty()) return out;
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < arch.input_types.size(); ++i) {
    const TensorType& t = arch.input_types[i];
    inputs.push_back(
        Input(Shape(t.shape.begin() + 1, t.shape.end()), t.dtype, arch.input_names[i]));
  }
  if (!arch.functional) {
    Tensor h = inputs.at(0);
    for (const LayerPtr& layer : arch.layers) {
      h = (*layer)(h);
      out[layer->name()] = {h.dtype(), h.shape()};
    }
    return out;
  }
  std::vector<std::vector<Tensor>> calls;
  for (const Model::Architecture::Call& call : arch.calls) {
    std::vector<Tensor> ins;
    for (const auto& [from, index] : call.inputs)
      ins.push_back(from < 0 ? inputs[index] : calls[from].at(index));
    const LayerPtr& layer = arch.layers[call.layer];
    calls.push_back(layer->outputs(ins));
    out[layer->name()] = {calls.back()[0].dtype(), calls.back()[0].shape()};
  }
  return out;
}

}  // namespace

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options) {
  saved::ModelDef m;
  return load(path, options, m);
}

ModelFileInfo describe_model_file(const std::string& path) {
  saved::ModelDef m;
  std::unique_ptr<Model> model = load(path, {}, m);
  ModelFileInfo info;
  info.path = path;
  info.model_name = model->name();
  info.kiln_version = m.kiln_version();
  info.functional = m.functional();
  info.tensor_records = m.num_tensors();
  const Model::Architecture arch = model->architecture();
  const std::map<std::string, TensorType> outputs = layer_outputs(arch);
  std::set<std::string> layers_done;
  for (const LayerPtr& layer : arch.layers) {
    if (!layers_done.insert(layer->name()).second) continue;
    ModelFileInfo::Layer& l = info.layers.emplace_back();
    l.name = layer->name();
    l.class_name = layer->type_name();
    l.dtype_policy = layer->dtype_policy().name();
    l.params = layer->count_params();
    if (auto it = outputs.find(l.name); it != outputs.end()) l.output = it->second;
  }
  std::set<const void*> seen;
  for (const Variable& v : model->weights()) {
    if (!seen.insert(v.id()).second) continue;
    info.params += num_elements(v.shape());
    if (v.trainable()) info.trainable_params += num_elements(v.shape());
  }
  if (!arch.input_types.empty()) {
    for (size_t i = 0; i < arch.input_types.size(); ++i)
      info.inputs.emplace_back(arch.input_names[i], arch.input_types[i]);
    const Model::InferenceGraph graph = model->inference_graph();
    const std::vector<std::string> names = model->output_names();
    for (size_t o = 0; o < graph.outputs.size(); ++o) {
      info.outputs.emplace_back(o < names.size() ? names[o] : graph.output_names[o],
                                TensorType{graph.outputs[o].dtype(), graph.outputs[o].shape()});
    }
  }
  const Model::CompileConfig compiled = model->compile_config();
  if (compiled.optimizer) {
    info.optimizer = compiled.optimizer->name();
    info.optimizer_config = compiled.optimizer->config();
    info.iterations = compiled.optimizer->iterations();
    for (const auto& loss : compiled.losses) info.losses.push_back({loss->name(), loss->config()});
    for (const std::string& metric : compiled.metrics.every_output())
      info.metrics.push_back(metric);
    for (const auto& [output, metrics] : compiled.metrics.by_output())
      for (const std::string& metric : metrics) info.metrics.push_back(output + "/" + metric);
    info.loss_weights = compiled.loss_weights;
  }
  return info;
}

}  // namespace kiln::nn

namespace kiln::io {
namespace {

ExportedGraph exported(const nn::Model& model, nn::Model::InferenceGraph ig) {
  ExportedGraph g{model.name(), ig.graph, {}, {}, std::move(ig.variables)};
  for (size_t i = 0; i < ig.inputs.size(); ++i)
    g.inputs.emplace_back(ig.input_names[i], ig.inputs[i]);
  for (size_t o = 0; o < ig.outputs.size(); ++o)
    g.outputs.emplace_back(ig.output_names[o], ig.outputs[o]);
  return g;
}

}  // namespace

std::string save_model(nn::Model& model, const std::string& dir, const Shape& input_shape,
                       DType dtype) {
  return save_graph(exported(model, model.inference_graph(input_shape, dtype)), dir);
}

std::string save_model(nn::Model& model, const std::string& dir) {
  return save_graph(exported(model, model.inference_graph()), dir);
}

}  // namespace kiln::io
