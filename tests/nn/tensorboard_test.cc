// The TensorBoard callback, checked by reading its event files back independently: records
// with io::RecordReader, Events with the generated protobuf classes (and `protoc --decode`).
#include "kiln/nn/tensorboard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kiln/io/tfrecord.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "src/api/io/proto/event.pb.h"
#include "src/api/io/proto/graph.pb.h"
#include "tests/testing/temp_dir.h"

namespace kiln::nn {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;

// The events of one event file, with its scalars and histograms by tag.
struct EventFile {
  std::vector<proto::Event> events;
  std::map<std::string, std::vector<std::pair<int64_t, float>>> scalars;  // (step, value)
  std::map<std::string, std::vector<std::pair<int64_t, proto::HistogramProto>>> histograms;
  std::vector<proto::GraphDef> graphs;
};

EventFile read_event_file(const fs::path& path) {
  EventFile f;
  for (const std::string& record : io::read_records(path.string())) {
    proto::Event e;
    EXPECT_TRUE(e.ParseFromString(record)) << path;
    f.events.push_back(e);
    if (e.has_graph_def()) {
      proto::GraphDef g;
      EXPECT_TRUE(g.ParseFromString(e.graph_def()));
      f.graphs.push_back(g);
    }
    for (const auto& v : e.summary().value()) {
      if (v.has_histo()) f.histograms[v.tag()].emplace_back(e.step(), v.histo());
      if (v.value_case() == proto::Summary::Value::kSimpleValue)
        f.scalars[v.tag()].emplace_back(e.step(), v.simple_value());
    }
  }
  return f;
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Records what the other callbacks see: batch logs by global step, weights at epoch starts.
class Recorder : public Callback {
 public:
  void on_epoch_begin(int epoch, Logs&) override {
    std::vector<std::vector<double>> w;
    for (const Variable& v : model()->trainable_weights())
      w.push_back(v.value().to_vector<double>());
    epoch_start[epoch] = w;
  }
  void on_train_batch_end(int64_t, Logs& logs) override {
    batch_logs[model()->optimizer().iterations()] = logs;
  }
  std::map<int64_t, Logs> batch_logs;
  std::map<int, std::vector<std::vector<double>>> epoch_start;
};

class TensorBoardTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_util::per_test_dir("kiln_tensorboard");
    fs::remove_all(dir_);
    // 64 points in 5 features, 3 classes by the sign pattern of two features.
    std::vector<float> xs(64 * 5);
    std::vector<int32_t> ys(64);
    for (int i = 0; i < 64; ++i) {
      for (int j = 0; j < 5; ++j)
        xs[i * 5 + j] = static_cast<float>(((i * 7 + j * 13) % 17) - 8) / 8;
      ys[i] = xs[i * 5] > 0 ? (xs[i * 5 + 1] > 0 ? 2 : 1) : 0;
    }
    x_ = Tensor::from_vector(xs, {64, 5});
    y_ = Tensor::from_vector(ys, {64});
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::unique_ptr<Sequential> make_model() {
    auto model = std::make_unique<Sequential>(std::vector<LayerRef>{Dense(4, "relu"), Dense(3)});
    model->set_seed(3);
    model->compile(optim::SGD(0.1), SparseCategoricalCrossentropy(/*from_logits=*/true),
                   {"accuracy"});
    return model;
  }

  fs::path dir_;
  Tensor x_, y_;
};

TEST_F(TensorBoardTest, EpochScalarsEqualTheHistoryInTrainAndValidationRuns) {
  auto owned = make_model();
  Sequential& model = *owned;
  History h = model.fit(x_, y_,
                        {.epochs = 3,
                         .batch_size = 16,
                         .validation_data = std::pair(x_, y_),
                         .callbacks = {TensorBoard(dir_.string())},
                         .verbose = 0});
  ASSERT_EQ(event_files(dir_ / "train").size(), 1u);
  ASSERT_EQ(event_files(dir_ / "validation").size(), 1u);
  EventFile train = read_event_file(event_files(dir_ / "train")[0]);
  EventFile val = read_event_file(event_files(dir_ / "validation")[0]);
  ASSERT_FALSE(train.events.empty());
  EXPECT_EQ(train.events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(val.events[0].file_version(), "brain.Event:2");

  auto expect_curve = [](const EventFile& f, const std::string& tag,
                         const std::vector<double>& values) {
    ASSERT_TRUE(f.scalars.count(tag)) << tag;
    const auto& points = f.scalars.at(tag);
    ASSERT_EQ(points.size(), values.size()) << tag;
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(points[i].first, static_cast<int64_t>(i)) << tag;
      EXPECT_EQ(points[i].second, static_cast<float>(values[i])) << tag << " epoch " << i;
    }
  };
  expect_curve(train, "epoch_loss", h.history.at("loss"));
  expect_curve(train, "epoch_accuracy", h.history.at("accuracy"));
  expect_curve(train, "epoch_learning_rate", {0.1, 0.1, 0.1});
  expect_curve(val, "epoch_loss", h.history.at("val_loss"));
  expect_curve(val, "epoch_accuracy", h.history.at("val_accuracy"));
  // Only the epoch scalars: no batch values, no validation values in train, no histograms.
  std::set<std::string> train_tags, val_tags;
  for (const auto& [tag, points] : train.scalars) train_tags.insert(tag);
  for (const auto& [tag, points] : val.scalars) val_tags.insert(tag);
  EXPECT_EQ(train_tags,
            (std::set<std::string>{"epoch_accuracy", "epoch_learning_rate", "epoch_loss"}));
  EXPECT_EQ(val_tags, (std::set<std::string>{"epoch_accuracy", "epoch_loss"}));
  EXPECT_TRUE(train.histograms.empty());
  EXPECT_TRUE(val.graphs.empty());
}

TEST_F(TensorBoardTest, LearningRateFollowsAScheduler) {
  auto owned = make_model();
  Sequential& model = *owned;
  model.fit(
      x_, y_,
      {.epochs = 3,
       .batch_size = 32,
       .callbacks = {LearningRateScheduler([](int epoch, double) { return 0.5 / (epoch + 1); }),
                     TensorBoard(dir_.string())},
       .verbose = 0});
  EventFile train = read_event_file(event_files(dir_ / "train").at(0));
  const auto& lr = train.scalars.at("epoch_learning_rate");
  ASSERT_EQ(lr.size(), 3u);
  EXPECT_FLOAT_EQ(lr[0].second, 0.5f);
  EXPECT_FLOAT_EQ(lr[1].second, 0.25f);
  EXPECT_FLOAT_EQ(lr[2].second, 0.5f / 3);
  EXPECT_FALSE(train.scalars.count("epoch_val_loss"));
  EXPECT_TRUE(event_files(dir_ / "validation").empty());  // no validation data, no run
}

TEST_F(TensorBoardTest, BatchScalarsEveryNStepsAtTheGlobalStep) {
  auto owned = make_model();
  Sequential& model = *owned;
  auto recorder = std::make_shared<Recorder>();
  model.fit(x_, y_,
            {.epochs = 3,
             .batch_size = 16,
             .callbacks = {TensorBoard(dir_.string(), {.update_freq = 3}), recorder},
             .verbose = 0});
  EventFile train = read_event_file(event_files(dir_ / "train").at(0));
  // 4 batches per epoch, 12 steps: written after steps 3, 6, 9, 12.
  for (const char* name : {"loss", "accuracy"}) {
    const std::string tag = std::string("batch_") + name;
    ASSERT_TRUE(train.scalars.count(tag)) << tag;
    const auto& points = train.scalars.at(tag);
    ASSERT_EQ(points.size(), 4u) << tag;
    for (size_t i = 0; i < points.size(); ++i) {
      const int64_t step = 3 * static_cast<int64_t>(i + 1);
      EXPECT_EQ(points[i].first, step);
      EXPECT_EQ(points[i].second, static_cast<float>(recorder->batch_logs.at(step).at(name)))
          << tag << " step " << step;
    }
  }
  EXPECT_FALSE(train.scalars.count("batch_batch_loss"));
  EXPECT_EQ(train.scalars.at("epoch_loss").size(), 3u);
}

TEST_F(TensorBoardTest, UpdateFreqBatchWritesEveryStepAndContinuesAcrossFits) {
  auto owned = make_model();
  Sequential& model = *owned;
  model.fit(x_, y_,
            {.epochs = 1,
             .batch_size = 32,
             .callbacks = {TensorBoard(dir_.string(), {.update_freq = "batch"})},
             .verbose = 0});
  model.fit(x_, y_,
            {.epochs = 1,
             .batch_size = 32,
             .callbacks = {TensorBoard(dir_.string(), {.update_freq = "batch"})},
             .verbose = 0});
  std::vector<fs::path> files = event_files(dir_ / "train");
  ASSERT_EQ(files.size(), 2u);  // one file per fit
  std::vector<int64_t> steps;
  for (const fs::path& f : files) {
    EventFile events = read_event_file(f);
    for (const auto& [step, value] : events.scalars["batch_loss"]) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST_F(TensorBoardTest, WeightAndUpdateHistogramsEveryHistogramFreqEpochs) {
  auto owned = make_model();
  Sequential& model = *owned;
  auto recorder = std::make_shared<Recorder>();
  model.fit(x_, y_,
            {.epochs = 3,
             .batch_size = 16,
             .callbacks = {recorder, TensorBoard(dir_.string(), {.histogram_freq = 2})},
             .verbose = 0});
  EventFile train = read_event_file(event_files(dir_ / "train").at(0));
  std::vector<Variable> weights = model.trainable_weights();
  ASSERT_EQ(weights.size(), 4u);
  std::set<std::string> expected_tags, tags;
  for (const Variable& v : weights) {
    expected_tags.insert(v.name());
    expected_tags.insert(v.name() + "/update");
    expected_tags.insert(v.name() + "/gradient");
  }
  EXPECT_TRUE(expected_tags.count("dense/kernel") && expected_tags.count("dense_1/bias"));
  for (const auto& [tag, points] : train.histograms) tags.insert(tag);
  EXPECT_EQ(tags, expected_tags);

  for (size_t k = 0; k < weights.size(); ++k) {
    const Variable& v = weights[k];
    const auto& points = train.histograms.at(v.name());
    ASSERT_EQ(points.size(), 2u);  // epochs 0 and 2
    EXPECT_EQ(points[0].first, 0);
    EXPECT_EQ(points[1].first, 2);
    // Epoch 2 is the last: its histogram describes the final weights.
    const proto::HistogramProto& last = points[1].second;
    std::vector<double> w = v.value().to_vector<double>();
    double sum = 0, lo = w[0], hi = w[0];
    for (double x : w) sum += x, lo = std::min(lo, x), hi = std::max(hi, x);
    EXPECT_EQ(last.num(), static_cast<double>(w.size()));
    EXPECT_DOUBLE_EQ(last.min(), lo);
    EXPECT_DOUBLE_EQ(last.max(), hi);
    EXPECT_NEAR(last.sum(), sum, 1e-9);
    double counted = 0;
    for (double c : last.bucket()) counted += c;
    EXPECT_EQ(counted, static_cast<double>(w.size()));

    // The update histogram of epoch 2: final weights minus those at the epoch's start.
    const auto& updates = train.histograms.at(v.name() + "/update");
    ASSERT_EQ(updates.size(), 2u);
    EXPECT_EQ(updates[1].first, 2);
    const std::vector<double>& start = recorder->epoch_start.at(2)[k];
    double update_sum = 0, update_lo = 0, update_hi = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      double d = static_cast<double>(static_cast<float>(w[i] - start[i]));
      update_sum += d;
      update_lo = i == 0 ? d : std::min(update_lo, d);
      update_hi = i == 0 ? d : std::max(update_hi, d);
    }
    EXPECT_NEAR(updates[1].second.sum(), update_sum, 1e-6);
    EXPECT_DOUBLE_EQ(updates[1].second.min(), update_lo);
    EXPECT_DOUBLE_EQ(updates[1].second.max(), update_hi);
    EXPECT_GT(updates[1].second.sum_squares(), 0);  // SGD moved every variable

    // The gradient histogram of epoch 2: the gradient of the epoch's last batch.
    const auto& grads = train.histograms.at(v.name() + "/gradient");
    ASSERT_EQ(grads.size(), 2u);
    EXPECT_EQ(grads[1].first, 2);
    EXPECT_EQ(grads[1].second.num(), static_cast<double>(w.size()));
    std::vector<std::pair<Variable, Tensor>> last_grads = model.last_gradients();
    ASSERT_EQ(last_grads.size(), weights.size());
    std::vector<double> g = last_grads[k].second.to_vector<double>();
    double grad_sum = 0;
    for (double x : g) grad_sum += x;
    EXPECT_NEAR(grads[1].second.sum(), grad_sum, 1e-6);
  }
}

TEST_F(TensorBoardTest, GraphIsTheInferenceGraphWithNodesScopedByLayer) {
  auto owned = make_model();
  Sequential& model = *owned;
  model.fit(
      x_, y_,
      {.epochs = 1, .batch_size = 32, .callbacks = {TensorBoard(dir_.string())}, .verbose = 0});
  EventFile train = read_event_file(event_files(dir_ / "train").at(0));
  ASSERT_EQ(train.graphs.size(), 1u);
  std::map<std::string, const proto::NodeDef*> nodes;
  for (const auto& node : train.graphs[0].node()) nodes[node.name()] = &node;
  // The input and each variable's placeholder, named as the variable.
  ASSERT_TRUE(nodes.count("x"));
  for (const char* var : {"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"}) {
    ASSERT_TRUE(nodes.count(var)) << var;
    EXPECT_EQ(nodes.at(var)->op(), "placeholder");
  }
  // Every computation node sits under its layer's scope, and no training nodes are there.
  int dense = 0, dense_1 = 0;
  for (const auto& [name, node] : nodes) {
    if (node->op() == "placeholder") continue;
    EXPECT_TRUE(name.rfind("dense/", 0) == 0 || name.rfind("dense_1/", 0) == 0) << name;
    EXPECT_EQ(name.find("gradients"), std::string::npos) << name;
    (name.rfind("dense_1/", 0) == 0 ? dense_1 : dense)++;
  }
  EXPECT_GT(dense, 0);
  EXPECT_GT(dense_1, 0);
  // The first layer's matmul reads the input and its kernel.
  bool reads_input_and_kernel = false;
  for (const auto& [name, node] : nodes) {
    std::set<std::string> inputs(node->input().begin(), node->input().end());
    if (inputs.count("x") && inputs.count("dense/kernel")) reads_input_and_kernel = true;
  }
  EXPECT_TRUE(reads_input_and_kernel);
  EXPECT_EQ(nodes.at("x")->attr().at("_output_shapes").list().shape(0).dim(1).size(), 5);
}

TEST_F(TensorBoardTest, WriteGraphFalseWritesNoGraph) {
  auto owned = make_model();
  Sequential& model = *owned;
  model.fit(x_, y_,
            {.epochs = 1,
             .batch_size = 32,
             .callbacks = {TensorBoard(dir_.string(), {.write_graph = false})},
             .verbose = 0});
  EXPECT_TRUE(read_event_file(event_files(dir_ / "train").at(0)).graphs.empty());
}

TEST_F(TensorBoardTest, ProtocDecodesTheTrainRun) {
  if (std::system("command -v protoc > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "protoc is not installed: skipping the protoc --decode check";
  }
  auto owned = make_model();
  Sequential& model = *owned;
  model.fit(x_, y_,
            {.epochs = 1,
             .batch_size = 32,
             .callbacks = {TensorBoard(dir_.string(), {.write_graph = false})},
             .verbose = 0});
  std::vector<std::string> records = io::read_records(event_files(dir_ / "train").at(0).string());
  // The epoch scalars follow the file-version event.
  std::string decoded_all;
  const std::string source = KILN_SOURCE_DIR;
  for (size_t i = 1; i < records.size(); ++i) {
    const fs::path payload = dir_ / ("payload" + std::to_string(i));
    const fs::path decoded = dir_ / ("decoded" + std::to_string(i));
    std::ofstream(payload, std::ios::binary) << records[i];
    const std::string command = "protoc --decode=kiln.proto.Event --proto_path='" + source + "' '" +
                                source + "/src/api/io/proto/event.proto' < '" + payload.string() +
                                "' > '" + decoded.string() + "' 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(decoded);
    decoded_all.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  EXPECT_THAT(decoded_all, HasSubstr("tag: \"epoch_loss\""));
  EXPECT_THAT(decoded_all, HasSubstr("tag: \"epoch_accuracy\""));
  EXPECT_THAT(decoded_all, HasSubstr("tag: \"epoch_learning_rate\""));
  EXPECT_THAT(decoded_all, HasSubstr("simple_value: 0.1"));
}

TEST_F(TensorBoardTest, BadOptionsAreErrors) {
  try {
    TensorBoard tb(dir_.string(), {.update_freq = "step"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("update_freq"));
    EXPECT_THAT(e.what(), HasSubstr("\"step\""));
  }
  EXPECT_THROW(TensorBoard(dir_.string(), {.update_freq = 0}), Error);
  EXPECT_THROW(TensorBoard(dir_.string(), {.histogram_freq = -1}), Error);
  EXPECT_THROW(TensorBoard(""), Error);
}

// A log dir under a regular file cannot be created, even by root: fit reports it before its
// first batch, not at the first write an epoch later.
TEST_F(TensorBoardTest, UnwritableLogDirFailsFitBeforeTheFirstBatchNamingThePath) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";  // a file where a directory should be
  const std::string log_dir = (dir_ / "file" / "logs").string();
  struct CountBatches : Callback {
    void on_train_batch_begin(int64_t, Logs&) override { ++count; }
    int64_t count = 0;
  };
  auto count = std::make_shared<CountBatches>();
  auto model = make_model();
  try {
    model->fit(
        x_, y_,
        {.epochs = 1, .batch_size = 32, .callbacks = {count, TensorBoard(log_dir)}, .verbose = 0});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("TensorBoard: cannot write to " + log_dir));
  }
  EXPECT_EQ(count->count, 0);
}

}  // namespace
}  // namespace kiln::nn
