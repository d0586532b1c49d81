// The TensorBoard callback: writes a model's training curves, weight histograms and graph as
// TensorBoard event files, in the layout Keras uses (log_dir/train, log_dir/validation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>

#include "kiln/nn/callbacks.h"

namespace kiln::nn {

// How often batch-level scalars are written: "epoch" (never: epoch scalars only), "batch"
// (after every batch) or every N batches (N >= 1). Like SaveFreq (checkpoint_callbacks.h).
using UpdateFreq = std::variant<std::string, int64_t>;

struct TensorBoardOptions {
  UpdateFreq update_freq = std::string("epoch");
  // Weight histograms every this many epochs (epochs 0, N, 2N, ...); 0: none.
  int histogram_freq = 0;
  // The model's inference graph, once per fit, in the train run.
  bool write_graph = true;
};

// Each fit writes one new event file in log_dir/train and, once validation values appear, one
// in log_dir/validation (created with their parents):
//  - per epoch (step = epoch index): "epoch_<name>" for every value of the epoch's logs —
//    "epoch_loss", "epoch_accuracy", ... in train; the "val_" values without that prefix in
//    validation ("epoch_loss" there is val_loss); and "epoch_learning_rate" (the optimizer's
//    learning rate at the end of the epoch) in train.
//  - with update_freq N: after every training step whose global step (optimizer iterations,
//    counted from 1, continuing across fit calls) is a multiple of N, "batch_<name>" for each
//    value of the batch logs, at that step. As in Keras, "batch_loss" is the running mean of
//    the loss over the epoch so far, and likewise for the metrics.
//  - every histogram_freq epochs: a histogram of each trainable variable (tag: the variable's
//    name, "dense/kernel"), and of how much the epoch changed it, "<name>/update" (the weights
//    at the end of the epoch minus those at its start: the sum of the epoch's optimizer
//    steps), and of its gradient at the epoch's last batch, "<name>/gradient"
//    (Model::last_gradients). A variable holding NaN or infinite values is left out of that
//    epoch's histograms.
//  - with write_graph: the inference graph (Model::inference_graph), nodes scoped by layer.
// Files are flushed at the end of every epoch and closed at the end of training. A log_dir that
// cannot be created and written fails fit before its first batch (kFailedPrecondition naming
// the path); bad options throw kInvalidArgument.
class TensorBoard : public Callback {
 public:
  explicit TensorBoard(std::string log_dir, TensorBoardOptions options = {});
  ~TensorBoard() override;
  TensorBoard(TensorBoard&&) noexcept;
  TensorBoard& operator=(TensorBoard&&) noexcept;

  void on_train_begin(Logs& logs) override;
  void on_train_end(Logs& logs) override;
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_batch_end(int64_t batch, Logs& logs) override;

  const std::string& log_dir() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kiln::nn
