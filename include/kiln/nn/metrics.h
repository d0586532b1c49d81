// Metrics: each turns a batch into a few statistics (recorded with ops, so they run inside
// the step graph), accumulates them on the host, and reports a result; reset per epoch.
#pragma once

#include <memory>
#include <string>
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

// The running mean of a scalar (used for the loss).
class Mean : public Metric {
 public:
  explicit Mean(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> batch_stats(const Tensor& y_true, const Tensor& value) const override;
  void update(const std::vector<Tensor>& stats) override;
  double result() const override;
  void reset() override;

 private:
  std::string name_;
  double sum_ = 0, count_ = 0;
};

}  // namespace kiln::nn
