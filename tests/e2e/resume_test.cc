// Kill and resume: a trainer process (tests/e2e/resume_trainer.cc) SIGKILLed in the middle of
// training, or in the middle of writing a backup, is started again with the same command; it
// resumes from its BackupAndRestore backup and ends bit-identical to an uninterrupted run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "kiln/io/checkpoint.h"
#include "tests/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;
using testing_util::ProcessResult;

class ResumeTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_util::per_test_dir("kiln_resume");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Runs the trainer with its backups in `backup` and final state in `out`.
  ProcessResult train(const std::string& backup, const std::string& out, int64_t kill_at = 0,
                      const std::map<std::string, std::string>& env = {}, int save_every = 7) {
    return testing_util::run_process(
        {KILN_RESUME_TRAINER, "--backup_dir=" + path(backup), "--out=" + path(out),
         "--kill_at_step=" + std::to_string(kill_at), "--save_every=" + std::to_string(save_every)},
        path(backup + ".log." + std::to_string(++runs_)), env);
  }

  // The uninterrupted run's final state.
  io::Checkpoint reference() {
    ProcessResult r = train("ref_backup", "ref");
    EXPECT_TRUE(r.exited_ok()) << r.output;
    EXPECT_THAT(r.output, HasSubstr("done: 60 steps"));
    EXPECT_FALSE(fs::exists(path("ref_backup")));  // deleted after a successful fit
    return io::load_checkpoint(path("ref"));
  }

  static void expect_bit_identical(const io::Checkpoint& got, const io::Checkpoint& want) {
    ASSERT_EQ(got.tensors.size(), want.tensors.size());
    for (const auto& [name, t] : want.tensors) {
      ASSERT_TRUE(got.tensors.count(name)) << name;
      const Tensor& g = got.tensors.at(name);
      ASSERT_EQ(g.nbytes(), t.nbytes()) << name;
      EXPECT_EQ(std::memcmp(g.raw_data(), t.raw_data(), t.nbytes()), 0) << name;
    }
  }

  fs::path dir_;
  int runs_ = 0;
};

TEST_F(ResumeTest, KilledMidTrainingResumesAndEndsBitIdentical) {
  const io::Checkpoint ref = reference();
  EXPECT_EQ(ref.tensors.at("optimizer/iterations").item<int64_t>(), 60);

  // Killed after step 30 (epoch 2, batch 10): the last backup is from step 28.
  ProcessResult killed = train("backup", "final", /*kill_at=*/30);
  ASSERT_TRUE(killed.killed_by(SIGKILL)) << killed.output;
  EXPECT_THAT(killed.output, HasSubstr("killing myself after step 30"));
  EXPECT_FALSE(fs::exists(path("final.index")));
  io::Checkpoint backup = io::load_checkpoint(path("backup"));
  EXPECT_EQ(backup.get_int("step"), 28);
  EXPECT_EQ(backup.get_int("epoch"), 1);  // 28 = 20 + 8: the next batch is epoch 1's batch 8
  EXPECT_EQ(backup.get_int("batch"), 8);

  // The same command again: it resumes at the backup and finishes.
  ProcessResult resumed = train("backup", "final", /*kill_at=*/30);
  ASSERT_TRUE(resumed.exited_ok()) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("resumed at epoch 1 batch 8"));
  EXPECT_THAT(resumed.output, testing::Not(HasSubstr("step 28 ")));  // no step is run twice
  EXPECT_THAT(resumed.output, HasSubstr("step 29 "));
  EXPECT_FALSE(fs::exists(path("backup")));
  expect_bit_identical(io::load_checkpoint(path("final")), ref);
}

TEST_F(ResumeTest, KilledWhileWritingABackupKeepsThePreviousOneAndEndsBitIdentical) {
  const io::Checkpoint ref = reference();
  // The third save (step 21) dies halfway through writing its data file.
  ProcessResult killed = train("backup", "final", 0, {{"KILN_FAULT_KILL_DURING_SAVE", "3"}});
  ASSERT_TRUE(killed.killed_by(SIGKILL)) << killed.output;
  EXPECT_THAT(killed.output, HasSubstr("step 20 "));  // step 21's line comes after its save
  EXPECT_THAT(killed.output, testing::Not(HasSubstr("step 21 ")));
  bool partial = false;
  for (const auto& e : fs::directory_iterator(path("backup")))
    partial |= e.path().filename().string().find(".tmp-") != std::string::npos;
  EXPECT_TRUE(partial);  // the interrupted save's temp file
  EXPECT_EQ(io::latest_checkpoint(path("backup")), path("backup/ckpt-14"));
  io::Checkpoint previous = io::load_checkpoint(path("backup"));  // every CRC checks out
  EXPECT_EQ(previous.get_int("step"), 14);
  EXPECT_EQ(previous.tensors.at("optimizer/iterations").item<int64_t>(), 14);

  ProcessResult resumed = train("backup", "final");
  ASSERT_TRUE(resumed.exited_ok()) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("resumed at epoch 0 batch 14"));
  expect_bit_identical(io::load_checkpoint(path("final")), ref);
}

TEST_F(ResumeTest, KilledTwiceStillEndsBitIdentical) {
  const io::Checkpoint ref = reference();
  ASSERT_TRUE(train("backup", "final", 12).killed_by(SIGKILL));  // backup at step 7
  ProcessResult second = train("backup", "final", 0, {{"KILN_FAULT_KILL_DURING_SAVE", "4"}});
  ASSERT_TRUE(second.killed_by(SIGKILL)) << second.output;  // saves 14, 21, 28; 35 dies
  EXPECT_THAT(second.output, HasSubstr("resumed at epoch 0 batch 7"));
  ProcessResult third = train("backup", "final");
  ASSERT_TRUE(third.exited_ok()) << third.output;
  EXPECT_THAT(third.output, HasSubstr("resumed at epoch 1 batch 8"));
  expect_bit_identical(io::load_checkpoint(path("final")), ref);
}

TEST_F(ResumeTest, ABackupOnAnEpochsLastBatchResumesAtTheNextEpoch) {
  const io::Checkpoint ref = reference();
  // Every 10 steps: step 20 is epoch 0's last batch; the backup says (epoch 1, batch 0).
  ASSERT_TRUE(train("backup", "final", 25, {}, 10).killed_by(SIGKILL));
  io::Checkpoint backup = io::load_checkpoint(path("backup"));
  EXPECT_EQ(backup.get_int("step"), 20);
  EXPECT_EQ(backup.get_int("epoch"), 1);
  EXPECT_EQ(backup.get_int("batch"), 0);
  ProcessResult resumed = train("backup", "final", 25, {}, 10);
  ASSERT_TRUE(resumed.exited_ok()) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("resumed at epoch 1 batch 0"));
  expect_bit_identical(io::load_checkpoint(path("final")), ref);
}

}  // namespace
}  // namespace kiln
