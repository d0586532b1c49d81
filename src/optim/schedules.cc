// Learning-rate schedules (Keras semantics): functions of the number of updates applied so far.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "kiln/optim.h"
#include "src/optim/hyper_params.h"

namespace kiln::optim {
namespace {

void require_positive(const char* schedule, const char* what, int64_t value) {
  if (value <= 0) {
    throw Error(ErrorCode::kInvalidArgument, std::string(schedule) + ": " + what +
                                                 " must be positive, got " + std::to_string(value));
  }
}

}  // namespace

Schedule constant_lr(double lr) {
  check_non_negative("constant_lr", "lr", lr);
  return [lr](int64_t) { return lr; };
}

Schedule exponential_decay(double lr, int64_t decay_steps, double rate, bool staircase) {
  require_positive("exponential_decay", "decay_steps", decay_steps);
  check_non_negative("exponential_decay", "lr", lr);
  check_non_negative("exponential_decay", "rate", rate);
  return [=](int64_t step) {
    double p = static_cast<double>(std::max<int64_t>(step, 0)) / static_cast<double>(decay_steps);
    if (staircase) p = std::floor(p);
    return lr * std::pow(rate, p);
  };
}

Schedule cosine_decay(double lr, int64_t decay_steps, double alpha) {
  require_positive("cosine_decay", "decay_steps", decay_steps);
  check_non_negative("cosine_decay", "lr", lr);
  if (!(alpha >= 0 && alpha <= 1)) invalid_hyper("cosine_decay", "alpha", "in [0, 1]", alpha);
  return [=](int64_t step) {
    double done = static_cast<double>(std::clamp<int64_t>(step, 0, decay_steps)) /
                  static_cast<double>(decay_steps);
    double cosine = 0.5 * (1 + std::cos(std::numbers::pi * done));
    return lr * ((1 - alpha) * cosine + alpha);
  };
}

Schedule linear_warmup(Schedule after, int64_t warmup_steps) {
  if (!after) throw Error(ErrorCode::kInvalidArgument, "linear_warmup: no schedule to follow");
  if (warmup_steps < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "linear_warmup: warmup_steps must be >= 0, got " + std::to_string(warmup_steps));
  }
  return [after = std::move(after), warmup_steps](int64_t step) {
    if (step >= warmup_steps) return after(step - warmup_steps);
    double fraction =
        static_cast<double>(std::max<int64_t>(step, 0)) / static_cast<double>(warmup_steps);
    return after(0) * fraction;
  };
}

}  // namespace kiln::optim
