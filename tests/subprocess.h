// Runs a program as a child process for tests that need a separate process (resume after a
// kill, loading a model without the code that built it, command-line tools).
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kiln::testing_util {

struct ProcessResult {
  int status = 0;      // from waitpid
  std::string output;  // stdout and stderr together
  bool exited_ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  bool killed_by(int signal) const { return WIFSIGNALED(status) && WTERMSIG(status) == signal; }
};

// Starts `argv` with extra environment variables, its stdout and stderr going to `log_path`.
// Returns the child's pid, or -1 if it could not be started.
inline pid_t spawn_process(const std::vector<std::string>& argv, const std::string& log_path,
                           const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    // A sharded run's (make check) shard would make a child kiln_tests run none of its tests.
    if (key == "GTEST_TOTAL_SHARDS" || key == "GTEST_SHARD_INDEX") continue;
    if (!env.count(key)) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// Waits for the child `pid` started by spawn_process and reads its output from `log_path`.
inline ProcessResult wait_process(pid_t pid, const std::string& log_path) {
  ProcessResult result;
  while (waitpid(pid, &result.status, 0) < 0 && errno == EINTR) {
  }
  std::ifstream in(log_path, std::ios::binary);
  result.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return result;
}

// Waits until the output of the running child `pid` (in `log_path`) contains `text`: true then;
// false if the child exits first or `timeout` passes. The child is left to wait_process.
inline bool wait_for_output(pid_t pid, const std::string& log_path, const std::string& text,
                            std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(log_path, std::ios::binary);
    const std::string output{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (output.find(text) != std::string::npos) return true;
    siginfo_t info{};
    if (waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) {
      return false;  // exited (not reaped: WNOWAIT)
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return false;
}

// Runs `argv` with extra environment variables, capturing its output in `log_path`.
inline ProcessResult run_process(const std::vector<std::string>& argv, const std::string& log_path,
                                 const std::map<std::string, std::string>& env = {}) {
  const pid_t pid = spawn_process(argv, log_path, env);
  if (pid < 0) return {.status = -1, .output = "posix_spawn failed for " + argv[0]};
  return wait_process(pid, log_path);
}

}  // namespace kiln::testing_util
