// Checkpointing callbacks (Keras semantics): ModelCheckpoint keeps the model's state as
// training goes; BackupAndRestore lets an interrupted fit continue exactly where it stopped.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "kiln/io/checkpoint.h"
#include "kiln/nn/callbacks.h"

namespace kiln::nn {

// How often to save: "epoch" (at the end of each epoch) or every N training batches, counted
// by the optimizer's iterations (so the schedule survives a restore).
using SaveFreq = std::variant<std::string, int64_t>;

struct ModelCheckpointOptions {
  std::string monitor = "val_loss";
  bool save_best_only = false;  // save only when `monitor` improves on the best so far
  std::string mode = "auto";    // "min", "max"; "auto": max for names with "acc" or "auc"
  SaveFreq save_freq = std::string("epoch");
  int max_to_keep = 0;  // directory form: how many checkpoints to keep (0: all)
  int verbose = 0;      // 1: print a line per save
};

// Saves model.state() (weights, optimizer slots and iterations) with the metadata "epoch" and
// "batch" (where fit goes on next: the epoch-end save of epoch e records (e + 1, 0)), "step"
// (optimizer iterations), "model" (its name) and, when the logs have it, "monitor" (the name)
// and "monitor_value" (the value, as text).
// `path` containing '{' is a pattern giving each save's checkpoint prefix: {epoch} (1-based, as
// Keras), {batch}, {step} and any log value, with an optional printf spec: "ckpt/e{epoch:02d}-
// {val_loss:.3f}". Otherwise `path` is a directory of ckpt-<step> checkpoints kept by an
// io::CheckpointManager (max_to_keep, a "checkpoint" pointer file). on_train_begin creates the
// directory (for a pattern, the directories before its first field) and checks that it can be
// written, so that fit fails with kFailedPrecondition before its first step, not at a save.
class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(std::string path, ModelCheckpointOptions options = {});
  void on_train_begin(Logs& logs) override;
  void on_epoch_begin(int epoch, Logs& logs) override { epoch_ = epoch; }
  void on_train_batch_end(int64_t batch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;

  // The prefix of the last checkpoint written ("" if none) and the best monitored value.
  const std::string& last_saved() const { return last_saved_; }
  double best() const { return best_; }

 private:
  void maybe_save(int next_epoch, int64_t next_batch, const Logs& logs);

  std::string path_;
  ModelCheckpointOptions options_;
  int64_t every_ = 0;  // batches; 0: each epoch
  int epoch_ = 0;
  double best_ = std::numeric_limits<double>::quiet_NaN();
  std::string last_saved_;
  std::unique_ptr<io::CheckpointManager> manager_;  // directory form
};

// Backs the training state up to `backup_dir` (one checkpoint, replaced atomically at each
// save, with a "checkpoint" pointer file) every epoch or every N batches. When fit starts and a
// backup exists, on_train_begin restores it (load_state) and makes fit resume at the position
// it recorded: the epoch and batch of the next batch to run. Shuffling and dropout depend only
// on the seed, epoch and iteration, so the resumed run ends with bit-identical weights. A restore
// prints "Resuming from epoch E, batch B of <backup_dir>" (1-based, as fit's progress counts). A
// backup that cannot be read fails fit with an error saying to delete backup_dir to start over, and
// a backup_dir that cannot be written fails it (kFailedPrecondition) before its first step. A
// successful fit (on_train_end) deletes the backup, unless delete_backup is false; a fit that
// throws or is killed leaves it for the next run. Put it first in the callback list, so the
// others see the restored state.
class BackupAndRestore : public Callback {
 public:
  explicit BackupAndRestore(std::string backup_dir, SaveFreq save_freq = std::string("epoch"),
                            bool delete_backup = true);
  void on_train_begin(Logs& logs) override;
  void on_epoch_begin(int epoch, Logs& logs) override { epoch_ = epoch; }
  void on_train_batch_end(int64_t batch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_end(Logs& logs) override;

  // Where the last on_train_begin resumed (epoch, batch), if it found a backup.
  const std::optional<std::pair<int, int64_t>>& restored_at() const { return restored_at_; }

 private:
  void save(int next_epoch, int64_t next_batch);

  std::string dir_;
  int64_t every_ = 0;  // batches; 0: each epoch
  bool delete_backup_;
  int epoch_ = 0;
  int64_t saved_at_step_ = -1;  // optimizer iterations at the last save
  std::optional<std::pair<int, int64_t>> restored_at_;
  std::unique_ptr<io::CheckpointManager> manager_;
};

}  // namespace kiln::nn
