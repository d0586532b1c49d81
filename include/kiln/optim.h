// Optimizers and learning-rate schedules (Keras semantics). An optimizer's update is written
// with ordinary ops, so it records into a training-step graph or runs eagerly alike.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/ref.h"
#include "kiln/tensor.h"
#include "kiln/variable.h"

namespace kiln::optim {

// Learning rate as a function of the number of updates applied so far. Its values must be
// finite and >= 0: an optimizer throws kInvalidArgument when its schedule gives another.
// The schedules below check their constants when made (kInvalidArgument): learning rates
// finite and >= 0, decay_steps > 0, warmup_steps >= 0.
//
// The built-in schedules carry their name and arguments (a saved model records them); any
// other callable converts to a custom schedule, which a saved model cannot record.
class Schedule {
 public:
  using Fn = std::function<double(int64_t step)>;
  Schedule() = default;
  Schedule(std::string name, Attrs config, Fn fn)
      : name_(std::move(name)), config_(std::move(config)), fn_(std::move(fn)) {}
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Schedule> &&
                                                    std::is_invocable_r_v<double, F&, int64_t>>>
  Schedule(F fn) : name_("custom"), fn_(std::move(fn)) {}  // NOLINT: implicit on purpose

  double operator()(int64_t step) const { return fn_(step); }
  explicit operator bool() const { return static_cast<bool>(fn_); }
  const std::string& name() const { return name_; }  // "constant", ..., "custom"
  // The arguments; linear_warmup's schedule after warm-up is "after" (its name) and
  // "after.<argument>".
  const Attrs& config() const { return config_; }

 private:
  std::string name_;
  Attrs config_;
  Fn fn_;
};
// The schedule a name and arguments describe (as Schedule::name()/config() give them);
// "custom" or an unknown name is kInvalidArgument.
Schedule schedule_from_config(const std::string& name, const Attrs& config);
Schedule constant_lr(double lr);
// lr * rate^(step / decay_steps), with integer division when staircase; rate finite and >= 0.
Schedule exponential_decay(double lr, int64_t decay_steps, double rate, bool staircase = false);
// Cosine from lr to lr * alpha over decay_steps, then lr * alpha; alpha in [0, 1].
Schedule cosine_decay(double lr, int64_t decay_steps, double alpha = 0);
// Linear ramp from 0 to after(0) over warmup_steps, then after(step - warmup_steps).
Schedule linear_warmup(Schedule after, int64_t warmup_steps);

// How a step reads an optimizer's own variables: the value they have in the traced step graph
// (a placeholder), or their current value when eager.
using ReadVariable = std::function<Tensor(const Variable&)>;

// An optimizer's part of a whole step beyond the per-variable updates (see Optimizer below).
struct StepGradients {
  std::vector<Tensor> grads;  // what apply() gets, one per variable (undefined: none)
  // A bool scalar: when defined, the step's new variable and slot values take effect only where
  // it holds (a graph select, no host round-trip); elsewhere they keep their old values.
  Tensor apply_if;
  // New values of the optimizer's own variables().
  std::vector<std::pair<Variable, Tensor>> state_updates;
};

class Optimizer {
 public:
  explicit Optimizer(Schedule schedule) : schedule_(std::move(schedule)) {}
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // Names of the per-variable slots (Adam: {"m", "v"}); each starts as zeros like the variable.
  virtual std::vector<std::string> slot_names() const = 0;
  // The update of one variable: returns its new value and new slots. `lr` is an f32 scalar,
  // `step` the 1-based update count as an f32 scalar (for bias correction).
  virtual std::pair<Tensor, std::vector<Tensor>> apply(const Tensor& var, const Tensor& grad,
                                                       const std::vector<Tensor>& slots,
                                                       const Tensor& lr,
                                                       const Tensor& step) const = 0;
  // ---- whole-step hooks, for optimizers acting across variables (LossScaleOptimizer) -----
  // A training step differentiates scale_loss(loss), sums the gradients over the replicas,
  // passes them to finish_gradients, calls apply() per variable with the gradients it gives,
  // keeps the old values where apply_if does not hold, and assigns state_updates. The
  // defaults: the loss as it is; the gradients clipped (clip()), always applied, no state.
  virtual Tensor scale_loss(const Tensor& loss, const ReadVariable& read) const;
  virtual StepGradients finish_gradients(const std::vector<Tensor>& grads,
                                         const ReadVariable& read) const;
  // Variables of the optimizer's own besides the per-variable slots (a loss scale), named
  // "optimizer/<what>": checkpoints (Model::state) and saved models hold them.
  virtual std::vector<Variable> variables() const { return {}; }

  // Keras' get_config: the hyper-parameters that rebuild this optimizer with
  // optimizer_from_config, including the learning-rate schedule ("learning_rate" and
  // "learning_rate.<argument>"), the clipping norm and an overridden learning rate. A
  // subclass adds its own arguments by overriding hyper_parameters(). Throws
  // kFailedPrecondition for a custom schedule (a function cannot be saved).
  Attrs config() const;
  virtual Attrs hyper_parameters() const { return {}; }
  const Schedule& schedule() const { return schedule_; }

  // The learning rate for the next update: the override if set, else schedule(iterations).
  double learning_rate() const;
  // Overrides the schedule (LearningRateScheduler); lr finite and >= 0.
  void set_learning_rate(double lr);
  int64_t iterations() const { return iterations_; }
  void set_iterations(int64_t n) { iterations_ = n; }

  // Clip gradients so their global L2 norm is at most max_norm (0: off; finite and >= 0).
  Optimizer& clip_global_norm(double max_norm);
  double global_clipnorm() const { return global_clipnorm_; }
  // Scales grads by min(1, max_norm / global_norm(grads)); identity when clipping is off.
  std::vector<Tensor> clip(const std::vector<Tensor>& grads) const;

  // Eager training loops: applies one update to each variable with its gradient (concrete),
  // keeping slots per variable inside the optimizer, and advances iterations(). Goes through
  // finish_gradients as a step does (a LossScaleOptimizer unscales and may skip the update;
  // the gradients given are those of scale_loss(loss)).
  void apply_gradients(std::vector<Variable>& vars, const std::vector<Tensor>& grads);
  // The slot tensors this optimizer holds for a variable (created on first use).
  std::vector<Variable>& slots(const Variable& var);

 private:
  friend class LossScaleOptimizer;  // takes over the wrapped optimizer's learning-rate override
  Schedule schedule_;
  double override_lr_ = -1;
  int64_t iterations_ = 0;
  double global_clipnorm_ = 0;
  std::map<const void*, std::vector<Variable>> slots_;
};

using OptimizerRef = Ref<Optimizer>;

// Optimizer classes by name(), for loading saved models: the built-in ones are registered; a
// custom optimizer registers a factory from its config (kAlreadyExists when taken, unless
// `replace`). optimizer_from_config throws kNotFound for an unknown class, naming it.
using OptimizerFactory = std::function<std::shared_ptr<Optimizer>(const Attrs& config)>;
void register_optimizer(const std::string& name, OptimizerFactory factory, bool replace = false);
std::shared_ptr<Optimizer> optimizer_from_config(const std::string& name, const Attrs& config);

// The optimizers check their hyper-parameters when constructed, as PyTorch's do, and throw
// kInvalidArgument naming the optimizer, the parameter and the value: lr, eps and weight_decay
// finite and >= 0; momentum, beta1, beta2 and rho (decay factors of running averages) in
// [0, 1); a Schedule not empty; SGD with nesterov needs a momentum > 0.

class SGD : public Optimizer {
 public:
  explicit SGD(double lr = 0.01, double momentum = 0, bool nesterov = false);
  SGD(Schedule lr, double momentum = 0, bool nesterov = false);
  std::string name() const override { return "SGD"; }
  Attrs hyper_parameters() const override;
  std::vector<std::string> slot_names() const override;
  std::pair<Tensor, std::vector<Tensor>> apply(const Tensor& var, const Tensor& grad,
                                               const std::vector<Tensor>& slots, const Tensor& lr,
                                               const Tensor& step) const override;

 private:
  double momentum_;
  bool nesterov_;
};

class Adam : public Optimizer {
 public:
  explicit Adam(double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-7);
  Adam(Schedule lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-7);
  std::string name() const override { return "Adam"; }
  Attrs hyper_parameters() const override;
  std::vector<std::string> slot_names() const override { return {"m", "v"}; }
  std::pair<Tensor, std::vector<Tensor>> apply(const Tensor& var, const Tensor& grad,
                                               const std::vector<Tensor>& slots, const Tensor& lr,
                                               const Tensor& step) const override;

 protected:
  // Checks the hyper-parameters under `optimizer`, the subclass's name.
  Adam(const std::string& optimizer, Schedule lr, double beta1, double beta2, double eps);
  double beta1_, beta2_, eps_;
};

// Adam with decoupled weight decay: var -= lr * weight_decay * var before the Adam step.
class AdamW : public Adam {
 public:
  explicit AdamW(double lr = 1e-3, double weight_decay = 0.004, double beta1 = 0.9,
                 double beta2 = 0.999, double eps = 1e-7);
  std::string name() const override { return "AdamW"; }
  Attrs hyper_parameters() const override;
  std::pair<Tensor, std::vector<Tensor>> apply(const Tensor& var, const Tensor& grad,
                                               const std::vector<Tensor>& slots, const Tensor& lr,
                                               const Tensor& step) const override;

 private:
  double weight_decay_;
};

class RMSprop : public Optimizer {
 public:
  explicit RMSprop(double lr = 1e-3, double rho = 0.9, double momentum = 0, double eps = 1e-7,
                   bool centered = false);
  std::string name() const override { return "RMSprop"; }
  Attrs hyper_parameters() const override;
  std::vector<std::string> slot_names() const override;
  std::pair<Tensor, std::vector<Tensor>> apply(const Tensor& var, const Tensor& grad,
                                               const std::vector<Tensor>& slots, const Tensor& lr,
                                               const Tensor& step) const override;

 private:
  double rho_, momentum_, eps_;
  bool centered_;
};

// Loss scaling for f16 training (TensorFlow's LossScaleOptimizer): the loss is multiplied by a
// scale before differentiation so that small gradients do not underflow f16, and the gradients
// are divided by it before the wrapped optimizer's update. Dynamic (the default): the scale
// starts at initial_scale (2^15); when any gradient of a step is inf or NaN the step is
// skipped (variables and the wrapped optimizer's slots keep their values) and the scale halves
// (not below 1); after growth_steps consecutive finite steps it doubles (unless that would be
// inf). The decision is made inside the compiled step. Fixed (dynamic = false): the scale
// stays initial_scale and every step is applied, as the wrapped optimizer would. The scale and
// the count of finite steps are variables ("optimizer/loss_scale", "optimizer/good_steps"), so
// checkpoints and BackupAndRestore keep them. iterations() counts skipped steps too, as
// TensorFlow's does. Model::compile wraps its optimizer in one when a layer of the model
// computes in f16 (policy "mixed_float16"), as Keras does.
struct LossScaleOptions {
  bool dynamic = true;
  double initial_scale = 32768;  // finite and >= 1
  int64_t growth_steps = 2000;   // > 0
};

class LossScaleOptimizer : public Optimizer {
 public:
  // Takes the wrapped optimizer's schedule, clipping and iterations; updates with its apply().
  explicit LossScaleOptimizer(OptimizerRef inner, LossScaleOptions options = {});
  std::string name() const override { return "LossScaleOptimizer"; }
  Attrs hyper_parameters() const override;
  std::vector<std::string> slot_names() const override { return inner_->slot_names(); }
  std::pair<Tensor, std::vector<Tensor>> apply(const Tensor& var, const Tensor& grad,
                                               const std::vector<Tensor>& slots, const Tensor& lr,
                                               const Tensor& step) const override;
  Tensor scale_loss(const Tensor& loss, const ReadVariable& read) const override;
  StepGradients finish_gradients(const std::vector<Tensor>& grads,
                                 const ReadVariable& read) const override;
  std::vector<Variable> variables() const override { return {scale_, good_steps_}; }

  Optimizer& inner_optimizer() const { return *inner_; }
  const LossScaleOptions& options() const { return options_; }
  double loss_scale() const;   // the current scale
  int64_t good_steps() const;  // consecutive finite steps since the scale last changed

 private:
  std::shared_ptr<Optimizer> inner_;
  LossScaleOptions options_;
  Variable scale_, good_steps_;  // f32 scalar, i64 scalar
};

}  // namespace kiln::optim
