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
  std::vector<Tensor> xs, ys;  // one placeholder per model input; per output (labels)
  Tensor seed, lr, iteration;
  std::vector<Variable> vars;         // in the order they were first read
  std::vector<Tensor> var_inputs;     // their placeholders
  std::vector<Variable> assigned;     // variables (and slots) the step returns new values for
  std::vector<Variable> gradient_of;  // the trainable variables whose gradients come last
  // The total loss, the loss of each output (when there are several), metric stats..., new
  // values of `assigned`, gradients.
  std::vector<Tensor> fetches;
  size_t num_losses = 1;
  // Compiled, each variable both read and assigned has its buffer updated in place: its new
  // value (fetch `donated_fetch[i]` for vars[i], -1 when not assigned) is donated its feed.
  std::vector<compiler::Donation> donations;
  std::vector<int> donated_fetch;
  std::vector<Tensor> predictions;  // one per model output
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

std::vector<Tensor> take_rows(const std::vector<Tensor>& ts, const std::vector<int64_t>& order,
                              int64_t begin, int64_t end) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(take_rows(t, order, begin, end));
  return out;
}

std::vector<TensorType> types_of(const std::vector<Tensor>& ts) {
  std::vector<TensorType> out;
  for (const Tensor& t : ts) out.push_back({t.dtype(), t.shape()});
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
  // The nn::Inputs' names (rows in summary()) and the outputs' (their layers' names, as Keras
  // names them: keys of per-output losses and logs).
  std::vector<std::string> input_names, output_names;

  uint64_t seed = 0;
  std::vector<TensorType> input_specs;  // [?, features...] per input; empty before build
  std::map<const Layer*, Shape> output_shapes;

  std::shared_ptr<optim::Optimizer> optimizer;
  std::vector<std::shared_ptr<Loss>> losses;  // one per output
  std::vector<double> loss_weights;           // one per output
  std::vector<std::string> metric_names;      // evaluate makes its own metrics from them
  std::vector<std::unique_ptr<Metric>> metrics;  // fit's: each name for each output in turn

  size_t num_outputs() const { return functional ? outputs.size() : 1; }
  size_t num_inputs() const { return functional ? inputs.size() : 1; }
  // Metric k of make_metrics() applies to this output.
  size_t metric_output(size_t k) const { return k / std::max<size_t>(1, metric_names.size()); }
  // A log key for output `o`: "loss" -> "dense_1_loss" when the model has several outputs.
  std::string output_key(size_t o, const std::string& what) const {
    return num_outputs() > 1 ? output_names[o] + "_" + what : what;
  }
  std::vector<std::unique_ptr<Metric>> make_metrics() const {
    std::vector<std::unique_ptr<Metric>> made;
    for (size_t o = 0; o < num_outputs(); ++o)
      for (const std::string& m : metric_names) made.push_back(make_metric(m, losses[o].get()));
    return made;
  }
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

  std::vector<Tensor> forward(const std::vector<Tensor>& xs, CallContext& ctx) {
    if (!functional) {
      seed_layers();
      Tensor h = xs.at(0);
      for (const LayerPtr& layer : layers) {
        auto scope = layer_scope(h, *layer);
        h = (*layer)(h, ctx);
        output_shapes[layer.get()] = h.shape();
      }
      return {h};
    }
    std::map<std::pair<int, int>, Tensor> values;
    auto key = [](const Tensor& t) {
      return std::make_pair(t.impl() ? t.impl()->node : -1, t.impl() ? t.impl()->output : 0);
    };
    for (size_t i = 0; i < inputs.size(); ++i) values[key(inputs[i])] = xs.at(i);
    for (const auto& call : calls) {
      std::vector<Tensor> ins;
      for (const Tensor& t : call.inputs) ins.push_back(values.at(key(t)));
      auto scope = layer_scope(ins[0], *call.layer);
      Tensor out = (*call.layer)(ins, ctx);
      output_shapes[call.layer.get()] = out.shape();
      values[key(call.output)] = out;
    }
    std::vector<Tensor> out;
    for (const Tensor& o : outputs) out.push_back(values.at(key(o)));
    return out;
  }

  // "x" for a one-input model, "x['<input name>']" otherwise.
  std::string input_label(size_t i) const {
    return num_inputs() > 1 ? "x['" + input_names[i] + "']" : std::string("x");
  }
  std::string output_label(size_t o) const {
    return num_outputs() > 1 ? "y['" + output_names[o] + "']" : std::string("y");
  }

  void check_input(const std::vector<Tensor>& xs, const std::string& what) const {
    if (xs.size() != num_inputs()) {
      throw Error(ErrorCode::kInvalidArgument,
                  what + ": the model takes " + std::to_string(num_inputs()) +
                      " input(s), got " + std::to_string(xs.size()));
    }
    for (size_t i = 0; i < xs.size(); ++i) {
      const Tensor& x = xs[i];
      if (!x.defined() || x.is_symbolic() || x.rank() < 1) {
        throw Error(ErrorCode::kInvalidArgument,
                    what + ": " + input_label(i) +
                        " must be a concrete tensor with a batch dimension");
      }
      if (x.dim(0) != xs[0].dim(0)) {
        throw Error(ErrorCode::kInvalidArgument,
                    what + ": the inputs have different numbers of rows (" + input_label(0) +
                        " is " + shape_str(xs[0].shape()) + ", " + input_label(i) + " is " +
                        shape_str(x.shape()) + ")");
      }
      if (input_specs.empty()) continue;
      const Shape& spec = input_specs[i].shape;
      bool ok = x.rank() == static_cast<int64_t>(spec.size());
      for (size_t d = 1; ok && d < spec.size(); ++d)
        ok = spec[d] == kUnknownDim || spec[d] == x.shape()[d];
      if (!ok) {
        throw Error(ErrorCode::kInvalidArgument,
                    what + ": " + input_label(i) + " has shape " + shape_str(x.shape()) +
                        " but the model expects " + shape_str(spec) +
                        " (? is the batch dimension)");
      }
    }
  }

  // The examples of fit or evaluate (`what` names the call and the argument): as many rows
  // of each y as of x, and at least one.
  void check_examples(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                      const std::string& what) const {
    check_input(xs, what);
    if (ys.size() != num_outputs()) {
      throw Error(ErrorCode::kInvalidArgument,
                  what + ": the model has " + std::to_string(num_outputs()) +
                      " output(s), got targets for " + std::to_string(ys.size()));
    }
    const Tensor& x = xs[0];
    for (size_t o = 0; o < ys.size(); ++o) {
      const Tensor& y = ys[o];
      const std::string shapes =
          "(" + input_label(0) + " is " + shape_str(x.shape()) + ", " + output_label(o) + " is " +
          (y.defined() ? shape_str(y.shape()) : std::string("undefined")) + ")";
      if (!y.defined() || y.is_symbolic() || y.rank() < 1 || y.dim(0) != x.dim(0)) {
        throw Error(ErrorCode::kInvalidArgument,
                    what + ": " + output_label(o) +
                        " must be a concrete tensor with as many rows as x " + shapes);
      }
      if (x.dim(0) == 0) {
        throw Error(ErrorCode::kInvalidArgument,
                    what + ": x and y are empty " + shapes + ": there are no examples");
      }
    }
  }

  // Traces forward (+ loss, metrics, gradients and updates for training) into a new graph.
  // Placeholders are named "x" and "y" for one input and output, else after the model's.
  Step trace(const std::vector<TensorType>& x_types,
             const std::optional<std::vector<TensorType>>& y_types, bool training) {
    Step s;
    Graph& g = s.graph;
    auto guard = g.as_default();
    for (size_t i = 0; i < x_types.size(); ++i) {
      s.xs.push_back(g.placeholder(x_types[i].dtype, with_unknown_batch(x_types[i].shape),
                                   x_types.size() > 1 ? input_names[i] : "x"));
    }
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
    s.predictions = forward(s.xs, ctx);
    if (input_specs.empty()) {
      for (const TensorType& t : x_types)
        input_specs.push_back({t.dtype, with_unknown_batch(t.shape)});
    }
    if (!y_types) {
      s.fetches = s.predictions;
      return s;
    }
    for (size_t o = 0; o < y_types->size(); ++o) {
      const TensorType& t = (*y_types)[o];
      s.ys.push_back(g.placeholder(t.dtype, with_unknown_batch(t.shape),
                                   y_types->size() > 1 ? "y_" + output_names[o] : "y"));
    }
    // The loss minimised: the weighted sum of the outputs' losses (Keras' loss_weights).
    Tensor loss_value;
    std::vector<Tensor> output_losses;
    for (size_t o = 0; o < s.predictions.size(); ++o) {
      Tensor l = (*losses[o])(s.ys[o], s.predictions[o]);
      output_losses.push_back(l);
      Tensor weighted = loss_weights[o] == 1.0 ? l : l * loss_weights[o];
      loss_value = o == 0 ? weighted : loss_value + weighted;
    }
    s.fetches.push_back(loss_value);
    if (output_losses.size() > 1) {
      for (const Tensor& l : output_losses) s.fetches.push_back(l);
      s.num_losses = 1 + output_losses.size();
    }
    for (size_t k = 0; k < metrics.size(); ++k) {
      size_t o = metric_output(k);
      std::vector<Tensor> stats = metrics[k]->batch_stats(s.ys[o], s.predictions[o]);
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
      int fetch = static_cast<int>(s.num_losses + s.num_metric_stats + k);
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
  static FeedList batch_feeds(const Step& s, const std::vector<Tensor>& xs,
                              const std::vector<Tensor>& ys, uint64_t seed, double lr,
                              double iteration) {
    FeedList feeds;
    feeds.reserve(s.vars.size() + xs.size() + ys.size() + 3);
    for (size_t i = 0; i < xs.size(); ++i) feeds.push_back({s.xs[i], xs[i]});
    feeds.push_back({s.seed, Tensor::scalar<int64_t>(static_cast<int64_t>(seed))});
    for (size_t o = 0; o < ys.size(); ++o) feeds.push_back({s.ys[o], ys[o]});
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
    size_t at = s.num_losses;
    for (size_t m = 0; m < metrics.size(); ++m) {
      std::vector<Tensor> stats(outs.begin() + at, outs.begin() + at + s.metric_stat_counts[m]);
      metrics[m]->update(stats);
      at += s.metric_stat_counts[m];
    }
  }

  // Sparse labels in range, for each output trained with a sparse categorical loss.
  static void validate_labels(const std::vector<Tensor>& ys, const Step& s,
                              const std::vector<std::shared_ptr<Loss>>& losses,
                              const std::string& what) {
    for (size_t o = 0; o < ys.size(); ++o) {
      if (!dynamic_cast<const SparseCategoricalCrossentropy*>(losses[o].get())) continue;
      int64_t classes = s.predictions[o].shape().back();
      if (classes == kUnknownDim) continue;
      std::vector<double> labels = ys[o].to_vector<double>();
      for (size_t i = 0; i < labels.size(); ++i) {
        double l = labels[i];
        if (!(l >= 0 && l < classes) || l != std::floor(l)) {
          std::ostringstream os;
          os << what << ": label " << l << " at index " << i
             << (ys.size() > 1 ? " of output " + std::to_string(o) : std::string())
             << " is out of range for " << classes << " classes (labels must be integers in [0, "
             << classes << "))";
          throw Error(ErrorCode::kInvalidArgument, os.str());
        }
      }
    }
  }

  // The activation output `o` comes out of: its last layer's ("" when unknown).
  std::string output_activation(size_t o) const {
    const Layer* last = functional || layers.empty() ? nullptr : layers.back().get();
    for (const auto& call : calls) {
      const auto& a = call.output.impl();
      const auto& b = outputs[o].impl();
      if (a && b && a->node == b->node && a->output == b->output) last = call.layer.get();
    }
    if (const auto* dense = dynamic_cast<const Dense*>(last)) return dense->activation_name();
    if (const auto* act = dynamic_cast<const Activation*>(last)) return act->activation_name();
    return "";
  }

  // Warns about a setup that runs but trains badly (Loss::advice), once per fit or evaluate
  // call: `ys` is that call's first batch of labels.
  void warn_about_setup(const std::vector<Tensor>& ys, const std::string& model,
                        const std::string& what) {
    std::vector<std::string> activations;
    std::vector<std::shared_ptr<Loss>> ls;
    {
      std::lock_guard lock(mu);
      for (size_t o = 0; o < ys.size(); ++o) activations.push_back(output_activation(o));
      ls = losses;
    }
    for (size_t o = 0; o < ys.size(); ++o) {
      std::string where = ys.size() > 1 ? " output '" + output_names[o] + "'" : "";
      for (const std::string& advice : ls[o]->advice(ys[o], activations[o]))
        kiln::warn(what + ": model '" + model + "'" + where + ": " + advice);
    }
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
    std::vector<Tensor> run(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys) const {
      FeedList feeds = batch_feeds(*step, xs, ys, 0, 0, 0);
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

  // Logs of fit and evaluate: "loss" (the weighted total), each output's "<name>_loss" when
  // there are several, and the metrics ("accuracy", or "<output>_accuracy").
  void log_results(const std::vector<double>& loss_sums, int64_t seen,
                   const std::vector<std::unique_ptr<Metric>>& ms,
                   std::map<std::string, double>& logs) const {
    auto mean_of = [&](double sum) { return seen ? sum / static_cast<double>(seen) : 0.0; };
    logs["loss"] = mean_of(loss_sums[0]);
    for (size_t o = 0; o + 1 < loss_sums.size(); ++o)
      logs[output_names[o] + "_loss"] = mean_of(loss_sums[o + 1]);
    for (size_t k = 0; k < ms.size(); ++k) logs[output_key(metric_output(k), ms[k]->name())] =
        ms[k]->result();
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
    if (!needed.count(value_of(it->output))) continue;
    kept.push_back(*it);
    for (const Tensor& in : it->inputs) needed.insert(value_of(in));
  }
  // Every value the calls read must come from a call or be an input: a plain op between layers
  // (kiln::mean(layer(x))) is not replayed when the model traces its steps.
  std::set<std::pair<int, int>> made = input_values;
  for (const auto& c : kept) made.insert(value_of(c.output));
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
      c.layer->set_name(unique);
      taken[unique] = c.layer.get();
    }
    impl_->layers.push_back(c.layer);
    impl_->output_shapes[c.layer.get()] = c.output.shape();  // summary() needs no build
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
      if (value_of(c.output) == value_of(out)) name = c.layer->name();
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
    where[value_of(impl_->calls[c].output)] = {static_cast<int>(c), 0};
  }
  for (const Tensor& out : impl_->outputs) a.outputs.push_back(where.at(value_of(out)));
  return a;
}

std::vector<Tensor> Model::read_variables(const std::vector<Variable>& variables) const {
  std::lock_guard lock(impl_->mu);  // between two of fit's steps
  std::vector<Tensor> out;
  out.reserve(variables.size());
  for (const Variable& v : variables) out.push_back(v.value());
  return out;
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
  compile(std::move(optimizer), std::vector<LossRef>{std::move(loss)}, std::move(metrics));
}

void Model::compile(optim::OptimizerRef optimizer, std::vector<LossRef> losses,
                    std::vector<std::string> metrics, std::vector<double> loss_weights) {
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
  std::lock_guard lock(impl_->mu);
  impl_->check_not_training("compile", name_);
  std::vector<std::shared_ptr<Loss>> shared;
  for (const LossRef& l : losses) shared.push_back(l.get());
  auto old_losses = std::exchange(impl_->losses, shared);
  auto old_names = std::exchange(impl_->metric_names, metrics);
  try {
    impl_->metrics = impl_->make_metrics();  // checks the names
  } catch (...) {
    impl_->losses = std::move(old_losses);
    impl_->metric_names = std::move(old_names);
    throw;
  }
  impl_->optimizer = optimizer.get();
  impl_->loss_weights = std::move(loss_weights);
  impl_->drop(impl_->train_step);
  impl_->drop(impl_->eval_step);
}

Model::CompileConfig Model::compile_config() const {
  std::lock_guard lock(impl_->mu);
  CompileConfig c;
  c.optimizer = impl_->optimizer;
  c.losses = impl_->losses;
  c.metrics = impl_->metric_names;
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

// Where fit's batches come from: slices of in-memory tensors or a Dataset's elements.
class BatchSource {
 public:
  using Batch = std::pair<std::vector<Tensor>, std::vector<Tensor>>;  // inputs, targets
  virtual ~BatchSource() = default;
  virtual int64_t steps() const = 0;  // per epoch; -1 when unknown
  virtual void begin_epoch(int epoch) = 0;
  // The next batch of this epoch, or nothing at its end.
  virtual std::optional<Batch> next() = 0;
};

namespace {

class TensorSource : public BatchSource {
 public:
  TensorSource(std::vector<Tensor> xs, std::vector<Tensor> ys, int64_t batch, bool shuffle,
               uint64_t seed)
      : xs_(std::move(xs)), ys_(std::move(ys)), batch_(batch), shuffle_(shuffle), seed_(seed) {}
  int64_t steps() const override { return (rows() + batch_ - 1) / batch_; }
  void begin_epoch(int epoch) override {
    order_.resize(rows());
    std::iota(order_.begin(), order_.end(), 0);
    if (shuffle_) {
      std::mt19937_64 rng(mix_seed(seed_, 1000000007ULL + epoch));
      std::shuffle(order_.begin(), order_.end(), rng);
    }
    next_ = 0;
  }
  std::optional<Batch> next() override {
    int64_t n = rows();
    if (next_ >= n) return std::nullopt;
    int64_t begin = next_, end = std::min(n, begin + batch_);
    next_ = end;
    return Batch(take_rows(xs_, order_, begin, end), take_rows(ys_, order_, begin, end));
  }

 private:
  int64_t rows() const { return xs_[0].dim(0); }
  std::vector<Tensor> xs_, ys_;
  int64_t batch_;
  bool shuffle_;
  uint64_t seed_;
  std::vector<int64_t> order_;
  int64_t next_ = 0;
};

// A dataset element: the model's inputs, then its targets, in order.
BatchSource::Batch split_element(const data::Element& e, size_t inputs, size_t outputs) {
  if (e.size() != inputs + outputs) {
    throw Error(ErrorCode::kInvalidArgument,
                "fit: dataset elements must hold the model's " + std::to_string(inputs) +
                    " input(s) then its " + std::to_string(outputs) + " target(s), got " +
                    std::to_string(e.size()) + " tensors");
  }
  return {std::vector<Tensor>(e.begin(), e.begin() + inputs),
          std::vector<Tensor>(e.begin() + inputs, e.end())};
}

class DatasetSource : public BatchSource {
 public:
  DatasetSource(data::Dataset ds, size_t inputs, size_t outputs)
      : ds_(std::move(ds)), inputs_(inputs), outputs_(outputs) {}
  int64_t steps() const override {
    int64_t c = ds_.cardinality();
    return c >= 0 ? c : -1;
  }
  void begin_epoch(int epoch) override { it_ = ds_.begin_epoch(epoch); }
  std::optional<Batch> next() override {
    std::optional<data::Element> e = it_.next();
    if (!e) return std::nullopt;
    return split_element(*e, inputs_, outputs_);
  }

 private:
  data::Dataset ds_;
  size_t inputs_, outputs_;
  data::Iterator it_;
};

// Named inputs or targets in the order of `names`; a missing or unknown name is an error.
std::vector<Tensor> by_name(const std::map<std::string, Tensor>& named,
                            const std::vector<std::string>& names, const std::string& what) {
  std::vector<Tensor> out;
  for (const std::string& n : names) {
    auto it = named.find(n);
    if (it == named.end()) {
      std::string known;
      for (const std::string& k : names) known += (known.empty() ? "" : ", ") + k;
      throw Error(ErrorCode::kInvalidArgument,
                  what + " has no entry '" + n + "' (the model's names: " + known + ")");
    }
    out.push_back(it->second);
  }
  for (const auto& [n, t] : named) {
    if (std::find(names.begin(), names.end(), n) == names.end()) {
      std::string known;
      for (const std::string& k : names) known += (known.empty() ? "" : ", ") + k;
      throw Error(ErrorCode::kInvalidArgument,
                  what + " has an entry '" + n + "' the model does not have (its names: " +
                      known + ")");
    }
  }
  return out;
}

}  // namespace

History Model::fit(const Tensor& x, const Tensor& y, const FitOptions& options) {
  return fit(std::vector<Tensor>{x}, std::vector<Tensor>{y}, options);
}

History Model::fit(const NamedTensors& x, const NamedTensors& y, const FitOptions& options) {
  return fit(by_name(x.map(), input_names(), "fit: x"), by_name(y.map(), output_names(), "fit: y"),
             options);
}

History Model::fit(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                   const FitOptions& options) {
  Impl::Training training(*impl_, name_);
  std::shared_ptr<const Step> step;
  {
    std::lock_guard lock(impl_->mu);
    impl_->check_examples(xs, ys, "fit");
    if (options.batch_size <= 0) {
      throw Error(ErrorCode::kInvalidArgument, "fit: batch_size must be > 0");
    }
    if (!impl_->train_step) {
      impl_->seed = impl_->seed ? impl_->seed : options.seed;
      impl_->train_step = std::make_shared<const Step>(
          impl_->trace(types_of(xs), types_of(ys), /*training=*/true));
    }
    step = impl_->train_step;
  }
  Impl::validate_labels(ys, *step, impl_->losses, "fit");
  TensorSource source(xs, ys, options.batch_size, options.shuffle, options.seed);
  return fit_batches(source, options, /*validate_each_batch=*/false);
}

History Model::fit(const data::Dataset& dataset, const FitOptions& options) {
  Impl::Training training(*impl_, name_);
  bool traced;
  {
    std::lock_guard lock(impl_->mu);
    traced = impl_->train_step != nullptr;
  }
  const size_t inputs = impl_->num_inputs(), outputs = impl_->num_outputs();
  if (!traced) {
    // Read outside the lock: a dataset's first element may take a while (files, maps).
    std::optional<data::Element> first = dataset.begin_epoch(0).next();
    if (!first) throw Error(ErrorCode::kInvalidArgument, "fit: the dataset is empty");
    auto [xs, ys] = split_element(*first, inputs, outputs);
    std::lock_guard lock(impl_->mu);
    impl_->check_input(xs, "fit");
    impl_->seed = impl_->seed ? impl_->seed : options.seed;
    impl_->train_step = std::make_shared<const Step>(
        impl_->trace(types_of(xs), types_of(ys), /*training=*/true));
  }
  DatasetSource source(dataset, inputs, outputs);
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
      impl_->check_examples({vx}, {vy}, "fit: validation_data");
    }
    step_ref = impl_->train_step;
  }
  const Step& step = *step_ref;
  const std::vector<std::shared_ptr<Loss>>& losses = impl_->losses;
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
    std::vector<double> loss_sums(step.num_losses, 0.0);  // total, then per output
    int64_t seen = 0;
    int64_t b = epoch == first_epoch ? first_batch : 0;
    for (; !stop_training; ++b) {
      impl_->batch = b;
      std::optional<BatchSource::Batch> batch = source.next();
      if (!batch) break;
      auto& [xb, yb] = *batch;
      if (validate_each_batch) {
        impl_->check_examples(xb, yb, "fit");  // input_specs are set: the step is traced
        Impl::validate_labels(yb, step, losses, "fit");
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
        size_t at = step.num_losses + step.num_metric_stats;
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
      const int64_t rows = xb[0].dim(0);
      for (size_t k = 0; k < step.num_losses; ++k) loss_sums[k] += outs[k].item<double>() * rows;
      seen += rows;
      Impl::update_metrics(step, outs, impl_->metrics);
      impl_->log_results(loss_sums, seen, impl_->metrics, batch_logs);
      batch_logs["batch_loss"] = batch_loss;
      for (Callback* c : callbacks) c->on_train_batch_end(b, batch_logs);
      progress.update(b + 1, batch_logs);
    }
    impl_->log_results(loss_sums, seen, impl_->metrics, epoch_logs);
    if (options.validation_data) {
      validating_in_fit = true;
      struct Reset {
        ~Reset() { validating_in_fit = false; }
      } reset;
      auto val = evaluate(std::vector<Tensor>{options.validation_data->first},
                          std::vector<Tensor>{options.validation_data->second},
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
  return evaluate(std::vector<Tensor>{x}, std::vector<Tensor>{y}, batch_size, verbose);
}

std::map<std::string, double> Model::evaluate(const NamedTensors& x, const NamedTensors& y,
                                              int64_t batch_size, int verbose) {
  return evaluate(by_name(x.map(), input_names(), "evaluate: x"),
                  by_name(y.map(), output_names(), "evaluate: y"), batch_size, verbose);
}

std::map<std::string, double> Model::evaluate(const std::vector<Tensor>& xs,
                                              const std::vector<Tensor>& ys, int64_t batch_size,
                                              int verbose) {
  std::shared_ptr<const Step> step;
  std::vector<Tensor> weights;
  std::vector<std::shared_ptr<Loss>> losses;
  std::vector<std::unique_ptr<Metric>> metrics;  // this call's own: fit's keep counting
  bool interpreted;
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->losses.empty()) {
      throw Error(ErrorCode::kFailedPrecondition, "evaluate: call compile() first");
    }
    impl_->check_examples(xs, ys, "evaluate");
    if (batch_size <= 0) {
      throw Error(ErrorCode::kInvalidArgument, "evaluate: batch_size must be > 0");
    }
    if (!impl_->eval_step) {
      impl_->eval_step = std::make_shared<const Step>(
          impl_->trace(types_of(xs), types_of(ys), /*training=*/false));
    }
    step = impl_->eval_step;
    losses = impl_->losses;
    metrics = impl_->make_metrics();
    weights = Impl::values_of(*step);
    interpreted = impl_->interpreted();
  }
  Impl::Snapshot snapshot{*impl_, step, std::move(weights), interpreted};
  Impl::validate_labels(ys, *step, losses, "evaluate");
  std::vector<double> loss_sums(step->num_losses, 0.0);
  const int64_t n = xs[0].dim(0);
  if (!validating_in_fit)
    impl_->warn_about_setup(take_rows(ys, {}, 0, std::min(n, batch_size)), name_, "evaluate");
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    int64_t end = std::min(n, begin + batch_size);
    std::vector<Tensor> outs =
        snapshot.run(take_rows(xs, {}, begin, end), take_rows(ys, {}, begin, end));
    for (size_t k = 0; k < step->num_losses; ++k)
      loss_sums[k] += outs[k].item<double>() * (end - begin);
    Impl::update_metrics(*step, outs, metrics);
  }
  std::map<std::string, double> result;
  impl_->log_results(loss_sums, n, metrics, result);
  if (verbose) {
    std::ostringstream os;
    for (const auto& [k, v] : result) os << " - " << k << ": " << v;
    std::printf("evaluate%s\n", os.str().c_str());
  }
  return result;
}

Tensor Model::predict(const Tensor& x, int64_t batch_size) {
  if (impl_->num_outputs() != 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "predict: model '" + name_ + "' has " + std::to_string(impl_->num_outputs()) +
                    " outputs; call predict with a list of inputs (it returns one per output)");
  }
  return predict(std::vector<Tensor>{x}, batch_size)[0];
}

std::map<std::string, Tensor> Model::predict(const NamedTensors& x, int64_t batch_size) {
  std::vector<Tensor> outs = predict(by_name(x.map(), input_names(), "predict: x"), batch_size);
  std::vector<std::string> names = output_names();
  std::map<std::string, Tensor> named;
  for (size_t o = 0; o < outs.size(); ++o) named[names[o]] = outs[o];
  return named;
}

std::vector<Tensor> Model::predict(const std::vector<Tensor>& xs, int64_t batch_size) {
  std::shared_ptr<const Step> step;
  std::vector<Tensor> weights;
  bool interpreted;
  {
    std::lock_guard lock(impl_->mu);
    impl_->check_input(xs, "predict");
    if (batch_size <= 0) {
      throw Error(ErrorCode::kInvalidArgument, "predict: batch_size must be > 0");
    }
    if (!impl_->predict_step) {
      impl_->predict_step = std::make_shared<const Step>(
          impl_->trace(types_of(xs), std::nullopt, /*training=*/false));
    }
    step = impl_->predict_step;
    weights = Impl::values_of(*step);
    interpreted = impl_->interpreted();
  }
  Impl::Snapshot snapshot{*impl_, step, std::move(weights), interpreted};
  const int64_t n = xs[0].dim(0);
  const size_t outputs = step->predictions.size();
  std::vector<std::vector<Tensor>> parts(outputs);
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    int64_t end = std::min(n, begin + batch_size);
    std::vector<Tensor> outs = snapshot.run(take_rows(xs, {}, begin, end), {});
    for (size_t o = 0; o < outputs; ++o) parts[o].push_back(outs[o]);
  }
  std::vector<Tensor> result;
  for (size_t o = 0; o < outputs; ++o) {
    if (parts[o].size() == 1) {
      result.push_back(parts[o][0]);
      continue;
    }
    if (parts[o].empty()) {
      Shape s = step->predictions[o].shape();
      s[0] = 0;
      result.push_back(Tensor::empty(step->predictions[o].dtype(), s));
      continue;
    }
    Shape s = parts[o][0].shape();
    s[0] = n;
    Tensor out = Tensor::empty(parts[o][0].dtype(), s);
    char* dst = static_cast<char*>(out.raw_mutable_data());
    for (const Tensor& p : parts[o]) {
      std::memcpy(dst, p.raw_data(), p.nbytes());
      dst += p.nbytes();
    }
    result.push_back(out);
  }
  return result;
}

}  // namespace kiln::nn
