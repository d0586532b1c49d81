// Timing helpers shared by the benchmarks (Kiln's and the LibTorch peers'): the best of several
// timed blocks, the process's CPU time, and the `RESULT key=value` lines that
// benchmarks/run.sh collects.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace kiln::bench {

// CPU seconds the process has used so far, every thread's (user and system): other work on a
// shared machine disturbs it much less than wall time.
inline double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// Calls fn once to warm up, then `reps` blocks of calls, each lasting at least `min_seconds`;
// returns the fastest block's seconds per call. The best block is the one least disturbed by
// other work on the machine.
template <class F>
double best_seconds_per_call(F&& fn, int reps = 3, double min_seconds = 0.3) {
  using Clock = std::chrono::steady_clock;
  fn();
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    int64_t calls = 0;
    double elapsed = 0;
    do {
      fn();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < min_seconds);
    best = std::min(best, elapsed / static_cast<double>(calls));
  }
  return best;
}

// Calls a and b once each to warm up, then alternately `calls` times each, timing every call;
// returns the median seconds per call of a and of b. For calls long enough to time one by one
// (tens of milliseconds): alternating exposes both to the same drift of the machine.
template <class A, class B>
std::pair<double, double> interleaved_median_seconds(A&& a, B&& b, int calls = 15) {
  using Clock = std::chrono::steady_clock;
  auto time_once = [](auto& fn) {
    const auto start = Clock::now();
    fn();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  a();
  b();
  std::vector<double> ta, tb;
  for (int i = 0; i < calls; ++i) {
    ta.push_back(time_once(a));
    tb.push_back(time_once(b));
  }
  auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  return {median(ta), median(tb)};
}

// Seconds for one call of fn (no warm-up): for costs paid once, such as a compile.
template <class F>
double seconds_once(F&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline void result(const std::string& key, double value) {
  std::printf("RESULT %s=%.6g\n", key.c_str(), value);
  std::fflush(stdout);
}

// A figure that cannot be measured yet: run.sh writes it as null with the reason.
inline void result_null(const std::string& key, const std::string& reason) {
  std::printf("RESULT %s=null reason=%s\n", key.c_str(), reason.c_str());
  std::fflush(stdout);
}

// The cases named on the command line (all of `known` when none is), or an empty list after
// printing usage when one is unknown.
inline std::vector<std::string> selected_cases(int argc, char** argv,
                                               const std::vector<std::string>& known) {
  std::vector<std::string> cases(argv + 1, argv + argc);
  if (cases.empty()) return known;
  for (const std::string& c : cases) {
    if (std::find(known.begin(), known.end(), c) == known.end()) {
      std::fprintf(stderr, "unknown case '%s'; cases:", c.c_str());
      for (const std::string& k : known) std::fprintf(stderr, " %s", k.c_str());
      std::fprintf(stderr, "\n");
      return {};
    }
  }
  return cases;
}

// The bundled trainers' f32 fit() cases, shared by Kiln's benchmarks (train_step_bench,
// step_breakdown_bench) and the LibTorch peer, so that both sides train the same batches: the
// model (the MLP or the CNN), the batch size and the batches per timed fit() call.
struct TrainerCase {
  const char* name;
  bool cnn;
  int64_t batch, steps;
};

inline const std::vector<TrainerCase>& trainer_cases() {
  static const std::vector<TrainerCase> cases = {
      {"mlp_b32", false, 32, 64},    {"mlp_b64", false, 64, 32}, {"mlp_b256", false, 256, 8},
      {"mlp_b1024", false, 1024, 4}, {"cnn_b32", true, 32, 8},   {"cnn_b128", true, 128, 2},
      {"cnn_b256", true, 256, 2}};
  return cases;
}

// The case named `name`, or null.
inline const TrainerCase* find_trainer_case(const std::string& name) {
  for (const TrainerCase& c : trainer_cases()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

// The trainer cases' names, then `more`.
inline std::vector<std::string> trainer_case_names(std::vector<std::string> more = {}) {
  std::vector<std::string> names;
  for (const TrainerCase& c : trainer_cases()) names.push_back(c.name);
  names.insert(names.end(), more.begin(), more.end());
  return names;
}

}  // namespace kiln::bench
