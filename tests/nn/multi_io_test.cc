// Functional models with several inputs and outputs: fit with per-output losses and weights,
// inputs and targets as lists, by name or from a Dataset; predict and evaluate; summary; errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "kiln/data/dataset.h"
#include "kiln/io/tfrecord.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/warnings.h"

namespace kiln::nn {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

using testing_util::CaptureWarnings;

// Two inputs (a: 4 features, b: 3), two outputs: "score" (regression on both) and "klass"
// (3-way classification from a alone through a shared trunk).
struct TwoByTwo {
  std::unique_ptr<Model> model;
  TwoByTwo() {
    Tensor a = Input({4}, f32, "a");
    Tensor b = Input({3}, f32, "b");
    Tensor ha = Dense(8, "tanh", true, glorot_uniform())(a);
    Tensor hb = Dense(8, "tanh")(b);
    Tensor score = Dense(1)(Add()({ha, hb}));
    Tensor klass = Dense(3)(ha);
    model = std::make_unique<Model>(std::vector<Tensor>{a, b}, std::vector<Tensor>{score, klass},
                                    "two_by_two");
    model->set_seed(5);
  }
};

struct Data {
  Tensor a, b, score, klass;
};

Data make_data(int64_t n) {
  Data d;
  d.a = random_normal({n, 4}, 11);
  d.b = random_normal({n, 3}, 12);
  d.score = sum(d.a, {1}, true) * 0.5 - sum(d.b, {1}, true) * 0.25;
  d.klass = convert(argmax(matmul(d.a, random_normal({4, 3}, 13)), 1), i32);
  return d;
}

std::vector<std::vector<float>> snapshot(const Model& m) {
  std::vector<std::vector<float>> out;
  for (const Variable& v : m.weights()) out.push_back(v.value().to_vector<float>());
  return out;
}

void compile_it(Model& m, std::vector<double> weights = {}) {
  m.compile(optim::Adam(0.02), {MeanSquaredError(), SparseCategoricalCrossentropy(true)},
            {"accuracy"}, std::move(weights));
}

TEST(MultiIO, NamesComeFromInputsAndOutputLayers) {
  TwoByTwo t;
  EXPECT_EQ(t.model->input_names(), (std::vector<std::string>{"a", "b"}));
  std::vector<std::string> outs = t.model->output_names();
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_NE(outs[0], outs[1]);
  std::string summary = t.model->summary();
  EXPECT_THAT(summary, HasSubstr("a (InputLayer)"));
  EXPECT_THAT(summary, HasSubstr("b (InputLayer)"));
}

TEST(MultiIO, FitLearnsBothOutputsAndLogsEachLoss) {
  TwoByTwo t;
  Data d = make_data(256);
  compile_it(*t.model);
  History h = t.model->fit({d.a, d.b}, {d.score, d.klass},
                           {.epochs = 8, .batch_size = 32, .seed = 3, .verbose = 0});
  std::vector<std::string> outs = t.model->output_names();
  for (const std::string& key :
       {std::string("loss"), outs[0] + "_loss", outs[1] + "_loss", outs[1] + "_accuracy"}) {
    ASSERT_EQ(h.history[key].size(), 8u) << key;
    if (key.find("accuracy") == std::string::npos)
      EXPECT_LT(h.history[key].back(), 0.5 * h.history[key].front()) << key;
  }
  // The total is the sum of the outputs' losses (weights 1).
  auto r = t.model->evaluate({d.a, d.b}, {d.score, d.klass}, 64);
  EXPECT_NEAR(r["loss"], r[outs[0] + "_loss"] + r[outs[1] + "_loss"], 1e-4 * r["loss"]);
  EXPECT_GT(r[outs[1] + "_accuracy"], 0.8);
  std::vector<Tensor> p = t.model->predict({d.a, d.b}, 100);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].shape(), (Shape{256, 1}));
  EXPECT_EQ(p[1].shape(), (Shape{256, 3}));
}

// As Keras, a flat metric list applies to every output; "accuracy" has no class to count for
// the regression output (mean squared error), so it is left out there, with a warning.
TEST(MultiIO, AFlatMetricListSkipsAnOutputItDoesNotFitWithAWarning) {
  TwoByTwo t;
  Data d = make_data(64);
  std::vector<std::string> outs = t.model->output_names();
  CaptureWarnings warnings;
  compile_it(*t.model);
  EXPECT_THAT(warnings.messages,
              ElementsAre(AllOf(HasSubstr("compile: model 'two_by_two'"),
                                HasSubstr("output '" + outs[0] + "'"), HasSubstr("'accuracy'"),
                                HasSubstr("mean_squared_error"), HasSubstr("not computed"))));
  History h = t.model->fit({d.a, d.b}, {d.score, d.klass},
                           {.epochs = 1, .batch_size = 16, .seed = 3, .verbose = 0});
  EXPECT_EQ(h.history.count(outs[0] + "_accuracy"), 0u);
  EXPECT_EQ(h.history.count(outs[1] + "_accuracy"), 1u);
  auto r = t.model->evaluate({d.a, d.b}, {d.score, d.klass});
  EXPECT_EQ(r.count(outs[0] + "_accuracy"), 0u);
  EXPECT_EQ(r.count(outs[1] + "_accuracy"), 1u);
}

// Keras' metrics={"out_a": [...], ...}: each output gets its own list; one not named gets none.
TEST(MultiIO, MetricsByOutputApplyToThatOutputOnly) {
  TwoByTwo t;
  Data d = make_data(64);
  std::vector<std::string> outs = t.model->output_names();
  CaptureWarnings warnings;
  t.model->compile(optim::Adam(0.02), {MeanSquaredError(), SparseCategoricalCrossentropy(true)},
                   {{outs[0], {"mse"}}, {outs[1], {"accuracy", "sparse_categorical_accuracy"}}});
  EXPECT_THAT(warnings.messages, IsEmpty());
  History h = t.model->fit({d.a, d.b}, {d.score, d.klass},
                           {.epochs = 1, .batch_size = 16, .seed = 3, .verbose = 0});
  auto r = t.model->evaluate({d.a, d.b}, {d.score, d.klass});
  auto keys_of = [](const auto& logs) {
    std::vector<std::string> keys;
    for (const auto& [key, value] : logs) keys.push_back(key);
    return keys;
  };
  for (const auto& keys : {keys_of(h.history), keys_of(r)}) {
    EXPECT_THAT(keys, UnorderedElementsAre("loss", outs[0] + "_loss", outs[0] + "_mse",
                                           outs[1] + "_loss", outs[1] + "_accuracy",
                                           outs[1] + "_sparse_categorical_accuracy"));
  }
  // The regression output's mse is its loss.
  EXPECT_NEAR(r[outs[0] + "_mse"], r[outs[0] + "_loss"], 1e-5 * r[outs[0] + "_loss"]);

  // Only one output named: the other has no metric.
  t.model->compile(optim::Adam(0.02), {MeanSquaredError(), SparseCategoricalCrossentropy(true)},
                   {{outs[1], {"accuracy"}}});
  r = t.model->evaluate({d.a, d.b}, {d.score, d.klass});
  EXPECT_EQ(r.count(outs[1] + "_accuracy"), 1u);
  EXPECT_EQ(r.size(), 4u);  // loss, the outputs' losses, klass' accuracy
}

TEST(MultiIO, AMetricThatDoesNotFitTheOutputItIsGivenForIsAClearError) {
  TwoByTwo t;
  Data d = make_data(32);
  std::vector<std::string> outs = t.model->output_names();
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "no error";
  };
  auto compile_with = [&](MetricNames metrics) {
    t.model->compile(optim::SGD(), {MeanSquaredError(), SparseCategoricalCrossentropy(true)},
                     std::move(metrics));
  };
  compile_with({{outs[1], {"accuracy"}}});
  EXPECT_THAT(message([&] { compile_with({{outs[0], {"accuracy"}}}); }),
              AllOf(HasSubstr("compile: model 'two_by_two': metric 'accuracy' does not fit "
                              "output '" + outs[0] + "' (loss mean_squared_error)"),
                    HasSubstr("no class to count"), HasSubstr("'mse'")));
  EXPECT_THAT(message([&] { compile_with({{outs[0], {"sparse_categorical_accuracy"}}}); }),
              AllOf(HasSubstr("metric 'sparse_categorical_accuracy' does not fit output '" +
                              outs[0] + "'"),
                    HasSubstr("one score per example (output shape (None, 1))")));
  EXPECT_THAT(message([&] { compile_with({{outs[1], {"auc"}}}); }),
              AllOf(HasSubstr("metric 'auc' does not fit output '" + outs[1] +
                              "' (loss sparse_categorical_crossentropy)"),
                    HasSubstr("class indices")));
  EXPECT_THAT(message([&] { compile_with({{"nope", {"mse"}}}); }),
              HasSubstr("metrics are given for output 'nope', which model 'two_by_two' does not "
                        "have (its outputs: " + outs[0] + ", " + outs[1] + ")"));
  // Refused, the model keeps the compile before.
  auto r = t.model->evaluate({d.a, d.b}, {d.score, d.klass});
  EXPECT_EQ(r.count(outs[1] + "_accuracy"), 1u);
  EXPECT_EQ(r.size(), 4u);
  // A named accuracy is taken at its word: the targets may be classes after all.
  compile_with({{outs[0], {"binary_accuracy"}}});

  // A single output's metric list is for that output alone.
  Sequential regression({Dense(1)}, "regression");
  EXPECT_THAT(message([&] { regression.compile(optim::SGD(), MeanSquaredError(), {"accuracy"}); }),
              HasSubstr("compile: model 'regression': metric 'accuracy' does not fit output "
                        "'dense' (loss mean_squared_error)"));
  EXPECT_THAT(message([&] { regression.compile(optim::SGD(), Huber(), {"acc"}); }),
              HasSubstr("(loss huber)"));
}

TEST(MultiIO, MetricsByOutputSurviveSaveAndLoad) {
  const std::filesystem::path dir = testing_util::per_test_dir("multi_io");
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "two.kiln").string();
  TwoByTwo t;
  Data d = make_data(32);
  std::vector<std::string> outs = t.model->output_names();
  const MetricNames metrics = {{outs[0], {"mse"}},
                               {outs[1], {"accuracy", "sparse_categorical_accuracy"}}};
  t.model->compile(optim::SGD(), {MeanSquaredError(), SparseCategoricalCrossentropy(true)},
                   metrics);
  t.model->save(path);
  std::unique_ptr<Model> loaded = load_model(path);
  EXPECT_EQ(loaded->compile_config().metrics, metrics);
  EXPECT_EQ(loaded->evaluate({d.a, d.b}, {d.score, d.klass}),
            t.model->evaluate({d.a, d.b}, {d.score, d.klass}));
  // A flat list stays flat.
  t.model->compile(optim::SGD(), {MeanSquaredError(), SparseCategoricalCrossentropy(true)},
                   {"mse"});
  t.model->save(path);
  EXPECT_EQ(load_model(path)->compile_config().metrics, MetricNames({"mse"}));
  std::filesystem::remove_all(dir);
}

// A file written before compile checked metrics against outputs (accuracy on a regression
// output, which always read 0) still loads: the metric is dropped with a warning naming it.
TEST(MultiIO, AnOlderFilesMetricThatDoesNotFitIsDroppedWithAWarningOnLoad) {
  const std::filesystem::path dir = testing_util::per_test_dir("multi_io_old_metric");
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "old.kiln").string(), old = (dir / "older.kiln").string();
  Sequential model({Dense(1)});
  model.build({3});
  model.compile(optim::SGD(), MeanSquaredError(), {"auc"});
  model.save(path);
  // Rewrite the metric's name in the model's first record, as an older Kiln would have saved it.
  {
    io::RecordReader reader(path);
    io::RecordWriter writer(old);
    bool first = true;
    for (std::optional<std::string> record; (record = reader.next());) {
      if (first) {
        const size_t at = record->find("auc");
        ASSERT_NE(at, std::string::npos);
        ASSERT_EQ(record->find("auc", at + 1), std::string::npos);
        record->replace(at, 3, "acc");
        first = false;
      }
      writer.write(*record);
    }
    writer.close();
  }
  CaptureWarnings warnings;
  std::unique_ptr<Model> loaded = load_model(old);
  ASSERT_EQ(warnings.messages.size(), 1u);
  EXPECT_THAT(warnings.messages[0], HasSubstr("metric 'acc' does not fit output"));
  Tensor x = random_normal({8, 3}, 1), y = random_normal({8, 1}, 2);
  auto logs = loaded->evaluate(x, y);
  EXPECT_EQ(logs.count("acc") + logs.count("accuracy"), 0u);
  EXPECT_EQ(logs.count("loss"), 1u);
  // Compiling with it by hand is still an error.
  EXPECT_THROW(loaded->compile(optim::SGD(), MeanSquaredError(), {"acc"}), Error);
  std::filesystem::remove_all(dir);
}

TEST(MultiIO, LossWeightsScaleEachOutputsShareOfTheTotal) {
  TwoByTwo t;
  Data d = make_data(64);
  compile_it(*t.model, {2.0, 0.5});
  auto r = t.model->evaluate({d.a, d.b}, {d.score, d.klass});
  std::vector<std::string> outs = t.model->output_names();
  EXPECT_NEAR(r["loss"], 2.0 * r[outs[0] + "_loss"] + 0.5 * r[outs[1] + "_loss"],
              1e-5 * r["loss"]);
}

TEST(MultiIO, AZeroLossWeightLeavesThatOutputsOwnHeadUntrained) {
  TwoByTwo t;
  Data d = make_data(64);
  t.model->compile(optim::SGD(0.1), {MeanSquaredError(), SparseCategoricalCrossentropy(true)},
                   {}, {1.0, 0.0});
  // The last layer makes the "klass" output: only the zero-weighted loss reaches it.
  LayerPtr head = t.model->layers().back();
  ASSERT_EQ(head->name(), t.model->output_names()[1]);
  std::vector<float> before = head->weights()[0].value().to_vector<float>();
  std::vector<float> trunk = t.model->layers()[0]->weights()[0].value().to_vector<float>();
  t.model->fit({d.a, d.b}, {d.score, d.klass}, {.epochs = 1, .batch_size = 16, .verbose = 0});
  EXPECT_EQ(head->weights()[0].value().to_vector<float>(), before);
  EXPECT_NE(t.model->layers()[0]->weights()[0].value().to_vector<float>(), trunk);
}

TEST(MultiIO, NamedInputsAndTargetsTrainExactlyLikeLists) {
  Data d = make_data(96);
  TwoByTwo lists, named;
  compile_it(*lists.model);
  compile_it(*named.model);
  FitOptions o{.epochs = 2, .batch_size = 16, .seed = 9, .verbose = 0};
  lists.model->fit({d.a, d.b}, {d.score, d.klass}, o);
  std::vector<std::string> outs = named.model->output_names();
  named.model->fit(std::map<std::string, Tensor>{{"b", d.b}, {"a", d.a}},
                   std::map<std::string, Tensor>{{outs[1], d.klass}, {outs[0], d.score}}, o);
  EXPECT_EQ(snapshot(*lists.model), snapshot(*named.model));
  auto p = named.model->predict(std::map<std::string, Tensor>{{"a", d.a}, {"b", d.b}});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[outs[1]].to_vector<float>(), lists.model->predict({d.a, d.b})[1].to_vector<float>());
}

TEST(MultiIO, ADatasetOfInputsThenTargetsTrainsLikeTensors) {
  Data d = make_data(96);
  TwoByTwo tensors, dataset;
  compile_it(*tensors.model);
  compile_it(*dataset.model);
  tensors.model->fit({d.a, d.b}, {d.score, d.klass},
                     {.epochs = 2, .batch_size = 16, .shuffle = false, .seed = 4, .verbose = 0});
  data::Dataset ds = data::Dataset::from_tensors({d.a, d.b, d.score, d.klass}).batch(16);
  dataset.model->fit(ds, {.epochs = 2, .seed = 4, .verbose = 0});
  EXPECT_EQ(snapshot(*tensors.model), snapshot(*dataset.model));
  data::Dataset wrong = data::Dataset::from_tensors({d.a, d.b, d.score}).batch(16);
  TwoByTwo other;
  compile_it(*other.model);
  try {
    other.model->fit(wrong, {.verbose = 0});
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("2 input(s) then its 2 target(s), got 3"));
  }
}

TEST(MultiIO, MistakesAreClearErrors) {
  TwoByTwo t;
  Data d = make_data(32);
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(message([&] { t.model->compile(optim::SGD(), {MeanSquaredError()}, {}, {1, 2, 3}); }),
              HasSubstr("3 loss_weights for 2 output(s)"));
  EXPECT_THAT(message([&] {
                t.model->compile(optim::SGD(), {MeanSquaredError(), MeanSquaredError(),
                                                MeanSquaredError()},
                                 {});
              }),
              HasSubstr("has 2 output(s) but 3 losses"));
  EXPECT_THAT(message([&] { t.model->compile(optim::SGD(), {MeanSquaredError()}, {}, {1, -1}); }),
              HasSubstr("finite and >= 0"));
  compile_it(*t.model);
  EXPECT_THAT(message([&] { t.model->fit({d.a}, {d.score, d.klass}, {.verbose = 0}); }),
              HasSubstr("takes 2 input(s), got 1"));
  EXPECT_THAT(message([&] { t.model->fit({d.b, d.a}, {d.score, d.klass}, {.verbose = 0}); }),
              HasSubstr("x['a'] has shape [32,3]"));
  EXPECT_THAT(message([&] {
                t.model->fit(std::map<std::string, Tensor>{{"a", d.a}},
                             std::map<std::string, Tensor>{{t.model->output_names()[0], d.score},
                                                           {t.model->output_names()[1], d.klass}},
                             {.verbose = 0});
              }),
              HasSubstr("fit: x has no entry 'b'"));
  EXPECT_THAT(message([&] { t.model->predict(d.a); }), HasSubstr("has 2 outputs"));
  EXPECT_THAT(message([&] { t.model->build({4}); }), HasSubstr("knows their shapes"));
  Tensor lone = Input({2}, f32, "lone");
  Tensor in = Input({2}, f32, "used");
  EXPECT_THAT(message([&] { Model({in, lone}, {Dense(1)(in)}); }),
              HasSubstr("no output depends on input 'lone'"));
}

TEST(MultiIO, AnUnknownSequenceLengthInTheInputServesEveryLength) {
  Tensor tokens = Input({kUnknownDim}, i32, "tokens");
  Tensor out = Dense(2)(GlobalAveragePooling1D()(Embedding(10, 4)(tokens)));
  Model model(tokens, out);
  model.compile(optim::Adam(0.01), SparseCategoricalCrossentropy(true));
  Tensor short_x = convert(random_uniform({8, 3}, 1, 0, 10), i32);
  Tensor long_x = convert(random_uniform({8, 7}, 2, 0, 10), i32);
  Tensor y = convert(random_uniform({8}, 3, 0, 2), i32);
  EXPECT_EQ(model.predict(short_x).shape(), (Shape{8, 2}));
  EXPECT_EQ(model.predict(long_x).shape(), (Shape{8, 2}));
  model.fit(short_x, y, {.epochs = 1, .verbose = 0});
  model.fit(long_x, y, {.epochs = 1, .verbose = 0});
  // One trace; a program per concrete shape (the compiler works on static shapes).
  EXPECT_EQ(model.compile_stats().compiles, 4);
}

TEST(MultiIO, LayersMadeUniqueInAModelTakeTheirWeightsNamesAlong) {
  Tensor in = Input({3});
  Tensor out = Dense(2)(Dense(4)(in));  // both default to "dense"
  Model model(in, out);
  std::vector<std::string> names;
  for (const Variable& v : model.weights()) names.push_back(v.name());
  EXPECT_EQ(names, (std::vector<std::string>{"dense/kernel", "dense/bias", "dense_1/kernel",
                                             "dense_1/bias"}));
  std::map<std::string, Tensor> state = model.state();
  EXPECT_EQ(state.count("dense_1/kernel"), 1u);
  EXPECT_EQ(state.count("dense/kernel#1"), 0u);
}

}  // namespace
}  // namespace kiln::nn
