// Optimizers: the shared bookkeeping (learning rate, iterations, global-norm clipping, slots for
// eager loops) and the updates of SGD, Adam, AdamW and RMSprop, written with ordinary ops so
// they record into a step graph or run eagerly alike.
#include <cmath>
#include <string>

#include "kiln/graph.h"
#include "kiln/ops.h"
#include "kiln/optim.h"
#include "src/api/optim/hyper_params.h"

namespace kiln::optim {
namespace {

[[noreturn]] void fail(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

// A constant learning rate, checked under the optimizer's name.
Schedule checked_lr(const std::string& opt, double lr) {
  check_non_negative(opt, "lr", lr);
  return constant_lr(lr);
}

Schedule checked_schedule(const std::string& opt, Schedule schedule) {
  if (!schedule) fail(opt + ": the learning-rate schedule is empty");
  return schedule;
}

void check_slots(const Optimizer& opt, const Tensor& var, const Tensor& grad,
                 const std::vector<Tensor>& slots) {
  size_t expected = opt.slot_names().size();
  if (slots.size() != expected) {
    fail(opt.name() + ".apply: expected " + std::to_string(expected) + " slots, got " +
         std::to_string(slots.size()));
  }
  if (!var.defined() || !grad.defined()) fail(opt.name() + ".apply: undefined variable or grad");
  if (!is_floating(var.dtype())) {
    fail(opt.name() + ".apply: variables must be floating point, got " + dtype_name(var.dtype()));
  }
}

// A scalar hyper-parameter tensor (lr, step) in the variable's dtype.
Tensor like(const Tensor& scalar, const Tensor& var) { return convert(scalar, var.dtype()); }

}  // namespace

// ---- Optimizer ------------------------------------------------------------------------------

double Optimizer::learning_rate() const {
  if (override_lr_ >= 0) return override_lr_;
  if (!schedule_) fail(name() + ": no learning-rate schedule");
  const double lr = schedule_(iterations_);
  // A schedule is a user's function: a NaN or negative rate would silently ruin every weight.
  if (!(std::isfinite(lr) && lr >= 0)) {
    fail(name() + ": the learning-rate schedule gave " + number_str(lr) + " at step " +
         std::to_string(iterations_) + "; learning rates must be finite and >= 0");
  }
  return lr;
}

void Optimizer::set_learning_rate(double lr) {
  check_non_negative(name() + ": set_learning_rate", "lr", lr);
  override_lr_ = lr;
}

Optimizer& Optimizer::clip_global_norm(double max_norm) {
  // An infinite max_norm would scale the gradients by inf / inf.
  check_non_negative(name() + ": clip_global_norm", "max_norm", max_norm);
  global_clipnorm_ = max_norm;
  return *this;
}

std::vector<Tensor> Optimizer::clip(const std::vector<Tensor>& grads) const {
  if (global_clipnorm_ <= 0 || grads.empty()) return grads;
  // Accumulated in f32 so that gradients of mixed dtypes share one norm.
  Tensor squares;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    Tensor gf = convert(g, f32);
    Tensor s = sum(gf * gf);
    squares = squares.defined() ? squares + s : s;
  }
  if (!squares.defined()) return grads;
  // scale = max_norm / max(norm, max_norm): 1 when the norm is already within bounds.
  Tensor max_norm = Tensor::scalar<float>(static_cast<float>(global_clipnorm_));
  Tensor scale = max_norm / maximum(sqrt(squares), max_norm);
  std::vector<Tensor> out;
  out.reserve(grads.size());
  for (const Tensor& g : grads) out.push_back(g.defined() ? g * convert(scale, g.dtype()) : g);
  return out;
}

Tensor Optimizer::scale_loss(const Tensor& loss, const ReadVariable&) const { return loss; }

StepGradients Optimizer::finish_gradients(const std::vector<Tensor>& grads,
                                          const ReadVariable&) const {
  return {clip(grads), {}, {}};
}

std::vector<Variable>& Optimizer::slots(const Variable& var) {
  auto it = slots_.find(var.id());
  // Slots are keyed by address: ones left by a destroyed variable of another type are stale.
  if (it != slots_.end() && (it->second.empty() || (it->second[0].shape() == var.shape() &&
                                                    it->second[0].dtype() == var.dtype()))) {
    return it->second;
  }
  if (it != slots_.end()) slots_.erase(it);
  // Slots are created while a step is being traced: lift the default graph so they are concrete.
  Graph::DefaultGuard no_graph{Graph(std::shared_ptr<detail::GraphImpl>())};
  std::vector<Variable> created;
  for (const std::string& slot : slot_names()) {
    created.emplace_back(zeros_like(var.value()), var.name() + "/" + slot, false);
  }
  return slots_.emplace(var.id(), std::move(created)).first->second;
}

void Optimizer::apply_gradients(std::vector<Variable>& vars, const std::vector<Tensor>& grads) {
  if (vars.size() != grads.size()) {
    fail(name() + ".apply_gradients: " + std::to_string(vars.size()) + " variables but " +
         std::to_string(grads.size()) + " gradients");
  }
  for (size_t i = 0; i < vars.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined()) continue;  // a variable the loss does not depend on
    if (g.is_symbolic()) fail(name() + ".apply_gradients: gradients must be concrete tensors");
    if (g.shape() != vars[i].shape()) {
      fail(name() + ".apply_gradients: gradient " + shape_str(g.shape()) +
           " does not match variable '" + vars[i].name() + "' " + shape_str(vars[i].shape()));
    }
  }
  Graph::DefaultGuard no_graph{Graph(std::shared_ptr<detail::GraphImpl>())};  // eager
  StepGradients finished = finish_gradients(grads, [](const Variable& v) { return v.value(); });
  const std::vector<Tensor>& clipped = finished.grads;
  Tensor lr = Tensor::scalar<float>(static_cast<float>(learning_rate()));
  Tensor step = Tensor::scalar<float>(static_cast<float>(iterations_ + 1));
  auto kept = [&](const Tensor& updated, const Variable& old) {
    Tensor value = convert(updated, old.dtype());
    return finished.apply_if.defined() ? where(finished.apply_if, value, old.value()) : value;
  };
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!clipped[i].defined()) continue;
    std::vector<Variable>& var_slots = slots(vars[i]);
    std::vector<Tensor> slot_values;
    for (const Variable& s : var_slots) slot_values.push_back(s.value());
    auto [value, new_slots] = apply(vars[i].value(), clipped[i], slot_values, lr, step);
    vars[i].assign(kept(value, vars[i]));
    for (size_t k = 0; k < var_slots.size(); ++k)
      var_slots[k].assign(kept(new_slots[k], var_slots[k]));
  }
  for (auto& [var, value] : finished.state_updates) {
    Variable target = var;
    target.assign(value);
  }
  ++iterations_;
}

// ---- SGD ------------------------------------------------------------------------------------

SGD::SGD(double lr, double momentum, bool nesterov)
    : SGD(checked_lr("SGD", lr), momentum, nesterov) {}

SGD::SGD(Schedule lr, double momentum, bool nesterov)
    : Optimizer(checked_schedule("SGD", std::move(lr))), momentum_(momentum), nesterov_(nesterov) {
  check_decay("SGD", "momentum", momentum);
  if (nesterov && momentum == 0) {  // as PyTorch: it would silently be plain SGD
    throw Error(ErrorCode::kInvalidArgument, "SGD: nesterov=true needs a momentum > 0, got 0");
  }
}

std::vector<std::string> SGD::slot_names() const {
  if (momentum_ > 0) return {"momentum"};
  return {};
}

std::pair<Tensor, std::vector<Tensor>> SGD::apply(const Tensor& var, const Tensor& grad,
                                                  const std::vector<Tensor>& slots,
                                                  const Tensor& lr, const Tensor& step) const {
  check_slots(*this, var, grad, slots);
  Tensor g = convert(grad, var.dtype());
  Tensor lr_g = like(lr, var) * g;
  if (momentum_ <= 0) return {var - lr_g, {}};
  Tensor v = slots[0] * momentum_ - lr_g;
  if (nesterov_) return {var + v * momentum_ - lr_g, {v}};
  return {var + v, {v}};
}

// ---- Adam and AdamW -------------------------------------------------------------------------

Adam::Adam(double lr, double beta1, double beta2, double eps)
    : Adam("Adam", checked_lr("Adam", lr), beta1, beta2, eps) {}

Adam::Adam(Schedule lr, double beta1, double beta2, double eps)
    : Adam("Adam", std::move(lr), beta1, beta2, eps) {}

Adam::Adam(const std::string& optimizer, Schedule lr, double beta1, double beta2, double eps)
    : Optimizer(checked_schedule(optimizer, std::move(lr))),
      beta1_(beta1),
      beta2_(beta2),
      eps_(eps) {
  check_decay(optimizer, "beta1", beta1);
  check_decay(optimizer, "beta2", beta2);
  check_non_negative(optimizer, "eps", eps);
}

std::pair<Tensor, std::vector<Tensor>> Adam::apply(const Tensor& var, const Tensor& grad,
                                                   const std::vector<Tensor>& slots,
                                                   const Tensor& lr, const Tensor& step) const {
  check_slots(*this, var, grad, slots);
  Tensor g = convert(grad, var.dtype());
  Tensor t = like(step, var);
  Tensor m = slots[0] + (g - slots[0]) * (1 - beta1_);
  Tensor v = slots[1] + (g * g - slots[1]) * (1 - beta2_);
  // Bias correction folded into the step size, as Keras does.
  Tensor b1_t = pow(scalar_like(beta1_, var), t);
  Tensor b2_t = pow(scalar_like(beta2_, var), t);
  Tensor alpha = like(lr, var) * sqrt(1.0 - b2_t) / (1.0 - b1_t);
  return {var - alpha * m / (sqrt(v) + eps_), {m, v}};
}

AdamW::AdamW(double lr, double weight_decay, double beta1, double beta2, double eps)
    : Adam("AdamW", checked_lr("AdamW", lr), beta1, beta2, eps), weight_decay_(weight_decay) {
  check_non_negative("AdamW", "weight_decay", weight_decay);
}

std::pair<Tensor, std::vector<Tensor>> AdamW::apply(const Tensor& var, const Tensor& grad,
                                                    const std::vector<Tensor>& slots,
                                                    const Tensor& lr, const Tensor& step) const {
  check_slots(*this, var, grad, slots);
  Tensor decayed = var - var * like(lr, var) * weight_decay_;
  return Adam::apply(decayed, grad, slots, lr, step);
}

// ---- RMSprop --------------------------------------------------------------------------------

RMSprop::RMSprop(double lr, double rho, double momentum, double eps, bool centered)
    : Optimizer(checked_lr("RMSprop", lr)),
      rho_(rho),
      momentum_(momentum),
      eps_(eps),
      centered_(centered) {
  check_decay("RMSprop", "rho", rho);
  check_decay("RMSprop", "momentum", momentum);
  check_non_negative("RMSprop", "eps", eps);
}

std::vector<std::string> RMSprop::slot_names() const {
  std::vector<std::string> names = {"velocity"};
  if (momentum_ > 0) names.push_back("momentum");
  if (centered_) names.push_back("average_gradient");
  return names;
}

std::pair<Tensor, std::vector<Tensor>> RMSprop::apply(const Tensor& var, const Tensor& grad,
                                                      const std::vector<Tensor>& slots,
                                                      const Tensor& lr, const Tensor& step) const {
  check_slots(*this, var, grad, slots);
  Tensor g = convert(grad, var.dtype());
  std::vector<Tensor> out;
  Tensor velocity = slots[0] * rho_ + g * g * (1 - rho_);
  out.push_back(velocity);
  Tensor denominator = velocity + eps_;
  Tensor average;
  if (centered_) {
    average = slots.back() * rho_ + g * (1 - rho_);
    denominator = velocity - average * average + eps_;
  }
  Tensor increment = like(lr, var) * g / sqrt(denominator);
  Tensor new_var;
  if (momentum_ > 0) {
    Tensor m = slots[1] * momentum_ + increment;
    out.push_back(m);
    new_var = var - m;
  } else {
    new_var = var - increment;
  }
  if (centered_) out.push_back(average);
  return {new_var, out};
}

}  // namespace kiln::optim
