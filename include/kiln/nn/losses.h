// Losses (Keras semantics): per-example values, averaged over the batch by operator().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/ref.h"
#include "kiln/tensor.h"

namespace kiln::nn {

class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string name() const = 0;
  // Keras' get_config: the arguments that rebuild this loss with loss_from_config(name(), ...).
  virtual Attrs config() const { return {}; }
  // One loss value per example: shape [batch].
  virtual Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const = 0;
  // The mean over the batch (an f32 scalar).
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const;
  // What looks wrong about a setup that runs but trains badly, for fit and evaluate to warn
  // about once per call: `y_true` is a concrete batch of labels, `output_activation` the
  // activation the model's last layer ends in ("" when none or unknown). Empty when all is well.
  virtual std::vector<std::string> advice(const Tensor& y_true,
                                          const std::string& output_activation) const {
    return {};
  }
};

using LossRef = Ref<Loss>;

// Loss classes by name(), for loading saved models: the built-in ones are registered; a custom
// loss registers a factory from its config (kAlreadyExists when taken, unless `replace`).
// loss_from_config throws kNotFound for an unknown name, naming it.
using LossFactory = std::function<std::shared_ptr<Loss>(const Attrs& config)>;
void register_loss(const std::string& name, LossFactory factory, bool replace = false);
std::shared_ptr<Loss> loss_from_config(const std::string& name, const Attrs& config);

// Integer labels [batch] against scores [batch, classes]. Stable log-softmax from logits.
class SparseCategoricalCrossentropy : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(bool from_logits = false) : from_logits_(from_logits) {}
  std::string name() const override { return "sparse_categorical_crossentropy"; }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override;
  std::vector<std::string> advice(const Tensor& y_true,
                                  const std::string& output_activation) const override;
  bool from_logits() const { return from_logits_; }
  Attrs config() const override { return {{"from_logits", from_logits_}}; }

 private:
  bool from_logits_;
};

// One-hot (or soft) labels [batch, classes] against scores [batch, classes].
class CategoricalCrossentropy : public Loss {
 public:
  explicit CategoricalCrossentropy(bool from_logits = false, double label_smoothing = 0)
      : from_logits_(from_logits), label_smoothing_(label_smoothing) {}
  std::string name() const override { return "categorical_crossentropy"; }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override;
  std::vector<std::string> advice(const Tensor& y_true,
                                  const std::string& output_activation) const override;
  bool from_logits() const { return from_logits_; }
  Attrs config() const override {
    return {{"from_logits", from_logits_}, {"label_smoothing", label_smoothing_}};
  }

 private:
  bool from_logits_;
  double label_smoothing_;
};

// Labels in {0, 1} (or [0, 1]); from logits uses max(x,0) - x*z + log1p(exp(-|x|)).
class BinaryCrossentropy : public Loss {
 public:
  explicit BinaryCrossentropy(bool from_logits = false) : from_logits_(from_logits) {}
  std::string name() const override { return "binary_crossentropy"; }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override;
  // Also warns about labels outside [0, 1].
  std::vector<std::string> advice(const Tensor& y_true,
                                  const std::string& output_activation) const override;
  bool from_logits() const { return from_logits_; }
  Attrs config() const override { return {{"from_logits", from_logits_}}; }

 private:
  bool from_logits_;
};

class MeanSquaredError : public Loss {
 public:
  std::string name() const override { return "mean_squared_error"; }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override;
};

class Huber : public Loss {
 public:
  explicit Huber(double delta = 1.0) : delta_(delta) {}
  std::string name() const override { return "huber"; }
  Attrs config() const override { return {{"delta", delta_}}; }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override;

 private:
  double delta_;
};

}  // namespace kiln::nn
