// The layer zoo (tests/nn/layer_zoo.h): every case's model is made of registered layer classes
// whose configs rebuild them.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/nn/layer_registry.h"
#include "tests/nn/layer_zoo.h"

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
