// The Keras-style progress display of fit: a bar redrawn in place on a terminal, one line per
// epoch otherwise (verbose 1), one line per epoch always (verbose 2), nothing (verbose 0).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "kiln/nn/callbacks.h"

namespace kiln::nn {

class ProgressBar {
 public:
  ProgressBar(int verbose, int64_t steps);
  void begin_epoch(int epoch, int epochs);
  void update(int64_t step, const Logs& logs);
  void end_epoch(int64_t steps_run, const Logs& logs);

 private:
  std::string line(int64_t step, const Logs& logs, bool final) const;
  int verbose_;
  int64_t steps_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "loss: 0.4100 - accuracy: 0.8500" for the keys a user wants to see (no batch_loss).
std::string format_logs(const Logs& logs);

}  // namespace kiln::nn
