// Model's loops: where fit's batches come from (tensors or a Dataset), fit, evaluate and
// predict.
#include <numeric>
#include <random>
#include <tuple>

#include "kiln/data/dataset.h"
#include "kiln/nn/checkpoint_callbacks.h"
#include "kiln/nn/tensorboard.h"
#include "src/api/nn/model_impl.h"
#include "src/api/nn/progress.h"

namespace kiln::nn {

// Where fit's batches come from: slices of in-memory tensors or a Dataset's elements.
class BatchSource {
 public:
  using Batch = std::pair<std::vector<Tensor>, std::vector<Tensor>>;  // inputs, targets
  virtual ~BatchSource() = default;
  virtual int64_t steps() const = 0;  // per epoch; -1 when unknown
  // What the workers of a multi-worker strategy must agree on about what they feed a step:
  // its global batch, the steps per epoch and how the data is divided between them.
  virtual std::vector<std::pair<std::string, std::string>> worker_facts() const = 0;
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
  std::vector<std::pair<std::string, std::string>> worker_facts() const override {
    return {{"global batch", std::to_string(batch_)},
            {"steps per epoch", std::to_string(steps())},
            {"data divided", "by element (each worker takes its part of every batch)"}};
  }
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
  // `global_batch` and `divided`: the rows of a step and the dataset's auto-shard policy, for
  // worker_facts.
  DatasetSource(data::Dataset ds, size_t inputs, size_t outputs, std::string global_batch,
                std::string divided)
      : ds_(std::move(ds)),
        inputs_(inputs),
        outputs_(outputs),
        global_batch_(std::move(global_batch)),
        divided_(std::move(divided)) {}
  int64_t steps() const override {
    int64_t c = ds_.cardinality();
    return c >= 0 ? c : -1;
  }
  std::vector<std::pair<std::string, std::string>> worker_facts() const override {
    return {{"global batch", global_batch_},
            {"steps per epoch", steps() >= 0 ? std::to_string(steps()) : "unknown"},
            {"data divided", divided_}};
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
  std::string global_batch_, divided_;
  data::Iterator it_;
};

// The rows of a dataset element's first component: the batch a step takes from it.
std::string rows_of(const std::optional<data::Element>& e) {
  if (!e || e->empty() || (*e)[0].rank() == 0) return "none (an empty or unbatched dataset)";
  return std::to_string((*e)[0].dim(0));
}

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
  impl_->worker_batches = false;  // every worker takes its part of each global batch
  TensorSource source(xs, ys, options.batch_size, options.shuffle, options.seed);
  return fit_batches(source, options, /*validate_each_batch=*/false);
}

History Model::fit(const data::Dataset& whole, const FitOptions& options) {
  Impl::Training training(*impl_, name_);
  // Under a strategy of several worker processes each trains on its part of the dataset, as
  // the dataset's auto-shard policy divides it: by file (or not at all, OFF), each worker's
  // batches are its own part of the step; by element, every worker reads the global batches and
  // the step takes its part of each (a part that may be empty at a short last batch).
  data::Dataset dataset = whole;
  impl_->worker_batches = false;
  // What the workers must agree on: how the dataset is divided and the global batch, the rows
  // of the whole dataset's first element (so a worker batched or cut differently is refused);
  // under OFF each worker batches its own data, which fit cannot compare.
  std::string global_batch = "one process's", divided = "not divided (one process)";
  bool read_whole = false;
  if (const distribute::Strategy* s = impl_->strategy.get()) {
    const int local = s->num_local_replicas(), workers = s->num_replicas_in_sync() / local;
    if (workers > 1) {
      data::WorkerShard shard = whole.shard_for_worker(workers, s->first_local_replica() / local);
      divided = std::string("auto-shard policy ") + data::auto_shard_policy_name(shard.policy);
      if (shard.policy == data::AutoShardPolicy::kOff) global_batch = "each worker's own (OFF)";
      read_whole = shard.policy != data::AutoShardPolicy::kOff;
      if (shard.policy != data::AutoShardPolicy::kData) {
        dataset = std::move(shard.dataset);
        impl_->worker_batches = true;
      }
    }
  }
  bool traced;
  {
    std::lock_guard lock(impl_->mu);
    traced = impl_->train_step != nullptr;
  }
  const size_t inputs = impl_->num_inputs(), outputs = impl_->num_outputs();
  // Read outside the lock: a dataset's first element may take a while (files, maps).
  std::optional<data::Element> first;
  if (!traced) first = dataset.begin_epoch(0).next();
  if (read_whole) {
    global_batch = rows_of(!traced && !impl_->worker_batches ? first : whole.begin_epoch(0).next());
  }
  if (!traced) {
    if (!first) throw Error(ErrorCode::kInvalidArgument, "fit: the dataset is empty");
    auto [xs, ys] = split_element(*first, inputs, outputs);
    std::lock_guard lock(impl_->mu);
    impl_->check_input(xs, "fit");
    impl_->seed = impl_->seed ? impl_->seed : options.seed;
    impl_->train_step = std::make_shared<const Step>(
        impl_->trace(types_of(xs), types_of(ys), /*training=*/true));
  }
  DatasetSource source(dataset, inputs, outputs, global_batch, divided);
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
  distribute::Strategy* strategy = impl_->strategy.get();
  const bool chief = !strategy || strategy->is_chief();
  if (strategy) {
    // Before any callback: a worker started differently fails here, as every other does.
    std::lock_guard lock(impl_->mu);
    strategy->check_consistent(impl_->worker_facts(step, options, source.worker_facts()));
  }
  std::vector<Callback*> callbacks;
  for (const auto& c : options.callbacks) {
    // Only the chief writes files: checkpoints, backups (the others get the chief's restored
    // state below) and TensorBoard logs.
    Callback* callback = c.get().get();
    if (!chief && (dynamic_cast<ModelCheckpoint*>(callback) ||
                   dynamic_cast<BackupAndRestore*>(callback) ||
                   dynamic_cast<TensorBoard*>(callback))) {
      continue;
    }
    c->set_model(this);
    callbacks.push_back(callback);
  }
  ProgressBar progress(chief ? options.verbose : 0, source.steps());
  History history;
  stop_training = false;
  Logs logs;
  impl_->resume.reset();
  for (Callback* c : callbacks) c->on_train_begin(logs);
  int first_epoch = options.initial_epoch;
  int64_t first_batch = 0;
  if (impl_->resume) std::tie(first_epoch, first_batch) = *impl_->resume;
  if (strategy) {
    // Every replica starts from the chief's variables (restored by its callbacks, if any) and
    // position; the local replicas from replica 0's.
    std::lock_guard lock(impl_->mu);
    impl_->sync_from_chief(step, first_epoch, first_batch);
    impl_->start_replicas(step);
  }
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
      const uint64_t seed = mix_seed(options.seed, it);
      std::vector<Tensor> outs;
      {
        // The one lock of a step: evaluate and predict take their weights before or after it.
        std::lock_guard lock(impl_->mu);
        if (impl_->strategy) {
          outs = impl_->run_replicated_training(step, xb, yb, seed, opt.learning_rate(),
                                                static_cast<double>(it + 1));
        } else {
          FeedList feeds = Impl::batch_feeds(step, xb, yb, seed, opt.learning_rate(),
                                             static_cast<double>(it + 1));
          outs = impl_->run_training(step, std::move(feeds), Impl::held_of(step));
        }
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
      // A step on a GPU leaves its values there: the losses and metric statistics (scalars)
      // are read through copies. (Packing them into one vector to copy once added more loops,
      // one per scalar's reshape, than it saved copies.)
      for (size_t k = 0; k < step.num_losses + step.num_metric_stats; ++k)
        outs[k] = kiln::detail::readable_on(outs[k], Device::cpu());
      double batch_loss = outs[0].item<double>();
      // Under a strategy the losses are the global batch's (over every worker's rows).
      const int64_t rows = step.total_rows_fetch >= 0
                               ? static_cast<int64_t>(outs[step.total_rows_fetch].item<double>())
                               : xb[0].dim(0);
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
    weights = impl_->values_of(*step);
    interpreted = impl_->interpreted();
  }
  Impl::Snapshot snapshot{*impl_, step, std::move(weights), interpreted};
  Impl::validate_labels(ys, *step, losses, "evaluate");
  std::vector<double> loss_sums(step->num_losses, 0.0);
  const int64_t n = xs[0].dim(0);
  if (!validating_in_fit)
    impl_->warn_about_setup(take_rows(ys, {}, 0, std::min(n, batch_size)), name_, "evaluate");
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    const int64_t end = std::min(n, begin + batch_size);
    const std::vector<Tensor> xb = take_rows(xs, {}, begin, end);
    const std::vector<Tensor> yb = take_rows(ys, {}, begin, end);
    // Under a strategy each local replica evaluates its part of the batch.
    auto parts = impl_->run_split(end - begin, [&](int64_t b, int64_t e) {
      if (b == 0 && e == end - begin) return snapshot.run(xb, yb);
      return snapshot.run(take_rows(xb, {}, b, e), take_rows(yb, {}, b, e));
    });
    for (const auto& [rows, outs] : parts) {
      for (size_t k = 0; k < step->num_losses; ++k) loss_sums[k] += outs[k].item<double>() * rows;
      Impl::update_metrics(*step, outs, metrics);
    }
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
    weights = impl_->values_of(*step);
    interpreted = impl_->interpreted();
  }
  Impl::Snapshot snapshot{*impl_, step, std::move(weights), interpreted};
  const int64_t n = xs[0].dim(0);
  const size_t outputs = step->predictions.size();
  std::vector<std::vector<Tensor>> parts(outputs);
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    const int64_t end = std::min(n, begin + batch_size);
    const std::vector<Tensor> xb = take_rows(xs, {}, begin, end);
    auto replica_parts = impl_->run_split(
        end - begin, [&](int64_t b, int64_t e) {
          return snapshot.run(b == 0 && e == end - begin ? xb : take_rows(xb, {}, b, e), {});
        });
    for (const auto& [rows, outs] : replica_parts)
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
