// LossScaleOptimizer: dynamic or fixed loss scaling around another optimizer, decided inside
// the step graph (is_finite, all, where) so that a compiled step never returns to the host.
#include <cmath>
#include <string>

#include "kiln/graph.h"
#include "kiln/ops.h"
#include "kiln/optim.h"
#include "src/api/optim/hyper_params.h"

namespace kiln::optim {
namespace {

std::shared_ptr<Optimizer> checked_inner(const OptimizerRef& inner) {
  if (!inner) {
    throw Error(ErrorCode::kInvalidArgument, "LossScaleOptimizer: the wrapped optimizer is null");
  }
  if (inner->name() == "LossScaleOptimizer") {
    throw Error(ErrorCode::kInvalidArgument,
                "LossScaleOptimizer: the wrapped optimizer is a LossScaleOptimizer already");
  }
  return inner.get();
}

Variable state_variable(Tensor value, const std::string& name) {
  Graph::DefaultGuard no_graph{Graph(std::shared_ptr<detail::GraphImpl>())};  // concrete
  return Variable(std::move(value), name, /*trainable=*/false);
}

}  // namespace

LossScaleOptimizer::LossScaleOptimizer(OptimizerRef inner, LossScaleOptions options)
    : Optimizer(checked_inner(inner)->schedule()), inner_(inner.get()), options_(options) {
  if (!(std::isfinite(options.initial_scale) && options.initial_scale >= 1)) {
    invalid_hyper("LossScaleOptimizer", "initial_scale", "finite and >= 1", options.initial_scale);
  }
  if (options.growth_steps <= 0) {
    invalid_hyper("LossScaleOptimizer", "growth_steps", "> 0",
                  static_cast<double>(options.growth_steps));
  }
  // The wrapped optimizer's bookkeeping carries over: the step feeds this one's.
  override_lr_ = inner_->override_lr_;
  set_iterations(inner_->iterations());
  clip_global_norm(inner_->global_clipnorm());
  scale_ = state_variable(Tensor::scalar<float>(static_cast<float>(options.initial_scale)),
                          "optimizer/loss_scale");
  good_steps_ = state_variable(Tensor::scalar<int64_t>(0), "optimizer/good_steps");
}

Attrs LossScaleOptimizer::hyper_parameters() const {
  Attrs c = {{"dynamic", options_.dynamic},
             {"initial_scale", options_.initial_scale},
             {"growth_steps", options_.growth_steps},
             {"inner_optimizer", inner_->name()}};
  const Attrs inner = inner_->config();
  for (const auto& [key, value] : inner.values()) c.set("inner_optimizer." + key, value);
  return c;
}

std::pair<Tensor, std::vector<Tensor>> LossScaleOptimizer::apply(const Tensor& var,
                                                                 const Tensor& grad,
                                                                 const std::vector<Tensor>& slots,
                                                                 const Tensor& lr,
                                                                 const Tensor& step) const {
  return inner_->apply(var, grad, slots, lr, step);
}

Tensor LossScaleOptimizer::scale_loss(const Tensor& loss, const ReadVariable& read) const {
  return loss * convert(read(scale_), loss.dtype());
}

StepGradients LossScaleOptimizer::finish_gradients(const std::vector<Tensor>& grads,
                                                   const ReadVariable& read) const {
  const Tensor scale = read(scale_);
  std::vector<Tensor> unscaled;
  Tensor finite;
  for (const Tensor& g : grads) {
    if (!g.defined()) {
      unscaled.push_back(g);
      continue;
    }
    Tensor u = g / convert(scale, g.dtype());
    Tensor ok = all(is_finite(u));
    finite = finite.defined() ? logical_and(finite, ok) : ok;
    unscaled.push_back(u);
  }
  StepGradients out{clip(unscaled), {}, {}};
  if (!options_.dynamic || !finite.defined()) return out;
  // TensorFlow's update: a finite step counts; growth_steps of them in a row double the scale
  // (kept when doubling overflows); a non-finite one halves it (not below 1) and resets.
  const Tensor good = read(good_steps_) + Tensor::scalar<int64_t>(1);
  const Tensor grow = greater_equal(good, Tensor::scalar<int64_t>(options_.growth_steps));
  const Tensor doubled = scale * Tensor::scalar<float>(2);
  const Tensor grown = where(grow, where(is_finite(doubled), doubled, scale), scale);
  const Tensor halved = maximum(scale * Tensor::scalar<float>(0.5f), Tensor::scalar<float>(1));
  const Tensor zero = Tensor::scalar<int64_t>(0);
  out.apply_if = finite;
  out.state_updates = {{scale_, where(finite, grown, halved)},
                       {good_steps_, where(finite, where(grow, zero, good), zero)}};
  return out;
}

double LossScaleOptimizer::loss_scale() const { return scale_.value().item<double>(); }
int64_t LossScaleOptimizer::good_steps() const { return good_steps_.value().item<int64_t>(); }

}  // namespace kiln::optim
