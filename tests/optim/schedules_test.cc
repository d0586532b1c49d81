// Learning-rate schedules at several steps, against closed-form values, and the constants they
// reject.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kiln/optim.h"
#include "tests/testing/values.h"

namespace kiln::optim {
namespace {

using ::testing::HasSubstr;

TEST(Schedules, ConstantIgnoresStep) {
  Schedule s = constant_lr(0.3);
  EXPECT_DOUBLE_EQ(s(0), 0.3);
  EXPECT_DOUBLE_EQ(s(1000), 0.3);
}

TEST(Schedules, ExponentialDecay) {
  Schedule s = exponential_decay(0.1, 10, 0.5);
  EXPECT_DOUBLE_EQ(s(0), 0.1);
  EXPECT_NEAR(s(5), 0.1 * std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(s(10), 0.05, 1e-12);
  EXPECT_NEAR(s(20), 0.025, 1e-12);
}

TEST(Schedules, ExponentialDecayStaircase) {
  Schedule s = exponential_decay(0.1, 10, 0.5, /*staircase=*/true);
  EXPECT_DOUBLE_EQ(s(9), 0.1);
  EXPECT_DOUBLE_EQ(s(10), 0.05);
  EXPECT_DOUBLE_EQ(s(15), 0.05);
  EXPECT_DOUBLE_EQ(s(25), 0.025);
}

TEST(Schedules, CosineDecayEndsAtAlphaTimesLr) {
  Schedule s = cosine_decay(1.0, 10, 0.1);
  EXPECT_DOUBLE_EQ(s(0), 1.0);
  EXPECT_NEAR(s(5), 0.9 * 0.5 + 0.1, 1e-12);  // cos(pi/2) = 0
  EXPECT_NEAR(s(2), 0.9 * 0.5 * (1 + std::cos(0.2 * M_PI)) + 0.1, 1e-12);
  EXPECT_NEAR(s(10), 0.1, 1e-12);
  EXPECT_NEAR(s(50), 0.1, 1e-12);
}

TEST(Schedules, LinearWarmupThenSchedule) {
  Schedule s = linear_warmup(constant_lr(0.2), 4);
  EXPECT_DOUBLE_EQ(s(0), 0.0);
  EXPECT_DOUBLE_EQ(s(1), 0.05);
  EXPECT_DOUBLE_EQ(s(2), 0.1);
  EXPECT_DOUBLE_EQ(s(4), 0.2);
  EXPECT_DOUBLE_EQ(s(100), 0.2);
  // The following schedule starts counting after the warmup.
  Schedule w = linear_warmup(exponential_decay(0.1, 10, 0.5), 10);
  EXPECT_NEAR(w(5), 0.05, 1e-12);
  EXPECT_NEAR(w(10), 0.1, 1e-12);
  EXPECT_NEAR(w(20), 0.05, 1e-12);
  // No warmup: the schedule itself.
  EXPECT_NEAR(linear_warmup(constant_lr(0.2), 0)(0), 0.2, 1e-12);
}

TEST(Schedules, InvalidArgumentsThrow) {
  EXPECT_THROW(exponential_decay(0.1, 0, 0.5), Error);
  EXPECT_THROW(cosine_decay(0.1, -3), Error);
  EXPECT_THROW(linear_warmup(Schedule(), 3), Error);
  EXPECT_THROW(linear_warmup(constant_lr(0.1), -1), Error);
}

// `make` throws kInvalidArgument with a message that contains `message`.
void expect_invalid(const std::function<void()>& make, const std::string& message) {
  test_values::expect_error(make, ErrorCode::kInvalidArgument, message);
}

// Learning rates finite and >= 0 (as the optimizers require), rates and fractions that keep
// the schedule finite: a NaN here would reach every weight.
TEST(Schedules, RejectNonFiniteOrNegativeConstants) {
  const double nan = std::nan("");
  expect_invalid([&] { constant_lr(nan); }, "constant_lr: lr must be finite and >= 0, got nan");
  expect_invalid([] { constant_lr(-0.5); }, "constant_lr: lr must be finite and >= 0, got -0.5");
  expect_invalid([] { exponential_decay(INFINITY, 10, 0.5); },
                 "exponential_decay: lr must be finite and >= 0, got inf");
  expect_invalid([] { exponential_decay(0.1, 10, -0.5); },
                 "exponential_decay: rate must be finite and >= 0, got -0.5");
  expect_invalid([&] { exponential_decay(0.1, 10, nan); },
                 "exponential_decay: rate must be finite and >= 0, got nan");
  expect_invalid([] { cosine_decay(-1, 10); }, "cosine_decay: lr must be finite and >= 0, got -1");
  expect_invalid([] { cosine_decay(0.1, 10, 1.5); },
                 "cosine_decay: alpha must be in [0, 1], got 1.5");
  expect_invalid([&] { cosine_decay(0.1, 10, nan); },
                 "cosine_decay: alpha must be in [0, 1], got nan");
  expect_invalid([] { linear_warmup(constant_lr(0.1), -1); },
                 "linear_warmup: warmup_steps must be >= 0, got -1");
  EXPECT_DOUBLE_EQ(constant_lr(0)(5), 0);
  EXPECT_DOUBLE_EQ(cosine_decay(0.1, 10, 1)(5), 0.1);
  EXPECT_DOUBLE_EQ(exponential_decay(0.1, 10, 0)(0), 0.1);
}

}  // namespace
}  // namespace kiln::optim
