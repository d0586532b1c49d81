// Models: fit/evaluate/predict, determinism, functional models, summary, callbacks, errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "kiln/data/dataset.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/testing/values.h"

namespace kiln::nn {
namespace {

using ::testing::HasSubstr;

// Two Gaussian blobs in 4-d, labels 0/1: linearly separable with a wide margin.
std::pair<Tensor, Tensor> blobs(int64_t n, uint64_t seed) {
  Tensor labels = convert(random_bernoulli({n}, seed, 0.5), i32);
  Tensor centers = expand_dims(convert(labels, f32) * 4.0 - 2.0, 1);  // -2 or +2
  Tensor x = random_normal({n, 4}, seed + 1) * 0.5 + centers;
  return {x, labels};
}

std::vector<std::vector<float>> snapshot(const Model& m) {
  std::vector<std::vector<float>> out;
  for (const Variable& v : m.weights()) out.push_back(v.value().to_vector<float>());
  return out;
}

TEST(Model, FitLearnsASeparableProblem) {
  auto [x, y] = blobs(256, 3);
  Sequential model({Dense(8, "relu"), Dense(2)});
  model.compile(optim::Adam(0.05), SparseCategoricalCrossentropy(true), {"accuracy"});
  History h = model.fit(x, y, {.epochs = 5, .batch_size = 32, .seed = 1, .verbose = 0});
  ASSERT_EQ(h.history["loss"].size(), 5u);
  EXPECT_LT(h.history["loss"].back(), h.history["loss"].front());
  auto scores = model.evaluate(x, y, 64);
  EXPECT_GT(scores["accuracy"], 0.97);
  Tensor pred = model.predict(x, 100);
  EXPECT_EQ(pred.shape(), (Shape{256, 2}));
}

TEST(Model, SameSeedGivesBitIdenticalWeights) {
  auto [x, y] = blobs(128, 5);
  auto train = [&] {
    auto model = std::make_unique<Sequential>(
        std::vector<LayerRef>{Dense(16, "relu"), Dropout(0.3), Dense(2)});
    model->set_seed(42);
    model->compile(optim::Adam(1e-2), SparseCategoricalCrossentropy(true));
    model->fit(x, y, {.epochs = 2, .batch_size = 16, .seed = 42, .verbose = 0});
    return snapshot(*model);
  };
  EXPECT_EQ(train(), train());
}

TEST(Model, CompiledAndInterpretedFitAgree) {
  auto [x, y] = blobs(96, 11);
  auto train = [&](ExecutionMode mode) {
    Sequential model({Dense(16, "relu"), Dropout(0.3), Dense(2)});
    model.set_execution_mode(mode);
    EXPECT_EQ(model.execution_mode(), mode);
    model.compile(optim::Adam(0.01), SparseCategoricalCrossentropy(true), {"accuracy"});
    History h = model.fit(x, y, {.epochs = 2, .batch_size = 32, .seed = 4, .verbose = 0});
    auto scores = model.evaluate(x, y, 64);
    return std::make_tuple(snapshot(model), h.history["loss"], scores["loss"],
                           model.predict(x, 50).to_vector<float>());
  };
  auto [w_c, loss_c, eval_c, pred_c] = train(ExecutionMode::kCompiled);
  auto [w_i, loss_i, eval_i, pred_i] = train(ExecutionMode::kInterpreted);
  // The compiled program fuses and vectorises (exp, log), so results agree to rounding.
  ASSERT_EQ(w_c.size(), w_i.size());
  for (size_t k = 0; k < w_c.size(); ++k)
    for (size_t i = 0; i < w_c[k].size(); ++i) EXPECT_NEAR(w_c[k][i], w_i[k][i], 1e-4) << k;
  for (size_t e = 0; e < loss_c.size(); ++e) EXPECT_NEAR(loss_c[e], loss_i[e], 1e-4);
  EXPECT_NEAR(eval_c, eval_i, 1e-4);
  for (size_t i = 0; i < pred_c.size(); ++i) EXPECT_NEAR(pred_c[i], pred_i[i], 1e-4);
}

TEST(Model, CompilesOncePerBatchShape) {
  auto [x, y] = blobs(100, 2);  // batches of 32, 32, 32 and 4: two train programs
  Sequential model({Dense(4, "relu"), Dense(2)});
  model.set_execution_mode(ExecutionMode::kCompiled);
  model.compile(optim::SGD(0.1), SparseCategoricalCrossentropy(true));
  model.fit(x, y, {.epochs = 3, .batch_size = 32, .shuffle = false, .verbose = 0});
  EXPECT_EQ(model.compile_stats().compiles, 2);
  EXPECT_EQ(model.compile_stats().cache_hits, 3 * 4 - 2);
  model.predict(x, 100);
  EXPECT_EQ(model.compile_stats().compiles, 3);
  model.set_execution_mode(ExecutionMode::kInterpreted);
  model.predict(x, 10);
  EXPECT_EQ(model.compile_stats().compiles, 3);  // interpreted: nothing compiled
}

TEST(Model, DifferentSeedsGiveDifferentWeights) {
  auto [x, y] = blobs(64, 5);
  std::vector<std::vector<std::vector<float>>> results;
  for (uint64_t seed : {1u, 2u}) {
    Sequential model({Dense(4), Dense(2)});
    model.set_seed(seed);
    model.compile(optim::SGD(0.1), SparseCategoricalCrossentropy(true));
    model.fit(x, y, {.epochs = 1, .batch_size = 16, .seed = seed, .verbose = 0});
    results.push_back(snapshot(model));
  }
  EXPECT_NE(results[0], results[1]);
}

TEST(Model, FitOnADatasetMatchesFitOnTheSameTensors) {
  auto [x, y] = blobs(100, 8);
  auto train = [&](bool use_dataset) {
    Sequential model({Dense(8, "relu"), Dropout(0.25), Dense(2)});
    model.set_seed(3);
    model.compile(optim::Adam(1e-2), SparseCategoricalCrossentropy(true), {"accuracy"});
    FitOptions options{.epochs = 2, .batch_size = 16, .shuffle = false, .seed = 3, .verbose = 0};
    History h = use_dataset ? model.fit(data::Dataset::from_tensors({x, y}).batch(16), options)
                            : model.fit(x, y, options);
    EXPECT_EQ(h.epochs_run, 2);
    return snapshot(model);
  };
  EXPECT_EQ(train(true), train(false));
}

TEST(Model, FitOnADatasetChecksItsElements) {
  Sequential model({Dense(2)});
  model.compile(optim::SGD(), SparseCategoricalCrossentropy(true));
  auto [x, y] = blobs(8, 1);
  EXPECT_THROW(model.fit(data::Dataset::from_tensors({x}).batch(4), {.verbose = 0}), Error);
}

TEST(Model, FunctionalModelMatchesTheSameLayersInSequence) {
  Tensor in = Input({4});
  Dense d1(3, "tanh"), d2(2);
  Tensor out = d2(d1(in));
  Model functional(in, out);
  Tensor x = random_normal({5, 4}, 9);
  CallContext ctx;
  Tensor expected = d2(d1(x, ctx), ctx);  // the same (shared) weights
  EXPECT_TRUE(allclose(functional.predict(x), expected, 1e-5, 1e-6));
}

// A plain op between layer calls is not replayed when the model traces its steps: the error says
// which op it is and what to do (it used to say "the output does not depend on the input").
TEST(Model, APlainOpBetweenFunctionalLayersIsAnErrorSayingWhatToDo) {
  Tensor in = Input({5}, i32);
  Tensor out = Dense(2)(kiln::mean(Embedding(20, 4)(in), {1}));
  Error e = test_values::thrown_error([&] { Model model(in, out, "bag"); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("Model 'bag': '"));
  EXPECT_THAT(e.what(), HasSubstr("is applied to layer outputs outside a layer"));
  EXPECT_THAT(e.what(), HasSubstr("do this op inside the call() of a Layer"));
  // The output itself a plain op of a layer output: the same error.
  Tensor in2 = Input({4});
  e = test_values::thrown_error([&] { Model model(in2, kiln::relu(Dense(3)(in2)) * 2.0f); });
  EXPECT_THAT(e.what(), HasSubstr("is applied to layer outputs outside a layer"));
  // A second nn::Input is named.
  Tensor other = Input({4}, f32, "other");
  e = test_values::thrown_error(
      [&] { Model model(in2, Dense(2)(Dense(4)(in2) + Dense(4)(other))); });
  EXPECT_THAT(e.what(), HasSubstr("is applied to layer outputs outside a layer"));
  e = test_values::thrown_error([&] { Model model(in2, Dense(2)(other)); });
  EXPECT_THAT(e.what(), HasSubstr("depends on nn::Input 'other', which is not one of the model's inputs"));
}

TEST(Model, SummaryListsLayersShapesAndParameterCounts) {
  Sequential model({Dense(128, "relu"), Dropout(0.2), Dense(10)});
  model.build({784});
  std::string s = model.summary();
  EXPECT_THAT(s, HasSubstr("Model: \"sequential\""));
  EXPECT_THAT(s, HasSubstr("dense (Dense)"));
  EXPECT_THAT(s, HasSubstr("(None, 128)"));
  EXPECT_THAT(s, HasSubstr("100,480"));
  EXPECT_THAT(s, HasSubstr("dense_1 (Dense)"));
  EXPECT_THAT(s, HasSubstr("Total params: 101,770"));
  EXPECT_THAT(s, HasSubstr("Non-trainable params: 0"));
}

TEST(Model, FunctionalSummaryWorksBeforeFit) {
  Tensor in = Input({4});
  Tensor out = Dense(2)(Dense(3, "tanh")(in));
  Model model(in, out, "functional");
  std::string s = model.summary();  // the Input gives every shape: no build needed
  EXPECT_THAT(s, HasSubstr("Model: \"functional\""));
  EXPECT_THAT(s, HasSubstr(" (InputLayer) "));
  EXPECT_THAT(s, HasSubstr("(None, 4)"));
  EXPECT_THAT(s, HasSubstr("(None, 3)"));
  EXPECT_THAT(s, HasSubstr("(None, 2)"));
  EXPECT_THAT(s, HasSubstr("Total params: 23"));  // 4*3+3 + 3*2+2
}

// An identity layer whose type name is longer than the summary's default column.
class AnIdentityLayerWithAVeryLongTypeName : public Layer {
 public:
  AnIdentityLayerWithAVeryLongTypeName() : Layer("identity") {}
  std::string type_name() const override { return "AnIdentityLayerWithAVeryLongTypeName"; }
  std::shared_ptr<Layer> clone() const override {
    return std::make_shared<AnIdentityLayerWithAVeryLongTypeName>(*this);
  }
  Tensor call(const std::vector<Tensor>& inputs, CallContext&) override { return inputs[0]; }
};

TEST(Model, SummaryColumnsStayAlignedForLongNames) {
  Sequential model({Dense(3), AnIdentityLayerWithAVeryLongTypeName(), Dense(2)});
  model.layers()[0]->set_name("a_dense_layer_with_a_rather_long_name");
  model.build({4});
  std::istringstream lines(model.summary());
  std::string line;
  size_t shape_col = std::string::npos, param_col = std::string::npos, rule = 0;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.find("Layer (type)") != std::string::npos) {
      shape_col = line.find("Output Shape");
      param_col = line.find("Param #");
      continue;
    }
    if (line.find_first_not_of('_') == std::string::npos) rule = line.size();
    if (line.find("(None") == std::string::npos) continue;
    ++rows;
    SCOPED_TRACE(line);
    ASSERT_NE(shape_col, std::string::npos);
    EXPECT_EQ(line.find("(None"), shape_col);
    EXPECT_EQ(line[shape_col - 1], ' ');  // the name column ends before the shape column
    EXPECT_EQ(line.find_first_of("0123456789", line.find(')', shape_col) + 1), param_col);
    EXPECT_LE(line.size(), rule);
  }
  EXPECT_EQ(rows, 3);
  std::string s = model.summary();
  EXPECT_THAT(s, HasSubstr(" a_dense_layer_with_a_rather_long_name (Dense) "));
  EXPECT_THAT(s, HasSubstr(" identity (AnIdentityLayerWithAVeryLongTypeName) "));
}

TEST(Model, EmptyTensorsAreAnErrorForFitAndEvaluate) {
  Sequential model({Dense(2)});
  model.compile(optim::SGD(), SparseCategoricalCrossentropy(true), {"accuracy"});
  Tensor x = zeros({0, 20}), y = zeros({0}, i32);
  try {
    model.fit(x, y, {.verbose = 0});
    FAIL() << "fit on empty tensors did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("fit: "));
    EXPECT_THAT(e.what(), HasSubstr("empty"));
    EXPECT_THAT(e.what(), HasSubstr("[0,20]"));
    EXPECT_THAT(e.what(), HasSubstr("[0]"));
  }
  try {
    model.evaluate(x, y);
    FAIL() << "evaluate on empty tensors did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("evaluate: "));
    EXPECT_THAT(e.what(), HasSubstr("empty"));
    EXPECT_THAT(e.what(), HasSubstr("[0,20]"));
  }
}

TEST(Model, EvaluateErrorsSayEvaluate) {
  auto [x, y] = blobs(16, 1);
  std::vector<int32_t> bad = y.to_vector<int32_t>();
  bad[3] = 5;
  Sequential model({Dense(2)});
  model.compile(optim::SGD(), SparseCategoricalCrossentropy(true));
  try {
    model.evaluate(x, Tensor::from_vector(bad));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::StartsWith("evaluate: label 5 at index 3"));
  }
}

TEST(Model, LabelsOutOfRangeAreAnError) {
  auto [x, y] = blobs(16, 1);
  std::vector<int32_t> bad = y.to_vector<int32_t>();
  bad[7] = 2;
  Sequential model({Dense(2)});
  model.compile(optim::SGD(), SparseCategoricalCrossentropy(true));
  try {
    model.fit(x, Tensor::from_vector(bad), {.verbose = 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("label 2 at index 7"));
    EXPECT_THAT(e.what(), HasSubstr("2 classes"));
  }
}

TEST(Model, BatchOfTheWrongShapeIsAnError) {
  auto [x, y] = blobs(16, 1);
  Sequential model({Dense(2)});
  model.compile(optim::SGD(), SparseCategoricalCrossentropy(true));
  model.fit(x, y, {.verbose = 0});
  try {
    model.predict(zeros({3, 5}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("[3,5]"));
    EXPECT_THAT(e.what(), HasSubstr("[?,4]"));
  }
}

TEST(Model, UnknownMetricIsAnError) {
  Sequential model({Dense(2)});
  EXPECT_THROW(model.compile(optim::SGD(), MeanSquaredError(), {"accurasy"}), Error);
}

TEST(Callbacks, TerminateOnNaNNamesEpochAndBatch) {
  auto [x, y] = blobs(64, 1);
  std::vector<float> xs = x.to_vector<float>();
  xs[4 * 40] = std::numeric_limits<float>::quiet_NaN();  // row 40: in the third batch of 16
  Sequential model({Dense(2)});
  model.compile(optim::SGD(0.1), SparseCategoricalCrossentropy(true));
  try {
    model.fit(Tensor::from_vector(xs, {64, 4}), y,
              {.batch_size = 16, .shuffle = false, .callbacks = {TerminateOnNaN()}, .verbose = 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("epoch 1, batch 3"));
  }
}

TEST(Callbacks, EarlyStoppingStopsWhenTheMonitoredValueStalls) {
  auto [x, y] = blobs(32, 1);
  Sequential model({Dense(2)});
  model.compile(optim::SGD(0.0), SparseCategoricalCrossentropy(true));  // lr 0: loss is flat
  History h = model.fit(x, y, {.epochs = 10, .callbacks = {EarlyStopping("loss", 1e-6, 2)},
                               .verbose = 0});
  EXPECT_EQ(h.epochs_run, 3);  // epoch 1 sets the best, epochs 2 and 3 do not improve
}

TEST(Callbacks, LearningRateSchedulerSetsTheRatePerEpoch) {
  auto [x, y] = blobs(32, 1);
  Sequential model({Dense(2)});
  model.compile(optim::SGD(0.1), SparseCategoricalCrossentropy(true));
  model.fit(x, y, {.epochs = 3,
                   .callbacks = {LearningRateScheduler([](int epoch, double) {
                     return 0.5 / (epoch + 1);
                   })},
                   .verbose = 0});
  EXPECT_DOUBLE_EQ(model.optimizer().learning_rate(), 0.5 / 3);
}

TEST(FitOptions, SettersTakeFieldsInAnyOrderAndMatchDesignatedInitializers) {
  auto [x, y] = blobs(64, 5);
  FitOptions designated{.epochs = 2, .batch_size = 16, .seed = 3, .verbose = 0};
  FitOptions chained = FitOptions().set_verbose(0).set_seed(3).set_batch_size(16).set_epochs(2);
  EXPECT_EQ(chained.epochs, 2);
  EXPECT_EQ(chained.batch_size, 16);
  EXPECT_EQ(chained.seed, 3u);
  EXPECT_EQ(chained.verbose, 0);
  Sequential a({Dense(4, "relu"), Dense(2)}), b({Dense(4, "relu"), Dense(2)});
  for (Sequential* m : {&a, &b})
    m->compile(optim::Adam(0.01), SparseCategoricalCrossentropy(true));
  a.fit(x, y, designated);
  b.fit(x, y, chained);
  EXPECT_EQ(snapshot(a), snapshot(b));
  FitOptions validated = FitOptions().set_validation_data(x, y).set_verbose(0);
  EXPECT_TRUE(validated.validation_data.has_value());
  EXPECT_EQ(b.fit(x, y, validated).history.count("val_loss"), 1u);
}

}  // namespace
}  // namespace kiln::nn
