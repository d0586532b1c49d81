// Model: forward pass over layers (sequential or functional), traced step graphs for
// training, evaluation and prediction, and the fit/evaluate/predict loops.
#include "kiln/nn/model.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "compiler/compile_cache.h"
#include "kiln/autodiff.h"
#include "kiln/data/dataset.h"
#include "kiln/graph.h"
#include "kiln/nn/layers.h"
#include "kiln/ops.h"
#include "kiln/warning.h"
#include "src/core/tensor_impl.h"
#include "src/core/variable_capture.h"
#include "src/nn/functional.h"
#include "src/nn/progress.h"

namespace kiln::nn {
namespace {

// Set while fit evaluates its validation_data: fit has given its warnings already.
thread_local bool validating_in_fit = false;

// A step graph: placeholders for the batch, the step's scalars and every variable it reads.
struct Step {
  Graph graph{"step"};
  Tensor x, y, seed, lr, iteration;
  std::vector<Variable> vars;         // in the order they were first read
  std::vector<Tensor> var_inputs;     // their placeholders
  std::vector<Variable> assigned;     // variables (and slots) the step returns new values for
  std::vector<Variable> gradient_of;  // the trainable variables whose gradients come last
  std::vector<Tensor> fetches;        // loss, metric stats..., new values of `assigned`
  // Compiled, each variable both read and assigned has its buffer updated in place: its new
  // value (fetch `donated_fetch[i]` for vars[i], -1 when not assigned) is donated its feed.
  std::vector<compiler::Donation> donations;
  std::vector<int> donated_fetch;
  Tensor prediction;
  size_t num_metric_stats = 0;
  std::vector<size_t> metric_stat_counts;
  // Compiled programs of this step, one per feed signature (a short last batch is another).
  std::shared_ptr<compiler::CompileCache> programs =
      std::make_shared<compiler::CompileCache>(/*capacity=*/4);
};

// Rows [begin, end) of t in the order of `order` (or as they are when order is empty).
Tensor take_rows(const Tensor& t, const std::vector<int64_t>& order, int64_t begin, int64_t end) {
  Shape shape = t.shape();
  shape[0] = end - begin;
  Tensor out = Tensor::empty(t.dtype(), shape);
  size_t row_bytes = t.shape()[0] == 0 ? 0 : t.nbytes() / t.shape()[0];
  const char* src = static_cast<const char*>(t.raw_data());
  char* dst = static_cast<char*>(out.raw_mutable_data());
  for (int64_t i = begin; i < end; ++i) {
    int64_t row = order.empty() ? i : order[i];
    std::memcpy(dst + (i - begin) * row_bytes, src + row * row_bytes, row_bytes);
  }
  return out;
}

Shape with_unknown_batch(const Shape& s) {
  Shape out = s;
  out[0] = kUnknownDim;
  return out;
}

std::string shape_spec(const Shape& s) {
  std::string out = "(None";
  for (size_t i = 1; i < s.size(); ++i) out += ", " + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(i, ",");
  return s;
}

// While recording, a layer's nodes are named "<layer>/<op>" (TensorBoard groups them).
std::optional<Graph::NameScope> layer_scope(const Tensor& x, const Layer& layer) {
  const std::string& name = layer.name();
  if (!x.defined() || !x.is_symbolic() || name.empty() || name.find('/') != std::string::npos) {
    return std::nullopt;
  }
  return std::optional<Graph::NameScope>(std::in_place, x.graph(), layer.name());
}

uint64_t mix_seed(uint64_t seed, uint64_t step) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (step + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (z ^ (z >> 31)) & 0x7fffffffffffffffULL;
}

}  // namespace

struct Model::Impl {
  // Guards everything below that fit, evaluate and predict share (the traced steps, shapes,
  // compile state) and the weights while fit's step lends, updates and assigns them: a read
  // takes its snapshot of the weights between two steps. See the contract in model.h.
  mutable std::mutex mu;
  bool fitting = false;  // a second fit, compile and add are refused meanwhile

  // Sequential models.
  std::vector<LayerPtr> layers;
  // Functional models.
  bool functional = false;
  std::vector<Tensor> inputs, outputs;
  std::vector<detail::FunctionalCall> calls;
  std::string input_name;  // of the nn::Input, its row in summary()

  uint64_t seed = 0;
  std::optional<TensorType> input_spec;  // [?, features...]
  std::map<const Layer*, Shape> output_shapes;

  std::shared_ptr<optim::Optimizer> optimizer;
  std::shared_ptr<Loss> loss;
  std::vector<std::string> metric_names;         // evaluate makes its own metrics from them
  std::vector<std::unique_ptr<Metric>> metrics;  // fit's
  // Held by the calls running them too: compile() or add() may drop a step an evaluate runs.
  std::shared_ptr<const Step> train_step, eval_step, predict_step;

  // Where fit is, and where it was asked to resume.
  int epoch = 0;
  int64_t batch = 0;
  std::optional<std::pair<int, int64_t>> resume;
  std::vector<std::pair<Variable, Tensor>> last_gradients;
  std::optional<ExecutionMode> mode;  // default_execution_mode() when unset
  Model::CompileStats compile_stats;  // of steps already dropped (re-traced)

  // Forgets a traced step (its programs), keeping its compile counts.
  void drop(std::shared_ptr<const Step>& step) {
    if (!step) return;
    compiler::CompileCache::Stats st = step->programs->stats();
    compile_stats.compiles += st.misses;
    compile_stats.cache_hits += st.hits;
    step.reset();
  }

  void seed_layers() {
    for (size_t i = 0; i < layers.size(); ++i)
      if (!layers[i]->built()) layers[i]->set_seed(seed * 1315423911u + i);
  }

  Tensor forward(const Tensor& x, CallContext& ctx) {
    if (!functional) {
      seed_layers();
      Tensor h = x;
      for (const LayerPtr& layer : layers) {
        auto scope = layer_scope(h, *layer);
        h = (*layer)(h, ctx);
        output_shapes[layer.get()] = h.shape();
      }
      return h;
    }
    std::map<std::pair<int, int>, Tensor> values;
    auto key = [](const Tensor& t) {
      return std::make_pair(t.impl() ? t.impl()->node : -1, t.impl() ? t.impl()->output : 0);
    };
    values[key(inputs[0])] = x;
    for (const auto& call : calls) {
      std::vector<Tensor> ins;
      for (const Tensor& t : call.inputs) ins.push_back(values.at(key(t)));
      auto scope = layer_scope(ins[0], *call.layer);
      Tensor out = (*call.layer)(ins, ctx);
      output_shapes[call.layer.get()] = out.shape();
      values[key(call.output)] = out;
    }
    return values.at(key(outputs[0]));
  }

  void check_input(const Tensor& x, const std::string& what) const {
    if (!x.defined() || x.is_symbolic() || x.rank() < 1) {
      throw Error(ErrorCode::kInvalidArgument,
                  what + ": x must be a concrete tensor with a batch dimension");
    }
    if (!input_spec) return;
    bool ok = x.rank() == static_cast<int64_t>(input_spec->shape.size());
    for (size_t i = 1; ok && i < input_spec->shape.size(); ++i)
      ok = input_spec->shape[i] == kUnknownDim || input_spec->shape[i] == x.shape()[i];
    if (!ok) {
      throw Error(ErrorCode::kInvalidArgument,
                  what + ": x has shape " + shape_str(x.shape()) + " but the model expects " +
                      shape_str(input_spec->shape) + " (? is the batch dimension)");
    }
  }

  // The examples of fit or evaluate (`what` names the call and the argument): as many rows
  // of y as of x, and at least one.
  void check_examples(const Tensor& x, const Tensor& y, const std::string& what) const {
    check_input(x, what);
    const std::string shapes = "(x is " + shape_str(x.shape()) + ", y is " +
                               (y.defined() ? shape_str(y.shape()) : std::string("undefined")) +
                               ")";
    if (!y.defined() || y.is_symbolic() || y.rank() < 1 || y.dim(0) != x.dim(0)) {
      throw Error(ErrorCode::kInvalidArgument,
                  what + ": y must be a concrete tensor with as many rows as x " + shapes);
    }
    if (x.dim(0) == 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  what + ": x and y are empty " + shapes + ": there are no examples");
    }
  }

  // Traces forward (+ loss, metrics, gradients and updates for training) into a new graph.
  Step trace(const TensorType& x_type, const std::optional<TensorType>& y_type, bool training) {
    Step s;
    Graph& g = s.graph;
    auto guard = g.as_default();
    s.x = g.placeholder(x_type.dtype, with_unknown_batch(x_type.shape), "x");
    s.seed = g.placeholder(i64, {}, "seed");
    std::map<const void*, Tensor> placeholders;
    auto resolve = [&](const Variable& v) {
      auto it = placeholders.find(v.id());
      if (it != placeholders.end()) return it->second;
      // Outside the layer's name scope: the variable's name ("dense/kernel") is scoped already.
      auto scopes = std::exchange(g.impl()->scopes, {});
      Tensor p = g.placeholder(v.dtype(), v.shape(), v.name());
      g.impl()->scopes = std::move(scopes);
      placeholders[v.id()] = p;
      s.vars.push_back(v);
      s.var_inputs.push_back(p);
      return p;
    };
    CallContext ctx(training, s.seed, resolve);
    s.prediction = forward(s.x, ctx);
    if (!input_spec) input_spec = TensorType{x_type.dtype, with_unknown_batch(x_type.shape)};
    if (!y_type) {
      s.fetches = {s.prediction};
      return s;
    }
    s.y = g.placeholder(y_type->dtype, with_unknown_batch(y_type->shape), "y");
    Tensor loss_value = (*loss)(s.y, s.prediction);
    s.fetches.push_back(loss_value);
    for (const auto& m : metrics) {
      std::vector<Tensor> stats = m->batch_stats(s.y, s.prediction);
      s.metric_stat_counts.push_back(stats.size());
      s.num_metric_stats += stats.size();
      for (Tensor& t : stats) s.fetches.push_back(t);
    }
    if (!training) return s;

    s.lr = g.placeholder(f32, {}, "learning_rate");
    s.iteration = g.placeholder(f32, {}, "iteration");
    std::vector<Variable> trainable;
    std::vector<Tensor> wrt;
    for (size_t i = 0; i < s.vars.size(); ++i) {
      if (!s.vars[i].trainable()) continue;
      trainable.push_back(s.vars[i]);
      wrt.push_back(s.var_inputs[i]);
    }
    std::vector<Tensor> grads = optimizer->clip(gradients(loss_value, wrt));
    {
      auto scope = g.name_scope(optimizer->name());
      for (size_t i = 0; i < trainable.size(); ++i) {
        std::vector<Variable>& slot_vars = optimizer->slots(trainable[i]);
        std::vector<Tensor> slot_inputs;
        for (const Variable& sv : slot_vars) slot_inputs.push_back(resolve(sv));
        auto [new_value, new_slots] =
            optimizer->apply(wrt[i], grads[i], slot_inputs, s.lr, s.iteration);
        s.assigned.push_back(trainable[i]);
        s.fetches.push_back(new_value);
        for (size_t k = 0; k < slot_vars.size(); ++k) {
          s.assigned.push_back(slot_vars[k]);
          s.fetches.push_back(new_slots[k]);
        }
      }
    }
    for (const auto& [var, value] : ctx.updates()) {
      s.assigned.push_back(var);
      s.fetches.push_back(value);
    }
    // The gradients are computed for the update anyway; returning them costs no extra work.
    for (size_t i = 0; i < trainable.size(); ++i) {
      s.gradient_of.push_back(trainable[i]);
      s.fetches.push_back(grads[i]);
    }
    s.donated_fetch.assign(s.vars.size(), -1);
    for (size_t k = 0; k < s.assigned.size(); ++k) {
      int fetch = static_cast<int>(1 + s.num_metric_stats + k);
      for (size_t i = 0; i < s.vars.size(); ++i) {
        if (!(s.vars[i] == s.assigned[k]) || s.donated_fetch[i] >= 0) continue;
        s.donated_fetch[i] = fetch;
        s.donations.push_back({s.var_inputs[i], fetch});
      }
    }
    return s;
  }

  bool interpreted() const {
    return mode.value_or(default_execution_mode()) == ExecutionMode::kInterpreted;
  }

  // The feeds of one run of `s` but its variables.
  static FeedList batch_feeds(const Step& s, const Tensor& x, const Tensor& y, uint64_t seed,
                              double lr, double iteration) {
    FeedList feeds;
    feeds.reserve(s.vars.size() + 5);
    feeds.push_back({s.x, x});
    feeds.push_back({s.seed, Tensor::scalar<int64_t>(static_cast<int64_t>(seed))});
    if (y.defined()) feeds.push_back({s.y, y});
    if (s.lr.defined()) {
      feeds.push_back({s.lr, Tensor::scalar<float>(static_cast<float>(lr))});
      feeds.push_back({s.iteration, Tensor::scalar<float>(static_cast<float>(iteration))});
    }
    return feeds;
  }

  // One training step on the variables themselves; the caller holds `mu` from here until it
  // has assigned the step's new values.
  std::vector<Tensor> run_training(const Step& s, FeedList feeds) {
    const bool interpreted = this->interpreted();
    const size_t first_var = feeds.size();
    for (size_t i = 0; i < s.vars.size(); ++i) {
      if (!interpreted && !s.donated_fetch.empty() && s.donated_fetch[i] >= 0) {
        // Lent to the run (moved out), which may then update its buffer in place.
        Tensor& held = kiln::detail::VariableAccess::held(s.vars[i]);
        feeds.emplace_back(s.var_inputs[i], std::move(held));
      } else {
        feeds.push_back({s.var_inputs[i], s.vars[i].value()});
      }
    }
    if (interpreted) return s.graph.run(feeds, s.fetches);
    std::vector<Tensor> outs;
    try {
      auto program = s.programs->get(s.graph, s.fetches, feeds, s.donations);
      outs = program->run_donating(std::move(feeds));
    } catch (...) {
      for (size_t i = 0; i < s.vars.size(); ++i) {
        Tensor& held = kiln::detail::VariableAccess::held(s.vars[i]);
        if (!held.defined()) held = std::move(feeds[first_var + i].second);
      }
      throw;
    }
    // The same Tensor when the buffer was updated in place, else a fresh one.
    for (size_t i = 0; i < s.vars.size(); ++i)
      if (!s.donated_fetch.empty() && s.donated_fetch[i] >= 0)
        kiln::detail::VariableAccess::held(s.vars[i]) = outs[s.donated_fetch[i]];
    return outs;
  }

  static void update_metrics(const Step& s, const std::vector<Tensor>& outs,
                             const std::vector<std::unique_ptr<Metric>>& metrics) {
    size_t at = 1;
    for (size_t m = 0; m < metrics.size(); ++m) {
      std::vector<Tensor> stats(outs.begin() + at, outs.begin() + at + s.metric_stat_counts[m]);
      metrics[m]->update(stats);
      at += s.metric_stat_counts[m];
    }
  }

  static void validate_labels(const Tensor& y, const Step& s, const Loss& loss,
                              const std::string& what) {
    if (!dynamic_cast<const SparseCategoricalCrossentropy*>(&loss)) return;
    int64_t classes = s.prediction.shape().back();
    if (classes == kUnknownDim) return;
    std::vector<double> labels = y.to_vector<double>();
    for (size_t i = 0; i < labels.size(); ++i) {
      double l = labels[i];
      if (!(l >= 0 && l < classes) || l != std::floor(l)) {
        std::ostringstream os;
        os << what << ": label " << l << " at index " << i << " is out of range for " << classes
           << " classes (labels must be integers in [0, " << classes << "))";
        throw Error(ErrorCode::kInvalidArgument, os.str());
      }
    }
  }

  // The activation the model's output comes out of: its last layer's ("" when unknown).
  std::string output_activation() const {
    const Layer* last = functional || layers.empty() ? nullptr : layers.back().get();
    for (const auto& call : calls) {
      const auto& a = call.output.impl();
      const auto& b = outputs[0].impl();
      if (a && b && a->node == b->node && a->output == b->output) last = call.layer.get();
    }
    if (const auto* dense = dynamic_cast<const Dense*>(last)) return dense->activation_name();
    if (const auto* act = dynamic_cast<const Activation*>(last)) return act->activation_name();
    return "";
  }

  // Warns about a setup that runs but trains badly (Loss::advice), once per fit or evaluate
  // call: `y` is that call's first batch of labels.
  void warn_about_setup(const Tensor& y, const std::string& model, const std::string& what) {
    std::string activation;
    std::shared_ptr<Loss> l;
    {
      std::lock_guard lock(mu);
      activation = output_activation();
      l = loss;
    }
    for (const std::string& advice : l->advice(y, activation))
      kiln::warn(what + ": model '" + model + "': " + advice);
  }

  // What evaluate and predict run on: a step and the weights it reads, taken together under
  // `mu` between two of fit's steps. Released under `mu` as well: fit's next step, which may
  // then update those buffers in place, is ordered after every read of them.
  struct Snapshot {
    Impl& impl;
    std::shared_ptr<const Step> step;
    std::vector<Tensor> weights;
    bool interpreted;
    Snapshot(Impl& impl, std::shared_ptr<const Step> step, std::vector<Tensor> weights,
             bool interpreted)
        : impl(impl),
          step(std::move(step)),
          weights(std::move(weights)),
          interpreted(interpreted) {}
    Snapshot(const Snapshot&) = delete;
    ~Snapshot() {
      std::lock_guard lock(impl.mu);
      weights.clear();
    }
    std::vector<Tensor> run(const Tensor& x, const Tensor& y) const {
      FeedList feeds = batch_feeds(*step, x, y, 0, 0, 0);
      for (size_t i = 0; i < weights.size(); ++i)
        feeds.push_back({step->var_inputs[i], weights[i]});
      if (interpreted) return step->graph.run(feeds, step->fetches);
      return step->programs->get(step->graph, step->fetches, feeds)->run(feeds);
    }
  };

  // The current values of a step's variables (with `mu` held).
  static std::vector<Tensor> values_of(const Step& s) {
    std::vector<Tensor> out;
    out.reserve(s.vars.size());
    for (const Variable& v : s.vars) out.push_back(v.value());
    return out;
  }

  // Refuses what may not run while fit does (with `mu` held).
  void check_not_training(const std::string& what, const std::string& model) const {
    if (!fitting) return;
    throw Error(ErrorCode::kFailedPrecondition,
                what + ": model '" + model +
                    "' is training (fit is running); wait for fit to return first");
  }

  struct Training;
};

// Marks the model as training for fit's duration: a second fit, compile() and add() are refused
// meanwhile (evaluate and predict are not: see model.h).
struct Model::Impl::Training {
  Training(Impl& impl, const std::string& model) : impl_(impl) {
    std::lock_guard lock(impl_.mu);
    if (impl_.fitting) {
      throw Error(ErrorCode::kFailedPrecondition,
                  "fit: model '" + model +
                      "' is already training (fit is running on this or another thread); "
                      "one fit at a time");
    }
    if (!impl_.optimizer) {
      throw Error(ErrorCode::kFailedPrecondition, "fit: call compile() before fit()");
    }
    impl_.fitting = true;
  }
  ~Training() {
    std::lock_guard lock(impl_.mu);
    impl_.fitting = false;
  }
  Training(const Training&) = delete;
  Impl& impl_;  // NOLINT: a plain holder
};

// ---- construction -----------------------------------------------------------------------

Tensor Input(const Shape& shape, DType dtype, const std::string& name) {
  Shape full = {kUnknownDim};
  full.insert(full.end(), shape.begin(), shape.end());
  return detail::functional_graph().placeholder(dtype, full, name);
}

Model::Model(std::string name) : impl_(std::make_unique<Impl>()), name_(std::move(name)) {}

Model::Model(const Tensor& input, const Tensor& output, std::string name)
    : Model(std::vector<Tensor>{input}, std::vector<Tensor>{output}, std::move(name)) {}

Model::Model(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
             std::string name)
    : Model(std::move(name)) {
  if (inputs.size() != 1 || outputs.size() != 1) {
    throw Error(ErrorCode::kUnimplemented,
                "Model '" + name_ + "': functional models take one input and one output");
  }
  Graph& fg = detail::functional_graph();
  for (const Tensor& t : {inputs[0], outputs[0]}) {
    if (!t.defined() || !t.is_symbolic() || !(t.graph() == fg)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "Model '" + name_ +
                      "': inputs and outputs must be symbolic tensors made from "
                      "nn::Input and layer calls");
    }
  }
  impl_->functional = true;
  impl_->inputs = inputs;
  impl_->outputs = outputs;
  // Keep the calls the output depends on, in recording order.
  std::set<std::pair<int, int>> needed = {{outputs[0].impl()->node, outputs[0].impl()->output}};
  const auto& all = detail::functional_calls();
  std::vector<detail::FunctionalCall> kept;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (!needed.count({it->output.impl()->node, it->output.impl()->output})) continue;
    kept.push_back(*it);
    for (const Tensor& in : it->inputs) needed.insert({in.impl()->node, in.impl()->output});
  }
  // Every value the calls read must come from a call or be the input: a plain op between layers
  // (kiln::mean(layer(x))) is not replayed when the model traces its steps.
  const std::pair<int, int> input_value = {inputs[0].impl()->node, inputs[0].impl()->output};
  std::set<std::pair<int, int>> made = {input_value};
  for (const auto& c : kept) made.insert({c.output.impl()->node, c.output.impl()->output});
  for (const auto& value : needed) {
    if (made.count(value)) continue;
    const NodeInfo node = fg.node(value.first);
    if (node.op == "placeholder") {
      throw Error(ErrorCode::kInvalidArgument,
                  "Model '" + name_ + "': the output depends on nn::Input '" + node.name +
                      "', which is not the model's input (functional models take one input)");
    }
    throw Error(ErrorCode::kInvalidArgument,
                "Model '" + name_ + "': '" + node.name + "' (op " + node.op + ", giving " +
                    node.outputs[value.second].str() +
                    ") is applied to layer outputs outside a layer; a functional model is made "
                    "of nn::Input and layer calls only, so do this op inside the call() of a "
                    "Layer (a subclass of nn::Layer) and call that layer instead");
  }
  if (!needed.count(input_value)) {
    throw Error(ErrorCode::kInvalidArgument,
                "Model '" + name_ + "': the output does not depend on the input");
  }
  std::reverse(kept.begin(), kept.end());
  impl_->calls = std::move(kept);
  for (const auto& c : impl_->calls) {
    impl_->layers.push_back(c.layer);
    impl_->output_shapes[c.layer.get()] = c.output.shape();  // summary() needs no build
  }
  impl_->input_spec = TensorType{inputs[0].dtype(), inputs[0].shape()};
  impl_->input_name = fg.node(inputs[0].impl()->node).name;
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
  return impl_->input_spec.has_value() && impl_->predict_step;
}

void Model::set_seed(uint64_t seed) {
  std::lock_guard lock(impl_->mu);
  impl_->seed = seed;
}

void Model::build(const Shape& input_shape, DType dtype) {
  Shape full = {kUnknownDim};
  full.insert(full.end(), input_shape.begin(), input_shape.end());
  std::lock_guard lock(impl_->mu);
  impl_->drop(impl_->predict_step);
  impl_->predict_step =
      std::make_shared<const Step>(impl_->trace({dtype, full}, std::nullopt, /*training=*/false));
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
    rows.push_back(
        {" " + impl_->input_name + " (InputLayer)", shape_spec(impl_->input_spec->shape), "0"});
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
      total += v.value().size();
      if (v.trainable()) trainable += v.value().size();
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
  for (const auto& [name, value] : saved) {
    if (name == "optimizer/iterations") continue;
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
  auto it = saved.find("optimizer/iterations");
  if (impl_->optimizer && it != saved.end()) {
    impl_->optimizer->set_iterations(it->second.item<int64_t>());
  }
}

std::vector<std::pair<Variable, Tensor>> Model::last_gradients() const {
  std::lock_guard lock(impl_->mu);
  return impl_->last_gradients;
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
  Step s = impl_->trace({dtype, full}, std::nullopt, /*training=*/false);
  InferenceGraph g{s.graph, s.x, s.prediction, {}};
  for (size_t i = 0; i < s.vars.size(); ++i) g.variables.emplace_back(s.vars[i], s.var_inputs[i]);
  return g;
}

std::optional<TensorType> Model::input_type() const {
  std::lock_guard lock(impl_->mu);
  return impl_->input_spec;
}

void Model::set_execution_mode(ExecutionMode mode) {
  std::lock_guard lock(impl_->mu);
  impl_->mode = mode;
}
ExecutionMode Model::execution_mode() const {
  std::lock_guard lock(impl_->mu);
  return impl_->mode.value_or(default_execution_mode());
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

void Model::compile(optim::OptimizerRef optimizer, LossRef loss, std::vector<std::string> metrics) {
  if (!optimizer || !loss) {
    throw Error(ErrorCode::kInvalidArgument, "compile: an optimizer and a loss are required");
  }
  std::vector<std::unique_ptr<Metric>> made;
  for (const std::string& m : metrics) made.push_back(make_metric(m, loss.get().get()));
  std::lock_guard lock(impl_->mu);
  impl_->check_not_training("compile", name_);
  impl_->optimizer = optimizer.get();
  impl_->loss = loss.get();
  impl_->metric_names = std::move(metrics);
  impl_->metrics = std::move(made);
  impl_->drop(impl_->train_step);
  impl_->drop(impl_->eval_step);
}

Tensor Model::call(const Tensor& x, CallContext& ctx) {
  std::lock_guard lock(impl_->mu);
  return impl_->forward(x, ctx);
}

Tensor Model::operator()(const Tensor& x) {
  if (x.defined() && x.is_symbolic()) {
    CallContext ctx(false);
    return call(x, ctx);
  }
  return predict(x, std::max<int64_t>(1, x.defined() && x.rank() > 0 ? x.dim(0) : 1));
}

// Where fit's batches come from: slices of in-memory tensors or a Dataset's elements.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t steps() const = 0;  // per epoch; -1 when unknown
  virtual void begin_epoch(int epoch) = 0;
  // The next batch of this epoch, or nothing at its end.
  virtual std::optional<std::pair<Tensor, Tensor>> next() = 0;
};

namespace {

class TensorSource : public BatchSource {
 public:
  TensorSource(Tensor x, Tensor y, int64_t batch, bool shuffle, uint64_t seed)
      : x_(std::move(x)), y_(std::move(y)), batch_(batch), shuffle_(shuffle), seed_(seed) {}
  int64_t steps() const override { return (x_.dim(0) + batch_ - 1) / batch_; }
  void begin_epoch(int epoch) override {
    order_.resize(x_.dim(0));
    std::iota(order_.begin(), order_.end(), 0);
    if (shuffle_) {
      std::mt19937_64 rng(mix_seed(seed_, 1000000007ULL + epoch));
      std::shuffle(order_.begin(), order_.end(), rng);
    }
    next_ = 0;
  }
  std::optional<std::pair<Tensor, Tensor>> next() override {
    int64_t n = x_.dim(0);
    if (next_ >= n) return std::nullopt;
    int64_t begin = next_, end = std::min(n, begin + batch_);
    next_ = end;
    return std::make_pair(take_rows(x_, order_, begin, end), take_rows(y_, order_, begin, end));
  }

 private:
  Tensor x_, y_;
  int64_t batch_;
  bool shuffle_;
  uint64_t seed_;
  std::vector<int64_t> order_;
  int64_t next_ = 0;
};

std::pair<Tensor, Tensor> as_xy(const data::Element& e) {
  if (e.size() != 2) {
    throw Error(ErrorCode::kInvalidArgument, "fit: dataset elements must be (x, y) pairs, got " +
                                                 std::to_string(e.size()) + " tensors");
  }
  return {e[0], e[1]};
}

class DatasetSource : public BatchSource {
 public:
  explicit DatasetSource(data::Dataset ds) : ds_(std::move(ds)) {}
  int64_t steps() const override {
    int64_t c = ds_.cardinality();
    return c >= 0 ? c : -1;
  }
  void begin_epoch(int epoch) override { it_ = ds_.begin_epoch(epoch); }
  std::optional<std::pair<Tensor, Tensor>> next() override {
    std::optional<data::Element> e = it_.next();
    if (!e) return std::nullopt;
    return as_xy(*e);
  }

 private:
  data::Dataset ds_;
  data::Iterator it_;
};

}  // namespace

History Model::fit(const Tensor& x, const Tensor& y, const FitOptions& options) {
  Impl::Training training(*impl_, name_);
  std::shared_ptr<const Step> step;
  {
    std::lock_guard lock(impl_->mu);
    impl_->check_examples(x, y, "fit");
    if (options.batch_size <= 0) {
      throw Error(ErrorCode::kInvalidArgument, "fit: batch_size must be > 0");
    }
    if (!impl_->train_step) {
      impl_->seed = impl_->seed ? impl_->seed : options.seed;
      impl_->train_step = std::make_shared<const Step>(impl_->trace(
          {x.dtype(), x.shape()}, TensorType{y.dtype(), y.shape()}, /*training=*/true));
    }
    step = impl_->train_step;
  }
  Impl::validate_labels(y, *step, *impl_->loss, "fit");
  TensorSource source(x, y, options.batch_size, options.shuffle, options.seed);
  return fit_batches(source, options, /*validate_each_batch=*/false);
}

History Model::fit(const data::Dataset& dataset, const FitOptions& options) {
  Impl::Training training(*impl_, name_);
  bool traced;
  {
    std::lock_guard lock(impl_->mu);
    traced = impl_->train_step != nullptr;
  }
  if (!traced) {
    // Read outside the lock: a dataset's first element may take a while (files, maps).
    std::optional<data::Element> first = dataset.begin_epoch(0).next();
    if (!first) throw Error(ErrorCode::kInvalidArgument, "fit: the dataset is empty");
    auto [x, y] = as_xy(*first);
    std::lock_guard lock(impl_->mu);
    impl_->check_input(x, "fit");
    impl_->seed = impl_->seed ? impl_->seed : options.seed;
    impl_->train_step = std::make_shared<const Step>(
        impl_->trace({x.dtype(), x.shape()}, TensorType{y.dtype(), y.shape()}, /*training=*/true));
  }
  DatasetSource source(dataset);
  return fit_batches(source, options, /*validate_each_batch=*/true);
}

History Model::fit_batches(BatchSource& source, const FitOptions& options,
                           bool validate_each_batch) {
  if (options.epochs < 0) throw Error(ErrorCode::kInvalidArgument, "fit: epochs must be >= 0");
  std::shared_ptr<const Step> step_ref;
  {
    std::lock_guard lock(impl_->mu);
    if (options.validation_data) {
      const auto& [vx, vy] = *options.validation_data;
      impl_->check_examples(vx, vy, "fit: validation_data");
    }
    step_ref = impl_->train_step;
  }
  const Step& step = *step_ref;
  const Loss& loss = *impl_->loss;
  std::vector<Callback*> callbacks;
  for (const auto& c : options.callbacks) {
    c->set_model(this);
    callbacks.push_back(c.get().get());
  }
  ProgressBar progress(options.verbose, source.steps());
  History history;
  stop_training = false;
  Logs logs;
  impl_->resume.reset();
  for (Callback* c : callbacks) c->on_train_begin(logs);
  int first_epoch = options.initial_epoch;
  int64_t first_batch = 0;
  if (impl_->resume) std::tie(first_epoch, first_batch) = *impl_->resume;
  bool warned = false;  // about the setup, at this call's first batch

  for (int epoch = first_epoch; epoch < options.epochs && !stop_training; ++epoch) {
    impl_->epoch = epoch;
    Logs epoch_logs;
    for (Callback* c : callbacks) c->on_epoch_begin(epoch, epoch_logs);
    progress.begin_epoch(epoch, options.epochs);
    source.begin_epoch(epoch);
    // Resuming mid-epoch: the same batches in the same order, the first ones skipped.
    for (int64_t b = 0; epoch == first_epoch && b < first_batch; ++b) source.next();
    for (auto& m : impl_->metrics) m->reset();
    double loss_sum = 0;
    int64_t seen = 0;
    int64_t b = epoch == first_epoch ? first_batch : 0;
    for (; !stop_training; ++b) {
      impl_->batch = b;
      std::optional<std::pair<Tensor, Tensor>> batch = source.next();
      if (!batch) break;
      auto& [xb, yb] = *batch;
      if (validate_each_batch) {
        impl_->check_input(xb, "fit");  // input_spec is set: the step is traced
        Impl::validate_labels(yb, step, loss, "fit");
      }
      if (!std::exchange(warned, true)) impl_->warn_about_setup(yb, name_, "fit");
      Logs batch_logs;
      for (Callback* c : callbacks) c->on_train_batch_begin(b, batch_logs);
      optim::Optimizer& opt = *impl_->optimizer;
      int64_t it = opt.iterations();
      FeedList feeds = Impl::batch_feeds(step, xb, yb, mix_seed(options.seed, it),
                                         opt.learning_rate(), static_cast<double>(it + 1));
      std::vector<Tensor> outs;
      {
        // The one lock of a step: evaluate and predict take their weights before or after it.
        std::lock_guard lock(impl_->mu);
        outs = impl_->run_training(step, std::move(feeds));
        size_t at = 1 + step.num_metric_stats;
        for (const Variable& v : step.assigned) {
          Variable target = v;
          target.assign(outs[at++]);
        }
        impl_->last_gradients.clear();
        for (const Variable& v : step.gradient_of)
          impl_->last_gradients.emplace_back(v, outs[at++]);
        opt.set_iterations(it + 1);
      }
      double batch_loss = outs[0].item<double>();
      loss_sum += batch_loss * xb.dim(0);
      seen += xb.dim(0);
      Impl::update_metrics(step, outs, impl_->metrics);
      batch_logs["loss"] = loss_sum / seen;
      for (auto& m : impl_->metrics) batch_logs[m->name()] = m->result();
      batch_logs["batch_loss"] = batch_loss;
      for (Callback* c : callbacks) c->on_train_batch_end(b, batch_logs);
      progress.update(b + 1, batch_logs);
    }
    epoch_logs["loss"] = seen ? loss_sum / seen : 0;
    for (auto& m : impl_->metrics) epoch_logs[m->name()] = m->result();
    if (options.validation_data) {
      validating_in_fit = true;
      struct Reset {
        ~Reset() { validating_in_fit = false; }
      } reset;
      auto val = evaluate(options.validation_data->first, options.validation_data->second,
                          options.batch_size, 0);
      for (const auto& [k, v] : val) epoch_logs["val_" + k] = v;
    }
    progress.end_epoch(b, epoch_logs);
    for (Callback* c : callbacks) c->on_epoch_end(epoch, epoch_logs);
    for (const auto& [k, v] : epoch_logs) history.history[k].push_back(v);
    ++history.epochs_run;
  }
  for (Callback* c : callbacks) c->on_train_end(logs);
  return history;
}

std::map<std::string, double> Model::evaluate(const Tensor& x, const Tensor& y, int64_t batch_size,
                                              int verbose) {
  std::shared_ptr<const Step> step;
  std::vector<Tensor> weights;
  std::shared_ptr<Loss> loss;
  std::vector<std::unique_ptr<Metric>> metrics;  // this call's own: fit's keep counting
  bool interpreted;
  {
    std::lock_guard lock(impl_->mu);
    if (!impl_->loss) {
      throw Error(ErrorCode::kFailedPrecondition, "evaluate: call compile() first");
    }
    impl_->check_examples(x, y, "evaluate");
    if (batch_size <= 0) {
      throw Error(ErrorCode::kInvalidArgument, "evaluate: batch_size must be > 0");
    }
    if (!impl_->eval_step) {
      impl_->eval_step = std::make_shared<const Step>(impl_->trace(
          {x.dtype(), x.shape()}, TensorType{y.dtype(), y.shape()}, /*training=*/false));
    }
    step = impl_->eval_step;
    loss = impl_->loss;
    for (const std::string& m : impl_->metric_names) metrics.push_back(make_metric(m, loss.get()));
    weights = Impl::values_of(*step);
    interpreted = impl_->interpreted();
  }
  Impl::Snapshot snapshot{*impl_, step, std::move(weights), interpreted};
  Impl::validate_labels(y, *step, *loss, "evaluate");
  double loss_sum = 0;
  const int64_t n = x.dim(0);
  if (!validating_in_fit)
    impl_->warn_about_setup(take_rows(y, {}, 0, std::min(n, batch_size)), name_, "evaluate");
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    int64_t end = std::min(n, begin + batch_size);
    std::vector<Tensor> outs =
        snapshot.run(take_rows(x, {}, begin, end), take_rows(y, {}, begin, end));
    loss_sum += outs[0].item<double>() * (end - begin);
    Impl::update_metrics(*step, outs, metrics);
  }
  std::map<std::string, double> result = {{"loss", loss_sum / n}};
  for (auto& m : metrics) result[m->name()] = m->result();
  if (verbose) {
    std::ostringstream os;
    for (const auto& [k, v] : result) os << " - " << k << ": " << v;
    std::printf("evaluate%s\n", os.str().c_str());
  }
  return result;
}

Tensor Model::predict(const Tensor& x, int64_t batch_size) {
  std::shared_ptr<const Step> step;
  std::vector<Tensor> weights;
  bool interpreted;
  {
    std::lock_guard lock(impl_->mu);
    impl_->check_input(x, "predict");
    if (batch_size <= 0) {
      throw Error(ErrorCode::kInvalidArgument, "predict: batch_size must be > 0");
    }
    if (!impl_->predict_step) {
      impl_->predict_step = std::make_shared<const Step>(
          impl_->trace({x.dtype(), x.shape()}, std::nullopt, /*training=*/false));
    }
    step = impl_->predict_step;
    weights = Impl::values_of(*step);
    interpreted = impl_->interpreted();
  }
  Impl::Snapshot snapshot{*impl_, step, std::move(weights), interpreted};
  const int64_t n = x.dim(0);
  std::vector<Tensor> parts;
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    int64_t end = std::min(n, begin + batch_size);
    parts.push_back(snapshot.run(take_rows(x, {}, begin, end), Tensor())[0]);
  }
  if (parts.size() == 1) return parts[0];
  if (parts.empty()) {
    Shape s = step->prediction.shape();
    s[0] = 0;
    return Tensor::empty(step->prediction.dtype(), s);
  }
  Shape s = parts[0].shape();
  s[0] = n;
  Tensor out = Tensor::empty(parts[0].dtype(), s);
  char* dst = static_cast<char*>(out.raw_mutable_data());
  for (const Tensor& p : parts) {
    std::memcpy(dst, p.raw_data(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

}  // namespace kiln::nn
