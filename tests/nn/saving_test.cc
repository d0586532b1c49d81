// Whole-model save and load (kiln/nn/saving.h): architecture, weights, optimizer state and
// compile configuration round-trip; training continues exactly; custom classes round-trip
// through their registration; bad files and unsaveable models are clear errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kiln/io/checkpoint.h"
#include "kiln/io/saved_model.h"
#include "kiln/io/summary.h"
#include "kiln/io/tfrecord.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/testing/temp_dir.h"

namespace kiln::nn {
namespace {

using ::testing::HasSubstr;

// A custom layer, registered the way a user registers one.
class Scale : public Layer {
 public:
  explicit Scale(double factor) : Layer("scale"), factor_(factor) {}
  std::string type_name() const override { return "SavingTestScale"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Scale>(*this); }
  Attrs config() const override { return {{"factor", factor_}}; }
  void build(const std::vector<Shape>& shapes) override {
    gain_ = add_weight("gain", {shapes[0].back()}, ones_init());
  }
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override {
    return inputs[0] * ctx.read(gain_) * factor_;
  }

 private:
  double factor_;
  Variable gain_;
};
KILN_REGISTER_LAYER("SavingTestScale",
                    [](const Attrs& c) { return std::make_shared<Scale>(c.get_float("factor")); });

// A custom layer nobody registered.
class Unregistered : public Layer {
 public:
  Unregistered() : Layer("unregistered") {}
  std::string type_name() const override { return "SavingTestUnregistered"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Unregistered>(*this); }
  Tensor call(const std::vector<Tensor>& inputs, CallContext&) override { return inputs[0]; }
};

class Saving : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_util::per_test_dir("saving");
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string read(const std::string& name) const {
    std::ifstream in(path(name), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  // Writes `data` as the file `name` in the test's directory; returns its path.
  std::string write(const std::string& name, const std::string& data) const {
    std::ofstream(path(name), std::ios::binary) << data;
    return path(name);
  }
  std::filesystem::path dir_;
};

std::pair<Tensor, Tensor> blobs(int64_t n) {
  Tensor labels = convert(random_bernoulli({n}, 3, 0.5), i32);
  Tensor x = random_normal({n, 4}, 4) * 0.5 + expand_dims(convert(labels, f32) * 2.0 - 1.0, 1);
  return {x, labels};
}

std::vector<std::vector<float>> snapshot(const Model& m) {
  std::vector<std::vector<float>> out;
  for (const Variable& v : m.weights()) out.push_back(v.value().to_vector<float>());
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST_F(Saving, SequentialRoundTripsAndContinuesTrainingExactly) {
  auto [x, y] = blobs(96);
  auto make = [] {
    auto m = std::make_unique<Sequential>(
        std::vector<LayerRef>{Dense(8, "relu"), Dropout(0.2), Scale(0.5), Dense(2)}, "clf");
    m->compile(optim::Adam(optim::exponential_decay(0.01, 5, 0.9)),
               SparseCategoricalCrossentropy(true), {"accuracy"});
    return m;
  };
  auto model = make();
  FitOptions first{.epochs = 2, .batch_size = 16, .seed = 4, .verbose = 0};
  model->fit(x, y, first);
  model->save(path("clf.kiln"));

  std::unique_ptr<Model> loaded = load_model(path("clf.kiln"));
  ASSERT_NE(dynamic_cast<Sequential*>(loaded.get()), nullptr);
  EXPECT_EQ(loaded->name(), "clf");
  EXPECT_EQ(loaded->summary(), model->summary());
  EXPECT_EQ(snapshot(*loaded), snapshot(*model));
  EXPECT_EQ(loaded->predict(x).to_vector<float>(), model->predict(x).to_vector<float>());
  EXPECT_EQ(loaded->evaluate(x, y), model->evaluate(x, y));
  EXPECT_EQ(loaded->optimizer().iterations(), model->optimizer().iterations());
  EXPECT_EQ(loaded->optimizer().learning_rate(), model->optimizer().learning_rate());

  FitOptions rest{.epochs = 4, .batch_size = 16, .seed = 4, .verbose = 0, .initial_epoch = 2};
  model->fit(x, y, rest);
  loaded->fit(x, y, rest);
  EXPECT_EQ(snapshot(*loaded), snapshot(*model));
}

TEST_F(Saving, MultiInputMultiOutputModelRoundTrips) {
  Tensor a = Input({4}, f32, "a"), b = Input({3}, f32, "b");
  Dense shared(6, "tanh");
  Tensor ha = shared(a);
  Tensor hb = Dense(6)(b);
  Tensor score = Dense(1)(Add()({ha, hb}));
  Tensor klass = Dense(2)(ha);
  Model model({a, b}, {score, klass}, "two");
  model.compile(optim::SGD(0.05, 0.9), {MeanSquaredError(), SparseCategoricalCrossentropy(true)},
                {"accuracy"}, {1.0, 0.5});
  Tensor xa = random_normal({64, 4}, 1), xb = random_normal({64, 3}, 2);
  Tensor ys = sum(xa, {1}, true), yk = convert(greater(sum(xa, {1}), zeros({64})), i32);
  FitOptions o{.epochs = 2, .batch_size = 16, .seed = 2, .verbose = 0};
  model.fit({xa, xb}, {ys, yk}, o);
  model.save(path("two.kiln"));
  std::unique_ptr<Model> loaded = load_model(path("two.kiln"));
  EXPECT_EQ(loaded->input_names(), model.input_names());
  EXPECT_EQ(loaded->output_names(), model.output_names());
  EXPECT_EQ(loaded->summary(), model.summary());
  EXPECT_EQ(loaded->compile_config().loss_weights, (std::vector<double>{1.0, 0.5}));
  auto p1 = model.predict({xa, xb}), p2 = loaded->predict({xa, xb});
  EXPECT_EQ(p1[0].to_vector<float>(), p2[0].to_vector<float>());
  EXPECT_EQ(p1[1].to_vector<float>(), p2[1].to_vector<float>());
  o.initial_epoch = 2;
  o.epochs = 3;
  model.fit({xa, xb}, {ys, yk}, o);
  loaded->fit({xa, xb}, {ys, yk}, o);
  EXPECT_EQ(snapshot(*loaded), snapshot(model));
}

TEST_F(Saving, AnUncompiledOrUnbuiltModelSavesItsArchitecture) {
  Sequential unbuilt({Dense(3), Dense(1)});
  unbuilt.save(path("unbuilt.kiln"));
  std::unique_ptr<Model> loaded = load_model(path("unbuilt.kiln"));
  EXPECT_FALSE(loaded->input_type().has_value());
  EXPECT_THAT(error_of([&] { loaded->optimizer(); }), HasSubstr("compile"));
  loaded->build({5});
  EXPECT_EQ(loaded->weights().size(), 4u);

  Sequential built({Dense(3), Dense(1)});
  built.build({5});
  built.compile(optim::Adam(), MeanSquaredError());
  built.save(path("built.kiln"));
  std::unique_ptr<Model> plain = load_model(path("built.kiln"), {.compile = false});
  EXPECT_THAT(error_of([&] { plain->optimizer(); }), HasSubstr("compile"));
  EXPECT_EQ(snapshot(*plain), snapshot(built));
}

TEST_F(Saving, WhatCannotBeRestoredIsRefusedAtSaveAndTheOldFileStays) {
  Sequential ok({Dense(2)});
  ok.build({3});
  ok.save(path("m.kiln"));
  const auto size = std::filesystem::file_size(path("m.kiln"));

  Sequential custom_layer({Dense(2), Unregistered()});
  custom_layer.build({3});
  EXPECT_THAT(error_of([&] { custom_layer.save(path("m.kiln")); }),
              HasSubstr("'SavingTestUnregistered', which this program has not registered"));

  Sequential custom_schedule({Dense(2)});
  custom_schedule.build({3});
  custom_schedule.compile(optim::SGD(optim::Schedule([](int64_t) { return 0.1; })),
                          MeanSquaredError());
  EXPECT_THAT(error_of([&] { custom_schedule.save(path("m.kiln")); }),
              HasSubstr("learning-rate schedule is a custom function"));
  // Refused before writing: the earlier file is intact and loads.
  EXPECT_EQ(std::filesystem::file_size(path("m.kiln")), size);
  EXPECT_NO_THROW(load_model(path("m.kiln")));
  for (const auto& entry : std::filesystem::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename(), "m.kiln") << "a temporary file was left behind";
}

TEST_F(Saving, BadFilesAreClearErrors) {
  Sequential m({Dense(4), Dense(2)});
  m.build({3});
  m.compile(optim::Adam(), MeanSquaredError());
  m.save(path("m.kiln"));
  const std::string bytes = read("m.kiln");
  try {
    load_model(path("missing.kiln"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_THAT(e.what(), HasSubstr("missing.kiln"));
  }
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;
  for (const std::string& f : {write("flipped.kiln", flipped),
                               write("truncated.kiln", bytes.substr(0, bytes.size() - 7)),
                               write("garbage.kiln", std::string(40, 'x'))}) {
    SCOPED_TRACE(f);
    try {
      load_model(f);
      FAIL() << "loaded a damaged file";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(f));
    }
  }
}

// What load_model was given, when it is not a whole model: it names the kind of file and what
// to do with it, instead of loading an empty model or failing on the contents.
TEST_F(Saving, ACheckpointIsNamedNotLoadedAsAModel) {
  Sequential m({Dense(2)});
  m.build({3});
  m.compile(optim::SGD(0.1), MeanSquaredError());
  // As ModelCheckpoint and BackupAndRestore write them, and one with no tensors or metadata
  // (which loaded as an empty model that compiled, fit and saved again).
  const std::string full =
      io::save_checkpoint(path("ck/ckpt-5"), m.state(), {{"epoch", int64_t{1}}});
  const std::string empty = io::save_checkpoint(path("empty/ckpt"), {});
  for (const std::string& prefix : {full, empty}) {
    SCOPED_TRACE(prefix);
    const std::string index = prefix + ".index";
    try {
      load_model(index);
      FAIL() << "loaded a checkpoint index as a model";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_THAT(e.what(), HasSubstr("load_model: " + index +
                                      " is a checkpoint index, not a Kiln model (.kiln)"));
      EXPECT_THAT(e.what(), HasSubstr("io::load_checkpoint(\"" + prefix + "\")"));
    }
    const std::string data = io::read_checkpoint_index(prefix).data_path;
    const std::string e = error_of([&] { load_model(data); });
    EXPECT_THAT(e, HasSubstr(data + " is a checkpoint data file, not a Kiln model (.kiln)"));
    EXPECT_THAT(e, HasSubstr("io::load_checkpoint(\"" + prefix + "\")"));
  }
  EXPECT_THAT(error_of([&] { load_model(path("ck")); }),
              HasSubstr(path("ck") + " is a checkpoint directory, not a Kiln model (.kiln)"));
}

TEST_F(Saving, OtherFilesSayWhatTheyAreNotAFormatVersion) {
  Sequential m({Dense(2)});
  m.build({3});
  std::string events;
  {
    io::EventWriter w(path("logs"));
    w.add_scalar("loss", 0.5, 1);
    events = w.path();
  }
  io::RecordWriter records(path("data.tfrecord"));
  records.write("some record");
  records.close();
  const std::string exported = io::save_model(m, path("export"), {3});
  std::ofstream(path("notes.txt")) << "not a model at all\n";
  const struct {
    std::string file, says;
  } cases[] = {
      {events, events + " is a TensorBoard event file, not a Kiln model (.kiln)"},
      {path("data.tfrecord"), path("data.tfrecord") + " is a TFRecord file whose first record "
                                                      "(at offset 0) is not a Kiln model"},
      {path("export"), path("export") + " is an exported model, not a Kiln model (.kiln); "
                                        "load it with io::load_model"},
      {exported + "/saved_model.pb", "is an exported model's graph, not a Kiln model (.kiln)"},
      {path("notes.txt"), path("notes.txt") + " is not a Kiln model (.kiln), or is damaged: "
                                              "it is not a TFRecord file"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string e = error_of([&] { load_model(c.file); });
    EXPECT_THAT(e, HasSubstr(c.says));
    EXPECT_THAT(e, testing::Not(HasSubstr("format version")));
  }
}

TEST_F(Saving, BytesAfterACompleteModelAreReportedAsSuch) {
  Sequential m({Dense(2)});
  m.build({3});
  m.save(path("m.kiln"));
  const std::string bytes = read("m.kiln");
  const std::string n = std::to_string(bytes.size());
  std::string e = error_of([&] { load_model(write("twice.kiln", bytes + bytes)); });
  EXPECT_THAT(e, HasSubstr("twice.kiln: the model ends at offset " + n + " but " + n +
                           " more bytes follow: another Kiln model (two files concatenated?)"));
  EXPECT_THAT(e, testing::Not(HasSubstr("truncated")));
  e = error_of([&] { load_model(write("tail.kiln", bytes + "xyz")); });
  EXPECT_THAT(e,
              HasSubstr("tail.kiln: the model ends at offset " + n + " but 3 more bytes follow"));
  // Cut at a record boundary: records are missing, and that is what it says.
  io::RecordReader reader(path("m.kiln"));
  reader.next();
  reader.next();
  const uint64_t cut = reader.offset();
  e = error_of([&] { load_model(write("cut.kiln", bytes.substr(0, cut))); });
  EXPECT_THAT(e, HasSubstr("cut.kiln: truncated: the file ends at offset " + std::to_string(cut) +
                           " after 1 of the model's 2 tensor records"));
}

TEST_F(Saving, OptimizersSchedulesAndLossesRoundTripThroughTheirConfigs) {
  std::vector<std::shared_ptr<optim::Optimizer>> opts = {
      std::make_shared<optim::SGD>(optim::cosine_decay(0.1, 100, 0.1), 0.9, true),
      std::make_shared<optim::Adam>(optim::linear_warmup(optim::constant_lr(0.01), 10), 0.8,
                                    0.99, 1e-6),
      std::make_shared<optim::AdamW>(0.002, 0.01), std::make_shared<optim::RMSprop>(0.01, 0.8, 0.1,
                                                                                   1e-6, true)};
  opts[1]->clip_global_norm(2.5);
  opts[2]->set_learning_rate(0.123);
  for (const auto& opt : opts) {
    SCOPED_TRACE(opt->name());
    auto again = optim::optimizer_from_config(opt->name(), opt->config());
    EXPECT_TRUE(again->config() == opt->config()) << opt->config().str();
    for (int64_t step : {0, 5, 50, 500}) {
      opt->set_iterations(step);
      again->set_iterations(step);
      EXPECT_EQ(again->learning_rate(), opt->learning_rate());
    }
  }
  std::vector<std::shared_ptr<Loss>> losses = {
      std::make_shared<CategoricalCrossentropy>(true, 0.1), std::make_shared<Huber>(2.0),
      std::make_shared<BinaryCrossentropy>(true)};
  for (const auto& l : losses) {
    auto again = loss_from_config(l->name(), l->config());
    EXPECT_TRUE(again->config() == l->config());
  }
  EXPECT_THAT(error_of([] { optim::optimizer_from_config("Nadam", {}); }),
              HasSubstr("'Nadam' is not registered"));
  EXPECT_THAT(error_of([] { loss_from_config("focal", {}); }), HasSubstr("'focal' is not registered"));
}

TEST_F(Saving, AMultiInputModelExportsForServingWithItsNames) {
  Tensor a = Input({2}, f32, "a"), b = Input({3}, f32, "b");
  Tensor out = Dense(1)(Concatenate()({Dense(2)(a), b}));
  Model model({a, b}, {out, Dense(2)(b)}, "served");
  const std::string version = io::save_model(model, path("export"));
  io::LoadedModel loaded = io::load_model(version);
  Tensor xa = random_normal({5, 2}, 1), xb = random_normal({5, 3}, 2);
  std::vector<std::string> outs = model.output_names();
  auto results = loaded.run("serving_default", {{"a", xa}, {"b", xb}});
  ASSERT_EQ(results.size(), 2u);
  std::vector<Tensor> expected = model.predict({xa, xb});
  EXPECT_EQ(results.at(outs[0]).to_vector<float>(), expected[0].to_vector<float>());
  EXPECT_EQ(results.at(outs[1]).to_vector<float>(), expected[1].to_vector<float>());
  EXPECT_THAT(error_of([&] { io::save_model(model, path("export"), {2}); }),
              HasSubstr("several inputs or outputs"));
}

}  // namespace
}  // namespace kiln::nn
