// ModelCheckpoint (directory and pattern forms, step and epoch frequency, save_best_only) and
// BackupAndRestore (an interrupted fit resumed in-process ends bit-identical and says so; the
// backup is deleted after success); configuration, unwritable-directory and corrupt-backup errors.
#include "kiln/nn/checkpoint_callbacks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/values.h"

namespace kiln::nn {
namespace {

using test_values::thrown_error;

namespace fs = std::filesystem;
using testing::HasSubstr;

// 32 rows: 4 batches of 8 per epoch.
std::pair<Tensor, Tensor> data() {
  Tensor x = random_normal({32, 4}, 21);
  Tensor y = convert(random_uniform({32}, 22, 0, 3), i32);
  return {x, y};
}

std::unique_ptr<Sequential> make_model() {
  auto m =
      std::make_unique<Sequential>(std::vector<LayerRef>{Dense(8, "relu"), Dropout(0.2), Dense(3)});
  m->set_seed(4);
  m->compile(optim::Adam(0.01), SparseCategoricalCrossentropy(true));
  return m;
}

FitOptions options(std::vector<CallbackRef> callbacks, int epochs = 3) {
  return {.epochs = epochs,
          .batch_size = 8,
          .seed = 9,
          .callbacks = std::move(callbacks),
          .verbose = 0};
}

bool same_state(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.nbytes() != t.nbytes() ||
        std::memcmp(it->second.raw_data(), t.raw_data(), t.nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

// Writes a scripted value into the epoch logs, for ModelCheckpoint to monitor.
class Score : public Callback {
 public:
  explicit Score(std::vector<double> values) : values_(std::move(values)) {}
  void on_epoch_end(int epoch, Logs& logs) override { logs["score"] = values_.at(epoch); }

 private:
  std::vector<double> values_;
};

// Throws after a given optimizer step: an interrupted fit.
class Interrupt : public Callback {
 public:
  explicit Interrupt(int64_t step) : step_(step) {}
  void on_train_batch_end(int64_t, Logs&) override {
    if (model()->optimizer().iterations() == step_) throw std::runtime_error("interrupted");
  }

 private:
  int64_t step_;
};

// Counts the training batches that ran.
class CountBatches : public Callback {
 public:
  void on_train_batch_end(int64_t, Logs&) override { ++count; }
  int64_t count = 0;
};

class CheckpointCallbacks : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_util::per_test_dir("kiln_ckpt_cb");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> index_files(const std::string& sub) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_ / sub)) {
      const std::string name = e.path().filename();
      if (name.size() > 6 && name.substr(name.size() - 6) == ".index") out.push_back(name);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path dir_;
};

TEST_F(CheckpointCallbacks, ModelCheckpointInADirectoryKeepsTheLastNWithPositionMetadata) {
  auto [x, y] = data();
  auto model = make_model();
  model->fit(x, y, options({ModelCheckpoint(path("ckpts"), {.max_to_keep = 2})}));
  EXPECT_EQ(index_files("ckpts"), (std::vector<std::string>{"ckpt-12.index", "ckpt-8.index"}));
  io::Checkpoint last = io::load_checkpoint(path("ckpts"));
  EXPECT_EQ(last.prefix, path("ckpts/ckpt-12"));
  EXPECT_EQ(last.get_int("epoch"), 3);
  EXPECT_EQ(last.get_int("batch"), 0);
  EXPECT_EQ(last.get_int("step"), 12);
  EXPECT_EQ(last.get_string("model"), "sequential");
  EXPECT_TRUE(same_state(last.tensors, model->state()));
}

TEST_F(CheckpointCallbacks, ModelCheckpointEveryNStepsRecordsTheNextBatch) {
  auto [x, y] = data();
  auto model = make_model();
  model->fit(x, y, options({ModelCheckpoint(path("c"), {.save_freq = int64_t{3}})}, 2));
  EXPECT_EQ(index_files("c"), (std::vector<std::string>{"ckpt-3.index", "ckpt-6.index"}));
  io::Checkpoint c3 = io::load_checkpoint(path("c/ckpt-3"));
  EXPECT_EQ(c3.get_int("epoch"), 0);
  EXPECT_EQ(c3.get_int("batch"), 3);
  io::Checkpoint c6 = io::load_checkpoint(path("c/ckpt-6"));
  EXPECT_EQ(c6.get_int("epoch"), 1);  // step 6 = epoch 1's batch 1; next is batch 2
  EXPECT_EQ(c6.get_int("batch"), 2);
}

TEST_F(CheckpointCallbacks, ModelCheckpointPatternsNameEachSave) {
  auto [x, y] = data();
  auto model = make_model();
  model->fit(x, y, options({ModelCheckpoint(path("p/e{epoch:02d}-s{step}"))}));
  EXPECT_EQ(index_files("p"),
            (std::vector<std::string>{"e01-s4.index", "e02-s8.index", "e03-s12.index"}));
  model->fit(x, y,
             options({Score({0.25, 0.5, 0.125}),
                      ModelCheckpoint(path("q/{score:.3f}"), {.monitor = "score"})}));
  EXPECT_EQ(index_files("q"),
            (std::vector<std::string>{"0.125.index", "0.250.index", "0.500.index"}));
}

TEST_F(CheckpointCallbacks, SaveBestOnlySavesWhenTheMonitoredValueImproves) {
  auto [x, y] = data();
  auto model = make_model();
  auto cb = std::make_shared<ModelCheckpoint>(
      path("best/e{epoch}"), ModelCheckpointOptions{.monitor = "score", .save_best_only = true});
  model->fit(x, y, options({Score({3, 1, 2, 0.5}), cb}, 4));
  EXPECT_EQ(index_files("best"), (std::vector<std::string>{"e1.index", "e2.index", "e4.index"}));
  EXPECT_EQ(cb->best(), 0.5);
  EXPECT_EQ(cb->last_saved(), path("best/e4"));
  io::Checkpoint best = io::load_checkpoint(path("best/e4"));
  EXPECT_EQ(best.get_string("monitor"), "score");
  EXPECT_EQ(best.get_string("monitor_value"), "0.500000");
  // "max" keeps the highest instead.
  auto model2 = make_model();
  model2->fit(
      x, y,
      options({Score({3, 1, 4, 0.5}),
               ModelCheckpoint(path("max/e{epoch}"),
                               {.monitor = "score", .save_best_only = true, .mode = "max"})},
              4));
  EXPECT_EQ(index_files("max"), (std::vector<std::string>{"e1.index", "e3.index"}));
}

TEST_F(CheckpointCallbacks, ConfigurationErrorsAreReported) {
  EXPECT_THAT(
      thrown_error([&] { ModelCheckpoint(path("c"), {.save_freq = std::string("batch")}); }).what(),
      HasSubstr("save_freq must be \"epoch\" or a number of batches, got \"batch\""));
  EXPECT_THAT(thrown_error([&] { ModelCheckpoint(path("c"), {.save_freq = int64_t{0}}); }).what(),
              HasSubstr("got 0"));
  EXPECT_THAT(thrown_error([&] { ModelCheckpoint(path("c"), {.mode = "avg"}); }).what(),
              HasSubstr("mode must be"));
  EXPECT_THAT(thrown_error([&] { BackupAndRestore(path("b"), int64_t{-2}); }).what(),
              HasSubstr("BackupAndRestore: save_freq"));
  EXPECT_EQ(thrown_error([&] { BackupAndRestore(""); }).code(), ErrorCode::kInvalidArgument);

  auto [x, y] = data();
  auto model = make_model();
  Error missing = thrown_error([&] {
    model->fit(x, y, options({ModelCheckpoint(path("c"), {.save_best_only = true})}, 1));
  });
  EXPECT_THAT(missing.what(), HasSubstr("monitors 'val_loss', which is not in the logs (loss)"));
  EXPECT_THAT(thrown_error([&] {
                model->fit(x, y, options({ModelCheckpoint(path("c/{nope}"))}, 1));
              }).what(),
              HasSubstr("uses {nope}"));
  EXPECT_THAT(thrown_error([&] {
                model->fit(x, y, options({ModelCheckpoint(path("c/{epoch:n}"))}, 1));
              }).what(),
              HasSubstr("unsupported format 'n'"));
}

TEST_F(CheckpointCallbacks, BackupAndRestoreResumesAnInterruptedFitBitIdentically) {
  auto [x, y] = data();
  auto reference = make_model();
  reference->fit(x, y, options({}));

  // Interrupted after step 6 (epoch 1, batch 1); the backup is from step 5 (every 5 steps).
  auto first = make_model();
  EXPECT_THROW(first->fit(x, y, options({BackupAndRestore(path("b"), int64_t{5}), Interrupt(6)})),
               std::runtime_error);
  EXPECT_EQ(io::load_checkpoint(path("b")).get_int("step"), 5);

  // A fresh process would build the model again: a new model with the same seed.
  auto second = make_model();
  auto backup = std::make_shared<BackupAndRestore>(path("b"), int64_t{5});
  History h = second->fit(x, y, options({backup}));
  ASSERT_TRUE(backup->restored_at().has_value());
  EXPECT_EQ(*backup->restored_at(), std::make_pair(1, int64_t{1}));
  EXPECT_EQ(h.epochs_run, 2);  // epochs 1 and 2
  EXPECT_TRUE(same_state(second->state(), reference->state()));
  EXPECT_FALSE(fs::exists(path("b")));  // deleted after success
}

TEST_F(CheckpointCallbacks, BackupAndRestoreEachEpochAndKeepingTheBackup) {
  auto [x, y] = data();
  auto reference = make_model();
  reference->fit(x, y, options({}));

  auto first = make_model();
  EXPECT_THROW(first->fit(x, y, options({BackupAndRestore(path("b")), Interrupt(10)})),
               std::runtime_error);
  io::Checkpoint b = io::load_checkpoint(path("b"));
  EXPECT_EQ(b.get_int("epoch"), 2);
  EXPECT_EQ(b.get_int("batch"), 0);

  auto second = make_model();
  second->fit(x, y,
              options({BackupAndRestore(path("b"), std::string("epoch"),
                                        /*delete_backup=*/false)}));
  EXPECT_TRUE(same_state(second->state(), reference->state()));
  EXPECT_EQ(io::load_checkpoint(path("b")).get_int("epoch"), 3);  // kept, at the end
}

TEST_F(CheckpointCallbacks, ABackupOfAnotherModelIsRejected) {
  auto [x, y] = data();
  auto small = std::make_unique<Sequential>(std::vector<LayerRef>{Dense(3)});
  small->compile(optim::SGD(0.1), SparseCategoricalCrossentropy(true));
  small->fit(x, y, options({BackupAndRestore(path("b"), std::string("epoch"), false)}, 1));
  auto model = make_model();
  Error e = thrown_error([&] { model->fit(x, y, options({BackupAndRestore(path("b"))})); });
  EXPECT_THAT(e.what(), HasSubstr("BackupAndRestore: cannot restore " + path("b/ckpt-4")));
  EXPECT_THAT(e.what(), HasSubstr("dense/bias"));
}

TEST_F(CheckpointCallbacks, AResumedFitSaysWhereItResumesFrom) {
  auto [x, y] = data();
  auto first = make_model();
  testing::internal::CaptureStdout();
  EXPECT_THROW(first->fit(x, y, options({BackupAndRestore(path("b"), int64_t{5}), Interrupt(6)})),
               std::runtime_error);
  EXPECT_THAT(testing::internal::GetCapturedStdout(), testing::Not(HasSubstr("Resuming")));

  auto second = make_model();
  testing::internal::CaptureStdout();
  second->fit(x, y, options({BackupAndRestore(path("b"), int64_t{5})}));
  EXPECT_THAT(testing::internal::GetCapturedStdout(),
              HasSubstr("Resuming from epoch 2, batch 2 of " + path("b") + "\n"));
}

TEST_F(CheckpointCallbacks, AnUnwritableDirectoryIsReportedBeforeTheFirstStep) {
  std::ofstream(path("file")) << "not a directory";
  auto [x, y] = data();
  struct Case {
    std::string who;
    CallbackRef callback;
  };
  const std::vector<Case> cases = {
      {"ModelCheckpoint", ModelCheckpoint(path("file/ckpts"))},
      {"ModelCheckpoint", ModelCheckpoint(path("file/p/e{epoch}"))},
      {"BackupAndRestore", BackupAndRestore(path("file/backup"))},
  };
  for (const Case& c : cases) {
    auto model = make_model();
    auto count = std::make_shared<CountBatches>();
    Error e = thrown_error([&] { model->fit(x, y, options({count, c.callback}, 1)); });
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(c.who + ": cannot write to " + path("file/")));
    EXPECT_EQ(count->count, 0) << c.who << " failed after " << count->count << " batches";
  }
}

TEST_F(CheckpointCallbacks, ACorruptBackupSaysHowToStartOver) {
  auto [x, y] = data();
  auto first = make_model();
  EXPECT_THROW(first->fit(x, y, options({BackupAndRestore(path("b"), int64_t{5}), Interrupt(6)})),
               std::runtime_error);
  const std::string prefix = io::load_checkpoint(path("b")).prefix;
  fs::resize_file(prefix + ".index", fs::file_size(prefix + ".index") / 2);

  auto second = make_model();
  Error e = thrown_error([&] { second->fit(x, y, options({BackupAndRestore(path("b"))})); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << e.what();
  EXPECT_THAT(e.what(), HasSubstr("BackupAndRestore: cannot load the backup in " + path("b")));
  EXPECT_THAT(e.what(), HasSubstr("delete " + path("b") +
                                  " (or pass a fresh backup directory) "
                                  "to start over"));
}

}  // namespace
}  // namespace kiln::nn
