// Quantization-aware training: the QAT model computes what the int8 file computes, trains the
// original model's weights through the fake quantization, and refuses what convert refuses.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/lite.h"
#include "kiln/lite_convert.h"
#include "kiln/nn.h"
#include "kiln/ops.h"
#include "kiln/optim.h"

namespace kiln::lite {
namespace {

using namespace kiln::nn;

std::unique_ptr<Sequential> small_cnn() {
  auto model = std::make_unique<Sequential>(std::vector<LayerRef>{
      Conv2D(6, {3, 3}, "relu", {1, 1}, "same"), MaxPool2D({2, 2}), Conv2D(8, {3, 3}),
      Activation("relu"), AveragePool2D({2, 2}), Flatten(), Dense(4)});
  model->set_seed(7);
  model->build({10, 10, 1});
  return model;
}

// A CNN of depthwise convolutions: multiplier 2 with "same" padding and stride 2, then 1.
std::unique_ptr<Sequential> depthwise_cnn() {
  auto model = std::make_unique<Sequential>(std::vector<LayerRef>{
      Conv2D(3, {3, 3}, "relu", {1, 1}, "same"), DepthwiseConv2D({3, 3}, "relu", {2, 2}, "same", 2),
      DepthwiseConv2D({2, 2}), Flatten(), Dense(4)});
  model->set_seed(8);
  model->build({10, 10, 1});
  return model;
}

TEST(LiteQatTest, TheQuantizationAwareModelComputesWhatTheInt8FileComputes) {
  for (bool depthwise : {false, true}) {
    std::unique_ptr<Sequential> cnn = depthwise ? depthwise_cnn() : small_cnn();
    ConvertOptions options;
    options.representative = random_uniform({128, 10, 10, 1}, 1);
    std::unique_ptr<Sequential> qat = quantization_aware(*cnn, options);
    const std::string path = testing::TempDir() + "/qat_forward.klite";
    convert(*cnn, path, options);
    auto int8 = Interpreter::load(path);
    const Tensor x = random_uniform({16, 10, 10, 1}, 2);
    const std::vector<float> fake = qat->predict(x).to_vector<float>();
    const std::vector<float> real = int8->run(x.to_vector<float>().data(), 16);
    const std::vector<float> plain = cnn->predict(x).to_vector<float>();
    ASSERT_EQ(fake.size(), real.size());
    // The output's int8 step: the file's last op's scale.
    const float step = int8->tensor(int8->ops().back().inputs[0]).scale;
    double fake_vs_real = 0, plain_vs_real = 0;
    for (size_t i = 0; i < real.size(); ++i) {
      fake_vs_real = std::max<double>(fake_vs_real, std::abs(fake[i] - real[i]));
      plain_vs_real = std::max<double>(plain_vs_real, std::abs(plain[i] - real[i]));
      // On the grid of the output: whole steps from the zero point.
      const float steps = fake[i] / step;
      EXPECT_NEAR(steps, std::round(steps), 1e-2) << i;
    }
    // Rounding ties and fixed-point requantization may move a value by a step now and then.
    EXPECT_LE(fake_vs_real, 2.01 * step) << (depthwise ? "depthwise" : "conv");
    EXPECT_GT(plain_vs_real, 0.0);
  }
}

// Float activations inside: the QAT model quantizes their outputs where the int8 file does.
TEST(LiteQatTest, FloatActivationsAreFakeQuantizedWhereTheFileQuantizesThem) {
  Sequential model({Dense(12, "tanh"), Activation("sigmoid"), Dense(6, "relu"), Dense(3)});
  model.set_seed(4);
  model.build({5});
  ConvertOptions options;
  options.representative = random_normal({256, 5}, 1);
  std::unique_ptr<Sequential> qat = quantization_aware(model, options);
  const std::string path = testing::TempDir() + "/qat_float_acts.klite";
  convert(model, path, options);
  auto int8 = Interpreter::load(path);
  const Tensor x = random_normal({32, 5}, 2);
  const std::vector<float> fake = qat->predict(x).to_vector<float>();
  const std::vector<float> real = int8->run(x.to_vector<float>().data(), 32);
  const float step = int8->tensor(int8->ops().back().inputs[0]).scale;
  for (size_t i = 0; i < real.size(); ++i) EXPECT_NEAR(fake[i], real[i], 2.01 * step) << i;
}

TEST(LiteQatTest, FineTuningATrainedModelUpdatesItsWeightsAndKeepsItsLoss) {
  // An MLP (the forward test above covers the convolutions) on a task it learns quickly: which
  // of the first four features is largest.
  auto mlp = std::make_unique<Sequential>(std::vector<LayerRef>{Dense(32, "relu"), Dense(4)});
  mlp->set_seed(5);
  mlp->build({8});
  const Tensor x = random_normal({512, 8}, 3);
  const Tensor y = argmax(slice(x, {0, 0}, {512, 4}), 1);
  mlp->compile(optim::Adam(3e-3), SparseCategoricalCrossentropy(/*from_logits=*/true));
  const History trained =
      mlp->fit(x, y, FitOptions().set_epochs(15).set_batch_size(32).set_verbose(0));
  // The ranges are calibrated on the trained model, as QAT is used: after training.
  ConvertOptions options;
  options.representative = x;
  std::unique_ptr<Sequential> qat = quantization_aware(*mlp, options);
  qat->compile(optim::Adam(1e-3), SparseCategoricalCrossentropy(/*from_logits=*/true));
  const std::vector<float> before = mlp->weights()[0].value().to_vector<float>();
  const History tuned =
      qat->fit(x, y, FitOptions().set_epochs(3).set_batch_size(32).set_verbose(0));
  const std::vector<float> after = mlp->weights()[0].value().to_vector<float>();
  EXPECT_NE(before, after) << "fit of the QAT model left the original kernel as it was";
  const double float_loss = trained.history.at("loss").back();
  const double qat_loss = tuned.history.at("loss").back();
  EXPECT_LT(float_loss, 0.5 * trained.history.at("loss").front()) << "the task was not learnt";
  EXPECT_LT(qat_loss, 1.5 * float_loss + 0.05) << float_loss << " -> " << qat_loss;
}

TEST(LiteQatTest, ALayerCalledTwiceIsRefused) {
  Tensor in = Input({4});
  auto dense = std::make_shared<Dense>(4, "relu");
  Tensor y = (*dense)((*dense)(in));
  Model model(in, Dense(2)(y), "shared");
  ConvertOptions options;
  options.representative = random_normal({16, 4}, 1);
  try {
    quantization_aware(model, options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("twice"), std::string::npos) << e.what();
  }
}

TEST(LiteQatTest, ModelsConvertCannotConvertAreRefusedTheSameWay) {
  Sequential model({Dense(4), RepeatVector(2)});
  model.build({3});
  ConvertOptions options;
  options.representative = random_uniform({8, 3}, 1);
  try {
    quantization_aware(model, options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("(RepeatVector): no lite op"), std::string::npos)
        << e.what();
  }
  // A batch normalization converts (folded), but QAT does not fold it.
  Sequential bn({Dense(4), BatchNormalization()});
  bn.build({3});
  try {
    quantization_aware(bn, options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("does not fold it"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::lite
