// The MPI collectives under mpirun: tests/distribute/mpi_worker.cc checks every collective on 2
// and 4 ranks; a rank that kills itself mid-job makes the survivors fail with the deadline error;
// MultiWorkerMirroredStrategy trains on 2 and 4 workers and refuses workers started differently;
// a worker leaving at start-up ends the job at once, with an error naming it;
// a worker killed (SIGKILL) or stopped (SIGSTOP) mid-training ends the job within the deadline,
// and running it again resumes from BackupAndRestore's backup to an uninterrupted run's weights.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/distribute/collective.h"

extern char** environ;

namespace kiln::distribute {
namespace {

struct JobResult {
  bool finished = false;  // false: killed at the test's timeout
  int status = 0;
  double seconds = 0;
  std::string output;
};

// The processes below `root`, by the parent links in /proc.
std::vector<pid_t> descendants_of(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const pid_t pid = std::atoi(entry.path().filename().c_str());
    if (pid <= 0) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    const size_t name_end = stat.rfind(')');
    if (name_end == std::string::npos) continue;
    std::istringstream rest(stat.substr(name_end + 1));
    char state = 0;
    pid_t parent = 0;
    rest >> state >> parent;
    children[parent].push_back(pid);
  }
  std::vector<pid_t> found = children[root];
  for (size_t i = 0; i < found.size(); ++i)
    for (pid_t c : children[found[i]]) found.push_back(c);
  return found;
}

// Kills every process this test process started that is still there (a rank that mpirun left
// behind comes to this process, its subreaper, when mpirun ends) and reaps them.
void kill_and_reap_children() {
  for (pid_t pid : descendants_of(getpid())) kill(pid, SIGKILL);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < give_up) {
    int status = 0;
    const pid_t reaped = waitpid(-1, &status, WNOHANG);
    if (reaped < 0 && errno == ECHILD) return;  // none left
    if (reaped == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Runs mpirun in a process group of its own, killing the whole group (mpirun and every rank)
// when it ends or at `timeout`, then whatever of the job is left anywhere below this process,
// reaping it, so nothing outlives the test.
JobResult run_job(int ranks, const std::map<std::string, std::string>& env,
                  const std::vector<std::string>& mpirun_flags, std::chrono::seconds timeout) {
  const std::string log = ::testing::TempDir() + "mpi_job_" + std::to_string(getpid()) + ".log";
  std::vector<std::string> argv = {KILN_MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np",
                                   std::to_string(ranks)};
  argv.insert(argv.end(), mpirun_flags.begin(), mpirun_flags.end());
  for (const auto& [k, v] : env) argv.insert(argv.end(), {"-x", k + "=" + v});
  argv.push_back(KILN_MPI_WORKER);
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  // Ranks orphaned by mpirun's end become this process's children, so it can kill and reap them.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  const auto start = std::chrono::steady_clock::now();
  const int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  JobResult result;
  if (rc != 0) {
    result.output = "could not start " + argv[0];
    return result;
  }
  while (std::chrono::steady_clock::now() - start < timeout) {
    if (waitpid(pid, &result.status, WNOHANG) == pid) {
      result.finished = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  kill(-pid, SIGKILL);  // whatever is left of the job
  if (!result.finished) waitpid(pid, &result.status, 0);
  kill_and_reap_children();
  std::ifstream in(log, std::ios::binary);
  result.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::remove(log.c_str());
  return result;
}

bool skip_reason(std::string* reason) {
  if (std::string(KILN_MPIRUN).empty()) {
    *reason = "mpirun was not found when the tests were configured (install openmpi-bin)";
    return true;
  }
  if (!mpi_available()) {
    *reason = "Kiln was built without MPI (libopenmpi-dev missing at configure time)";
    return true;
  }
  return false;
}

TEST(MpiCollective, EveryCollectiveAndDTypeUnderMpirunWith2And4Ranks) {
  std::string reason;
  if (skip_reason(&reason)) GTEST_SKIP() << reason;
  for (int ranks : {2, 4}) {
    const JobResult job =
        run_job(ranks, {{"KILN_COLLECTIVE_TIMEOUT", "60"}}, {}, std::chrono::seconds(120));
    ASSERT_TRUE(job.finished) << "mpirun -np " << ranks << " did not finish:\n" << job.output;
    EXPECT_TRUE(WIFEXITED(job.status) && WEXITSTATUS(job.status) == 0) << job.output;
    for (int r = 0; r < ranks; ++r) {
      EXPECT_NE(job.output.find("rank " + std::to_string(r) + " of " + std::to_string(ranks) +
                                ": ok, local rank " + std::to_string(r)),
                std::string::npos)
          << "-np " << ranks << ", rank " << r << ":\n"
          << job.output;
    }
    EXPECT_EQ(job.output.find("FAIL"), std::string::npos) << job.output;
  }
}

TEST(MpiCollective, AKilledRankMakesTheSurvivorsFailWithTheDeadlineErrorNamingIt) {
  std::string reason;
  if (skip_reason(&reason)) GTEST_SKIP() << reason;
  // --enable-recovery: mpirun lets the survivors run on after a rank dies (by default it kills
  // them within a second or two), so the test sees what Kiln tells them.
  // 4 rows: small all_reduces, polled; 100,000 rows (1.2 MB): moved on the communication thread.
  for (const char* rows : {"4", "100000"}) {
    const JobResult job = run_job(3,
                                  {{"KILN_COLLECTIVE_TIMEOUT", "1"},
                                   {"KILN_TEST_KILL_RANK", "1"},
                                   {"KILN_TEST_KILL_STEP", "3"},
                                   {"KILN_TEST_KILL_ROWS", rows}},
                                  {"--enable-recovery"}, std::chrono::seconds(60));
    ASSERT_TRUE(job.finished) << "the job hung (" << rows << " rows):\n" << job.output;
    for (int r : {0, 2}) {
      const std::string line = "error deadline exceeded: all_reduce step 3 (rank " +
                               std::to_string(r) + " of 3, mpi): rank 1 did not arrive within 1 s";
      EXPECT_NE(job.output.find(line), std::string::npos) << rows << " rows, rank " << r << ":\n"
                                                          << job.output;
    }
    EXPECT_EQ(job.output.find("finished without noticing"), std::string::npos) << job.output;
    EXPECT_LT(job.seconds, 30) << job.output;
  }
}

// A rank stopped (SIGSTOP) during a loop of 12 MB all_reduces, most likely while the data
// moves on the communication thread: a peer fails with the deadline error naming the
// collective and its step, and the job ends. Which ranks get to print depends on mpirun (it
// aborts the others once one exits with an error, and may resume the stopped one).
TEST(MpiCollective, AStoppedRankMakesAPeerFailWithTheDeadlineError) {
  std::string reason;
  if (skip_reason(&reason)) GTEST_SKIP() << reason;
  const JobResult job = run_job(3, {{"KILN_COLLECTIVE_TIMEOUT", "2"}, {"KILN_TEST_STOP_RANK", "1"}},
                                {}, std::chrono::seconds(60));
  ASSERT_TRUE(job.finished) << "the job hung:\n" << job.output;
  const std::string error = "error deadline exceeded: all_reduce step ";
  const size_t at = job.output.find(error);
  ASSERT_NE(at, std::string::npos) << job.output;
  // Either the calls' exchange (a rank did not arrive) or the transfer (every rank arrived).
  const std::string line = job.output.substr(at, job.output.find('\n', at) - at);
  EXPECT_TRUE(line.find("did not arrive within 2 s") != std::string::npos ||
              line.find("every rank arrived, but the transfer did not complete within 2 s") !=
                  std::string::npos)
      << job.output;
  EXPECT_EQ(job.output.find("finished without noticing"), std::string::npos) << job.output;
  EXPECT_LT(job.seconds, 45) << job.output;
}

// A rank stopped (SIGSTOP) while it waits for its peer, which arrives meanwhile, and resumed
// (SIGCONT) past its deadline: the exchange completed while it was stopped, so the collective
// succeeds; neither "rank  did not arrive" (no rank) nor the peer that was there is blamed
// (tests/distribute/mpi_worker.cc, KILN_TEST_MODE=resumed_wait).
TEST(MpiCollective, ARankResumedPastItsDeadlineFindsTheExchangeThatCompletedWhileItWasStopped) {
  std::string reason;
  if (skip_reason(&reason)) GTEST_SKIP() << reason;
  const JobResult job =
      run_job(2, {{"KILN_TEST_MODE", "resumed_wait"}}, {}, std::chrono::seconds(60));
  ASSERT_TRUE(job.finished) << "the job hung:\n" << job.output;
  EXPECT_TRUE(WIFEXITED(job.status) && WEXITSTATUS(job.status) == 0) << job.output;
  for (int r : {0, 1}) {
    EXPECT_NE(job.output.find("rank " + std::to_string(r) + " of 2: resumed ok"), std::string::npos)
        << job.output;
  }
  EXPECT_EQ(job.output.find("error"), std::string::npos) << job.output;
}

// MultiWorkerMirroredStrategy under mpirun: every worker ends with the chief's weights (bit for
// bit), which are within the reassociation bound of one process's; only the chief prints
// progress.
TEST(MultiWorkerMpi, FitWith2And4WorkersMatchesOneProcessAndOnlyTheChiefPrints) {
  std::string reason;
  if (skip_reason(&reason)) GTEST_SKIP() << reason;
  // Also with 16-byte gradient buckets (several a step): with 4 workers a batch of 10 gives parts
  // of 2 and 3 rows, compiled apart, whose buckets must still run in one order.
  for (auto [ranks, bucket] : {std::pair{2, ""}, {4, ""}, {2, "16"}, {4, "16"}}) {
    std::map<std::string, std::string> env = {{"KILN_COLLECTIVE_TIMEOUT", "60"},
                                              {"KILN_TEST_MODE", "fit"}};
    if (*bucket) env["KILN_TEST_BUCKET_BYTES"] = bucket;
    const JobResult job = run_job(ranks, env, {}, std::chrono::seconds(180));
    ASSERT_TRUE(job.finished) << "mpirun -np " << ranks << " did not finish:\n" << job.output;
    EXPECT_TRUE(WIFEXITED(job.status) && WEXITSTATUS(job.status) == 0) << job.output;
    for (int r = 0; r < ranks; ++r) {
      EXPECT_NE(job.output.find("rank " + std::to_string(r) + " of " + std::to_string(ranks) +
                                ": weights identical to the chief's"),
                std::string::npos)
          << job.output;
    }
    EXPECT_NE(job.output.find("rank 0 of " + std::to_string(ranks) +
                              ": within the bound of one process's weights"),
              std::string::npos)
        << job.output;
    const size_t first = job.output.find("Epoch 2/2");
    EXPECT_NE(first, std::string::npos) << job.output;
    EXPECT_EQ(job.output.find("Epoch 2/2", first + 1), std::string::npos)
        << "progress printed by more than the chief:\n"
        << job.output;
  }
}

TEST(MultiWorkerMpi, AWorkerWithAnotherGlobalBatchModelDTypeOrPolicyMakesEveryWorkerFailAtStartUp) {
  std::string reason;
  if (skip_reason(&reason)) GTEST_SKIP() << reason;
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"KILN_TEST_BATCH", "24"}, {"KILN_TEST_WORKER1_BATCH", "12"}},
       "global batch: worker 0 has 24; worker 1 has 12"},
      {{{"KILN_TEST_WORKER1_MODEL", "two_layers"}},
       "layers: worker 0 has Dense; worker 1 has Dense Dense"},
      {{{"KILN_TEST_WORKER1_MODEL", "f64"}},
       "inputs: worker 0 has f32[?,6]; worker 1 has f64[?,6]"},
      {{{"KILN_TEST_WORKER1_MODEL", "mixed_bfloat16"}},
       "dtype policy: worker 0 has float32; worker 1 has mixed_bfloat16"},
      // A Dataset's batches of 16 and 8 rows over 96 and 48 rows: 6 steps an epoch on both.
      {{{"KILN_TEST_DATASET", "1"},
        {"KILN_TEST_BATCH", "16"},
        {"KILN_TEST_ROWS", "96"},
        {"KILN_TEST_WORKER1_BATCH", "8"},
        {"KILN_TEST_WORKER1_ROWS", "48"}},
       "global batch: worker 0 has 16; worker 1 has 8"}};
  for (const auto& [settings, difference] : cases) {
    std::map<std::string, std::string> env = settings;
    env["KILN_COLLECTIVE_TIMEOUT"] = "60";
    env["KILN_TEST_MODE"] = "fit";
    const JobResult job = run_job(2, env, {}, std::chrono::seconds(120));
    ASSERT_TRUE(job.finished) << job.output;
    // Both workers print the same error (the worker prints what fit threw, once).
    auto count = [&](const std::string& what) {
      int n = 0;
      for (size_t at = job.output.find(what); at != std::string::npos;
           at = job.output.find(what, at + 1))
        ++n;
      return n;
    };
    EXPECT_EQ(count("error failed precondition: MultiWorkerMirroredStrategy: the 2 workers were "
                    "started with different settings"),
              2)
        << job.output;
    EXPECT_EQ(count(difference), 2) << job.output;
    EXPECT_LT(job.seconds, 60) << job.output;
  }
}

// A worker leaving during start-up, before fit's consistency check, under the default 5-minute
// deadline: an error (its communicator closes as the error unwinds, then the process exits)
// makes the waiting worker fail at once naming it, and the job end; a SIGKILL makes mpirun end
// the job itself, naming the rank and the signal. mpirun's --timeout of 60 s bounds the job:
// a survivor waiting out its deadline would end it with mpirun's time-limit message instead.
TEST(MultiWorkerMpi, AWorkerLeavingAtStartUpEndsTheJobWithAnErrorNamingIt) {
  std::string reason;
  if (skip_reason(&reason)) GTEST_SKIP() << reason;
  const std::map<std::string, std::string> env = {
      {"KILN_COLLECTIVE_TIMEOUT", "300"}, {"KILN_TEST_MODE", "fit"}, {"KILN_TEST_EXIT_RANK", "1"}};
  auto with = [&](const char* how) {
    std::map<std::string, std::string> e = env;
    e["KILN_TEST_EXIT"] = how;
    return e;
  };
  const JobResult error = run_job(2, with("error"), {"--timeout", "60"}, std::chrono::seconds(120));
  ASSERT_TRUE(error.finished) << error.output;
  EXPECT_TRUE(WIFEXITED(error.status) && WEXITSTATUS(error.status) != 0) << error.output;
  EXPECT_NE(error.output.find("error not found: rank 1 of 2: leaving at start-up"),
            std::string::npos)
      << error.output;
  EXPECT_NE(error.output.find("error unavailable: all_gather step 1 (rank 0 of 2, mpi): rank 1 "
                              "left the job without joining it"),
            std::string::npos)
      << error.output;
  EXPECT_EQ(error.output.find("time limit"), std::string::npos) << error.output;

  const JobResult killed = run_job(2, with("kill"), {"--timeout", "60"}, std::chrono::seconds(120));
  ASSERT_TRUE(killed.finished) << killed.output;
  EXPECT_TRUE(WIFEXITED(killed.status) && WEXITSTATUS(killed.status) != 0) << killed.output;
  EXPECT_NE(killed.output.find("process rank 1 with PID"), std::string::npos) << killed.output;
  EXPECT_NE(killed.output.find("exited on signal 9"), std::string::npos) << killed.output;
  EXPECT_EQ(killed.output.find("time limit"), std::string::npos) << killed.output;
}

// The line of `output` starting at `what`, or "".
std::string line_at(const std::string& output, const std::string& what) {
  const size_t at = output.find(what);
  if (at == std::string::npos) return "";
  return output.substr(at, output.find('\n', at) - at);
}

// Training for 4 epochs with BackupAndRestore every 7 batches (tests/distribute/mpi_worker.cc,
// KILN_TEST_MODE=resume): worker `victim` sends itself `signal` at the end of its 25th batch
// (epoch 3; the last backup is after batch 21), with a 2 s collective deadline. The other worker
// must fail with the deadline error (or kUnavailable) within it, and the job end; running it
// again resumes at epoch 3, batch 2 and ends with the weights of an uninterrupted run, bit for
// bit: the same batches (shuffled by seed and epoch) summed over the same 2 workers.
void kill_mid_training_then_resume(int victim, const std::string& signal) {
  const std::string root = ::testing::TempDir() + "mpi_resume_" + std::to_string(getpid());
  const std::string once = root + "_uninterrupted", backup = root + "_" + signal;
  // Removed before and after, also when an assertion ends the test early.
  struct RemoveDirs {
    std::vector<std::string> dirs;
    void operator()() const {
      for (const std::string& d : dirs) std::filesystem::remove_all(d);
    }
    ~RemoveDirs() { (*this)(); }
  } remove_dirs{{once, backup}};
  remove_dirs();
  const std::string weights = "rank 0 of 2: weights ";

  const JobResult whole = run_job(2,
                                  {{"KILN_COLLECTIVE_TIMEOUT", "60"},
                                   {"KILN_TEST_MODE", "resume"},
                                   {"KILN_TEST_BACKUP_DIR", once}},
                                  {}, std::chrono::seconds(120));
  ASSERT_TRUE(whole.finished && WIFEXITED(whole.status) && WEXITSTATUS(whole.status) == 0)
      << whole.output;
  const std::string want = line_at(whole.output, weights);
  ASSERT_NE(want, "") << whole.output;

  // mpirun kills the survivors of a rank that died within a second or two unless recovery is
  // enabled; a stopped rank it does not notice, and it ends the job when the survivor exits.
  const JobResult broken = run_job(
      2,
      {{"KILN_COLLECTIVE_TIMEOUT", "2"},
       {"KILN_TEST_MODE", "resume"},
       {"KILN_TEST_BACKUP_DIR", backup},
       {"KILN_TEST_SIGNAL_RANK", std::to_string(victim)},
       {"KILN_TEST_SIGNAL", signal},
       {"KILN_TEST_SIGNAL_BATCH", "25"}},
      signal == "KILL" ? std::vector<std::string>{"--enable-recovery"} : std::vector<std::string>{},
      std::chrono::seconds(60));
  ASSERT_TRUE(broken.finished) << "the job hung after SIG" << signal << ":\n" << broken.output;
  EXPECT_LT(broken.seconds, 30) << broken.output;
  const int survivor = 1 - victim;
  const std::string prefix = "worker " + std::to_string(survivor) + " of 2: all_reduce step ";
  const std::string deadline = line_at(broken.output, "error deadline exceeded: " + prefix);
  const std::string gone = line_at(broken.output, "error unavailable: " + prefix);
  EXPECT_TRUE(deadline.find("rank " + std::to_string(victim) + " did not arrive within 2 s") !=
                  std::string::npos ||
              deadline.find("the transfer did not complete within 2 s") != std::string::npos ||
              gone.find("rank " + std::to_string(victim)) != std::string::npos)
      << "SIG" << signal << " of worker " << victim << ":\n"
      << broken.output;
  EXPECT_EQ(broken.output.find(weights), std::string::npos) << broken.output;
  ASSERT_TRUE(std::filesystem::exists(backup)) << "no backup left to resume from";

  const JobResult resumed = run_job(2,
                                    {{"KILN_COLLECTIVE_TIMEOUT", "60"},
                                     {"KILN_TEST_MODE", "resume"},
                                     {"KILN_TEST_BACKUP_DIR", backup}},
                                    {}, std::chrono::seconds(120));
  ASSERT_TRUE(resumed.finished && WIFEXITED(resumed.status) && WEXITSTATUS(resumed.status) == 0)
      << resumed.output;
  EXPECT_NE(resumed.output.find("Resuming from epoch 3, batch 2"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(line_at(resumed.output, weights), want) << resumed.output;
  EXPECT_EQ(descendants_of(getpid()), std::vector<pid_t>{}) << "processes left running";
}

TEST(MultiWorkerMpi, AKilledWorkerEndsTheJobWithinTheDeadlineAndARerunResumesToTheSameWeights) {
  std::string reason;
  if (skip_reason(&reason)) GTEST_SKIP() << reason;
  kill_mid_training_then_resume(1, "KILL");
}

TEST(MultiWorkerMpi, AStoppedChiefEndsTheJobWithinTheDeadlineAndARerunResumesToTheSameWeights) {
  std::string reason;
  if (skip_reason(&reason)) GTEST_SKIP() << reason;
  kill_mid_training_then_resume(0, "STOP");
}

}  // namespace
}  // namespace kiln::distribute
