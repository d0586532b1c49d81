// Dtype policies (kiln/nn/policy.h): variables stay f32, layers compute in the policy's dtype,
// a per-layer policy beats the global one, model outputs are f32; training under a mixed
// policy, compiled and interpreted; checkpoints cross policies; saved models keep them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/io/saved_model.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/testing/temp_dir.h"

namespace kiln::nn {
namespace {

using ::testing::HasSubstr;

// Leaves the global policy as each test found it ("float32").
class MixedPrecision : public testing_util::TempDirTest {
 protected:
  void TearDown() override {
    set_global_policy("float32");
    TempDirTest::TearDown();
  }
};

Tensor inputs(int64_t rows, int64_t features) {
  std::vector<float> v;
  for (int64_t i = 0; i < rows * features; ++i) v.push_back(std::sin(0.37f * i));
  return Tensor::from_vector(v, {rows, features});
}

Tensor labels(int64_t rows, int64_t classes) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < rows; ++i) v.push_back(i % classes);
  return Tensor::from_vector(v, {rows});
}

std::unique_ptr<Sequential> mlp() {
  return std::make_unique<Sequential>(
      std::vector<LayerRef>{Dense(16, "relu"), Dense(3),
                            with_options(Activation("softmax"), {.dtype_policy = "float32"})});
}

TEST(Policy, NamesComputeAndVariableDtypes) {
  EXPECT_EQ(Policy().name(), "float32");
  EXPECT_EQ(Policy("mixed_bfloat16").compute_dtype(), bf16);
  EXPECT_EQ(Policy("mixed_float16").compute_dtype(), f16);
  EXPECT_EQ(Policy("mixed_float16").variable_dtype(), f32);
  EXPECT_FALSE(Policy("float32").mixed());
  try {
    Policy("mixed_float8");
    FAIL() << "an unknown policy was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("'mixed_float8'"));
  }
}

TEST_F(MixedPrecision, LayersTakeTheGlobalPolicyWhenMade) {
  Dense before(4);
  set_global_policy("mixed_bfloat16");
  Dense after(4);
  EXPECT_EQ(global_policy().name(), "mixed_bfloat16");
  EXPECT_EQ(before.dtype_policy().name(), "float32");
  EXPECT_EQ(after.dtype_policy().name(), "mixed_bfloat16");
}

TEST_F(MixedPrecision, VariablesStayF32AndOutputsAreInTheComputeDtype) {
  set_global_policy("mixed_bfloat16");
  Dense dense(4);
  Tensor y = dense(inputs(2, 3));
  EXPECT_EQ(y.dtype(), bf16);
  for (const Variable& v : dense.weights()) EXPECT_EQ(v.dtype(), f32) << v.name();
  set_global_policy("mixed_float16");
  Dense half(4);
  EXPECT_EQ(half(inputs(2, 3)).dtype(), f16);
}

TEST_F(MixedPrecision, APerLayerPolicyBeatsTheGlobalOne) {
  set_global_policy("mixed_bfloat16");
  auto softmax = with_options(Activation("softmax"), {.dtype_policy = "float32"});
  EXPECT_EQ(softmax.dtype_policy().name(), "float32");
  Dense dense(4);
  Tensor h = dense(inputs(2, 3));
  ASSERT_EQ(h.dtype(), bf16);
  EXPECT_EQ(softmax(h).dtype(), f32);  // its bf16 input is cast to f32
  set_global_policy("float32");
  auto mixed = with_options(Dense(4), {.dtype_policy = "mixed_float16"});
  EXPECT_EQ(mixed(inputs(2, 3)).dtype(), f16);
}

TEST_F(MixedPrecision, ModelOutputsAreF32) {
  set_global_policy("mixed_bfloat16");
  Sequential model({Dense(8, "relu"), Dense(3)});  // the last layer computes in bf16
  Tensor p = model.predict(inputs(5, 4));
  EXPECT_EQ(p.dtype(), f32);
  for (const Variable& v : model.weights()) EXPECT_EQ(v.dtype(), f32) << v.name();
  Tensor in = Input({4});
  Tensor out = Dense(2)(Dense(8)(in));
  Model functional(in, out);
  EXPECT_EQ(functional.predict(inputs(5, 4)).dtype(), f32);
}

// Model::set_outputs_in_compute_dtype: predict returns the last layer's bf16 (the same values
// the default f32 outputs hold), training sees f32 either way (the same losses, bit for bit),
// and saved models keep the setting.
TEST_F(MixedPrecision, OutputsCanStayInTheComputeDtype) {
  set_global_policy("mixed_bfloat16");
  auto make = [] {
    auto m = std::make_unique<Sequential>(std::vector<LayerRef>{Dense(8, "relu"), Dense(3)});
    m->set_seed(3);
    m->compile(optim::Adam(1e-2), SparseCategoricalCrossentropy(/*from_logits=*/true),
               {"accuracy"});
    return m;
  };
  auto kept = make(), cast = make();
  EXPECT_FALSE(kept->outputs_in_compute_dtype());
  Tensor x = inputs(32, 4);
  Tensor as_f32 = kept->predict(x);
  ASSERT_EQ(as_f32.dtype(), f32);
  kept->set_outputs_in_compute_dtype(true);  // drops the predict step traced with the cast
  EXPECT_TRUE(kept->outputs_in_compute_dtype());
  Tensor as_bf16 = kept->predict(x);
  ASSERT_EQ(as_bf16.dtype(), bf16);
  EXPECT_EQ(convert(as_bf16, f32).to_vector<float>(), as_f32.to_vector<float>());
  EXPECT_EQ((*kept)(x).dtype(), bf16);

  FitOptions fit{.epochs = 3, .batch_size = 8, .shuffle = false, .verbose = 0};
  History hk = kept->fit(x, labels(32, 3), fit), hc = cast->fit(x, labels(32, 3), fit);
  EXPECT_EQ(hk.history.at("loss"), hc.history.at("loss"));
  EXPECT_EQ(hk.history.at("accuracy"), hc.history.at("accuracy"));
  EXPECT_EQ(kept->evaluate(x, labels(32, 3)), cast->evaluate(x, labels(32, 3)));

  kept->save(path("kept.kiln"));
  std::unique_ptr<Model> loaded = load_model(path("kept.kiln"));
  EXPECT_TRUE(loaded->outputs_in_compute_dtype());
  Tensor again = loaded->predict(x);
  ASSERT_EQ(again.dtype(), bf16);
  EXPECT_EQ(convert(again, f32).to_vector<float>(),
            convert(kept->predict(x), f32).to_vector<float>());
}

// Trains under each policy, compiled and interpreted: the loss falls and stays finite.
TEST_F(MixedPrecision, TrainsUnderEachPolicyCompiledAndInterpreted) {
  for (const char* policy : {"float32", "mixed_bfloat16", "mixed_float16"}) {
    for (ExecutionMode mode : {ExecutionMode::kCompiled, ExecutionMode::kInterpreted}) {
      SCOPED_TRACE(std::string(policy) +
                   (mode == ExecutionMode::kCompiled ? " compiled" : " interpreted"));
      set_global_policy(policy);
      auto model = mlp();
      model->set_execution_mode(mode);
      model->compile(optim::Adam(1e-2), SparseCategoricalCrossentropy(), {"accuracy"});
      History h = model->fit(inputs(64, 4), labels(64, 3),
                             {.epochs = 5, .batch_size = 16, .shuffle = false, .verbose = 0});
      const std::vector<double>& loss = h.history.at("loss");
      EXPECT_TRUE(std::isfinite(loss.back()));
      EXPECT_LT(loss.back(), loss.front());
      for (const Variable& v : model->weights()) EXPECT_EQ(v.dtype(), f32) << v.name();
      EXPECT_EQ(model->optimizer().name(),
                std::string(policy) == "mixed_float16" ? "LossScaleOptimizer" : "Adam");
    }
  }
}

// Convolutions, pooling and dense layers in bf16 and f16, compiled and interpreted.
TEST_F(MixedPrecision, ConvolutionModelsTrainUnderMixedPolicies) {
  for (const char* policy : {"mixed_bfloat16", "mixed_float16"}) {
    for (ExecutionMode mode : {ExecutionMode::kCompiled, ExecutionMode::kInterpreted}) {
      SCOPED_TRACE(std::string(policy) +
                   (mode == ExecutionMode::kCompiled ? " compiled" : " interpreted"));
      set_global_policy(policy);
      Sequential model({Conv2D(4, {3, 3}, "relu"), MaxPool2D({2, 2}), Flatten(), Dense(3)});
      model.set_execution_mode(mode);
      model.compile(optim::Adam(1e-2), SparseCategoricalCrossentropy(true));
      Tensor x = reshape(inputs(16, 36), {16, 6, 6, 1});
      EXPECT_EQ((*model.layers()[0])(x).dtype(), Policy(policy).compute_dtype());
      History h = model.fit(x, labels(16, 3),
                            {.epochs = 4, .batch_size = 8, .shuffle = false, .verbose = 0});
      EXPECT_TRUE(std::isfinite(h.history.at("loss").back()));
      EXPECT_LT(h.history.at("loss").back(), h.history.at("loss").front());
      EXPECT_EQ(model.predict(x).dtype(), f32);
    }
  }
}

// Integer ids stay integers (no cast); the embedding and attention compute in the policy's dtype.
TEST_F(MixedPrecision, EmbeddingAndAttentionTrainUnderMixedPolicies) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 16 * 6; ++i) ids.push_back((i * 7) % 20);
  Tensor x = Tensor::from_vector(ids, {16, 6});
  for (const char* policy : {"mixed_bfloat16", "mixed_float16"}) {
    SCOPED_TRACE(policy);
    set_global_policy(policy);
    Sequential model({Embedding(20, 8), MultiHeadAttention(2, 4), Flatten(), Dense(3)});
    model.compile(optim::Adam(1e-2), SparseCategoricalCrossentropy(true));
    History h =
        model.fit(x, labels(16, 3), {.epochs = 4, .batch_size = 8, .shuffle = false, .verbose = 0});
    EXPECT_TRUE(std::isfinite(h.history.at("loss").back()));
    EXPECT_LT(h.history.at("loss").back(), h.history.at("loss").front());
    EXPECT_EQ((*model.layers()[0])(x).dtype(), Policy(policy).compute_dtype());
    for (const Variable& v : model.weights()) EXPECT_EQ(v.dtype(), f32) << v.name();
  }
}

TEST_F(MixedPrecision, NormalizationLayersComputeInF32AndKeepF32Statistics) {
  set_global_policy("mixed_bfloat16");
  Sequential model({Dense(8), BatchNormalization(), LayerNormalization(), Dense(3)});
  model.compile(optim::SGD(0.1), SparseCategoricalCrossentropy(true));
  model.fit(inputs(32, 4), labels(32, 3), {.epochs = 1, .batch_size = 8, .verbose = 0});
  for (const Variable& v : model.weights()) EXPECT_EQ(v.dtype(), f32) << v.name();
  EXPECT_EQ(model.layers()[1]->dtype_policy().name(), "mixed_bfloat16");
}

// A checkpoint holds f32 variables under every policy, so it restores under another; the loss
// scale of mixed_float16 is kept where both sides have one and ignored where one does not.
TEST_F(MixedPrecision, CheckpointsRestoreUnderAnotherPolicy) {
  std::map<std::string, std::map<std::string, Tensor>> states;
  for (const char* policy : {"float32", "mixed_bfloat16", "mixed_float16"}) {
    set_global_policy(policy);
    auto model = mlp();
    model->compile(optim::Adam(1e-2), SparseCategoricalCrossentropy());
    model->fit(inputs(32, 4), labels(32, 3), {.epochs = 1, .batch_size = 8, .verbose = 0});
    states[policy] = model->state();
  }
  EXPECT_TRUE(states["mixed_float16"].count("optimizer/loss_scale"));
  EXPECT_FALSE(states["float32"].count("optimizer/loss_scale"));
  for (const auto& [from, state] : states) {
    for (const char* to : {"float32", "mixed_bfloat16", "mixed_float16"}) {
      SCOPED_TRACE(from + " -> " + to);
      set_global_policy(to);
      auto model = mlp();
      model->compile(optim::Adam(1e-2), SparseCategoricalCrossentropy());
      model->build({4});
      model->fit(inputs(8, 4), labels(8, 3), {.epochs = 1, .batch_size = 8, .verbose = 0});
      ASSERT_NO_THROW(model->load_state(state));
      std::map<std::string, Tensor> loaded = model->state();
      for (const auto& [name, value] : state) {
        if (!loaded.count(name)) continue;  // a loss scale the target has none of
        EXPECT_EQ(loaded[name].to_vector<double>(), value.to_vector<double>()) << name;
      }
    }
  }
}

TEST_F(MixedPrecision, SavedModelsKeepEachLayersPolicy) {
  set_global_policy("mixed_float16");
  auto model = mlp();
  model->compile(optim::Adam(1e-2), SparseCategoricalCrossentropy());
  model->fit(inputs(32, 4), labels(32, 3), {.epochs = 1, .batch_size = 8, .verbose = 0});
  Tensor before = model->predict(inputs(6, 4));
  model->save(path("model.kiln"));
  set_global_policy("float32");
  std::unique_ptr<Model> loaded = load_model(path("model.kiln"));
  std::vector<LayerPtr> layers = loaded->layers();
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers[0]->dtype_policy().name(), "mixed_float16");
  EXPECT_EQ(layers[1]->dtype_policy().name(), "mixed_float16");
  EXPECT_EQ(layers[2]->dtype_policy().name(), "float32");
  EXPECT_EQ(loaded->predict(inputs(6, 4)).to_vector<float>(), before.to_vector<float>());
  auto& opt = dynamic_cast<optim::LossScaleOptimizer&>(loaded->optimizer());
  auto& original = dynamic_cast<optim::LossScaleOptimizer&>(model->optimizer());
  EXPECT_EQ(opt.loss_scale(), original.loss_scale());
  EXPECT_EQ(opt.inner_optimizer().name(), "Adam");
}

// The exported inference graph (kiln/io/saved_model.h) holds the casts: served, it gives the
// model's own predictions.
TEST_F(MixedPrecision, ExportedInferenceGraphsServeTheSamePredictions) {
  set_global_policy("mixed_bfloat16");
  auto model = mlp();
  Tensor x = inputs(6, 4);
  Tensor expected = model->predict(x);
  io::save_model(*model, path("export"));
  io::LoadedModel served = io::load_model(path("export"));
  EXPECT_THAT(served.graph().to_text(), HasSubstr("bf16"));  // the casts were exported
  EXPECT_EQ(served.predict(x).to_vector<float>(), expected.to_vector<float>());
}

}  // namespace
}  // namespace kiln::nn
