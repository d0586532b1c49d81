// The layer zoo (tests/nn/layer_zoo.h): every case's model is made of registered layer classes
// whose configs rebuild them; it trains (the loss falls), saves, loads in another process and
// trains further to exactly the weights an uninterrupted run reaches.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/nn/layer_registry.h"
#include "tests/nn/layer_zoo.h"
#include "tests/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace kiln::nn::testing {

std::vector<ZooCase>& zoo() {
  static std::vector<ZooCase> cases;
  return cases;
}

namespace {

KILN_ZOO_CASE("dense_dropout",
              [] {
                return std::make_unique<Sequential>(
                    std::vector<LayerRef>{Dense(8, "relu"), Dropout(0.25), Dense(2)});
              },
              [] {
                Tensor x = random_normal({64, 5}, 1);
                return std::pair{x, matmul(x, random_normal({5, 2}, 2))};
              });

TEST(LayerZoo, EveryLayerIsRegisteredAndItsConfigRebuildsIt) {
  for (const ZooCase& c : zoo()) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<Model> model = c.make();
    auto [x, y] = c.data();
    Shape features(x.shape().begin() + 1, x.shape().end());
    if (!model->input_type()) model->build(features, x.dtype());
    for (const LayerPtr& layer : model->layers()) {
      ASSERT_TRUE(is_layer_registered(layer->type_name())) << layer->type_name();
      LayerPtr rebuilt = layer_from_config(layer->type_name(), layer->config(), layer->name());
      EXPECT_EQ(rebuilt->type_name(), layer->type_name());
      EXPECT_EQ(rebuilt->name(), layer->name());
      EXPECT_TRUE(rebuilt->config() == layer->config()) << layer->config().str();
    }
  }
}

// ---- train, save, load in another process, continue ------------------------------------------

constexpr int kFirstEpochs = 3, kAllEpochs = 5;

FitOptions zoo_fit(int epochs, int initial_epoch) {
  return {.epochs = epochs, .batch_size = 16, .seed = 21, .verbose = 0,
          .initial_epoch = initial_epoch};
}

void compile_case(Model& model, const ZooCase& c) {
  if (c.loss == "sparse_categorical_crossentropy") {
    model.compile(optim::Adam(c.learning_rate), SparseCategoricalCrossentropy(true), {"accuracy"});
  } else {
    model.compile(optim::Adam(c.learning_rate), MeanSquaredError());
  }
}

std::vector<std::vector<uint8_t>> weight_bytes(const Model& m) {
  std::vector<std::vector<uint8_t>> out;
  for (const Variable& v : m.weights()) {
    const Tensor t = v.value();
    const auto* p = static_cast<const uint8_t*>(t.raw_data());
    out.emplace_back(p, p + t.nbytes());
  }
  return out;
}

// The child: for each case named in KILN_ZOO_CHILD_DIR/cases, load <case>.kiln, train to
// kAllEpochs and save <case>.continued.kiln. Run by the test below, not on its own.
TEST(LayerZooChild, DISABLED_LoadAndContinue) {
  const char* dir = std::getenv("KILN_ZOO_CHILD_DIR");
  ASSERT_NE(dir, nullptr) << "run by LayerZoo.TrainsSavesLoadsInAnotherProcessAndContinues";
  for (const ZooCase& c : zoo()) {
    const std::string path = std::string(dir) + "/" + c.name + ".kiln";
    if (!std::filesystem::exists(path)) continue;
    SCOPED_TRACE(c.name);
    std::unique_ptr<Model> model = load_model(path);
    auto [x, y] = c.data();
    model->fit(x, y, zoo_fit(kAllEpochs, kFirstEpochs));
    model->save(std::string(dir) + "/" + c.name + ".continued.kiln");
  }
}

TEST(LayerZoo, TrainsSavesLoadsInAnotherProcessAndContinues) {
  const std::filesystem::path dir = testing_util::per_test_dir("layer_zoo");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::map<std::string, std::unique_ptr<Model>> uninterrupted;
  for (const ZooCase& c : zoo()) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<Model> model = c.make();
    auto [x, y] = c.data();
    model->set_seed(3);
    compile_case(*model, c);
    History h = model->fit(x, y, zoo_fit(kFirstEpochs, 0));
    EXPECT_LT(h.history["loss"].back(), h.history["loss"].front()) << "the loss did not fall";
    model->save((dir / (c.name + ".kiln")).string());
    // The same model loaded in this process predicts the same bits.
    std::unique_ptr<Model> again = load_model((dir / (c.name + ".kiln")).string());
    EXPECT_EQ(again->predict(x).to_vector<float>(), model->predict(x).to_vector<float>());
    EXPECT_EQ(again->summary(), model->summary());
    uninterrupted[c.name] = std::move(model);
  }
  const std::string log = (dir / "child.log").string();
  testing_util::ProcessResult child = testing_util::run_process(
      {"/proc/self/exe", "--gtest_also_run_disabled_tests",
       "--gtest_filter=LayerZooChild.DISABLED_LoadAndContinue"},
      log, {{"KILN_ZOO_CHILD_DIR", dir.string()}});
  ASSERT_TRUE(child.exited_ok()) << child.output;
  for (const ZooCase& c : zoo()) {
    SCOPED_TRACE(c.name);
    Model& model = *uninterrupted.at(c.name);
    auto [x, y] = c.data();
    model.fit(x, y, zoo_fit(kAllEpochs, kFirstEpochs));
    std::unique_ptr<Model> continued = load_model((dir / (c.name + ".continued.kiln")).string());
    EXPECT_EQ(weight_bytes(*continued), weight_bytes(model))
        << "training continued in another process reached other weights";
    EXPECT_EQ(continued->compile_config().optimizer->iterations(),
              model.compile_config().optimizer->iterations());
  }
  std::filesystem::remove_all(dir);
}

TEST(LayerRegistry, UnknownClassNamesItAndHowToRegister) {
  try {
    layer_from_config("NoSuchLayer", {}, "mine");
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("NoSuchLayer"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("KILN_REGISTER_LAYER"), std::string::npos);
  }
}

TEST(LayerRegistry, RegisteringANameTwiceIsRefusedUnlessReplacing) {
  auto factory = [](const Attrs&) -> LayerPtr { return std::make_shared<Flatten>(); };
  register_layer("ZooTestTwice", factory);
  EXPECT_THROW(register_layer("ZooTestTwice", factory), Error);
  EXPECT_NO_THROW(register_layer("ZooTestTwice", factory, /*replace=*/true));
}

TEST(LayerRegistry, AMissingConfigEntryNamesLayerAndClass) {
  try {
    layer_from_config("Dense", {}, "head");
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Dense"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("missing attribute"), std::string::npos) << e.what();
  }
}

TEST(Initializers, BuiltInOnesRoundTripThroughTheirConfig) {
  for (const Initializer& init : {zeros_init(), constant_init(2.5), random_uniform_init(-1, 2),
                                  random_normal_init(0.5, 2), truncated_normal_init(0, 3),
                                  glorot_uniform(), glorot_normal(), he_uniform(), he_normal()}) {
    SCOPED_TRACE(init.name());
    Initializer again = initializer_from_config(init.name(), init.config());
    EXPECT_EQ(again.name(), init.name());
    Tensor a = init({4, 3}, f32, 7), b = again({4, 3}, f32, 7);
    EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  }
  Initializer custom = [](const Shape& s, DType d, uint64_t) { return ones(s, d); };
  EXPECT_EQ(custom.name(), "custom");
  EXPECT_THROW(initializer_from_config("nope", {}), Error);
}

}  // namespace
}  // namespace kiln::nn::testing
