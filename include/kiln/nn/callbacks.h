// Callbacks (Keras semantics): hooks around training, epochs and batches.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include "kiln/ref.h"
#include "kiln/tensor.h"
#include <vector>

namespace kiln::nn {

class Model;
using Logs = std::map<std::string, double>;

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(Logs& logs) {}
  virtual void on_train_end(Logs& logs) {}
  virtual void on_epoch_begin(int epoch, Logs& logs) {}
  virtual void on_epoch_end(int epoch, Logs& logs) {}
  virtual void on_train_batch_begin(int64_t batch, Logs& logs) {}
  virtual void on_train_batch_end(int64_t batch, Logs& logs) {}
  virtual void on_test_begin(Logs& logs) {}
  virtual void on_test_end(Logs& logs) {}
  void set_model(Model* model) { model_ = model; }

 protected:
  Model* model() const { return model_; }

 private:
  Model* model_ = nullptr;
};

using CallbackRef = Ref<Callback>;

// Stops when `monitor` has not improved by min_delta for `patience` epochs.
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(std::string monitor = "val_loss", double min_delta = 0, int patience = 0,
                         std::string mode = "auto", bool restore_best_weights = false);
  void on_train_begin(Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_end(Logs& logs) override;
  int stopped_epoch() const { return stopped_epoch_; }

 private:
  std::string monitor_, mode_;
  double min_delta_;
  int patience_, wait_ = 0, stopped_epoch_ = -1, best_epoch_ = -1;
  bool restore_best_weights_;
  double best_ = std::numeric_limits<double>::quiet_NaN();
  std::vector<Tensor> best_weights_;
};

// Stops training with a kiln::Error naming the epoch and batch when the loss becomes NaN/inf.
class TerminateOnNaN : public Callback {
 public:
  void on_epoch_begin(int epoch, Logs& logs) override { epoch_ = epoch; }
  void on_train_batch_end(int64_t batch, Logs& logs) override;

 private:
  int epoch_ = 0;
};

// Sets the optimizer's learning rate at the start of each epoch to schedule(epoch, lr).
class LearningRateScheduler : public Callback {
 public:
  explicit LearningRateScheduler(std::function<double(int epoch, double lr)> schedule)
      : schedule_(std::move(schedule)) {}
  void on_epoch_begin(int epoch, Logs& logs) override;

 private:
  std::function<double(int, double)> schedule_;
};

}  // namespace kiln::nn
