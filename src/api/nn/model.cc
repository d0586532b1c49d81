// Model: construction (Sequential and functional), inspection, summary, state, compile, the
// inference graph and the architecture. Steps are traced in step.cc, the loops run in fit.cc.
#include "kiln/nn/model.h"

#include <algorithm>

#include "src/api/nn/model_impl.h"

namespace kiln::nn {

// ---- construction -----------------------------------------------------------------------

Tensor Input(const Shape& shape, DType dtype, const std::string& name) {
  Shape full = {kUnknownDim};
  full.insert(full.end(), shape.begin(), shape.end());
  Tensor in = detail::functional_graph().placeholder(dtype, full, name);
  detail::input_names()[in.impl()->node] = name;
  return in;
}

Model::Model(std::string name) : impl_(std::make_unique<Impl>()), name_(std::move(name)) {}

Model::Model(const Tensor& input, const Tensor& output, std::string name)
    : Model(std::vector<Tensor>{input}, std::vector<Tensor>{output}, std::move(name)) {}

Model::Model(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
             std::string name)
    : Model(std::move(name)) {
  if (inputs.empty() || outputs.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "Model '" + name_ + "': a functional model needs at least one input and output");
  }
  Graph& fg = detail::functional_graph();
  auto value_of = [](const Tensor& t) { return std::make_pair(t.impl()->node, t.impl()->output); };
  std::set<std::pair<int, int>> input_values, output_values;
  for (const auto* list : {&inputs, &outputs}) {
    for (const Tensor& t : *list) {
      if (!t.defined() || !t.is_symbolic() || !(t.graph() == fg)) {
        throw Error(ErrorCode::kInvalidArgument,
                    "Model '" + name_ +
                        "': inputs and outputs must be symbolic tensors made from "
                        "nn::Input and layer calls");
      }
    }
  }
  for (const Tensor& in : inputs) {
    const NodeInfo node = fg.node(in.impl()->node);
    if (node.op != "placeholder") {
      throw Error(ErrorCode::kInvalidArgument,
                  "Model '" + name_ + "': input '" + node.name +
                      "' is not an nn::Input (op " + node.op + ")");
    }
    if (!input_values.insert(value_of(in)).second) {
      throw Error(ErrorCode::kInvalidArgument,
                  "Model '" + name_ + "': input '" + node.name + "' is given twice");
    }
  }
  impl_->functional = true;
  impl_->inputs = inputs;
  impl_->outputs = outputs;
  // Keep the calls the outputs depend on, in recording order.
  std::set<std::pair<int, int>> needed;
  for (const Tensor& out : outputs) needed.insert(value_of(out));
  const auto& all = detail::functional_calls();
  std::vector<detail::FunctionalCall> kept;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (std::none_of(it->outputs.begin(), it->outputs.end(),
                     [&](const Tensor& o) { return needed.count(value_of(o)) > 0; }))
      continue;
    kept.push_back(*it);
    for (const Tensor& in : it->inputs) needed.insert(value_of(in));
  }
  // Every value the calls read must come from a call or be an input: a plain op between layers
  // (kiln::mean(layer(x))) is not replayed when the model traces its steps.
  std::set<std::pair<int, int>> made = input_values;
  for (const auto& c : kept)
    for (const Tensor& o : c.outputs) made.insert(value_of(o));
  for (const auto& value : needed) {
    if (made.count(value)) continue;
    const NodeInfo node = fg.node(value.first);
    if (node.op == "placeholder") {
      throw Error(ErrorCode::kInvalidArgument,
                  "Model '" + name_ + "': an output depends on nn::Input '" + node.name +
                      "', which is not one of the model's inputs");
    }
    throw Error(ErrorCode::kInvalidArgument,
                "Model '" + name_ + "': '" + node.name + "' (op " + node.op + ", giving " +
                    node.outputs[value.second].str() +
                    ") is applied to layer outputs outside a layer; a functional model is made "
                    "of nn::Input and layer calls only, so do this op inside the call() of a "
                    "Layer (a subclass of nn::Layer, or nn::Lambda) and call that layer instead");
  }
  for (const Tensor& in : inputs) {
    if (!needed.count(value_of(in))) {
      throw Error(ErrorCode::kInvalidArgument,
                  "Model '" + name_ + "': no output depends on input '" +
                      fg.node(in.impl()->node).name + "'");
    }
  }
  std::reverse(kept.begin(), kept.end());
  impl_->calls = std::move(kept);
  // Layer names are unique within the model (Keras names "dense", "dense_1", ...): a layer
  // called again (the same weights) keeps its name; another layer of a taken name gets a suffix.
  std::map<std::string, const Layer*> taken;
  for (const auto& c : impl_->calls) {
    const Layer* same = nullptr;
    for (const auto& l : impl_->layers) {
      if (!c.layer->weights().empty() && !l->weights().empty() &&
          l->weights()[0] == c.layer->weights()[0])
        same = l.get();
    }
    if (same) {
      c.layer->set_name(same->name());
    } else {
      std::string base = c.layer->name(), unique = base;
      for (int i = 1; taken.count(unique); ++i) unique = base + "_" + std::to_string(i);
      if (unique != base) {
        // Its weights were named when it was built ("dense/kernel"): they follow the layer.
        for (const Variable& v : c.layer->weights()) {
          if (v.name().compare(0, base.size() + 1, base + "/") == 0)
            kiln::detail::VariableAccess::rename(v, unique + v.name().substr(base.size()));
        }
      }
      c.layer->set_name(unique);
      taken[unique] = c.layer.get();
    }
    impl_->layers.push_back(c.layer);
    impl_->output_shapes[c.layer.get()] = c.outputs[0].shape();  // summary() needs no build
  }
  for (const Tensor& in : inputs) {
    impl_->input_specs.push_back({in.dtype(), in.shape()});
    auto named = detail::input_names().find(in.impl()->node);
    std::string name =
        named != detail::input_names().end() ? named->second : fg.node(in.impl()->node).name;
    std::string unique = name;  // two Inputs of one name ("input"): "input", "input_1"
    for (int i = 1; std::count(impl_->input_names.begin(), impl_->input_names.end(), unique); ++i)
      unique = name + "_" + std::to_string(i);
    impl_->input_names.push_back(unique);
  }
  for (const Tensor& out : outputs) {
    std::string name;
    for (const auto& c : impl_->calls)
      for (const Tensor& o : c.outputs)
        if (value_of(o) == value_of(out)) name = c.layer->name();
    if (name.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "Model '" + name_ + "': an output is an nn::Input itself; outputs must come "
                  "from layer calls");
    }
    std::string unique = name;
    for (int i = 1; std::count(impl_->output_names.begin(), impl_->output_names.end(), unique);
         ++i)
      unique = name + "_" + std::to_string(i);
    impl_->output_names.push_back(unique);
  }
}

Model::~Model() = default;

Sequential::Sequential(std::vector<LayerRef> layers, std::string name) : Model(std::move(name)) {
  for (auto& l : layers) add(std::move(l));
}

void Sequential::add(LayerRef layer) {
  if (!layer) throw Error(ErrorCode::kInvalidArgument, "Sequential::add: null layer");
  std::lock_guard lock(impl_->mu);
  impl_->check_not_training("Sequential::add", name_);
  std::set<std::string> names;
  for (const auto& l : impl_->layers) names.insert(l->name());
  std::string base = layer->name(), name = base;
  for (int i = 1; names.count(name); ++i) name = base + "_" + std::to_string(i);
  layer->set_name(name);
  impl_->layers.push_back(layer.get());
  impl_->drop(impl_->train_step);
  impl_->drop(impl_->eval_step);
  impl_->drop(impl_->predict_step);
}

// ---- inspection -------------------------------------------------------------------------

std::vector<LayerPtr> Model::layers() const { return impl_->layers; }

std::vector<Variable> Model::weights() const {
  std::vector<Variable> out;
  std::set<const void*> seen;
  for (const auto& l : impl_->layers)
    for (const Variable& v : l->weights())
      if (seen.insert(v.id()).second) out.push_back(v);
  return out;
}

std::vector<Variable> Model::trainable_weights() const {
  std::vector<Variable> out;
  for (const Variable& v : weights())
    if (v.trainable()) out.push_back(v);
  return out;
}

optim::Optimizer& Model::optimizer() {
  if (!impl_->optimizer) {
    throw Error(ErrorCode::kFailedPrecondition, "Model '" + name_ + "': call compile() first");
  }
  return *impl_->optimizer;
}

bool Model::built() const {
  std::lock_guard lock(impl_->mu);
  return !impl_->input_specs.empty() && impl_->predict_step;
}

void Model::set_seed(uint64_t seed) {
  std::lock_guard lock(impl_->mu);
  impl_->seed = seed;
}

void Model::build(const Shape& input_shape, DType dtype) {
  Shape full = {kUnknownDim};
  full.insert(full.end(), input_shape.begin(), input_shape.end());
  std::lock_guard lock(impl_->mu);
  if (impl_->num_inputs() != 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "build: model '" + name_ + "' has " + std::to_string(impl_->num_inputs()) +
                    " inputs; a functional model knows their shapes from its nn::Inputs");
  }
  impl_->drop(impl_->predict_step);
  impl_->predict_step = std::make_shared<const Step>(
      impl_->trace({TensorType{dtype, full}}, std::nullopt, /*training=*/false));
}

std::string Model::summary() const {
  std::lock_guard lock(impl_->mu);
  if (impl_->output_shapes.empty()) {
    throw Error(ErrorCode::kFailedPrecondition,
                "Model '" + name_ +
                    "' has not been built yet: call build(input_shape), fit or "
                    "predict first");
  }
  // Rows first: the columns are as wide as their widest cell (as Keras sizes them).
  std::vector<std::array<std::string, 3>> rows;
  if (impl_->functional) {
    for (size_t i = 0; i < impl_->inputs.size(); ++i) {
      rows.push_back({" " + impl_->input_names[i] + " (InputLayer)",
                      shape_spec(impl_->input_specs[i].shape), "0"});
    }
  }
  int64_t total = 0, trainable = 0;
  std::set<const void*> seen;
  for (const auto& l : impl_->layers) {
    auto it = impl_->output_shapes.find(l.get());
    rows.push_back({" " + l->name() + " (" + l->type_name() + ")",
                    it == impl_->output_shapes.end() ? "?" : shape_spec(it->second),
                    with_commas(l->count_params())});
    for (const Variable& v : l->weights()) {
      if (!seen.insert(v.id()).second) continue;
      total += num_elements(v.shape());
      if (v.trainable()) trainable += num_elements(v.shape());
    }
  }
  const std::array<std::string, 3> header = {" Layer (type)", "Output Shape", "Param #"};
  std::array<size_t, 3> width = {29, 26, 10};  // Keras' defaults; a column grows to fit
  for (const auto& row : rows)
    for (size_t c = 0; c < 3; ++c) width[c] = std::max(width[c], row[c].size() + (c < 2 ? 2 : 0));
  const size_t line = width[0] + width[1] + width[2];
  const std::string rule(line, '_'), dbl(line, '=');
  auto print = [&](std::ostream& os, const std::array<std::string, 3>& row) {
    os << row[0] << std::string(width[0] - row[0].size(), ' ') << row[1]
       << std::string(width[1] - row[1].size(), ' ') << row[2] << "\n";
  };
  std::ostringstream os;
  os << "Model: \"" << name_ << "\"\n" << rule << "\n";
  print(os, header);
  os << dbl << "\n";
  for (const auto& row : rows) print(os, row);
  os << dbl << "\n";
  os << "Total params: " << with_commas(total) << "\n";
  os << "Trainable params: " << with_commas(trainable) << "\n";
  os << "Non-trainable params: " << with_commas(total - trainable) << "\n" << rule << "\n";
  return os.str();
}

// ---- state ----------------------------------------------------------------------------------

std::map<std::string, Tensor> Model::state() const {
  std::lock_guard lock(impl_->mu);  // between two of fit's steps
  std::map<std::string, Tensor> out;
  auto put = [&](const std::string& name, const Tensor& value) {
    std::string key = name;
    for (int i = 1; out.count(key); ++i) key = name + "#" + std::to_string(i);
    out[key] = value;
  };
  for (const Variable& v : weights()) {
    put(v.name(), v.value());
    if (!impl_->optimizer || !v.trainable()) continue;
    for (const Variable& slot : impl_->optimizer->slots(v)) put(slot.name(), slot.value());
  }
  if (impl_->optimizer) {
    put("optimizer/iterations", Tensor::scalar<int64_t>(impl_->optimizer->iterations()));
    for (const Variable& v : impl_->optimizer->variables()) put(v.name(), v.value());
  }
  return out;
}

void Model::load_state(const std::map<std::string, Tensor>& saved) {
  std::lock_guard lock(impl_->mu);  // between two of fit's steps
  std::map<std::string, Variable> targets;
  auto put = [&](const std::string& name, const Variable& v) {
    std::string key = name;
    for (int i = 1; targets.count(key); ++i) key = name + "#" + std::to_string(i);
    targets[key] = v;
  };
  for (const Variable& v : weights()) {
    put(v.name(), v);
    if (!impl_->optimizer || !v.trainable()) continue;
    for (const Variable& slot : impl_->optimizer->slots(v)) put(slot.name(), slot);
  }
  // The optimizer's own variables (a loss scale) load when both sides have them: a checkpoint
  // written under one dtype policy restores under another, with or without loss scaling.
  std::map<std::string, Variable> optimizer_vars;
  if (impl_->optimizer)
    for (const Variable& v : impl_->optimizer->variables()) optimizer_vars[v.name()] = v;
  for (const auto& [name, value] : saved) {
    if (name == "optimizer/iterations") continue;
    if (name.rfind("optimizer/", 0) == 0) continue;
    if (!targets.count(name)) {
      throw Error(ErrorCode::kNotFound, "load_state: model '" + name_ + "' has no variable '" +
                                            name + "' (is it built and compiled the same way?)");
    }
  }
  for (auto& [name, var] : targets) {
    auto it = saved.find(name);
    if (it == saved.end()) {
      throw Error(ErrorCode::kNotFound,
                  "load_state: the saved state has no value for '" + name + "'");
    }
    var.assign(it->second);  // checks dtype and shape
  }
  for (auto& [name, var] : optimizer_vars) {
    auto value = saved.find(name);
    if (value != saved.end()) var.assign(value->second);
  }
  auto it = saved.find("optimizer/iterations");
  if (impl_->optimizer && it != saved.end()) {
    impl_->optimizer->set_iterations(it->second.item<int64_t>());
  }
}

std::vector<Tensor> Model::replica_weights(int replica) const {
  std::lock_guard lock(impl_->mu);
  const int replicas = impl_->strategy ? impl_->strategy->num_local_replicas() : 1;
  if (replica < 0 || replica >= replicas) {
    throw Error(ErrorCode::kInvalidArgument,
                "replica_weights: replica " + std::to_string(replica) + " is not one of the " +
                    std::to_string(replicas) + " local replica(s) of model '" + name_ + "'" +
                    (impl_->strategy ? " (" + impl_->strategy->name() + ")" : std::string()));
  }
  std::vector<Tensor> out;
  for (const Variable& v : weights()) {
    const size_t r = static_cast<size_t>(replica);
    if (r == 0 || r > impl_->replica_values.size()) {
      out.push_back(v.value());
      continue;
    }
    auto it = impl_->replica_values[r - 1].find(v.id());
    out.push_back(it != impl_->replica_values[r - 1].end() ? it->second : v.value());
  }
  return out;
}

std::vector<std::pair<Variable, Tensor>> Model::last_gradients() const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::pair<Variable, Tensor>> out = impl_->last_gradients;
  // A step on a GPU left them there: copied to the host when asked for.
  for (auto& [v, g] : out) g = kiln::detail::readable_on(g, Device::cpu());
  return out;
}

int Model::current_epoch() const { return impl_->epoch; }
int64_t Model::current_batch() const { return impl_->batch; }

void Model::resume_at(int epoch, int64_t batch) {
  if (epoch < 0 || batch < 0) {
    throw Error(ErrorCode::kInvalidArgument, "resume_at: epoch and batch must be >= 0");
  }
  impl_->resume = std::make_pair(epoch, batch);
}

Model::InferenceGraph Model::inference_graph(const Shape& input_shape, DType dtype) {
  Shape full = {kUnknownDim};
  full.insert(full.end(), input_shape.begin(), input_shape.end());
  std::lock_guard lock(impl_->mu);
  if (impl_->num_inputs() != 1 || impl_->num_outputs() != 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "inference_graph(input_shape): model '" + name_ +
                    "' has several inputs or outputs; call inference_graph() without arguments");
  }
  Step s = impl_->trace({TensorType{dtype, full}}, std::nullopt, /*training=*/false);
  InferenceGraph g{s.graph, s.xs[0], s.predictions[0], {}, s.xs, s.predictions,
                   impl_->functional ? impl_->input_names : std::vector<std::string>{"x"},
                   {"output_0"}};
  for (size_t i = 0; i < s.vars.size(); ++i) g.variables.emplace_back(s.vars[i], s.var_inputs[i]);
  return g;
}

Model::InferenceGraph Model::inference_graph() {
  std::lock_guard lock(impl_->mu);
  if (impl_->input_specs.empty()) {
    throw Error(ErrorCode::kFailedPrecondition,
                "inference_graph: model '" + name_ + "' is not built yet (call build first)");
  }
  Step s = impl_->trace(impl_->input_specs, std::nullopt, /*training=*/false);
  InferenceGraph g{s.graph, s.xs[0], s.predictions[0], {}, s.xs, s.predictions, {}, {}};
  if (impl_->functional && impl_->num_inputs() > 1) {
    g.input_names = impl_->input_names;
  } else {
    g.input_names = {"x"};
  }
  for (size_t o = 0; o < s.predictions.size(); ++o) {
    g.output_names.push_back(impl_->num_outputs() > 1 ? impl_->output_names[o]
                                                      : "output_" + std::to_string(o));
  }
  for (size_t i = 0; i < s.vars.size(); ++i) g.variables.emplace_back(s.vars[i], s.var_inputs[i]);
  return g;
}

Model::Architecture Model::architecture() const {
  std::lock_guard lock(impl_->mu);
  Architecture a;
  a.functional = impl_->functional;
  a.layers = impl_->layers;
  a.input_names = input_names();
  a.input_types = impl_->input_specs;
  a.seed = impl_->seed;
  a.outputs_in_compute_dtype = impl_->outputs_in_compute_dtype;
  if (!impl_->functional) return a;
  std::map<std::pair<int, int>, std::pair<int, int>> where;  // graph value -> (call, index)
  auto value_of = [](const Tensor& t) { return std::make_pair(t.impl()->node, t.impl()->output); };
  for (size_t i = 0; i < impl_->inputs.size(); ++i)
    where[value_of(impl_->inputs[i])] = {-1, static_cast<int>(i)};
  for (size_t c = 0; c < impl_->calls.size(); ++c) {
    Architecture::Call call;
    call.layer = c;  // layers holds one entry per call
    for (const Tensor& in : impl_->calls[c].inputs) call.inputs.push_back(where.at(value_of(in)));
    a.calls.push_back(std::move(call));
    const std::vector<Tensor>& outs = impl_->calls[c].outputs;
    for (size_t k = 0; k < outs.size(); ++k)
      where[value_of(outs[k])] = {static_cast<int>(c), static_cast<int>(k)};
  }
  for (const Tensor& out : impl_->outputs) a.outputs.push_back(where.at(value_of(out)));
  return a;
}

std::optional<TensorType> Model::input_type() const {
  std::lock_guard lock(impl_->mu);
  if (impl_->input_specs.empty()) return std::nullopt;
  return impl_->input_specs[0];
}

std::vector<TensorType> Model::input_types() const {
  std::lock_guard lock(impl_->mu);
  return impl_->input_specs;
}

std::vector<std::string> Model::input_names() const {
  return impl_->functional ? impl_->input_names : std::vector<std::string>{"x"};
}

std::vector<std::string> Model::output_names() const {
  if (impl_->functional) return impl_->output_names;
  return {impl_->layers.empty() ? std::string("output") : impl_->layers.back()->name()};
}

void Model::set_execution_mode(ExecutionMode mode) {
  std::lock_guard lock(impl_->mu);
  impl_->mode = mode;
}
ExecutionMode Model::execution_mode() const {
  std::lock_guard lock(impl_->mu);
  return impl_->mode.value_or(default_execution_mode());
}

void Model::set_outputs_in_compute_dtype(bool keep) {
  std::lock_guard lock(impl_->mu);
  impl_->check_not_training("set_outputs_in_compute_dtype", name_);
  if (impl_->outputs_in_compute_dtype == keep) return;
  impl_->outputs_in_compute_dtype = keep;
  impl_->drop(impl_->train_step);  // traced with the other outputs
  impl_->drop(impl_->eval_step);
  impl_->drop(impl_->predict_step);
}
bool Model::outputs_in_compute_dtype() const {
  std::lock_guard lock(impl_->mu);
  return impl_->outputs_in_compute_dtype;
}

Model::CompileStats Model::compile_stats() const {
  std::lock_guard lock(impl_->mu);
  CompileStats total = impl_->compile_stats;
  for (const auto* step : {&impl_->train_step, &impl_->eval_step, &impl_->predict_step}) {
    if (!*step) continue;
    compiler::CompileCache::Stats s = (*step)->programs->stats();
    total.compiles += s.misses;
    total.cache_hits += s.hits;
  }
  return total;
}

// ---- compile / fit / evaluate / predict ---------------------------------------------------

namespace {

// Why metric `metric` cannot measure an output trained with `loss` whose predictions have shape
// `shape` (empty when not known yet), or "" when it can.
std::string metric_misfit(const std::string& metric, const Loss* loss, const Shape& shape) {
  const bool accuracy = metric == "accuracy" || metric == "acc";
  const bool regression =
      dynamic_cast<const MeanSquaredError*>(loss) || dynamic_cast<const Huber*>(loss);
  if (accuracy && regression) {
    return "a regression loss leaves no class to count (use 'mse' for this output, or name "
           "binary_accuracy, categorical_accuracy or sparse_categorical_accuracy if its targets "
           "are classes)";
  }
  if (metric == "auc" && dynamic_cast<const SparseCategoricalCrossentropy*>(loss)) {
    return "auc scores each label element against one prediction, and these labels are class "
           "indices (use accuracy)";
  }
  const bool categorical =
      metric == "sparse_categorical_accuracy" || metric == "categorical_accuracy" ||
      (accuracy && (dynamic_cast<const SparseCategoricalCrossentropy*>(loss) ||
                    dynamic_cast<const CategoricalCrossentropy*>(loss)));
  if (categorical && !shape.empty() && shape.back() == 1) {
    return "one score per example (output shape " + shape_spec(shape) +
           ") is no distribution over classes (use binary_accuracy)";
  }
  return "";
}

}  // namespace

std::vector<std::vector<std::string>> Model::Impl::metrics_by_output(
    const MetricNames& given, const std::string& model, std::vector<std::string>& warnings) const {
  const std::vector<std::string> names =
      functional ? output_names
                 : std::vector<std::string>{layers.empty() ? "output" : layers.back()->name()};
  if (given.per_output()) {
    for (const auto& [name, list] : given.by_output()) {
      if (std::find(names.begin(), names.end(), name) != names.end()) continue;
      std::string known;
      for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
      throw Error(ErrorCode::kInvalidArgument, "compile: metrics are given for output '" + name +
                                                   "', which model '" + model +
                                                   "' does not have (its outputs: " + known + ")");
    }
  }
  std::vector<std::vector<std::string>> out(names.size());
  for (size_t o = 0; o < names.size(); ++o) {
    static const std::vector<std::string> kNone;
    auto listed = given.by_output().find(names[o]);
    const std::vector<std::string>& list =
        !given.per_output()                 ? given.every_output()
        : listed != given.by_output().end() ? listed->second
                                            : kNone;
    Shape shape;
    if (functional) {
      shape = outputs[o].shape();
    } else if (!layers.empty() && output_shapes.count(layers.back().get())) {
      shape = output_shapes.at(layers.back().get());
    }
    std::vector<std::string> kept;
    for (const std::string& metric : list) {
      const std::string misfit = metric_misfit(metric, losses[o].get(), shape);
      if (misfit.empty()) {
        kept.push_back(metric);
        continue;
      }
      const std::string what = "compile: model '" + model + "': metric '" + metric +
                               "' does not fit output '" + names[o] + "' (loss " +
                               losses[o]->name() + "): " + misfit;
      // A flat list is for every output: it may be meant for some of them only.
      if ((given.per_output() || names.size() == 1) && !LoadingSavedModel::active)
        throw Error(ErrorCode::kInvalidArgument, what);
      warnings.push_back(what + "; it is not computed for that output (to choose each output's "
                                "metrics, give them by output name)");
    }
    out[o] = std::move(kept);
  }
  return out;
}

void Model::compile(optim::OptimizerRef optimizer, LossRef loss, MetricNames metrics,
                    CompileOptions options) {
  compile(std::move(optimizer), std::vector<LossRef>{std::move(loss)}, std::move(metrics), {},
          std::move(options));
}

void Model::compile(optim::OptimizerRef optimizer, std::vector<LossRef> losses,
                    MetricNames metrics, std::vector<double> loss_weights,
                    CompileOptions options) {
  if (!optimizer || losses.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "compile: an optimizer and a loss are required");
  }
  for (const LossRef& l : losses)
    if (!l) throw Error(ErrorCode::kInvalidArgument, "compile: a loss is null");
  const size_t outputs = impl_->num_outputs();
  // One loss for a model of several outputs applies to each (as in Keras).
  if (losses.size() == 1 && outputs > 1) losses.assign(outputs, losses[0]);
  if (losses.size() != outputs) {
    throw Error(ErrorCode::kInvalidArgument,
                "compile: model '" + name_ + "' has " + std::to_string(outputs) +
                    " output(s) but " + std::to_string(losses.size()) + " losses were given");
  }
  if (loss_weights.empty()) loss_weights.assign(outputs, 1.0);
  if (loss_weights.size() != outputs) {
    throw Error(ErrorCode::kInvalidArgument,
                "compile: " + std::to_string(loss_weights.size()) + " loss_weights for " +
                    std::to_string(outputs) + " output(s)");
  }
  for (double w : loss_weights) {
    if (!(std::isfinite(w) && w >= 0)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "compile: loss weights must be finite and >= 0, got " + std::to_string(w));
    }
  }
  compiler::check_device(options.device);
  if (options.device.type != DeviceType::kCpu && options.strategy)
    throw Error(ErrorCode::kUnimplemented,
                "compile: model '" + name_ + "': a distribution strategy on " +
                    options.device.str() + " is not built yet (its replicas run on the host)");
  std::unique_lock lock(impl_->mu);
  impl_->check_not_training("compile", name_);
  std::vector<std::shared_ptr<Loss>> shared;
  for (const LossRef& l : losses) shared.push_back(l.get());
  auto old_losses = std::exchange(impl_->losses, shared);
  auto old_metrics = impl_->output_metrics;
  std::vector<std::string> warnings;
  try {
    impl_->output_metrics = impl_->metrics_by_output(metrics, name_, warnings);
    impl_->metrics = impl_->make_metrics();  // checks the names
  } catch (...) {
    impl_->losses = std::move(old_losses);
    impl_->output_metrics = std::move(old_metrics);
    throw;
  }
  impl_->metrics_given = std::move(metrics);
  impl_->optimizer = optimizer.get();
  // As Keras: f16 compute needs loss scaling, so the optimizer is wrapped in one.
  const bool computes_in_f16 =
      std::any_of(impl_->layers.begin(), impl_->layers.end(),
                  [](const LayerPtr& l) { return l->dtype_policy().compute_dtype() == f16; });
  if (computes_in_f16 && impl_->optimizer->name() != "LossScaleOptimizer")
    impl_->optimizer = std::make_shared<optim::LossScaleOptimizer>(optimizer);
  impl_->loss_weights = std::move(loss_weights);
  // The train step (dropped below) is traced for the strategy; evaluate and predict split by it.
  impl_->strategy = options.strategy.get();
  impl_->replica_values.clear();
  impl_->drop(impl_->train_step);
  impl_->drop(impl_->eval_step);
  if (impl_->device != options.device) {
    // The predict step was compiled for the last device: traced again for this one (the model
    // keeps the last device and its step if that fails).
    const Device last = std::exchange(impl_->device, options.device);
    if (impl_->predict_step) {
      std::vector<TensorType> types;
      for (const Tensor& x : impl_->predict_step->xs) types.push_back({x.dtype(), x.shape()});
      try {
        auto retraced = std::make_shared<const Step>(
            impl_->trace(types, std::nullopt, /*training=*/false));
        impl_->drop(impl_->predict_step);
        impl_->predict_step = std::move(retraced);
      } catch (...) {
        impl_->device = last;
        throw;
      }
    }
  }
  lock.unlock();
  for (const std::string& w : warnings) kiln::warn(w);
}

Model::CompileConfig Model::compile_config() const {
  std::lock_guard lock(impl_->mu);
  CompileConfig c;
  c.optimizer = impl_->optimizer;
  c.losses = impl_->losses;
  c.metrics = impl_->metrics_given;
  c.loss_weights = impl_->loss_weights;
  return c;
}

Tensor Model::call(const Tensor& x, CallContext& ctx) {
  std::lock_guard lock(impl_->mu);
  if (impl_->num_inputs() != 1 || impl_->num_outputs() != 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "call: model '" + name_ + "' has several inputs or outputs; use call(xs, ctx)");
  }
  return impl_->forward({x}, ctx)[0];
}

std::vector<Tensor> Model::call(const std::vector<Tensor>& xs, CallContext& ctx) {
  std::lock_guard lock(impl_->mu);
  if (xs.size() != impl_->num_inputs()) {
    throw Error(ErrorCode::kInvalidArgument,
                "call: model '" + name_ + "' takes " + std::to_string(impl_->num_inputs()) +
                    " input(s), got " + std::to_string(xs.size()));
  }
  return impl_->forward(xs, ctx);
}

Tensor Model::operator()(const Tensor& x) {
  if (x.defined() && x.is_symbolic()) {
    CallContext ctx(false);
    return call(x, ctx);
  }
  return predict(x, std::max<int64_t>(1, x.defined() && x.rank() > 0 ? x.dim(0) : 1));
}

}  // namespace kiln::nn
