// LossScaleOptimizer: scaled f16 gradients survive where unscaled ones underflow; an overflow
// skips exactly its step (weights and slots untouched), halves the scale; finite steps grow it;
// fixed scaling; the eager loop; its config and state.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "kiln/distribute/mirrored_strategy.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/testing/temp_dir.h"

namespace kiln::optim {
namespace {

using nn::Dense;
using nn::Sequential;
using ::testing::HasSubstr;

class LossScaling : public ::testing::TestWithParam<ExecutionMode> {
 protected:
  void SetUp() override { nn::set_global_policy("mixed_float16"); }
  void TearDown() override { nn::set_global_policy("float32"); }

  // y = x @ w in f16, w a [1, 1] f32 kernel starting at 1; MSE against y = 0.
  std::unique_ptr<Sequential> model(const LossScaleOptimizer& opt) {
    auto m = std::make_unique<Sequential>(
        std::vector<nn::LayerRef>{Dense(1, "", /*use_bias=*/false, nn::ones_init())});
    m->set_execution_mode(GetParam());
    m->compile(opt, nn::MeanSquaredError());
    return m;
  }
  // One training step on the single row x.
  static void step(nn::Model& m, float x) {
    m.fit(Tensor::from_vector<float>({x}, {1, 1}), Tensor::from_vector<float>({0}, {1, 1}),
          {.epochs = 1, .batch_size = 1, .verbose = 0});
  }
  static float kernel(nn::Model& m) { return m.weights()[0].value().to_vector<float>()[0]; }
  static LossScaleOptimizer& lso(nn::Model& m) {
    return dynamic_cast<LossScaleOptimizer&>(m.optimizer());
  }
};

// d loss / d w = 2 x^2 = 2e-8 for x = 1e-4: below f16's smallest subnormal (6e-8), so the f16
// matmul gradient rounds to zero unless the loss is scaled first.
TEST_P(LossScaling, ScaledF16GradientsDoNotUnderflow) {
  auto unscaled = model(LossScaleOptimizer(SGD(0.1), {.dynamic = false, .initial_scale = 1}));
  step(*unscaled, 1e-4f);
  ASSERT_EQ(unscaled->last_gradients().size(), 1u);
  EXPECT_EQ(unscaled->last_gradients()[0].second.to_vector<float>()[0], 0.0f);

  auto scaled = model(LossScaleOptimizer(SGD(0.1)));
  step(*scaled, 1e-4f);
  const float g = scaled->last_gradients()[0].second.to_vector<float>()[0];
  EXPECT_NEAR(g, 2e-8, 2e-10);  // unscaled again after the f16 backward pass
}

TEST_P(LossScaling, AnOverflowSkipsExactlyThatStepAndHalvesTheScale) {
  auto m = model(LossScaleOptimizer(Adam(0.01)));
  step(*m, 0.5f);
  ASSERT_EQ(lso(*m).good_steps(), 1);
  const std::map<std::string, Tensor> before = m->state();
  ASSERT_TRUE(before.count("dense/kernel/m"));
  // x = 300: d loss / d y = 2 * 300 * 2^15 overflows f16 (65504) on the way back.
  step(*m, 300.0f);
  const std::map<std::string, Tensor> after = m->state();
  for (const char* name : {"dense/kernel", "dense/kernel/m", "dense/kernel/v"}) {
    EXPECT_EQ(after.at(name).to_vector<float>(), before.at(name).to_vector<float>()) << name;
  }
  EXPECT_EQ(lso(*m).loss_scale(), 16384.0);
  EXPECT_EQ(lso(*m).good_steps(), 0);
  EXPECT_EQ(m->optimizer().iterations(), 2);  // counted, as TensorFlow counts skipped steps
  step(*m, 0.5f);                             // the next finite step applies
  EXPECT_NE(m->state().at("dense/kernel").to_vector<float>(),
            before.at("dense/kernel").to_vector<float>());
  EXPECT_EQ(lso(*m).loss_scale(), 16384.0);
  EXPECT_EQ(lso(*m).good_steps(), 1);
}

TEST_P(LossScaling, TheScaleDoublesAfterGrowthStepsFiniteSteps) {
  auto m = model(LossScaleOptimizer(SGD(0.01), {.initial_scale = 4, .growth_steps = 3}));
  std::vector<double> scales;
  std::vector<int64_t> counts;
  for (int i = 0; i < 7; ++i) {
    step(*m, 0.5f);
    scales.push_back(lso(*m).loss_scale());
    counts.push_back(lso(*m).good_steps());
  }
  EXPECT_EQ(scales, (std::vector<double>{4, 4, 8, 8, 8, 16, 16}));
  EXPECT_EQ(counts, (std::vector<int64_t>{1, 2, 0, 1, 2, 0, 1}));
}

TEST_P(LossScaling, AFixedScaleNeverChanges) {
  auto m = model(
      LossScaleOptimizer(SGD(0.01), {.dynamic = false, .initial_scale = 8, .growth_steps = 1}));
  step(*m, 0.5f);
  step(*m, 0.5f);
  EXPECT_EQ(lso(*m).loss_scale(), 8.0);
  EXPECT_EQ(lso(*m).good_steps(), 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, LossScaling,
                         ::testing::Values(ExecutionMode::kCompiled, ExecutionMode::kInterpreted),
                         [](const auto& info) {
                           return info.param == ExecutionMode::kCompiled ? "Compiled"
                                                                         : "Interpreted";
                         });

// Under a MirroredStrategy the decision is made on the summed gradients: every replica skips
// the same steps, keeps the same scale and the same weights.
TEST(LossScaleOptimizer, ReplicasSkipTogether) {
  nn::set_global_policy("mixed_float16");
  Sequential m({Dense(1, "", /*use_bias=*/false, nn::ones_init())});
  nn::set_global_policy("float32");
  m.compile(LossScaleOptimizer(Adam(0.01), {.initial_scale = 1024, .growth_steps = 100}),
            nn::MeanSquaredError(), {},
            {.strategy = std::make_shared<distribute::MirroredStrategy>(2)});
  // Rows 2 and 3 form the second batch; row 3 overflows f16 on its replica only.
  Tensor x = Tensor::from_vector<float>({0.5f, 0.25f, 0.5f, 3000.0f}, {4, 1});
  m.fit(x, Tensor::from_vector<float>({0, 0, 0, 0}, {4, 1}),
        {.epochs = 1, .batch_size = 2, .shuffle = false, .verbose = 0});
  auto& opt = dynamic_cast<LossScaleOptimizer&>(m.optimizer());
  EXPECT_EQ(opt.loss_scale(), 512.0);
  EXPECT_EQ(opt.good_steps(), 0);
  EXPECT_EQ(m.replica_weights(1)[0].to_vector<float>(), m.replica_weights(0)[0].to_vector<float>());
}

// Throws after a given optimizer step: an interrupted fit.
class Interrupt : public nn::Callback {
 public:
  explicit Interrupt(int64_t step) : step_(step) {}
  void on_train_batch_end(int64_t, nn::Logs&) override {
    if (model()->optimizer().iterations() == step_) throw std::runtime_error("interrupted");
  }

 private:
  int64_t step_;
};

// The scale and the good-step count are in the backup: a resumed fit ends where an
// uninterrupted one does (scale 2048 after steps that grow, overflow at x = 300 and grow).
TEST(LossScaleOptimizer, BackupAndRestoreKeepsTheScale) {
  const std::filesystem::path dir = testing_util::per_test_dir("kiln_loss_scale_backup");
  std::filesystem::remove_all(dir);
  Tensor x = Tensor::from_vector<float>({0.5f, 0.5f, 0.5f, 300.0f, 0.5f, 0.5f, 0.5f}, {7, 1});
  Tensor y = Tensor::from_vector<float>(std::vector<float>(7, 0.0f), {7, 1});
  auto make = [] {
    nn::set_global_policy("mixed_float16");
    auto m = std::make_unique<Sequential>(
        std::vector<nn::LayerRef>{Dense(1, "", /*use_bias=*/false, nn::ones_init())});
    nn::set_global_policy("float32");
    m->compile(LossScaleOptimizer(Adam(0.01), {.initial_scale = 1024, .growth_steps = 2}),
               nn::MeanSquaredError());
    return m;
  };
  auto fit = [&](nn::Model& m, std::vector<nn::CallbackRef> callbacks) {
    m.fit(x, y,
          {.epochs = 1, .batch_size = 1, .shuffle = false, .callbacks = callbacks, .verbose = 0});
  };
  auto reference = make();
  fit(*reference, {});
  auto first = make();
  EXPECT_THROW(fit(*first, {nn::BackupAndRestore(dir.string(), int64_t{2}), Interrupt(3)}),
               std::runtime_error);
  auto second = make();
  fit(*second, {nn::BackupAndRestore(dir.string(), int64_t{2})});
  auto& ref = dynamic_cast<LossScaleOptimizer&>(reference->optimizer());
  auto& resumed = dynamic_cast<LossScaleOptimizer&>(second->optimizer());
  EXPECT_EQ(ref.loss_scale(), 2048.0);
  EXPECT_EQ(resumed.loss_scale(), ref.loss_scale());
  EXPECT_EQ(resumed.good_steps(), ref.good_steps());
  EXPECT_EQ(second->weights()[0].value().to_vector<float>(),
            reference->weights()[0].value().to_vector<float>());
  std::filesystem::remove_all(dir);
}

TEST(LossScaleOptimizer, EagerApplyGradientsUnscalesAndSkipsNonFiniteSteps) {
  LossScaleOptimizer opt(SGD(0.5), {.initial_scale = 4});
  std::vector<Variable> vars = {Variable(Tensor::from_vector<float>({1, 1}), "w")};
  // Gradients of the scaled loss: 4 * [0.5, 1].
  opt.apply_gradients(vars, {Tensor::from_vector<float>({2, 4})});
  EXPECT_EQ(vars[0].value().to_vector<float>(), (std::vector<float>{0.75f, 0.5f}));
  opt.apply_gradients(vars, {Tensor::from_vector<float>({INFINITY, 4})});
  EXPECT_EQ(vars[0].value().to_vector<float>(), (std::vector<float>{0.75f, 0.5f}));
  EXPECT_EQ(opt.loss_scale(), 2.0);
  EXPECT_EQ(opt.iterations(), 2);
}

TEST(LossScaleOptimizer, TheConfigRebuildsIt) {
  LossScaleOptimizer opt(Adam(0.02), {.dynamic = true, .initial_scale = 64, .growth_steps = 7});
  auto rebuilt = std::dynamic_pointer_cast<LossScaleOptimizer>(
      optimizer_from_config(opt.name(), opt.config()));
  ASSERT_TRUE(rebuilt);
  EXPECT_EQ(rebuilt->inner_optimizer().name(), "Adam");
  EXPECT_EQ(rebuilt->options().growth_steps, 7);
  EXPECT_EQ(rebuilt->loss_scale(), 64.0);
  EXPECT_DOUBLE_EQ(rebuilt->learning_rate(), 0.02);
  EXPECT_EQ(rebuilt->slot_names(), (std::vector<std::string>{"m", "v"}));
}

TEST(LossScaleOptimizer, BadArgumentsNameTheOptimizer) {
  try {
    LossScaleOptimizer(SGD(0.1), {.initial_scale = 0.5});
    FAIL() << "initial_scale 0.5 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("LossScaleOptimizer: initial_scale"));
  }
  EXPECT_THROW(LossScaleOptimizer(SGD(0.1), {.growth_steps = 0}), Error);
  EXPECT_THROW(LossScaleOptimizer(OptimizerRef(LossScaleOptimizer(SGD(0.1)))), Error);
}

TEST(LossScaleOptimizer, CompileWrapsOnlyUnderMixedFloat16) {
  nn::set_global_policy("mixed_bfloat16");
  Sequential bf({Dense(2)});
  bf.compile(SGD(0.1), nn::MeanSquaredError());
  EXPECT_EQ(bf.optimizer().name(), "SGD");
  nn::set_global_policy("mixed_float16");
  Sequential half({Dense(2)});
  half.compile(SGD(0.1), nn::MeanSquaredError());
  nn::set_global_policy("float32");
  EXPECT_EQ(half.optimizer().name(), "LossScaleOptimizer");
  EXPECT_EQ(dynamic_cast<LossScaleOptimizer&>(half.optimizer()).loss_scale(), 32768.0);
}

}  // namespace
}  // namespace kiln::optim
