// Model's step graphs: tracing forward, loss, metrics, gradients and the optimizer's update
// into one graph, and running one training step on the variables (of one replica, or of every
// local replica of a distribution strategy).
#include "kiln/autodiff.h"
#include "src/api/nn/model_impl.h"

namespace kiln::nn {
namespace {

bool is_float(DType d) { return d == f32 || d == f64 || d == f16 || d == bf16; }

}  // namespace

Step Model::Impl::trace(const std::vector<TensorType>& x_types,
                        const std::optional<std::vector<TensorType>>& y_types, bool training) {
  Step s;
  // A training step on a GPU returns its values there: the variables' new values stay on the
  // device (and are read there by the next step), as do the gradients; fit reads the losses
  // and metric statistics through copies.
  s.programs = std::make_shared<compiler::CompileCache>(
      /*capacity=*/4,
      compiler::CompileOptions{.device = device,
                               .outputs_on_device = training && device.type != DeviceType::kCpu});
  Graph& g = s.graph;
  auto guard = g.as_default();
  for (size_t i = 0; i < x_types.size(); ++i) {
    // Dimensions the model's Input leaves unknown (a sequence length) stay unknown, so one
    // trace serves every size of them, as the batch dimension always does.
    Shape shape = with_unknown_batch(x_types[i].shape);
    if (i < input_specs.size() && input_specs[i].shape.size() == shape.size()) {
      for (size_t d = 1; d < shape.size(); ++d)
        if (input_specs[i].shape[d] == kUnknownDim) shape[d] = kUnknownDim;
    }
    s.xs.push_back(
        g.placeholder(x_types[i].dtype, shape, x_types.size() > 1 ? input_names[i] : "x"));
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
    Tensor l = (*losses[o])(s.ys[o], f32_output(s.predictions[o]));
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
    std::vector<Tensor> stats = metrics[k]->batch_stats(s.ys[o], f32_output(s.predictions[o]));
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
  // A LossScaleOptimizer differentiates the scaled loss; the loss fetched stays unscaled.
  std::vector<Tensor> grads = gradients(optimizer->scale_loss(loss_value, resolve), wrt);
  std::vector<std::pair<Variable, Tensor>> updates = ctx.updates();
  Tensor total_rows;
  if (strategy) {
    // The global batch's mean: each replica's losses, gradients and float updates (its means
    // over its rows) weighted by its rows, summed over the replicas, divided by their rows; the
    // metric statistics (sums) summed, those of a replica without rows dropped.
    s.replica_rows = g.placeholder(f32, {}, "replica_rows");
    s.replica_has_rows = g.placeholder(f32, {}, "replica_has_rows");
    auto weighted = [&](const Tensor& v) {
      return v * (v.dtype() == f32 ? s.replica_rows : convert(s.replica_rows, v.dtype()));
    };
    std::vector<Tensor> local = {s.replica_rows};
    for (size_t k = 0; k < s.num_losses; ++k) local.push_back(weighted(s.fetches[k]));
    for (size_t k = 0; k < s.num_metric_stats; ++k) {
      const Tensor& stat = s.fetches[s.num_losses + k];
      local.push_back(stat * (stat.dtype() == f32 ? s.replica_has_rows
                                                  : convert(s.replica_has_rows, stat.dtype())));
    }
    for (const Tensor& gr : grads) local.push_back(weighted(gr));
    std::vector<size_t> averaged_updates;
    for (size_t k = 0; k < updates.size(); ++k) {
      if (!is_float(updates[k].second.dtype())) continue;  // counters: the same on every replica
      averaged_updates.push_back(k);
      local.push_back(weighted(updates[k].second));
    }
    // In buckets, each one all_reduce (as one per step would, but started by parts).
    std::vector<Tensor> global = distribute::all_reduce_in_buckets(
        local, strategy->bucket_bytes(), strategy->overlaps_communication());
    total_rows = global[0];
    auto mean = [&](const Tensor& sum) {
      return sum / (sum.dtype() == f32 ? total_rows : convert(total_rows, sum.dtype()));
    };
    size_t at = 1;
    for (size_t k = 0; k < s.num_losses; ++k) s.fetches[k] = mean(global[at++]);
    for (size_t k = 0; k < s.num_metric_stats; ++k) s.fetches[s.num_losses + k] = global[at++];
    for (Tensor& gr : grads) gr = mean(global[at++]);
    for (size_t k : averaged_updates) updates[k].second = mean(global[at++]);
  }
  {
    auto scope = g.name_scope(optimizer->name());
    optim::StepGradients finished = optimizer->finish_gradients(grads, resolve);
    grads = finished.grads;
    // A skipped step (loss scaling: a gradient was not finite) keeps every old value.
    auto kept = [&](const Tensor& updated, const Tensor& old) {
      if (!finished.apply_if.defined()) return updated;
      return where(finished.apply_if, convert(updated, old.dtype()), old);
    };
    for (size_t i = 0; i < trainable.size(); ++i) {
      std::vector<Variable>& slot_vars = optimizer->slots(trainable[i]);
      std::vector<Tensor> slot_inputs;
      for (const Variable& sv : slot_vars) slot_inputs.push_back(resolve(sv));
      auto [new_value, new_slots] =
          optimizer->apply(wrt[i], grads[i], slot_inputs, s.lr, s.iteration);
      s.assigned.push_back(trainable[i]);
      s.fetches.push_back(kept(new_value, wrt[i]));
      for (size_t k = 0; k < slot_vars.size(); ++k) {
        s.assigned.push_back(slot_vars[k]);
        s.fetches.push_back(kept(new_slots[k], slot_inputs[k]));
      }
    }
    for (const auto& [var, value] : finished.state_updates) {
      resolve(var);  // fed, so that the update may reuse its buffer
      s.assigned.push_back(var);
      s.fetches.push_back(value);
    }
  }
  for (const auto& [var, value] : updates) {
    s.assigned.push_back(var);
    s.fetches.push_back(value);
  }
  // The gradients are computed for the update anyway; returning them costs no extra work.
  for (size_t i = 0; i < trainable.size(); ++i) {
    s.gradient_of.push_back(trainable[i]);
    s.fetches.push_back(grads[i]);
  }
  if (total_rows.defined()) {
    s.total_rows_fetch = static_cast<int>(s.fetches.size());
    s.fetches.push_back(total_rows);
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

FeedList Model::Impl::batch_feeds(const Step& s, const std::vector<Tensor>& xs,
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

std::vector<Tensor*> Model::Impl::held_of(const Step& s) {
  std::vector<Tensor*> held;
  held.reserve(s.vars.size());
  for (const Variable& v : s.vars) held.push_back(&kiln::detail::VariableAccess::held(v));
  return held;
}

std::vector<Tensor> Model::Impl::run_training(const Step& s, FeedList feeds,
                                              const std::vector<Tensor*>& held) {
  const bool interpreted = this->interpreted();
  const Device on = step_device();
  const size_t first_var = feeds.size();
  // Copies first, so that a failed one leaves every variable as it was: a step on a GPU moves
  // the host variables it reads there (once: they stay, read in place by the next steps, the
  // ones it never assigns too); a variable on another device than the step's (a model trained
  // on a GPU, then run on the host) is read through a host copy.
  std::vector<Tensor> copies(s.vars.size());
  for (size_t i = 0; i < s.vars.size(); ++i) {
    keep_on(*held[i], on);
    if (kiln::detail::needs_host_copy(*held[i], on))
      copies[i] = held[i]->to(Device::cpu());
  }
  for (size_t i = 0; i < s.vars.size(); ++i) {
    if (copies[i].defined()) {
      feeds.emplace_back(s.var_inputs[i], std::move(copies[i]));
    } else if (!interpreted && !s.donated_fetch.empty() && s.donated_fetch[i] >= 0) {
      // Lent to the run (moved out), which may then update its buffer in place.
      feeds.emplace_back(s.var_inputs[i], std::move(*held[i]));
    } else {
      feeds.push_back({s.var_inputs[i], *held[i]});
    }
  }
  if (interpreted) return s.graph.run(feeds, s.fetches);
  std::vector<Tensor> outs;
  try {
    auto program = s.programs->get(s.graph, s.fetches, feeds, s.donations);
    outs = program->run_donating(std::move(feeds));
  } catch (...) {
    for (size_t i = 0; i < s.vars.size(); ++i)
      if (!held[i]->defined()) *held[i] = std::move(feeds[first_var + i].second);
    throw;
  }
  // The same Tensor when the buffer was updated in place, else a fresh one.
  for (size_t i = 0; i < s.vars.size(); ++i)
    if (!s.donated_fetch.empty() && s.donated_fetch[i] >= 0) *held[i] = outs[s.donated_fetch[i]];
  return outs;
}

void Model::Impl::start_replicas(const Step& s) {
  replica_values.assign(strategy->num_local_replicas() - 1, {});
  for (auto& values : replica_values) {
    for (const Variable& v : s.vars) values[v.id()] = v.value();
    for (const Variable& v : s.assigned) values[v.id()] = v.value();
  }
}

std::vector<std::pair<std::string, std::string>> Model::Impl::worker_facts(
    const Step& s, const FitOptions& options,
    const std::vector<std::pair<std::string, std::string>>& batches) const {
  std::string layer_types, policies, variables, inputs;
  bool one_policy = true;
  for (const LayerPtr& l : layers) {
    layer_types += (layer_types.empty() ? "" : " ") + l->type_name();
    policies += (policies.empty() ? "" : " ") + l->dtype_policy().name();
    one_policy = one_policy && l->dtype_policy() == layers.front()->dtype_policy();
  }
  // "mixed_bfloat16" when every layer has it, else each layer's in order.
  if (one_policy && !layers.empty()) policies = layers.front()->dtype_policy().name();
  for (const Variable& v : s.vars) {
    variables +=
        (variables.empty() ? "" : ", ") + v.name() + " " + TensorType{v.dtype(), v.shape()}.str();
  }
  for (const TensorType& t : input_specs) inputs += (inputs.empty() ? "" : ", ") + t.str();
  std::vector<std::pair<std::string, std::string>> facts = {
      {"world size", std::to_string(strategy->num_replicas_in_sync())},
      {"layers", layer_types},
      {"dtype policy", policies},
      {"variables", variables},
      {"inputs", inputs},
      {"optimizer",
       optimizer->name() + " (learning rate " + std::to_string(optimizer->learning_rate()) + ")"},
      {"gradient bucket bytes", std::to_string(strategy->bucket_bytes())},
      {"epochs", std::to_string(options.epochs)},
      {"shuffle and seed", std::string(options.shuffle ? "shuffled" : "in order") + ", seed " +
                               std::to_string(options.seed)}};
  facts.insert(facts.end(), batches.begin(), batches.end());
  return facts;
}

void Model::Impl::sync_from_chief(const Step& s, int& epoch, int64_t& batch) {
  if (strategy->num_replicas_in_sync() == strategy->num_local_replicas()) return;  // one process
  std::vector<Variable> vars = s.vars;
  for (const Variable& v : s.assigned)
    if (std::find(vars.begin(), vars.end(), v) == vars.end()) vars.push_back(v);
  std::vector<Tensor> values;
  for (const Variable& v : vars) values.push_back(v.value());
  values.push_back(Tensor::from_vector<int64_t>({epoch, batch, optimizer->iterations()}, {3}));
  strategy->broadcast_from_chief(values);
  for (size_t i = 0; i < vars.size(); ++i) {
    Variable target = vars[i];
    target.assign(values[i]);
  }
  auto position = values.back().data<int64_t>();
  epoch = static_cast<int>(position[0]);
  batch = position[1];
  optimizer->set_iterations(position[2]);
}

namespace {

// Replica r of n gets rows [r*rows/n, (r+1)*rows/n): consecutive, sizes differing by one at most.
std::pair<int64_t, int64_t> replica_part(int64_t rows, int r, int n) {
  return {rows * r / n, rows * (r + 1) / n};
}

}  // namespace

std::vector<Tensor> Model::Impl::run_replicated_training(const Step& s,
                                                         const std::vector<Tensor>& xs,
                                                         const std::vector<Tensor>& ys,
                                                         uint64_t seed, double lr,
                                                         double iteration) {
  distribute::Strategy& strat = *strategy;
  // Every worker holds the global batch and takes its replicas' parts of it; or it holds its own
  // part (worker_batches), which its local replicas divide.
  const int n = worker_batches ? strat.num_local_replicas() : strat.num_replicas_in_sync();
  const int first = worker_batches ? 0 : strat.first_local_replica();
  const int64_t rows = xs[0].dim(0);
  std::vector<Tensor> replica0;
  strat.run_local([&](int r) {
    const int replica = strat.first_local_replica() + r;
    auto [begin, end] = replica_part(rows, first + r, n);
    const bool has_rows = end > begin;
    // Without rows of its own (a last batch shorter than the replicas), a replica still takes
    // part in the step's all_reduce: it runs on a stand-in row, weighted by zero.
    if (!has_rows) begin = 0, end = 1;
    // Replica 0 draws as one process would; the others draw dropout masks of their own.
    const uint64_t replica_seed = replica == 0 ? seed : mix_seed(seed, 0x5EEDull << 32 | replica);
    FeedList feeds = batch_feeds(s, take_rows(xs, {}, begin, end), take_rows(ys, {}, begin, end),
                                 replica_seed, lr, iteration);
    feeds.push_back({s.replica_rows, Tensor::scalar<float>(has_rows ? end - begin : 0)});
    feeds.push_back({s.replica_has_rows, Tensor::scalar<float>(has_rows ? 1 : 0)});
    if (r == 0) {
      replica0 = run_training(s, std::move(feeds), held_of(s));
      return;
    }
    std::map<const void*, Tensor>& mine = replica_values[r - 1];
    std::vector<Tensor*> held;
    for (const Variable& v : s.vars) held.push_back(&mine.at(v.id()));
    std::vector<Tensor> outs = run_training(s, std::move(feeds), held);
    size_t at = s.num_losses + s.num_metric_stats;
    for (const Variable& v : s.assigned) mine[v.id()] = outs[at++];
  });
  return replica0;
}

std::vector<std::pair<int64_t, std::vector<Tensor>>> Model::Impl::run_split(
    int64_t rows,
    const std::function<std::vector<Tensor>(int64_t begin, int64_t end)>& part) const {
  if (!strategy) return {{rows, part(0, rows)}};
  const int n = strategy->num_local_replicas();
  std::vector<std::pair<int64_t, std::vector<Tensor>>> outs(n);
  strategy->run_local([&](int r) {
    auto [begin, end] = replica_part(rows, r, n);
    if (end > begin) outs[r] = {end - begin, part(begin, end)};
  });
  std::vector<std::pair<int64_t, std::vector<Tensor>>> nonempty;
  for (auto& o : outs)
    if (o.first > 0) nonempty.push_back(std::move(o));
  return nonempty;
}

void Model::Impl::update_metrics(const Step& s, const std::vector<Tensor>& outs,
                                 const std::vector<std::unique_ptr<Metric>>& metrics) {
  size_t at = s.num_losses;
  for (size_t m = 0; m < metrics.size(); ++m) {
    std::vector<Tensor> stats(outs.begin() + at, outs.begin() + at + s.metric_stat_counts[m]);
    metrics[m]->update(stats);
    at += s.metric_stat_counts[m];
  }
}

}  // namespace kiln::nn
