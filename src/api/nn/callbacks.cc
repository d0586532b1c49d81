// The built-in callbacks: EarlyStopping, TerminateOnNaN, LearningRateScheduler.
#include "kiln/nn/callbacks.h"

#include <cmath>
#include <cstdio>

#include "kiln/nn/model.h"

namespace kiln::nn {

EarlyStopping::EarlyStopping(std::string monitor, double min_delta, int patience,
                             std::string mode, bool restore_best_weights)
    : monitor_(std::move(monitor)), mode_(std::move(mode)), min_delta_(std::abs(min_delta)),
      patience_(patience), restore_best_weights_(restore_best_weights) {
  if (mode_ == "auto") {
    bool higher = monitor_.find("acc") != std::string::npos ||
                  monitor_.find("auc") != std::string::npos;
    mode_ = higher ? "max" : "min";
  }
  if (mode_ != "min" && mode_ != "max") {
    throw Error(ErrorCode::kInvalidArgument,
                "EarlyStopping: mode must be \"auto\", \"min\" or \"max\", got \"" + mode_ + "\"");
  }
}

void EarlyStopping::on_train_begin(Logs&) {
  wait_ = 0;
  stopped_epoch_ = best_epoch_ = -1;
  best_ = std::numeric_limits<double>::quiet_NaN();
  best_weights_.clear();
}

void EarlyStopping::on_epoch_end(int epoch, Logs& logs) {
  auto it = logs.find(monitor_);
  if (it == logs.end()) {
    std::string have;
    for (const auto& [k, v] : logs) have += (have.empty() ? "" : ", ") + k;
    throw Error(ErrorCode::kInvalidArgument,
                "EarlyStopping: monitored value '" + monitor_ + "' is not in the logs (" + have +
                    ")");
  }
  double value = it->second;
  bool improved = std::isnan(best_) ||
                  (mode_ == "min" ? value < best_ - min_delta_ : value > best_ + min_delta_);
  if (improved) {
    best_ = value;
    best_epoch_ = epoch;
    wait_ = 0;
    if (restore_best_weights_) {
      best_weights_.clear();
      for (const Variable& v : model()->weights()) best_weights_.push_back(v.value());
    }
    return;
  }
  if (++wait_ >= std::max(1, patience_)) {  // as Keras: patience 0 stops at the first miss
    stopped_epoch_ = epoch;
    model()->stop_training = true;
  }
}

void EarlyStopping::on_train_end(Logs&) {
  if (!restore_best_weights_ || best_weights_.empty() || stopped_epoch_ < 0) return;
  std::vector<Variable> weights = model()->weights();
  for (size_t i = 0; i < weights.size() && i < best_weights_.size(); ++i)
    weights[i].assign(best_weights_[i]);
}

void TerminateOnNaN::on_train_batch_end(int64_t batch, Logs& logs) {
  auto it = logs.find("batch_loss");
  if (it == logs.end()) it = logs.find("loss");
  if (it == logs.end() || std::isfinite(it->second)) return;
  if (model()) model()->stop_training = true;
  throw Error(ErrorCode::kFailedPrecondition,
              "TerminateOnNaN: the loss became " + std::string(std::isnan(it->second) ? "NaN" : "inf") +
                  " at epoch " + std::to_string(epoch_ + 1) + ", batch " +
                  std::to_string(batch + 1) + "; training stopped");
}

void LearningRateScheduler::on_epoch_begin(int epoch, Logs& logs) {
  optim::Optimizer& opt = model()->optimizer();
  double lr = schedule_(epoch, opt.learning_rate());
  if (!std::isfinite(lr) || lr < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "LearningRateScheduler: the schedule returned " + std::to_string(lr) +
                    " for epoch " + std::to_string(epoch));
  }
  opt.set_learning_rate(lr);
  logs["learning_rate"] = lr;
}

}  // namespace kiln::nn
