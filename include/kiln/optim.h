// Optimizers and learning-rate schedules (Keras semantics). An optimizer's update is written
// with ordinary ops, so it records into a training-step graph or runs eagerly alike.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ref.h"
#include "kiln/tensor.h"
#include "kiln/variable.h"

namespace kiln::optim {

// Learning rate as a function of the number of updates applied so far. Its values must be
// finite and >= 0: an optimizer throws kInvalidArgument when its schedule gives another.
// The schedules below check their constants when made (kInvalidArgument): learning rates
// finite and >= 0, decay_steps > 0, warmup_steps >= 0.
using Schedule = std::function<double(int64_t step)>;
Schedule constant_lr(double lr);
// lr * rate^(step / decay_steps), with integer division when staircase; rate finite and >= 0.
Schedule exponential_decay(double lr, int64_t decay_steps, double rate, bool staircase = false);
// Cosine from lr to lr * alpha over decay_steps, then lr * alpha; alpha in [0, 1].
Schedule cosine_decay(double lr, int64_t decay_steps, double alpha = 0);
// Linear ramp from 0 to after(0) over warmup_steps, then after(step - warmup_steps).
Schedule linear_warmup(Schedule after, int64_t warmup_steps);

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
  // keeping slots per variable inside the optimizer, and advances iterations().
  void apply_gradients(std::vector<Variable>& vars, const std::vector<Tensor>& grads);
  // The slot tensors this optimizer holds for a variable (created on first use).
  std::vector<Variable>& slots(const Variable& var);

 private:
  Schedule schedule_;
  double override_lr_ = -1;
  int64_t iterations_ = 0;
  double global_clipnorm_ = 0;
  std::map<const void*, std::vector<Variable>> slots_;
};

using OptimizerRef = Ref<Optimizer>;

// The optimizers check their hyper-parameters when constructed, as PyTorch's do, and throw
// kInvalidArgument naming the optimizer, the parameter and the value: lr, eps and weight_decay
// finite and >= 0; momentum, beta1, beta2 and rho (decay factors of running averages) in
// [0, 1); a Schedule not empty; SGD with nesterov needs a momentum > 0.

class SGD : public Optimizer {
 public:
  explicit SGD(double lr = 0.01, double momentum = 0, bool nesterov = false);
  SGD(Schedule lr, double momentum = 0, bool nesterov = false);
  std::string name() const override { return "SGD"; }
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
  std::vector<std::string> slot_names() const override;
  std::pair<Tensor, std::vector<Tensor>> apply(const Tensor& var, const Tensor& grad,
                                               const std::vector<Tensor>& slots, const Tensor& lr,
                                               const Tensor& step) const override;

 private:
  double rho_, momentum_, eps_;
  bool centered_;
};

}  // namespace kiln::optim
