// Learning-rate schedules (Keras semantics): functions of the number of updates applied so far.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "kiln/optim.h"
#include "src/api/optim/hyper_params.h"

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
  return Schedule("constant", {{"lr", lr}}, [lr](int64_t) { return lr; });
}

Schedule exponential_decay(double lr, int64_t decay_steps, double rate, bool staircase) {
  require_positive("exponential_decay", "decay_steps", decay_steps);
  check_non_negative("exponential_decay", "lr", lr);
  check_non_negative("exponential_decay", "rate", rate);
  Attrs config{{"lr", lr}, {"decay_steps", decay_steps}, {"rate", rate}, {"staircase", staircase}};
  return Schedule("exponential_decay", std::move(config), [=](int64_t step) {
    double p = static_cast<double>(std::max<int64_t>(step, 0)) / static_cast<double>(decay_steps);
    if (staircase) p = std::floor(p);
    return lr * std::pow(rate, p);
  });
}

Schedule cosine_decay(double lr, int64_t decay_steps, double alpha) {
  require_positive("cosine_decay", "decay_steps", decay_steps);
  check_non_negative("cosine_decay", "lr", lr);
  if (!(alpha >= 0 && alpha <= 1)) invalid_hyper("cosine_decay", "alpha", "in [0, 1]", alpha);
  Attrs config{{"lr", lr}, {"decay_steps", decay_steps}, {"alpha", alpha}};
  return Schedule("cosine_decay", std::move(config), [=](int64_t step) {
    double done = static_cast<double>(std::clamp<int64_t>(step, 0, decay_steps)) /
                  static_cast<double>(decay_steps);
    double cosine = 0.5 * (1 + std::cos(std::numbers::pi * done));
    return lr * ((1 - alpha) * cosine + alpha);
  });
}

Schedule linear_warmup(Schedule after, int64_t warmup_steps) {
  if (!after) throw Error(ErrorCode::kInvalidArgument, "linear_warmup: no schedule to follow");
  if (warmup_steps < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "linear_warmup: warmup_steps must be >= 0, got " + std::to_string(warmup_steps));
  }
  Attrs config{{"warmup_steps", warmup_steps}, {"after", after.name()}};
  for (const auto& [key, value] : after.config().values()) config.set("after." + key, value);
  return Schedule("linear_warmup", std::move(config),
                  [after = std::move(after), warmup_steps](int64_t step) {
                    if (step >= warmup_steps) return after(step - warmup_steps);
                    double fraction = static_cast<double>(std::max<int64_t>(step, 0)) /
                                      static_cast<double>(warmup_steps);
                    return after(0) * fraction;
                  });
}

Schedule schedule_from_config(const std::string& name, const Attrs& c) {
  if (name == "constant") return constant_lr(c.get_float("lr"));
  if (name == "exponential_decay") {
    return exponential_decay(c.get_float("lr"), c.get_int("decay_steps"), c.get_float("rate"),
                             c.get_bool("staircase"));
  }
  if (name == "cosine_decay") {
    return cosine_decay(c.get_float("lr"), c.get_int("decay_steps"), c.get_float("alpha"));
  }
  if (name == "linear_warmup") {
    Attrs after;
    for (const auto& [key, value] : c.values())
      if (key.rfind("after.", 0) == 0) after.set(key.substr(6), value);
    return linear_warmup(schedule_from_config(c.get_string("after"), after),
                         c.get_int("warmup_steps"));
  }
  throw Error(ErrorCode::kInvalidArgument,
              "schedule_from_config: unknown learning-rate schedule '" + name +
                  "' (known: constant, exponential_decay, cosine_decay, linear_warmup; a custom "
                  "function cannot be restored)");
}

}  // namespace kiln::optim
