// A small trainer for the kill-and-resume test: an MLP with dropout on synthetic data, --epochs
// (3) x 20 batches, BackupAndRestore every --save_every steps; writes its final state (weights,
// optimizer slots and iterations) as the checkpoint --out. --kill_at_step=K makes a run that did
// not resume from a backup SIGKILL itself after step K, so the same command, run again, resumes
// and finishes.
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "examples/common/flags.h"
#include "kiln/io/checkpoint.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/nn/checkpoint_callbacks.h"

namespace {

// Logs each step; kills the process after step `kill_at` unless the run resumed.
class StepLog : public kiln::nn::Callback {
 public:
  StepLog(int64_t kill_at, const kiln::nn::BackupAndRestore* backup)
      : kill_at_(kill_at), backup_(backup) {}
  void on_train_begin(kiln::nn::Logs&) override {
    if (backup_->restored_at()) {
      std::printf("resumed at epoch %d batch %lld\n", backup_->restored_at()->first,
                  static_cast<long long>(backup_->restored_at()->second));
    }
  }
  void on_train_batch_end(int64_t batch, kiln::nn::Logs& logs) override {
    const int64_t step = model()->optimizer().iterations();
    std::printf("step %lld loss %.6f\n", static_cast<long long>(step), logs["batch_loss"]);
    if (step == kill_at_ && !backup_->restored_at()) {
      std::printf("killing myself after step %lld\n", static_cast<long long>(step));
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
  }

 private:
  int64_t kill_at_;
  const kiln::nn::BackupAndRestore* backup_;
};

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags(argc, argv);
  const std::string backup_dir = flags.str("backup_dir", "");
  const std::string out = flags.str("out", "");
  const int64_t kill_at = flags.integer("kill_at_step", 0);
  const int64_t save_every = flags.integer("save_every", 7);
  const int epochs = static_cast<int>(flags.integer("epochs", 3));
  const uint64_t seed = static_cast<uint64_t>(flags.integer("seed", 5));
  flags.check();
  if (backup_dir.empty() || out.empty()) {
    std::fprintf(stderr,
                 "usage: resume_trainer --backup_dir=DIR --out=PREFIX [--kill_at_step=K] "
                 "[--save_every=N] [--epochs=E] [--seed=S]\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    const int64_t n = 160, batch = 8;  // 20 batches per epoch
    kiln::Tensor x = kiln::random_normal({n, 6}, 11);
    kiln::Tensor y = kiln::convert(kiln::random_uniform({n}, 12, 0, 3), kiln::i32);
    kiln::nn::Sequential model(
        {kiln::nn::Dense(16, "relu"), kiln::nn::Dropout(0.3), kiln::nn::Dense(3)});
    model.set_seed(seed);
    model.compile(kiln::optim::Adam(0.01), kiln::nn::SparseCategoricalCrossentropy(true));
    auto backup = std::make_shared<kiln::nn::BackupAndRestore>(backup_dir, save_every);
    model.fit(x, y,
              {.epochs = epochs,
               .batch_size = batch,
               .seed = seed,
               .callbacks = {backup, StepLog(kill_at, backup.get())},
               .verbose = 0});
    kiln::io::save_checkpoint(out, model.state());
    std::printf("done: %lld steps\n", static_cast<long long>(model.optimizer().iterations()));
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
