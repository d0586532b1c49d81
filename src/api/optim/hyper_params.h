// Checks of optimizer and schedule hyper-parameters, made when the optimizer or schedule is
// constructed: kInvalidArgument errors naming the owner, the parameter and the value.
#pragma once

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>

#include "kiln/error.h"

namespace kiln::optim {

// The shortest text that reads back as `value` ("0.1", "-1e-08", "nan", "inf").
inline std::string number_str(double value) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, ec == std::errc() ? end : buffer);
}

[[noreturn]] inline void invalid_hyper(std::string_view owner, std::string_view name,
                                       std::string_view range, double value) {
  throw Error(ErrorCode::kInvalidArgument, std::string(owner) + ": " + std::string(name) +
                                               " must be " + std::string(range) + ", got " +
                                               number_str(value));
}

// Learning rates, eps, weight decay: finite and >= 0.
inline void check_non_negative(std::string_view owner, std::string_view name, double value) {
  if (!(std::isfinite(value) && value >= 0)) invalid_hyper(owner, name, "finite and >= 0", value);
}

// Decay factors of running averages (betas, momentum, rho): in [0, 1); at 1 the average never
// moves from its zero start (or, for momentum, never forgets).
inline void check_decay(std::string_view owner, std::string_view name, double value) {
  if (!(value >= 0 && value < 1)) invalid_hyper(owner, name, "in [0, 1)", value);
}

}  // namespace kiln::optim
