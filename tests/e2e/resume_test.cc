// Kill and resume: a trainer process (tests/e2e/resume_trainer.cc) SIGKILLed in the middle of
// training, at each stage of writing a backup, or from outside at random moments, is started
// again with the same command; it resumes from its BackupAndRestore backup and ends
// bit-identical to an uninterrupted run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "kiln/io/checkpoint.h"
#include "tests/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;
using testing_util::ProcessResult;
using namespace std::chrono_literals;

class ResumeTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_util::per_test_dir("kiln_resume");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The trainer's command line: backups in `backup`, the final state in `out`.
  std::vector<std::string> command(const std::string& backup, const std::string& out,
                                   int64_t kill_at = 0, int save_every = 7, int epochs = 3) const {
    return {KILN_RESUME_TRAINER,
            "--backup_dir=" + path(backup),
            "--out=" + path(out),
            "--kill_at_step=" + std::to_string(kill_at),
            "--save_every=" + std::to_string(save_every),
            "--epochs=" + std::to_string(epochs)};
  }
  std::string next_log(const std::string& backup) {
    return path(backup + ".log." + std::to_string(++runs_));
  }

  // Runs the trainer with its backups in `backup` and final state in `out`.
  ProcessResult train(const std::string& backup, const std::string& out, int64_t kill_at = 0,
                      const std::map<std::string, std::string>& env = {}, int save_every = 7) {
    return testing_util::run_process(command(backup, out, kill_at, save_every), next_log(backup),
                                     env);
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

  // No half-written file passes for a backup: latest_checkpoint finds one that loads (every CRC
  // checked), and so does every other index in `dir`. Returns the latest, if any.
  static std::optional<io::Checkpoint> loadable_backups(const std::string& dir) {
    std::optional<std::string> latest;
    EXPECT_NO_THROW(latest = io::latest_checkpoint(dir));
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().string();
      if (name.size() < 6 || name.compare(name.size() - 6, 6, ".index") != 0) continue;
      EXPECT_NO_THROW(io::load_checkpoint(name)) << name << " is not a complete checkpoint";
    }
    if (!latest) return std::nullopt;
    std::optional<io::Checkpoint> backup;
    EXPECT_NO_THROW(backup = io::load_checkpoint(*latest));
    return backup;
  }

  fs::path dir_;
  int runs_ = 0;
};

// The names of the temp files of interrupted saves in `dir`.
std::set<std::string> temp_files(const std::string& dir) {
  std::set<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find(".tmp-") != std::string::npos) names.insert(name);
  }
  return names;
}

// Where a run resumes: the step of its backup and the position in fit the backup records.
struct Position {
  int64_t step, epoch, batch;
  static Position of(const io::Checkpoint& backup) {
    return {backup.get_int("step"), backup.get_int("epoch"), backup.get_int("batch")};
  }
};

// The first "step N" a trainer's output logs; nullopt if none.
std::optional<int64_t> first_step(const std::string& output) {
  const size_t at = output.rfind("step ", 0) == 0 ? 0 : output.find("\nstep ");
  if (at == std::string::npos) return std::nullopt;
  return std::stoll(output.substr(output.find("step ", at) + 5));
}

// A run started from the backup at `from` (none: from scratch) says where it resumed, and its
// first step is the one after the backup's: no step is lost or run twice.
void expect_resumed_from(const std::string& output, const std::optional<Position>& from) {
  if (from) {
    EXPECT_THAT(output, HasSubstr("resumed at epoch " + std::to_string(from->epoch) + " batch " +
                                  std::to_string(from->batch) + "\n"));
  } else {
    EXPECT_THAT(output, testing::Not(HasSubstr("resumed at")));
  }
  if (std::optional<int64_t> first = first_step(output)) {
    EXPECT_EQ(*first, (from ? from->step : 0) + 1) << output.substr(0, 200);
  }
}

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

// The third backup (step 21) is killed at one stage of its save (KILN_FAULT_KILL_DURING_SAVE,
// stages in src/api/io/checkpoint.cc).
class ResumeKilledSaveTest : public ResumeTest, public testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {  // per_test_dir would name a subdirectory: the test's name has a '/'
    dir_ = fs::path(testing::TempDir()) /
           ("kiln_resume_" + std::to_string(getpid()) + "_killed_at_" + GetParam());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
};

TEST_P(ResumeKilledSaveTest, ResumesFromTheBackupItLeftAndEndsBitIdentical) {
  const std::string stage = GetParam();
  const io::Checkpoint ref = reference();
  ProcessResult killed =
      train("backup", "final", 0, {{"KILN_FAULT_KILL_DURING_SAVE", "3:" + stage}});
  ASSERT_TRUE(killed.killed_by(SIGKILL)) << killed.output;
  EXPECT_THAT(killed.output, HasSubstr("step 20 "));  // step 21's line comes after its save
  EXPECT_THAT(killed.output, testing::Not(HasSubstr("step 21 ")));
  // Until the pointer names step 21, the backup is step 14's, even once step 21's is committed.
  const bool pointer_moved = stage == "pointer_renamed" || stage == "old_removed";
  const Position want = pointer_moved ? Position{21, 1, 1} : Position{14, 0, 14};
  EXPECT_EQ(!temp_files(path("backup")).empty(), stage.find("_partial") != std::string::npos ||
                                                     stage.find("_written") != std::string::npos);
  std::optional<io::Checkpoint> backup = loadable_backups(path("backup"));
  ASSERT_TRUE(backup);
  EXPECT_EQ(backup->prefix, path("backup/ckpt-" + std::to_string(want.step)));
  EXPECT_EQ(backup->get_int("step"), want.step);
  EXPECT_EQ(backup->tensors.at("optimizer/iterations").item<int64_t>(), want.step);

  ProcessResult resumed = train("backup", "final");
  ASSERT_TRUE(resumed.exited_ok()) << resumed.output;
  expect_resumed_from(resumed.output, want);
  expect_bit_identical(io::load_checkpoint(path("final")), ref);
}

INSTANTIATE_TEST_SUITE_P(EveryStage, ResumeKilledSaveTest,
                         testing::Values("data_partial", "data_written", "data_renamed",
                                         "index_partial", "index_written", "index_renamed",
                                         "stale_removed", "pointer_partial", "pointer_written",
                                         "pointer_renamed", "old_removed"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

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

// SIGKILLed from outside at random moments of training, several times in a row, each run
// resuming from the backup the killed one left: the last run ends bit-identical to an
// uninterrupted one. Backups every 2 steps over 240 steps, so most kills land inside a save and
// each resume replays up to a step.
TEST_F(ResumeTest, KilledFromOutsideAtRandomMomentsEndsBitIdentical) {
  constexpr int kKills = 6, kSaveEvery = 2, kEpochs = 12, kSteps = 20 * kEpochs;
  constexpr uint64_t kSeed = 0x6b696c6c;

  // The uninterrupted run, timed from its first step: each kill comes a random fraction of
  // 1/kKills of that after a run's first step, so that a run is killed before it finishes (half
  // that once a run finished first: the machine got faster).
  const std::vector<std::string> ref_command = command("ref_backup", "ref", 0, kSaveEvery, kEpochs);
  const std::string ref_log = next_log("ref_backup");
  const pid_t ref_pid = testing_util::spawn_process(ref_command, ref_log);
  ASSERT_GT(ref_pid, 0);
  const bool ref_started = testing_util::wait_for_output(ref_pid, ref_log, "step ", 60s);
  const auto started_at = std::chrono::steady_clock::now();
  ProcessResult ref_run = testing_util::wait_process(ref_pid, ref_log);
  const auto training = std::chrono::steady_clock::now() - started_at;
  ASSERT_TRUE(ref_started && ref_run.exited_ok()) << ref_run.output;
  ASSERT_THAT(ref_run.output, HasSubstr("done: " + std::to_string(kSteps) + " steps"));
  const io::Checkpoint ref = io::load_checkpoint(path("ref"));

  const std::vector<std::string> cmd = command("backup", "final", 0, kSaveEvery, kEpochs);
  std::mt19937_64 rng(kSeed);
  std::uniform_real_distribution<double> fraction(0.0, 1.0);
  std::ostringstream history;  // printed with every failure: the seed and each run's kill
  history << "seed " << kSeed << ", reference training "
          << std::chrono::duration_cast<std::chrono::microseconds>(training).count() << " us;";
  std::optional<Position> from;  // the backup the next run resumes from
  double max_delay_us =
      std::chrono::duration_cast<std::chrono::microseconds>(training).count() / double{kKills};
  int kills = 0;
  for (int run = 0; kills < kKills && run < 3 * kKills; ++run) {
    const auto delay =
        std::chrono::microseconds(static_cast<int64_t>(fraction(rng) * max_delay_us));
    history << " run " << run << " killed " << delay.count() << " us after its first step";
    SCOPED_TRACE(history.str());
    const std::set<std::string> temps_before = temp_files(path("backup"));
    const std::string log = next_log("backup");
    const pid_t pid = testing_util::spawn_process(cmd, log);
    ASSERT_GT(pid, 0);
    const bool stepping = testing_util::wait_for_output(pid, log, "step ", 60s);
    if (stepping) std::this_thread::sleep_for(delay);
    kill(pid, SIGKILL);  // nothing if it has exited already
    ProcessResult r = testing_util::wait_process(pid, log);
    expect_resumed_from(r.output, from);
    if (r.exited_ok()) {  // done before the kill: it must be right all the same
      history << " (finished first)";
      expect_bit_identical(io::load_checkpoint(path("final")), ref);
      io::remove_checkpoint(path("final"));
      from.reset();  // the backups went with the successful end
      max_delay_us /= 2;
      continue;
    }
    ASSERT_TRUE(stepping && r.killed_by(SIGKILL))
        << "the run neither trained within 60 s nor finished:\n"
        << r.output;
    ++kills;
    // The latest backup is a good one, never older than the one this run resumed from, until the
    // run finished training and deleted its backups.
    std::optional<io::Checkpoint> backup = loadable_backups(path("backup"));
    if (HasFailure()) return;
    if (!backup) {
      EXPECT_TRUE(!from ||
                  r.output.find("step " + std::to_string(kSteps) + " ") != std::string::npos)
          << "the backup is gone, but training had not finished";
      from.reset();
      continue;
    }
    const Position at = Position::of(*backup);
    if (from) EXPECT_GE(at.step, from->step);
    EXPECT_EQ(backup->tensors.at("optimizer/iterations").item<int64_t>(), at.step);
    const std::set<std::string> temps = temp_files(path("backup"));
    const bool mid_save = !std::includes(temps_before.begin(), temps_before.end(), temps.begin(),
                                         temps.end());  // a new temp file: killed inside a save
    history << " (backup at step " << at.step << (mid_save ? ", a save interrupted)" : ")");
    from = at;
  }
  SCOPED_TRACE(history.str());
  RecordProperty("kills", history.str());  // in --gtest_output=xml
  EXPECT_EQ(kills, kKills);

  ProcessResult last = testing_util::run_process(cmd, next_log("backup"));
  ASSERT_TRUE(last.exited_ok()) << last.output;
  expect_resumed_from(last.output, from);
  EXPECT_THAT(last.output, HasSubstr("done: " + std::to_string(kSteps) + " steps"));
  expect_bit_identical(io::load_checkpoint(path("final")), ref);
}

}  // namespace
}  // namespace kiln
