// Metrics: batch statistics computed with ops (so they run inside a step graph), accumulated
// on the host; and make_metric, which resolves Keras metric names.
#include "kiln/nn/metrics.h"

#include <string>
#include <utility>

#include "kiln/ops.h"

namespace kiln::nn {
namespace {

[[noreturn]] void fail(const std::string& metric, const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, metric + ": " + message);
}

std::string shapes(const Tensor& y_true, const Tensor& y_pred) {
  return "(y_true " + shape_str(y_true.shape()) + ", y_pred " + shape_str(y_pred.shape()) + ")";
}

void check_defined(const std::string& metric, const Tensor& y_true, const Tensor& y_pred) {
  if (!y_true.defined() || !y_pred.defined()) fail(metric, "undefined y_true or y_pred");
}

bool compatible(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != kUnknownDim && b[i] != kUnknownDim && a[i] != b[i]) return false;
  }
  return true;
}

// The number of elements of x as an f32 scalar, computed from x itself so that it also works
// for symbolic tensors whose batch size is only known at run time.
Tensor count_elements(const Tensor& x) { return sum(convert(x, f32) * 0.0 + 1.0); }

// {number of true elements, number of elements} of a bool tensor.
std::vector<Tensor> ratio_stats(const Tensor& correct) {
  Tensor c = convert(correct, f32);
  return {sum(c), count_elements(c)};
}

// Labels [batch] (or [batch, 1]) as i64, checked against predictions [batch, classes].
Tensor sparse_labels(const std::string& metric, const Tensor& y_true, const Tensor& y_pred) {
  check_defined(metric, y_true, y_pred);
  if (y_pred.rank() < 1) fail(metric, "y_pred needs a class axis " + shapes(y_true, y_pred));
  Tensor labels = y_true;
  if (labels.rank() == y_pred.rank() && labels.dim(-1) == 1) labels = squeeze(labels, {-1});
  Shape batch(y_pred.shape().begin(), y_pred.shape().end() - 1);
  if (!compatible(labels.shape(), batch)) {
    fail(metric,
         "labels must have the shape of y_pred without its class axis " + shapes(y_true, y_pred));
  }
  return convert(labels, i64);
}

// "accuracy" without a loss to resolve it: chosen from the shapes, like Keras.
class ShapeResolvedAccuracy : public RatioMetric {
 public:
  explicit ShapeResolvedAccuracy(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> batch_stats(const Tensor& y_true, const Tensor& y_pred) const override {
    check_defined(name_, y_true, y_pred);
    if (y_pred.rank() >= 1 && y_pred.dim(-1) == 1) {
      return BinaryAccuracy(0.5, name_).batch_stats(y_true, y_pred);
    }
    if (y_true.rank() < y_pred.rank() || (y_true.rank() >= 1 && y_true.dim(-1) == 1)) {
      return SparseCategoricalAccuracy(name_).batch_stats(y_true, y_pred);
    }
    return CategoricalAccuracy(name_).batch_stats(y_true, y_pred);
  }

 private:
  std::string name_;
};

std::unique_ptr<Metric> accuracy_for(const std::string& name, const Loss* loss) {
  if (dynamic_cast<const SparseCategoricalCrossentropy*>(loss)) {
    return std::make_unique<SparseCategoricalAccuracy>(name);
  }
  if (dynamic_cast<const CategoricalCrossentropy*>(loss)) {
    return std::make_unique<CategoricalAccuracy>(name);
  }
  if (dynamic_cast<const BinaryCrossentropy*>(loss)) {
    return std::make_unique<BinaryAccuracy>(0.5, name);
  }
  return std::make_unique<ShapeResolvedAccuracy>(name);
}

}  // namespace

// ---- RatioMetric and Mean -------------------------------------------------------------------

void RatioMetric::update(const std::vector<Tensor>& stats) {
  if (stats.size() != 2) {
    fail(name(),
         "update expects the 2 tensors of batch_stats, got " + std::to_string(stats.size()));
  }
  total_ += stats[0].item<double>();
  count_ += stats[1].item<double>();
}

double RatioMetric::result() const { return count_ > 0 ? total_ / count_ : 0; }

void RatioMetric::reset() { total_ = count_ = 0; }

std::vector<Tensor> Mean::batch_stats(const Tensor& y_true, const Tensor& value) const {
  if (!value.defined()) fail(name_, "undefined value");
  Tensor v = convert(value, f32);
  return {sum(v), count_elements(v)};
}

// ---- accuracies and mean squared error -------------------------------------------------------

std::vector<Tensor> SparseCategoricalAccuracy::batch_stats(const Tensor& y_true,
                                                           const Tensor& y_pred) const {
  Tensor labels = sparse_labels(name_, y_true, y_pred);
  return ratio_stats(equal(argmax(y_pred, -1), labels));
}

std::vector<Tensor> CategoricalAccuracy::batch_stats(const Tensor& y_true,
                                                     const Tensor& y_pred) const {
  check_defined(name_, y_true, y_pred);
  if (y_pred.rank() < 1 || !compatible(y_true.shape(), y_pred.shape())) {
    fail(name_, "y_true and y_pred must both be [batch, classes] " + shapes(y_true, y_pred));
  }
  return ratio_stats(equal(argmax(y_true, -1), argmax(y_pred, -1)));
}

std::vector<Tensor> BinaryAccuracy::batch_stats(const Tensor& y_true, const Tensor& y_pred) const {
  check_defined(name_, y_true, y_pred);
  Tensor t = y_true;
  Tensor p = y_pred;
  if (t.rank() == p.rank() - 1 && p.dim(-1) == 1) t = expand_dims(t, -1);
  if (p.rank() == t.rank() - 1 && t.dim(-1) == 1) p = expand_dims(p, -1);
  if (!compatible(t.shape(), p.shape()))
    fail(name_, "shapes do not match " + shapes(y_true, y_pred));
  Tensor above = greater(convert(p, f32), Tensor::scalar(static_cast<float>(threshold_)));
  Tensor predicted = convert(above, f32);
  return ratio_stats(equal(predicted, convert(t, f32)));
}

std::vector<Tensor> MeanSquaredErrorMetric::batch_stats(const Tensor& y_true,
                                                        const Tensor& y_pred) const {
  Tensor per_example = convert(MeanSquaredError().per_example(y_true, y_pred), f32);
  return {sum(per_example), count_elements(per_example)};
}

// ---- AUC ------------------------------------------------------------------------------------

AUC::AUC(int num_thresholds, std::string name) : name_(std::move(name)) {
  if (num_thresholds < 2) {
    fail(name_, "num_thresholds must be at least 2, got " + std::to_string(num_thresholds));
  }
  constexpr double kEpsilon = 1e-7;
  thresholds_.push_back(-kEpsilon);
  for (int i = 1; i < num_thresholds - 1; ++i) {
    thresholds_.push_back(static_cast<double>(i) / (num_thresholds - 1));
  }
  thresholds_.push_back(1 + kEpsilon);
  reset();
}

std::vector<Tensor> AUC::batch_stats(const Tensor& y_true, const Tensor& y_pred) const {
  check_defined(name_, y_true, y_pred);
  int64_t n_true = y_true.size(), n_pred = y_pred.size();
  if (!y_true.is_symbolic() && !y_pred.is_symbolic() && n_true != n_pred) {
    fail(name_, "y_true and y_pred must have as many elements " + shapes(y_true, y_pred));
  }
  std::vector<float> thresholds(thresholds_.begin(), thresholds_.end());
  Tensor thr = Tensor::from_vector(thresholds);                       // [T]
  Tensor pred = expand_dims(reshape(convert(y_pred, f32), {-1}), 1);  // [N, 1]
  Tensor positive =
      expand_dims(not_equal(reshape(convert(y_true, f32), {-1}), Tensor::scalar<float>(0)),
                  1);                 // [N, 1]
  Tensor above = greater(pred, thr);  // [N, T]
  Tensor tp = sum(convert(logical_and(above, positive), f32), {0});
  Tensor fp = sum(convert(logical_and(above, logical_not(positive)), f32), {0});
  Tensor positives = sum(convert(positive, f32));
  Tensor negatives = count_elements(positive) - positives;
  return {tp, fp, negatives - fp, positives - tp};
}

void AUC::update(const std::vector<Tensor>& stats) {
  if (stats.size() != 4) {
    fail(name_, "update expects the 4 tensors of batch_stats, got " + std::to_string(stats.size()));
  }
  std::vector<double>* counts[] = {&tp_, &fp_, &tn_, &fn_};
  for (int k = 0; k < 4; ++k) {
    std::vector<double> values = stats[k].to_vector<double>();
    if (values.size() != thresholds_.size()) {
      fail(name_, "update expects [" + std::to_string(thresholds_.size()) + "] counts, got " +
                      shape_str(stats[k].shape()));
    }
    for (size_t i = 0; i < values.size(); ++i) (*counts[k])[i] += values[i];
  }
}

double AUC::result() const {
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  double area = 0;
  for (size_t i = 0; i + 1 < thresholds_.size(); ++i) {
    double fpr0 = ratio(fp_[i], fp_[i] + tn_[i]), fpr1 = ratio(fp_[i + 1], fp_[i + 1] + tn_[i + 1]);
    double tpr0 = ratio(tp_[i], tp_[i] + fn_[i]), tpr1 = ratio(tp_[i + 1], tp_[i + 1] + fn_[i + 1]);
    area += (fpr0 - fpr1) * (tpr0 + tpr1) / 2;
  }
  return area;
}

void AUC::reset() {
  for (std::vector<double>* v : {&tp_, &fp_, &tn_, &fn_}) v->assign(thresholds_.size(), 0.0);
}

// ---- make_metric ----------------------------------------------------------------------------

std::unique_ptr<Metric> make_metric(const std::string& name, const Loss* loss) {
  if (name == "accuracy" || name == "acc") return accuracy_for(name, loss);
  if (name == "sparse_categorical_accuracy") return std::make_unique<SparseCategoricalAccuracy>();
  if (name == "categorical_accuracy") return std::make_unique<CategoricalAccuracy>();
  if (name == "binary_accuracy") return std::make_unique<BinaryAccuracy>();
  if (name == "auc") return std::make_unique<AUC>();
  if (name == "mse" || name == "mean_squared_error") {
    return std::make_unique<MeanSquaredErrorMetric>(name);
  }
  throw Error(ErrorCode::kInvalidArgument,
              "unknown metric '" + name +
                  "'; known metrics: accuracy, acc, sparse_categorical_accuracy, "
                  "categorical_accuracy, binary_accuracy, auc, mse, mean_squared_error");
}

}  // namespace kiln::nn
