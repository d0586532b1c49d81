// nn::GraphLayer: a trained model's exported graph (here a Kiln saved model) as a layer of a new
// model: the same numbers as the original, frozen or fine-tuned under fit, saved and loaded
// whole, and clear errors for graphs and inputs that do not fit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/io/saved_model.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/nn/graph_layer.h"
#include "tests/testing/temp_dir.h"

namespace kiln::nn {
namespace {

using testing::HasSubstr;

class GraphLayerTest : public testing_util::TempDirTest {
 protected:
  // A trained-looking base: Dense(8, relu) -> Dense(4), exported for inputs of 6 features.
  io::ExportedGraph exported_base(Sequential& base) {
    base.set_seed(3);
    base.build({6});
    io::save_model(base, path("base"), {6});
    return io::load_model(path("base")).exported();
  }

  static std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

  static std::vector<std::vector<float>> weights_of(const Layer& layer) {
    std::vector<std::vector<float>> w;
    for (const Variable& v : layer.weights()) w.push_back(v.value().to_vector<float>());
    return w;
  }
};

Tensor features(int64_t n, uint64_t seed) { return random_uniform({n, 6}, seed, -1, 1); }

TEST_F(GraphLayerTest, ComputesWhatTheExportedModelComputes) {
  Sequential base({Dense(8, "relu"), Dense(4)});
  io::ExportedGraph graph = exported_base(base);
  ASSERT_EQ(graph.variables.size(), 4u);
  auto layer = std::make_shared<GraphLayer>(graph);
  const Tensor x = features(5, 1);
  const Tensor want = base.predict(x);
  EXPECT_EQ(values((*layer)(x)), values(want));  // eager: the same ops on the same values
  EXPECT_EQ(layer->weights().size(), 4u);
  EXPECT_TRUE(layer->trainable_weights().empty());
  EXPECT_EQ(layer->input_names(), std::vector<std::string>{"x"});

  // Inside a functional model, traced and compiled: equal within rounding.
  Tensor in = Input({6});
  Model model(in, (*layer)(in));
  const std::vector<float> got = values(model.predict(x));
  const std::vector<float> exp = values(want);
  ASSERT_EQ(got.size(), exp.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], exp[i], 1e-5) << i;
}

TEST_F(GraphLayerTest, FrozenBaseKeepsItsWeightsWhileTheHeadTrains) {
  Sequential base({Dense(8, "relu"), Dense(4)});
  auto frozen = std::make_shared<GraphLayer>(exported_base(base), /*trainable=*/false);
  auto head = std::make_shared<Dense>(3);
  Sequential model({frozen, head});
  model.compile(optim::Adam(0.05), SparseCategoricalCrossentropy(true));
  const Tensor x = features(64, 2);
  const Tensor y = convert(random_uniform({64}, 5, 0, 3), i32);
  model.build({6});
  const auto base_before = weights_of(*frozen);
  const auto head_before = weights_of(*head);
  History h = model.fit(x, y, {.epochs = 3, .batch_size = 16, .seed = 1, .verbose = 0});
  EXPECT_EQ(weights_of(*frozen), base_before);
  EXPECT_NE(weights_of(*head), head_before);
  EXPECT_EQ(model.trainable_weights().size(), 2u);  // the head's kernel and bias
}

TEST_F(GraphLayerTest, TrainableBaseIsFineTunedAndLossFalls) {
  Sequential base({Dense(8, "relu"), Dense(4)});
  auto tuned = std::make_shared<GraphLayer>(exported_base(base), /*trainable=*/true);
  Sequential model({tuned, Dense(3)});
  model.compile(optim::Adam(0.05), SparseCategoricalCrossentropy(true));
  const Tensor x = features(64, 2);
  const Tensor y = convert(random_uniform({64}, 5, 0, 3), i32);
  model.build({6});
  const auto before = weights_of(*tuned);
  History h = model.fit(x, y, {.epochs = 8, .batch_size = 16, .seed = 1, .verbose = 0});
  EXPECT_NE(weights_of(*tuned), before);
  EXPECT_EQ(model.trainable_weights().size(), 6u);
  const std::vector<double>& loss = h.history.at("loss");
  EXPECT_LT(loss.back(), loss.front());
}

TEST_F(GraphLayerTest, ModelHoldingItSavesAndLoadsWhole) {
  Sequential base({Dense(8, "relu"), Dense(4)});
  auto layer = std::make_shared<GraphLayer>(exported_base(base), /*trainable=*/true, "base");
  Sequential model({layer, Dense(2)});
  model.compile(optim::SGD(0.1), MeanSquaredError());
  const Tensor x = features(32, 7);
  model.fit(x, random_uniform({32, 2}, 8), {.epochs = 2, .batch_size = 8, .seed = 1, .verbose = 0});
  model.save(path("whole.kiln"));
  std::unique_ptr<Model> loaded = load_model(path("whole.kiln"));
  EXPECT_EQ(values(loaded->predict(x)), values(model.predict(x)));
  EXPECT_EQ(loaded->trainable_weights().size(), 6u);
}

TEST_F(GraphLayerTest, RefusesGraphsAndInputsThatDoNotFit) {
  Sequential base({Dense(8, "relu"), Dense(4)});
  io::ExportedGraph graph = exported_base(base);
  GraphLayer layer(graph);
  try {
    layer(reshape(features(2, 1), {2, 3, 2}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("input 0 ('x') must be f32[?,6], got f32[2,3,2]"));
  }
  io::ExportedGraph unfed = graph;
  unfed.variables.pop_back();  // its placeholder is fed by nothing now
  try {
    GraphLayer bad(unfed);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("is neither an input nor a variable's"));
  }
  io::ExportedGraph no_inputs = graph;
  no_inputs.inputs.clear();
  EXPECT_THROW(GraphLayer{no_inputs}, Error);
  EXPECT_THAT(
      [&] {
        try {
          io::load_model(path("base")).exported("nope");
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      HasSubstr("has no signature 'nope' (it has: serving_default)"));
}

}  // namespace
}  // namespace kiln::nn
