// Model's private parts, shared by its source files: the traced step graphs (Step), the
// batch helpers, and Model::Impl (model.cc: construction, inspection, state, compile;
// step.cc: tracing and running a step; fit.cc: the fit, evaluate and predict loops).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "compiler/compile_cache.h"
#include "kiln/distribute/ops.h"
#include "kiln/graph.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/model.h"
#include "kiln/ops.h"
#include "kiln/warning.h"
#include "src/core/device_memory.h"
#include "src/core/tensor_impl.h"
#include "src/core/variable_capture.h"
#include "src/api/nn/functional.h"

namespace kiln::nn {

// Set while fit evaluates its validation_data: fit has given its warnings already.
inline thread_local bool validating_in_fit = false;

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
  // Traced for a strategy (training): this replica's rows of the global batch and 1 when it has
  // any (0 when it runs a stand-in row at a short last batch), fed per replica; the fetch of
  // the rows of the whole global batch (summed over the replicas), after the gradients.
  Tensor replica_rows, replica_has_rows;
  int total_rows_fetch = -1;
  std::vector<Tensor> predictions;  // one per model output
  size_t num_metric_stats = 0;
  std::vector<size_t> metric_stat_counts;
  // Compiled programs of this step, one per feed signature (a short last batch is another),
  // for the model's device (made by Model::Impl::trace).
  std::shared_ptr<compiler::CompileCache> programs;
};

// Rows [begin, end) of t in the order of `order` (or as they are when order is empty).
inline Tensor take_rows(const Tensor& t, const std::vector<int64_t>& order, int64_t begin, int64_t end) {
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

inline std::vector<Tensor> take_rows(const std::vector<Tensor>& ts, const std::vector<int64_t>& order,
                              int64_t begin, int64_t end) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(take_rows(t, order, begin, end));
  return out;
}

inline std::vector<TensorType> types_of(const std::vector<Tensor>& ts) {
  std::vector<TensorType> out;
  for (const Tensor& t : ts) out.push_back({t.dtype(), t.shape()});
  return out;
}

inline Shape with_unknown_batch(const Shape& s) {
  Shape out = s;
  out[0] = kUnknownDim;
  return out;
}

inline std::string shape_spec(const Shape& s) {
  std::string out = "(None";
  for (size_t i = 1; i < s.size(); ++i) out += ", " + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

inline std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(i, ",");
  return s;
}

// While recording, a layer's nodes are named "<layer>/<op>" (TensorBoard groups them).
inline std::optional<Graph::NameScope> layer_scope(const Tensor& x, const Layer& layer) {
  const std::string& name = layer.name();
  if (!x.defined() || !x.is_symbolic() || name.empty() || name.find('/') != std::string::npos) {
    return std::nullopt;
  }
  return std::optional<Graph::NameScope>(std::in_place, x.graph(), layer.name());
}

inline uint64_t mix_seed(uint64_t seed, uint64_t step) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (step + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (z ^ (z >> 31)) & 0x7fffffffffffffffULL;
}

// While a saved model is compiled again on load (src/api/nn/saving.cc), a metric that does not
// fit its output is dropped with a warning instead of failing compile: files written before that
// check (accuracy on a regression output, always 0) still load.
struct LoadingSavedModel {
  LoadingSavedModel() { active = true; }
  ~LoadingSavedModel() { active = false; }
  LoadingSavedModel(const LoadingSavedModel&) = delete;
  static inline thread_local bool active = false;
};

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
  std::shared_ptr<distribute::Strategy> strategy;  // compile's; null: one replica
  Device device = Device::cpu();                   // compile's: where the steps run
  // Whether fit's batches are this worker's part of the global batch (a dataset divided between
  // the workers, data::Dataset::shard_for_worker) rather than the whole global batch.
  bool worker_batches = false;
  // The variables of local replicas 1, 2, ... (replica 0's are the Variables), by Variable id:
  // copied from replica 0's at the start of each fit, then updated by each replica's own step.
  std::vector<std::map<const void*, Tensor>> replica_values;
  std::vector<std::shared_ptr<Loss>> losses;  // one per output
  std::vector<double> loss_weights;           // one per output
  MetricNames metrics_given;                  // as compile was given them
  // The names of each output's metrics (those that fit it); evaluate makes its own from them.
  std::vector<std::vector<std::string>> output_metrics;
  std::vector<std::unique_ptr<Metric>> metrics;  // fit's: each output's in turn

  size_t num_outputs() const { return functional ? outputs.size() : 1; }
  size_t num_inputs() const { return functional ? inputs.size() : 1; }
  // Metric k of make_metrics() applies to this output.
  size_t metric_output(size_t k) const {
    size_t o = 0;
    while (o + 1 < output_metrics.size() && k >= output_metrics[o].size())
      k -= output_metrics[o++].size();
    return o;
  }
  // A log key for output `o`: "loss" -> "dense_1_loss" when the model has several outputs.
  std::string output_key(size_t o, const std::string& what) const {
    return num_outputs() > 1 ? output_names[o] + "_" + what : what;
  }
  std::vector<std::unique_ptr<Metric>> make_metrics() const {
    std::vector<std::unique_ptr<Metric>> made;
    for (size_t o = 0; o < output_metrics.size(); ++o)
      for (const std::string& m : output_metrics[o])
        made.push_back(make_metric(m, losses[o].get()));
    return made;
  }
  // Each output's metric names from compile's (with `losses` set): a flat list applies to every
  // output, a metric that does not fit an output is an error, or, from a flat list on a model of
  // several outputs, left out for that output with a message added to `warnings`.
  std::vector<std::vector<std::string>> metrics_by_output(const MetricNames& given,
                                                          const std::string& model,
                                                          std::vector<std::string>& warnings) const;
  // Held by the calls running them too: compile() or add() may drop a step an evaluate runs.
  std::shared_ptr<const Step> train_step, eval_step, predict_step;

  // Where fit is, and where it was asked to resume.
  int epoch = 0;
  int64_t batch = 0;
  std::optional<std::pair<int, int64_t>> resume;
  std::vector<std::pair<Variable, Tensor>> last_gradients;
  std::optional<ExecutionMode> mode;  // default_execution_mode() when unset
  bool outputs_in_compute_dtype = false;  // Model::set_outputs_in_compute_dtype
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
      return {model_output(h)};
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
      std::vector<Tensor> outs = call.layer->outputs(ins, ctx);
      output_shapes[call.layer.get()] = outs.at(0).shape();
      for (size_t k = 0; k < call.outputs.size(); ++k) values[key(call.outputs[k])] = outs.at(k);
    }
    std::vector<Tensor> out;
    for (const Tensor& o : outputs) out.push_back(model_output(values.at(key(o))));
    return out;
  }

  // A model's outputs are f32 whatever its layers compute in (mixed precision), so that
  // predict sees f32, unless set_outputs_in_compute_dtype kept them; the losses and metrics
  // read them as f32 either way.
  static Tensor f32_output(const Tensor& y) {
    return y.dtype() == f16 || y.dtype() == bf16 ? convert(y, f32) : y;
  }
  Tensor model_output(const Tensor& y) const {
    return outputs_in_compute_dtype ? y : f32_output(y);
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
             const std::optional<std::vector<TensorType>>& y_types, bool training);

  bool interpreted() const {
    return mode.value_or(default_execution_mode()) == ExecutionMode::kInterpreted;
  }
  // Where the steps run now: compile's device, or the host when interpreted.
  Device step_device() const { return interpreted() ? Device::cpu() : device; }
  // A variable's tensor on the host moved to `on` when that is a GPU: a GPU model's variables
  // live there once its steps have read them.
  static void keep_on(Tensor& held, const Device& on) {
    if (on.type != DeviceType::kCpu && held.device().type == DeviceType::kCpu) held = held.to(on);
  }

  // The feeds of one run of `s` but its variables.
  static FeedList batch_feeds(const Step& s, const std::vector<Tensor>& xs,
                              const std::vector<Tensor>& ys, uint64_t seed, double lr,
                              double iteration);

  // One training step on the variables whose values `held` points to (one per s.vars; the
  // donated ones are lent to the run and replaced by their new values). The caller holds `mu`
  // from here until it has assigned the step's new values.
  std::vector<Tensor> run_training(const Step& s, FeedList feeds,
                                   const std::vector<Tensor*>& held);
  // Where the Variables of `s` hold their values (replica 0's).
  static std::vector<Tensor*> held_of(const Step& s);

  // One step of every local replica of the strategy on its part of the global batch (xs, ys),
  // the replicas' own variables updated; returns replica 0's outputs (the losses, metric
  // statistics and gradients of the global batch, its new values). The caller holds `mu`.
  std::vector<Tensor> run_replicated_training(const Step& s, const std::vector<Tensor>& xs,
                                              const std::vector<Tensor>& ys, uint64_t seed,
                                              double lr, double iteration);
  // Copies replica 0's variables (those `s` reads or assigns) to the other local replicas.
  void start_replicas(const Step& s);
  // What the workers of a strategy must agree on to train together (compared at fit's start):
  // the model's layers, their dtype policies and variables, the inputs, the optimizer, the data
  // order and the epochs, then `batches` (what fit's batch source feeds: the global batch, the
  // steps per epoch, how the data is divided).
  std::vector<std::pair<std::string, std::string>> worker_facts(
      const Step& s, const FitOptions& options,
      const std::vector<std::pair<std::string, std::string>>& batches) const;
  // Gives every worker the chief's variables (those `s` reads or assigns), optimizer
  // iterations and starting position (epoch, batch).
  void sync_from_chief(const Step& s, int& epoch, int64_t& batch);
  // Runs `part(begin, end)` for each local replica's consecutive part of rows [0, rows), at
  // once on the strategy's replicas (on this thread without one), and returns the replicas'
  // row counts and outputs in replica order, skipping replicas without rows.
  std::vector<std::pair<int64_t, std::vector<Tensor>>> run_split(
      int64_t rows,
      const std::function<std::vector<Tensor>(int64_t begin, int64_t end)>& part) const;

  static void update_metrics(const Step& s, const std::vector<Tensor>& outs,
                             const std::vector<std::unique_ptr<Metric>>& metrics);

  // Sparse labels in range, for each output trained with a sparse categorical loss.
  static void validate_labels(const std::vector<Tensor>& ys, const Step& s,
                              const std::vector<std::shared_ptr<Loss>>& losses,
                              const std::string& what) {
    for (size_t o = 0; o < ys.size(); ++o) {
      if (!dynamic_cast<const SparseCategoricalCrossentropy*>(losses[o].get())) continue;
      int64_t classes = s.predictions[o].shape().back();
      if (classes == kUnknownDim) continue;
      // Labels on a GPU (Dataset::prefetch_to_device) are read through a copy: a few bytes
      // a batch, so that a label out of range is still an error naming it.
      std::vector<double> labels = ys[o].to(Device::cpu()).to_vector<double>();
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
      const auto& a = call.outputs[0].impl();
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

  // The current values of a step's variables (with `mu` held), each where the steps run: a GPU
  // model's variables are moved to it on first use (as fit's steps leave them) and read there
  // in place; a host step reads a device variable through the host copy value() keeps.
  std::vector<Tensor> values_of(const Step& s) const {
    const Device on = step_device();
    std::vector<Tensor> out;
    out.reserve(s.vars.size());
    for (const Variable& v : s.vars) {
      if (on.type != DeviceType::kCpu && v.device().type == DeviceType::kCpu)
        keep_on(kiln::detail::VariableAccess::held(v), on);
      out.push_back(v.device() == on ? kiln::detail::VariableAccess::stored(v) : v.value());
    }
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
    if (distribute::current_collective() != nullptr) {
      throw Error(ErrorCode::kFailedPrecondition,
                  "fit: model '" + model +
                      "' is being trained from inside a replica of a distribution strategy (a "
                      "CollectiveScope is active on this thread, e.g. within strategy.run). To "
                      "train data-parallel, compile the model with {.strategy = ...} and call fit "
                      "outside the strategy's replicas");
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

}  // namespace kiln::nn
