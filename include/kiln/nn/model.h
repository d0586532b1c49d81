// Models: Sequential and functional, compiled with an optimizer, a loss and metrics, trained
// with fit. The whole train step (forward, loss, backward, optimizer update) is one graph.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/device.h"
#include "kiln/distribute/strategy.h"
#include "kiln/function.h"
#include "kiln/graph.h"
#include "kiln/nn/callbacks.h"
#include "kiln/nn/layer.h"
#include "kiln/nn/losses.h"
#include "kiln/nn/metrics.h"
#include "kiln/optim.h"
#include "kiln/ref.h"

namespace kiln::data {
class Dataset;
}  // namespace kiln::data

namespace kiln::nn {

class BatchSource;

// Set the fields with designated initializers in declaration order
// ({.epochs = 5, .batch_size = 64, .verbose = 0}), or in any order with the setters:
// FitOptions().set_verbose(0).set_epochs(5).
struct FitOptions {
  int epochs = 1;
  int64_t batch_size = 32;
  bool shuffle = true;
  uint64_t seed = 0;  // shuffling and dropout; same seed, same weights
  std::optional<std::pair<Tensor, Tensor>> validation_data;
  std::vector<CallbackRef> callbacks;
  int verbose = 1;  // 0 silent, 1 progress bar (one line per epoch when not a terminal), 2 line
  int initial_epoch = 0;

  FitOptions& set_epochs(int v) { return epochs = v, *this; }
  FitOptions& set_batch_size(int64_t v) { return batch_size = v, *this; }
  FitOptions& set_shuffle(bool v) { return shuffle = v, *this; }
  FitOptions& set_seed(uint64_t v) { return seed = v, *this; }
  FitOptions& set_validation_data(Tensor x, Tensor y) {
    return validation_data = std::make_pair(std::move(x), std::move(y)), *this;
  }
  FitOptions& set_callbacks(std::vector<CallbackRef> v) { return callbacks = std::move(v), *this; }
  FitOptions& add_callback(CallbackRef v) { return callbacks.push_back(std::move(v)), *this; }
  FitOptions& set_verbose(int v) { return verbose = v, *this; }
  FitOptions& set_initial_epoch(int v) { return initial_epoch = v, *this; }
};

// Settings of compile beyond the optimizer, losses and metrics: {.strategy = ...}.
struct CompileOptions {
  // Data-parallel training (kiln/distribute/strategy.h). The strategy is a compile option, not a
  // scope around model building (Keras' strategy.scope()) nor a fit option: the train step is
  // traced for it (each replica differentiates its part of the batch, then all_reduces inside
  // the compiled step sum the gradients, one per bucket of Strategy::bucket_bytes()), so a
  // model's compile decides how all its later fits
  // run. The model-building code does not change, nor do fit's arguments: batch_size is the
  // global batch. fit splits each global batch into consecutive parts, one per replica (sizes
  // differing by at most one row when it does not divide; a replica left without rows at a
  // short last batch contributes nothing); each replica runs forward and backward on its part;
  // the gradients (and the new values of non-trained variables such as a batch norm's moving
  // statistics) are averaged over the replicas weighted by their rows, so the result is the
  // global batch's mean as one replica would compute it but for float reassociation; every
  // replica then applies the same update to its own copy of the variables, which stay
  // bit-identical (replica_weights). The losses and metrics logged are the global batch's.
  // evaluate and predict split their batches across the local replicas too. Dropout draws
  // differ per replica. A strategy is used by one model's fit at a time. Null: one replica.
  Ref<distribute::Strategy> strategy;
  // Where fit, evaluate and predict run their compiled steps: the host (cpu:0), or a GPU
  // (Device::cuda(0)), where each step's fused loops and dots run as CUDA kernels and
  // cuBLASLt matmuls, its other ops on the host (compiler/executable.h's CompileOptions).
  // The model-building code and fit's arguments do not change. On a GPU the variables (weights,
  // optimizer slots) live there: fit's steps leave their new values there and evaluate and
  // predict read them in place, so a step copies its batch up and its losses and metrics down,
  // not the state; Variable::device() says where a value is and Variable::value() reads it
  // through a host copy (get_weights, callbacks and checkpoints work unchanged). Compiled again
  // for the host, the model reads them through copies and its steps bring them back to the
  // host. Checked here: a GPU this
  // machine lacks is kUnavailable or kInvalidArgument; a GPU with a strategy is
  // kUnimplemented (not built yet). Interpreted steps (set_execution_mode) run on the host.
  Device device = Device::cpu();
};

// compile's metrics, as Keras takes them: names for every output ({"accuracy"}), or names by
// output ({{"price", {"mse"}}, {"label", {"accuracy"}}}, Keras' metrics={"price": [...], ...}; an
// output not named gets none). A metric that does not fit an output is kInvalidArgument naming
// the output, the metric and the loss: "accuracy" where the loss is a regression loss
// (mean_squared_error, huber: there is no class to count; name binary_, categorical_ or
// sparse_categorical_accuracy when the targets are classes after all), or a categorical
// accuracy on an output of one unit. From a flat list on a model of several outputs, such a
// metric is left out for that output alone, with a warning (kiln::warn), and computed for the
// others.
class MetricNames {
 public:
  using ByOutput = std::map<std::string, std::vector<std::string>>;
  MetricNames() = default;
  // string_view, not string: {"out", {"mse"}} is then never taken for one string (from a range).
  MetricNames(std::initializer_list<std::string_view> names)
      : every_output_(names.begin(), names.end()) {}
  MetricNames(std::vector<std::string> names)  // NOLINT: implicit
      : every_output_(std::move(names)) {}
  MetricNames(std::initializer_list<ByOutput::value_type> by_output)
      : by_output_(by_output), per_output_(true) {}
  MetricNames(ByOutput by_output)  // NOLINT: implicit
      : by_output_(std::move(by_output)), per_output_(true) {}
  bool per_output() const { return per_output_; }
  const std::vector<std::string>& every_output() const { return every_output_; }
  const ByOutput& by_output() const { return by_output_; }
  bool operator==(const MetricNames&) const = default;

 private:
  std::vector<std::string> every_output_;
  ByOutput by_output_;
  bool per_output_ = false;
};

// Tensors by name, {{"a", xa}, {"b", xb}}: a model's inputs or targets (a class rather than a
// std::map so that a braced list of tensors {xa, xb} is never taken for one).
class NamedTensors {
 public:
  NamedTensors(std::initializer_list<std::pair<const std::string, Tensor>> init) : map_(init) {}
  NamedTensors(std::map<std::string, Tensor> map) : map_(std::move(map)) {}  // NOLINT: implicit
  const std::map<std::string, Tensor>& map() const { return map_; }

 private:
  std::map<std::string, Tensor> map_;
};

struct History {
  std::map<std::string, std::vector<double>> history;  // "loss", "accuracy", "val_loss", ...
  int epochs_run = 0;
};

// A symbolic input of a functional model: shape without the batch dimension.
Tensor Input(const Shape& shape, DType dtype = f32, const std::string& name = "input");

// Threads. A serving thread may call predict, evaluate (or operator() on a concrete batch),
// state(), save() and summary() while fit trains on another, as with Keras and PyTorch. Each such
// call reads the weights (save and state() also the optimizer's) as they are between two of fit's
// steps (one consistent set for the whole call, never a mix of two steps), and fit is not
// disturbed: its weights, losses, metrics and random numbers are bit-identical to those of a run
// alone. A read waits at most for the step in progress; fit takes one uncontended lock per step,
// and copies a weight instead of updating it in place only while a read still holds its previous
// value (under a MirroredStrategy, whose replica threads serve one run at a time, a step also
// waits for a predict or evaluate batch in progress). load_state from another thread lands
// between two steps. A second fit while one runs, compile() and Sequential::add() during fit
// throw kiln::Error. The rest (build, set_seed,
// set_execution_mode, resume_at, optimizer(), and the Variables of weights() or layers()) is for
// fit's own thread and its callbacks; from other threads read the weights through state() or
// predict.
//
// Several inputs and outputs (functional models, as Keras'): Model({in_a, in_b}, {out_1, out_2}).
// Inputs are named by their nn::Input, outputs by the layer that makes them (input_names(),
// output_names()). fit, evaluate and predict take one tensor per input (and per output) as
// lists in that order or as maps by name; a Dataset's elements hold the inputs, then the
// targets. compile takes one loss per output (or one for all), metrics for every output or by
// output (MetricNames) and optional loss_weights; fit minimises the weighted sum and logs it as
// "loss", each output's as "<output>_loss", and each metric of an output as "<output>_<metric>".
class Model {
 public:
  // Functional: outputs computed from inputs by calling layers on symbolic tensors.
  Model(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
        std::string name = "model");
  Model(const Tensor& input, const Tensor& output, std::string name = "model");
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  void compile(optim::OptimizerRef optimizer, LossRef loss, MetricNames metrics = {},
               CompileOptions options = {});
  // Per output: losses (one applies to every output), metrics (a list for every output, or
  // lists by output name: MetricNames) and the weights of the outputs' losses in the total
  // (default 1 each; finite and >= 0).
  void compile(optim::OptimizerRef optimizer, std::vector<LossRef> losses, MetricNames metrics,
               std::vector<double> loss_weights = {}, CompileOptions options = {});
  // What compile was given (for saving): null optimizer and no losses before compile.
  struct CompileConfig {
    std::shared_ptr<optim::Optimizer> optimizer;
    std::vector<std::shared_ptr<Loss>> losses;
    MetricNames metrics;
    std::vector<double> loss_weights;
  };
  CompileConfig compile_config() const;

  History fit(const Tensor& x, const Tensor& y, const FitOptions& options = {});
  History fit(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
              const FitOptions& options = {});
  History fit(const NamedTensors& x, const NamedTensors& y, const FitOptions& options = {});
  // Trains on a Dataset of batched (inputs..., targets...) elements; its epoch number
  // reshuffles it. options.batch_size and shuffle do not apply (the dataset batches and
  // shuffles).
  History fit(const data::Dataset& dataset, const FitOptions& options = {});
  // Loss and metrics over (x, y): {"loss": ..., "accuracy": ...}. fit and evaluate refuse
  // empty x and y (kInvalidArgument), as fit does an empty Dataset.
  std::map<std::string, double> evaluate(const Tensor& x, const Tensor& y, int64_t batch_size = 32,
                                         int verbose = 0);
  std::map<std::string, double> evaluate(const std::vector<Tensor>& x,
                                         const std::vector<Tensor>& y, int64_t batch_size = 32,
                                         int verbose = 0);
  std::map<std::string, double> evaluate(const NamedTensors& x, const NamedTensors& y,
                                         int64_t batch_size = 32, int verbose = 0);
  // One output: its predictions. Several: one tensor per output (by name for named inputs).
  Tensor predict(const Tensor& x, int64_t batch_size = 32);
  std::vector<Tensor> predict(const std::vector<Tensor>& x, int64_t batch_size = 32);
  std::map<std::string, Tensor> predict(const NamedTensors& x, int64_t batch_size = 32);
  // How fit, evaluate and predict run their step graphs: compiled (one program per input
  // signature, cached; the default unless KILN_INTERPRET=1, see kiln/function.h) or with the
  // reference interpreter. Like Keras' jit_compile.
  void set_execution_mode(ExecutionMode mode);
  ExecutionMode execution_mode() const;
  // Under a mixed dtype policy the model's outputs are cast to f32 by default, so predict,
  // operator() and call return f32. With true they stay in the dtype the output layers compute
  // in (bf16 or f16: half the memory and bandwidth for inference, or the input of another
  // low-precision model), as Keras' outputs do; the losses and metrics still read them cast to
  // f32. Saved models keep the setting. Not while fit runs (kFailedPrecondition).
  void set_outputs_in_compute_dtype(bool keep);
  bool outputs_in_compute_dtype() const;
  // Step programs compiled so far (a new batch size compiles once more) and runs that reused one.
  struct CompileStats {
    int64_t compiles = 0;
    int64_t cache_hits = 0;
  };
  CompileStats compile_stats() const;
  // Inference on a concrete batch, or recording on a symbolic one.
  Tensor operator()(const Tensor& x);
  Tensor call(const Tensor& x, CallContext& ctx);
  std::vector<Tensor> call(const std::vector<Tensor>& xs, CallContext& ctx);

  // Builds the weights for inputs of this shape (without the batch dimension), as the first
  // fit/predict would. Sequential models need it (or a first call) before summary(); a
  // functional model knows its shapes from its Input.
  void build(const Shape& input_shape, DType dtype = f32);
  bool built() const;
  // Seeds weight initialisation of layers not yet built (default 0): same seed, same weights.
  void set_seed(uint64_t seed);

  // The Keras-style table: layer (type), output shape, parameter count; totals. Columns widen
  // to fit long names.
  std::string summary() const;
  const std::string& name() const { return name_; }
  std::vector<Variable> weights() const;
  std::vector<Variable> trainable_weights() const;
  std::vector<LayerPtr> layers() const;
  optim::Optimizer& optimizer();
  bool stop_training = false;

  // ---- state, for checkpoints and export -------------------------------------------------
  // Every variable of the model and of its optimizer by a stable name ("dense/kernel",
  // "dense/kernel/Adam/m", ...) plus "optimizer/iterations" (i64 scalar) and the optimizer's
  // own variables ("optimizer/loss_scale", "optimizer/good_steps" of a LossScaleOptimizer). Complete once fit
  // has traced its step (callbacks' on_train_begin and later).
  std::map<std::string, Tensor> state() const;
  // Assigns values saved by state(); every name must exist with the same dtype and shape,
  // except the "optimizer/" ones, which load where this model's optimizer has them (so a state
  // saved with loss scaling loads without, and the other way round).
  void load_state(const std::map<std::string, Tensor>& state);
  // The values of weights() as replica `replica` of the compile strategy holds them after fit
  // (replica 0 holds the model's own; the others their copies, which fit makes from replica 0's
  // at its start and each replica updates itself). Without a strategy, or before fit, every
  // replica reads the model's own.
  std::vector<Tensor> replica_weights(int replica) const;
  // The gradient of the loss for each trainable variable at the last training batch, as the
  // optimizer's update got it (after clipping; divided by the loss scale under a
  // LossScaleOptimizer). Empty before the first batch. Host tensors (a GPU step's copied down).
  std::vector<std::pair<Variable, Tensor>> last_gradients() const;
  // Where fit is: the epoch and the batch within it about to run (or last run).
  int current_epoch() const;
  int64_t current_batch() const;
  // Makes the running fit continue from (epoch, batch) — for BackupAndRestore, called from
  // on_train_begin. Batches before `batch` in that epoch are skipped, the shuffling order
  // and dropout seeds stay those of an uninterrupted run, so results are bit-identical.
  void resume_at(int epoch, int64_t batch);

  // The inference graph (training=false): input placeholder, output, and the placeholder
  // each variable is fed through. For export (kiln::io::save_model).
  struct InferenceGraph {
    Graph graph;
    Tensor input, output;  // the first ones
    std::vector<std::pair<Variable, Tensor>> variables;
    std::vector<Tensor> inputs, outputs;  // all of them, with their signature names:
    std::vector<std::string> input_names, output_names;  // "x" / "output_0" for one
  };
  InferenceGraph inference_graph(const Shape& input_shape, DType dtype = f32);
  // For the input types the model is built for (every input and output).
  InferenceGraph inference_graph();
  // ---- whole-model save and load (kiln/nn/saving.h) ----------------------------------------
  // Saves architecture, weights, optimizer state and compile configuration to one file;
  // nn::load_model(path) gives the model back. See kiln/nn/saving.h.
  void save(const std::string& path) const;
  // What the model is made of, for saving. Functional: each call's layer and inputs, values
  // named as (call index, 0) for a call's output and (-1, i) for input i.
  struct Architecture {
    bool functional = false;
    std::vector<LayerPtr> layers;  // Sequential: in order; functional: one per call
    std::vector<std::string> input_names;
    std::vector<TensorType> input_types;  // empty before a Sequential model is built
    struct Call {
      size_t layer = 0;  // into layers
      std::vector<std::pair<int, int>> inputs;
    };
    std::vector<Call> calls;
    std::vector<std::pair<int, int>> outputs;
    uint64_t seed = 0;
    bool outputs_in_compute_dtype = false;
  };
  Architecture architecture() const;

  // The input type the model was built for ([?, features...]); nullopt before build, the first
  // fit or predict (a functional model knows it from its Input).
  std::optional<TensorType> input_type() const;
  std::vector<TensorType> input_types() const;  // every input's; empty before build
  // Sequential: {"x"} and its last layer's name.
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;

 protected:
  explicit Model(std::string name);
  History fit_batches(BatchSource& source, const FitOptions& options,
                      bool validate_each_batch);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string name_;
};

class Sequential : public Model {
 public:
  explicit Sequential(std::vector<LayerRef> layers = {}, std::string name = "sequential");
  void add(LayerRef layer);
};

}  // namespace kiln::nn
