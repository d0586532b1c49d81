// Optimizers: one and two updates against numbers worked out by hand from the Keras update
// rules, gradient clipping, the eager apply_gradients loop, and recording into a graph.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kiln/kiln.h"
#include "kiln/optim.h"
#include "tests/testing/values.h"

namespace kiln::optim {
namespace {

using ::testing::HasSubstr;

Tensor vec(std::vector<float> v) { return Tensor::from_vector(v); }

void expect_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-6) {
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), expected.size()) << t.str();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "at " << i;
}

// Runs `steps` eager updates of one variable, gradient `grads[k]` at step k.
Tensor run_steps(Optimizer& opt, Tensor init, const std::vector<Tensor>& grads) {
  std::vector<Variable> vars = {Variable(init, "w")};
  for (const Tensor& g : grads) opt.apply_gradients(vars, {g});
  return vars[0].value();
}

TEST(SGD, PlainStepIsVarMinusLrTimesGrad) {
  SGD sgd(0.1);
  EXPECT_TRUE(sgd.slot_names().empty());
  // [1, 2] - 0.1 * [0.5, -1] = [0.95, 2.1]
  expect_values(run_steps(sgd, vec({1, 2}), {vec({0.5, -1})}), {0.95, 2.1});
}

TEST(SGD, MomentumAccumulatesVelocity) {
  SGD sgd(0.1, 0.9);
  EXPECT_EQ(sgd.slot_names(), std::vector<std::string>{"momentum"});
  // v1 = -0.1, w1 = 0.9; v2 = 0.9 * -0.1 - 0.1 = -0.19, w2 = 0.71.
  expect_values(run_steps(sgd, vec({1}), {vec({1}), vec({1})}), {0.71});
}

TEST(SGD, NesterovLooksAhead) {
  SGD sgd(0.1, 0.9, /*nesterov=*/true);
  // v1 = -0.1, w1 = 1 + 0.9 * -0.1 - 0.1 = 0.81; v2 = -0.19, w2 = 0.81 - 0.171 - 0.1 = 0.539.
  expect_values(run_steps(sgd, vec({1}), {vec({1}), vec({1})}), {0.539});
}

TEST(Adam, FirstStepMovesByLearningRate) {
  Adam adam(0.1);
  EXPECT_EQ(adam.slot_names(), (std::vector<std::string>{"m", "v"}));
  // m = 0.05, v = 0.00025, lr_t = 0.1 * sqrt(0.001) / 0.1; step = lr_t * m / (sqrt(v) + eps)
  // = 0.1 * (0.0158113883 / (0.0158113883 + 1e-7)) = 0.09999937.
  expect_values(run_steps(adam, vec({1}), {vec({0.5})}), {0.90000063});
}

TEST(Adam, SecondStepUsesBiasCorrection) {
  Adam adam(0.1);
  // Step 2 with g = -0.25: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225,
  // lr_t = 0.1 * sqrt(1 - 0.999^2) / (1 - 0.9^2) = 0.02353167; w = 0.90000063 - lr_t * 0.02 /
  // (0.01767060 + 1e-7) = 0.87336708.
  Tensor w = run_steps(adam, vec({1}), {vec({0.5}), vec({-0.25})});
  expect_values(w, {0.87336708});
  EXPECT_EQ(adam.iterations(), 2);
}

TEST(Adam, SlotsAreKeptPerVariable) {
  Adam adam(0.1);
  std::vector<Variable> vars = {Variable(vec({1}), "a"), Variable(vec({1, 1}), "b")};
  adam.apply_gradients(vars, {vec({0.5}), vec({1, -1})});
  std::vector<Variable>& a = adam.slots(vars[0]);
  std::vector<Variable>& b = adam.slots(vars[1]);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].name(), "a/m");
  expect_values(a[0].value(), {0.05});
  expect_values(a[1].value(), {0.00025});
  expect_values(b[0].value(), {0.1, -0.1});
  EXPECT_FALSE(b[1].trainable());
}

TEST(Adam, SlotsAreConcreteWhenCreatedWhileTracing) {
  Adam adam;
  Variable w(vec({1, 2}), "w");
  Graph g;
  auto guard = g.as_default();
  std::vector<Variable>& slots = adam.slots(w);
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_FALSE(slots[1].value().is_symbolic());
  EXPECT_EQ(slots[1].value().to_vector<float>(), (std::vector<float>{0, 0}));
}

TEST(AdamW, DecaysBeforeTheAdamStep) {
  AdamW adamw(0.1, /*weight_decay=*/0.1);
  EXPECT_EQ(adamw.name(), "AdamW");
  // 1 - 0.1 * 0.1 * 1 = 0.99, then the Adam step of 0.09999937.
  expect_values(run_steps(adamw, vec({1}), {vec({0.5})}), {0.89000063});
}

TEST(RMSprop, PlainStep) {
  RMSprop rms(0.01);
  EXPECT_EQ(rms.slot_names(), std::vector<std::string>{"velocity"});
  // velocity = 0.1 * 4 = 0.4; w = 1 - 0.01 * 2 / sqrt(0.4 + 1e-7) = 0.96837723.
  expect_values(run_steps(rms, vec({1}), {vec({2})}), {0.96837723});
}

TEST(RMSprop, MomentumTwoSteps) {
  RMSprop rms(0.01, 0.9, /*momentum=*/0.5);
  // inc1 = 0.02 / sqrt(0.4) = 0.03162278; velocity2 = 0.36 + 0.4 = 0.76,
  // inc2 = 0.02 / sqrt(0.76) = 0.02294157; m2 = 0.5 * inc1 + inc2; w = 1 - inc1 - m2 = 0.92962427.
  expect_values(run_steps(rms, vec({1}), {vec({2}), vec({2})}), {0.92962427});
}

TEST(RMSprop, CenteredSubtractsSquaredMeanGradient) {
  RMSprop rms(0.01, 0.9, 0, 1e-7, /*centered=*/true);
  EXPECT_EQ(rms.slot_names(), (std::vector<std::string>{"velocity", "average_gradient"}));
  // velocity = 0.4, average = 0.2; w = 1 - 0.02 / sqrt(0.4 - 0.04 + 1e-7) = 0.96666667.
  expect_values(run_steps(rms, vec({1}), {vec({2})}), {0.96666667});
}

TEST(Optimizer, WorksInF64) {
  SGD sgd(0.5);
  std::vector<Variable> vars = {Variable(Tensor::from_vector<double>({1.0}), "w")};
  sgd.apply_gradients(vars, {Tensor::from_vector<double>({0.25})});
  EXPECT_EQ(vars[0].dtype(), f64);
  EXPECT_DOUBLE_EQ(vars[0].value().item<double>(), 0.875);
}

TEST(Optimizer, LearningRateFollowsScheduleUnlessOverridden) {
  SGD sgd(exponential_decay(1.0, 1, 0.5));
  EXPECT_DOUBLE_EQ(sgd.learning_rate(), 1.0);
  std::vector<Variable> vars = {Variable(vec({0}), "w")};
  sgd.apply_gradients(vars, {vec({1})});  // lr 1
  EXPECT_EQ(sgd.iterations(), 1);
  EXPECT_DOUBLE_EQ(sgd.learning_rate(), 0.5);
  sgd.apply_gradients(vars, {vec({1})});  // lr 0.5
  expect_values(vars[0].value(), {-1.5});
  sgd.set_learning_rate(0.01);
  EXPECT_DOUBLE_EQ(sgd.learning_rate(), 0.01);
  sgd.set_iterations(10);
  EXPECT_DOUBLE_EQ(sgd.learning_rate(), 0.01);
  EXPECT_THROW(sgd.set_learning_rate(-1), Error);
}

TEST(Optimizer, ClipScalesByGlobalNorm) {
  SGD sgd(0.1);
  std::vector<Tensor> grads = {vec({3, 4}), vec({12})};  // global norm 13
  // Off by default: unchanged.
  expect_values(sgd.clip(grads)[0], {3, 4});
  sgd.clip_global_norm(6.5);
  EXPECT_DOUBLE_EQ(sgd.global_clipnorm(), 6.5);
  std::vector<Tensor> clipped = sgd.clip(grads);
  expect_values(clipped[0], {1.5, 2});
  expect_values(clipped[1], {6});
  // Within bounds: unchanged.
  sgd.clip_global_norm(20);
  expect_values(sgd.clip(grads)[1], {12});
  EXPECT_THROW(sgd.clip_global_norm(-1), Error);
}

TEST(Optimizer, ApplyGradientsClips) {
  SGD sgd(1.0);
  sgd.clip_global_norm(1);
  std::vector<Variable> vars = {Variable(vec({0, 0}), "w")};
  sgd.apply_gradients(vars, {vec({3, 4})});
  expect_values(vars[0].value(), {-0.6, -0.8});
}

TEST(Optimizer, ApplyGradientsSkipsUndefinedGradients) {
  SGD sgd(1.0);
  std::vector<Variable> vars = {Variable(vec({1}), "a"), Variable(vec({1}), "b")};
  sgd.apply_gradients(vars, {vec({1}), Tensor()});
  expect_values(vars[0].value(), {0});
  expect_values(vars[1].value(), {1});
}

TEST(Optimizer, ApplyGradientsRejectsMismatches) {
  SGD sgd(1.0);
  std::vector<Variable> vars = {Variable(vec({1, 2}), "kernel")};
  EXPECT_THROW(sgd.apply_gradients(vars, {}), Error);
  try {
    sgd.apply_gradients(vars, {vec({1, 2, 3})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("kernel"));
    EXPECT_THAT(e.what(), HasSubstr("[3]"));
    EXPECT_THAT(e.what(), HasSubstr("[2]"));
  }
  EXPECT_EQ(sgd.iterations(), 0);
}

TEST(Optimizer, ApplyChecksSlotCount) {
  Adam adam;
  Tensor one = Tensor::scalar<float>(1);
  try {
    adam.apply(vec({1}), vec({1}), {vec({0})}, one, one);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Adam.apply: expected 2 slots, got 1"));
  }
}

// `make` throws kInvalidArgument with a message that contains `message`.
void expect_invalid(const std::function<void()>& make, const std::string& message) {
  test_values::expect_error(make, ErrorCode::kInvalidArgument, message);
}

const double kNan = std::nan("");
const double kInf = INFINITY;

// As PyTorch's optimizers: lr >= 0 and finite, checked when the optimizer is made.
TEST(Optimizer, LearningRateMustBeFiniteAndNonNegative) {
  for (auto [lr, text] : std::vector<std::pair<double, std::string>>{
           {kNan, "nan"}, {kInf, "inf"}, {-kInf, "-inf"}, {-0.1, "-0.1"}}) {
    SCOPED_TRACE(text);
    const std::string range = " must be finite and >= 0, got " + text;
    expect_invalid([lr = lr] { SGD sgd(lr); }, "SGD: lr" + range);
    expect_invalid([lr = lr] { SGD sgd(lr, 0.9, true); }, "SGD: lr" + range);
    expect_invalid([lr = lr] { Adam adam(lr); }, "Adam: lr" + range);
    expect_invalid([lr = lr] { AdamW adamw(lr); }, "AdamW: lr" + range);
    expect_invalid([lr = lr] { RMSprop rms(lr); }, "RMSprop: lr" + range);
    expect_invalid([lr = lr] { SGD(0.1).set_learning_rate(lr); },
                   "SGD: set_learning_rate: lr" + range);
  }
  // Zero is a valid (frozen) learning rate.
  EXPECT_DOUBLE_EQ(SGD(0).learning_rate(), 0);
  EXPECT_DOUBLE_EQ(Adam(0).learning_rate(), 0);
  EXPECT_DOUBLE_EQ(AdamW(0).learning_rate(), 0);
  EXPECT_DOUBLE_EQ(RMSprop(0).learning_rate(), 0);
}

TEST(Optimizer, ScheduleMustBeSetAndGiveValidLearningRates) {
  expect_invalid([] { SGD sgd{Schedule()}; }, "SGD: the learning-rate schedule is empty");
  expect_invalid([] { Adam adam{Schedule()}; }, "Adam: the learning-rate schedule is empty");
  // A schedule's value is checked when it is used: a NaN would silently ruin every weight.
  SGD sgd(Schedule([](int64_t step) { return step < 1 ? 0.1 : kNan; }));
  std::vector<Variable> vars = {Variable(vec({1}), "w")};
  sgd.apply_gradients(vars, {vec({1})});
  expect_invalid([&] { sgd.apply_gradients(vars, {vec({1})}); },
                 "SGD: the learning-rate schedule gave nan at step 1");
  expect_values(vars[0].value(), {0.9});
}

TEST(SGD, MomentumMustBeInZeroToOne) {
  for (auto [momentum, text] : std::vector<std::pair<double, std::string>>{
           {1, "1"}, {1.5, "1.5"}, {-0.5, "-0.5"}, {kNan, "nan"}, {kInf, "inf"}}) {
    expect_invalid([m = momentum] { SGD sgd(0.1, m); },
                   "SGD: momentum must be in [0, 1), got " + text);
  }
  EXPECT_NO_THROW(SGD(0.1, 0));
  EXPECT_NO_THROW(SGD(0.1, 0.999));
  // Nesterov without momentum would silently be plain SGD.
  expect_invalid([] { SGD sgd(0.1, 0, /*nesterov=*/true); },
                 "SGD: nesterov=true needs a momentum > 0");
  EXPECT_NO_THROW(SGD(0.1, 0.9, /*nesterov=*/true));
}

TEST(Adam, BetasMustBeInZeroToOneAndEpsFiniteNonNegative) {
  for (auto [beta, text] : std::vector<std::pair<double, std::string>>{
           {1, "1"}, {1.5, "1.5"}, {-0.1, "-0.1"}, {kNan, "nan"}}) {
    SCOPED_TRACE(text);
    expect_invalid([b = beta] { Adam adam(0.1, b); }, "Adam: beta1 must be in [0, 1), got " + text);
    expect_invalid([b = beta] { Adam adam(0.1, 0.9, b); },
                   "Adam: beta2 must be in [0, 1), got " + text);
    expect_invalid([b = beta] { Adam adam(constant_lr(0.1), b); },
                   "Adam: beta1 must be in [0, 1), got " + text);
  }
  for (auto [eps, text] : std::vector<std::pair<double, std::string>>{
           {-1e-8, "-1e-08"}, {kNan, "nan"}, {kInf, "inf"}}) {
    expect_invalid([e = eps] { Adam adam(0.1, 0.9, 0.999, e); },
                   "Adam: eps must be finite and >= 0, got " + text);
  }
  EXPECT_NO_THROW(Adam(0.1, 0, 0, 0));
}

TEST(AdamW, HyperParametersAreCheckedUnderItsOwnName) {
  for (auto [decay, text] :
       std::vector<std::pair<double, std::string>>{{-1, "-1"}, {kNan, "nan"}, {kInf, "inf"}}) {
    expect_invalid([d = decay] { AdamW adamw(0.1, d); },
                   "AdamW: weight_decay must be finite and >= 0, got " + text);
  }
  expect_invalid([] { AdamW adamw(0.1, 0.004, 1); }, "AdamW: beta1 must be in [0, 1), got 1");
  expect_invalid([] { AdamW adamw(0.1, 0.004, 0.9, 1); }, "AdamW: beta2 must be in [0, 1), got 1");
  expect_invalid([] { AdamW adamw(0.1, 0.004, 0.9, 0.999, -1); },
                 "AdamW: eps must be finite and >= 0, got -1");
  EXPECT_NO_THROW(AdamW(0.1, 0));
}

TEST(RMSprop, RhoAndMomentumMustBeInZeroToOneAndEpsFiniteNonNegative) {
  for (auto [value, text] : std::vector<std::pair<double, std::string>>{
           {1, "1"}, {2, "2"}, {-0.1, "-0.1"}, {kNan, "nan"}}) {
    SCOPED_TRACE(text);
    expect_invalid([v = value] { RMSprop rms(0.1, v); },
                   "RMSprop: rho must be in [0, 1), got " + text);
    expect_invalid([v = value] { RMSprop rms(0.1, 0.9, v); },
                   "RMSprop: momentum must be in [0, 1), got " + text);
  }
  expect_invalid([] { RMSprop rms(0.1, 0.9, 0, kInf); },
                 "RMSprop: eps must be finite and >= 0, got inf");
  expect_invalid([] { RMSprop rms(0.1, 0.9, 0, -1e-7); },
                 "RMSprop: eps must be finite and >= 0, got -1e-07");
  EXPECT_NO_THROW(RMSprop(0.1, 0, 0.5, 0));
}

// An infinite max_norm would scale every gradient by inf / inf = NaN.
TEST(Optimizer, ClipNormMustBeFiniteAndNonNegative) {
  SGD sgd(0.1);
  expect_invalid([&] { sgd.clip_global_norm(kInf); },
                 "SGD: clip_global_norm: max_norm must be finite and >= 0, got inf");
  expect_invalid([&] { sgd.clip_global_norm(kNan); },
                 "SGD: clip_global_norm: max_norm must be finite and >= 0, got nan");
  expect_invalid([&] { sgd.clip_global_norm(-1); },
                 "SGD: clip_global_norm: max_norm must be finite and >= 0, got -1");
  EXPECT_EQ(sgd.global_clipnorm(), 0);
}

TEST(Optimizer, ApplyRecordsIntoAGraphAndMatchesEager) {
  Adam adam(0.1);
  Graph g("step");
  Tensor var = g.placeholder(f32, {2}, "var");
  Tensor grad = g.placeholder(f32, {2}, "grad");
  Tensor m = g.placeholder(f32, {2}, "m");
  Tensor v = g.placeholder(f32, {2}, "v");
  Tensor lr = g.placeholder(f32, {}, "lr");
  Tensor step = g.placeholder(f32, {}, "step");
  auto [new_var, new_slots] = adam.apply(var, grad, {m, v}, lr, step);
  EXPECT_TRUE(new_var.is_symbolic());
  ASSERT_EQ(new_slots.size(), 2u);
  std::vector<Tensor> out = g.run({{var, vec({1, 1})},
                                   {grad, vec({0.5, -0.5})},
                                   {m, vec({0, 0})},
                                   {v, vec({0, 0})},
                                   {lr, Tensor::scalar<float>(0.1f)},
                                   {step, Tensor::scalar<float>(1)}},
                                  {new_var, new_slots[0], new_slots[1]});
  expect_values(out[0], {0.90000063, 1.09999937});
  expect_values(out[1], {0.05, -0.05});
  expect_values(out[2], {0.00025, 0.00025});
}

TEST(Optimizer, ClipRecordsIntoAGraph) {
  SGD sgd;
  sgd.clip_global_norm(2.5);
  Graph g;
  Tensor a = g.placeholder(f32, {kUnknownDim}, "a");
  Tensor clipped = sgd.clip({a})[0];
  expect_values(g.run({{a, vec({3, 4})}}, clipped), {1.5, 2});
}

}  // namespace
}  // namespace kiln::optim
