// Progress output of fit.
#include "src/api/nn/progress.h"

#include <unistd.h>

#include <cstdio>

namespace kiln::nn {

std::string format_logs(const Logs& logs) {
  std::string out;
  // Training values first, then validation, each in name order (std::map order).
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [k, v] : logs) {
      if (k == "batch_loss" || (k.rfind("val_", 0) == 0) != (pass == 1)) continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.4f", v);
      out += " - " + k + ": " + buf;
    }
  }
  return out;
}

ProgressBar::ProgressBar(int verbose, int64_t steps)
    : verbose_(verbose), steps_(steps), terminal_(isatty(fileno(stdout)) != 0) {}

void ProgressBar::begin_epoch(int epoch, int epochs) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
  if (verbose_ == 0) return;
  std::printf("Epoch %d/%d\n", epoch + 1, epochs);
  std::fflush(stdout);
}

std::string ProgressBar::line(int64_t step, const Logs& logs, bool final) const {
  using namespace std::chrono;
  double elapsed = duration<double>(steady_clock::now() - start_).count();
  std::string digits = steps_ >= 0 ? std::to_string(steps_) : "Unknown";
  char head[64];
  std::snprintf(head, sizeof head, "%*lld/%s", steps_ >= 0 ? static_cast<int>(digits.size()) : 0,
                static_cast<long long>(step), digits.c_str());
  std::string out = head;
  if (verbose_ == 1 && steps_ >= 0) {
    const int width = 30;
    int filled = steps_ ? static_cast<int>(width * step / steps_) : width;
    std::string bar(width, '.');
    for (int i = 0; i < filled; ++i) bar[i] = '=';
    if (filled < width && filled > 0) bar[filled - 1] = '>';
    out += " [" + bar + "]";
  }
  char timing[64];
  double per_step = step ? elapsed / step : 0;
  if (final || steps_ < 0) {
    std::snprintf(timing, sizeof timing, " - %.0fs %.0fms/step", elapsed, per_step * 1e3);
  } else {
    std::snprintf(timing, sizeof timing, " - ETA: %.0fs", per_step * (steps_ - step));
  }
  return out + timing + format_logs(logs);
}

void ProgressBar::update(int64_t step, const Logs& logs) {
  if (verbose_ != 1 || !terminal_) return;
  auto now = std::chrono::steady_clock::now();
  if ((steps_ < 0 || step < steps_) && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  std::printf("\r%s\033[K", line(step, logs, false).c_str());
  std::fflush(stdout);
}

void ProgressBar::end_epoch(int64_t steps_run, const Logs& logs) {
  if (verbose_ == 0) return;
  if (steps_ < 0) steps_ = steps_run;  // known after the first epoch
  std::printf("%s%s\n", terminal_ && verbose_ == 1 ? "\r" : "",
              line(steps_run, logs, true).c_str());
  std::fflush(stdout);
}

}  // namespace kiln::nn
