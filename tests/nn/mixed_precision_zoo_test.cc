// Every layer of the layer zoo (tests/nn/layer_zoo.h) under mixed_bfloat16 and mixed_float16:
// its model trains (compiled) with f32 variables and a finite, falling loss, and predicts f32.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/nn.h"
#include "tests/nn/layer_zoo.h"

namespace kiln::nn {
namespace {

using testing::ZooCase;
using testing::zoo;

class MixedPrecisionZoo : public ::testing::TestWithParam<const char*> {
 protected:
  void TearDown() override { set_global_policy("float32"); }
};

TEST_P(MixedPrecisionZoo, EveryLayerTrainsWithF32Variables) {
  for (const ZooCase& c : zoo()) {
    SCOPED_TRACE(c.name);
    set_global_policy(GetParam());
    std::unique_ptr<Model> model = c.make();
    set_global_policy("float32");
    auto [x, y] = c.data();
    if (c.loss == "sparse_categorical_crossentropy") {
      model->compile(optim::Adam(c.learning_rate), SparseCategoricalCrossentropy(true));
    } else {
      model->compile(optim::Adam(c.learning_rate), MeanSquaredError());
    }
    History h;
    try {
      h = model->fit(x, y, {.epochs = 3, .batch_size = 16, .seed = 21, .verbose = 0});
    } catch (const Error& e) {
      ADD_FAILURE() << "fit under " << GetParam() << ": " << e.what();
      continue;
    }
    const std::vector<double>& loss = h.history.at("loss");
    EXPECT_TRUE(std::isfinite(loss.back()));
    EXPECT_LT(loss.back(), loss.front()) << "the loss did not fall";
    EXPECT_EQ(model->predict(x).dtype(), f32);
    for (const Variable& v : model->weights()) EXPECT_EQ(v.dtype(), f32) << v.name();
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, MixedPrecisionZoo,
                         ::testing::Values("mixed_bfloat16", "mixed_float16"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace kiln::nn
