// Model's step graphs: tracing forward, loss, metrics, gradients and the optimizer's update
// into one graph, and running one training step on the variables.
#include "kiln/autodiff.h"
#include "src/api/nn/model_impl.h"

namespace kiln::nn {

Step Model::Impl::trace(const std::vector<TensorType>& x_types,
                        const std::optional<std::vector<TensorType>>& y_types, bool training) {
  Step s;
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
    s.xs.push_back(g.placeholder(x_types[i].dtype, shape,
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

std::vector<Tensor> Model::Impl::run_training(const Step& s, FeedList feeds) {
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
