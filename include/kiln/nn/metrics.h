// Metrics: each turns a batch into a few statistics (recorded with ops, so they run inside
// the step graph), accumulates them on the host, and reports a result; reset per epoch.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn/losses.h"
#include "kiln/tensor.h"

namespace kiln::nn {

class Metric {
 public:
  virtual ~Metric() = default;
  virtual std::string name() const = 0;
  // Per-batch statistics, e.g. {number correct, number of examples}.
  virtual std::vector<Tensor> batch_stats(const Tensor& y_true, const Tensor& y_pred) const = 0;
  // Accumulates concrete values of batch_stats.
  virtual void update(const std::vector<Tensor>& stats) = 0;
  virtual double result() const = 0;
  virtual void reset() = 0;
};

// Metric by Keras name: "accuracy"/"acc" (resolved against the loss like Keras: sparse
// categorical for SparseCategoricalCrossentropy, categorical for CategoricalCrossentropy,
// binary for BinaryCrossentropy), "sparse_categorical_accuracy", "categorical_accuracy",
// "binary_accuracy", "auc", "mse". An unknown name throws kiln::Error listing the known ones.
std::unique_ptr<Metric> make_metric(const std::string& name, const Loss* loss = nullptr);

// Metrics whose result is a running ratio: batch_stats gives two f32 scalars {numerator,
// denominator} (e.g. {number correct, number of examples}); result() is their running ratio.
class RatioMetric : public Metric {
 public:
  void update(const std::vector<Tensor>& stats) override;
  double result() const override;  // 0 before any update
  void reset() override;

 private:
  double total_ = 0, count_ = 0;
};

// The running mean of a scalar or of all elements of a tensor (used for the loss); y_true is
// ignored.
class Mean : public RatioMetric {
 public:
  explicit Mean(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> batch_stats(const Tensor& y_true, const Tensor& value) const override;

 private:
  std::string name_;
};

// Integer labels [batch] (or [batch, 1]) against scores [batch, classes]: argmax == label.
class SparseCategoricalAccuracy : public RatioMetric {
 public:
  explicit SparseCategoricalAccuracy(std::string name = "sparse_categorical_accuracy")
      : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> batch_stats(const Tensor& y_true, const Tensor& y_pred) const override;

 private:
  std::string name_;
};

// One-hot labels against scores, both [batch, classes]: argmax(y_true) == argmax(y_pred).
class CategoricalAccuracy : public RatioMetric {
 public:
  explicit CategoricalAccuracy(std::string name = "categorical_accuracy")
      : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> batch_stats(const Tensor& y_true, const Tensor& y_pred) const override;

 private:
  std::string name_;
};

// Labels in {0, 1} against probabilities: (y_pred > threshold) == y_true, over all elements.
class BinaryAccuracy : public RatioMetric {
 public:
  explicit BinaryAccuracy(double threshold = 0.5, std::string name = "binary_accuracy")
      : threshold_(threshold), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> batch_stats(const Tensor& y_true, const Tensor& y_pred) const override;

 private:
  double threshold_;
  std::string name_;
};

// Mean over examples of the mean squared error over the last axis.
class MeanSquaredErrorMetric : public RatioMetric {
 public:
  explicit MeanSquaredErrorMetric(std::string name = "mean_squared_error")
      : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> batch_stats(const Tensor& y_true, const Tensor& y_pred) const override;

 private:
  std::string name_;
};

// Area under the ROC curve, like Keras's AUC: confusion counts at num_thresholds thresholds
// evenly spaced over [0, 1] (the ends nudged by 1e-7 to take in 0 and 1); a prediction is
// positive when strictly above a threshold; trapezoidal sum over the (FPR, TPR) points.
// Labels are positive when non-zero; all elements are pooled.
class AUC : public Metric {
 public:
  explicit AUC(int num_thresholds = 200, std::string name = "auc");
  std::string name() const override { return name_; }
  // {tp, fp, tn, fn}, each f32 [num_thresholds].
  std::vector<Tensor> batch_stats(const Tensor& y_true, const Tensor& y_pred) const override;
  void update(const std::vector<Tensor>& stats) override;
  double result() const override;
  void reset() override;
  const std::vector<double>& thresholds() const { return thresholds_; }

 private:
  std::string name_;
  std::vector<double> thresholds_;
  std::vector<double> tp_, fp_, tn_, fn_;
};

}  // namespace kiln::nn
