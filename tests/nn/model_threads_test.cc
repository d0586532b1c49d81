// Model's thread-safety contract: predict, evaluate and save on other threads while fit trains
// see the weights from between two steps, never disturb fit, and a second concurrent fit is
// refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/testing/temp_dir.h"

namespace kiln::nn {
namespace {

using ::testing::HasSubstr;

std::pair<Tensor, Tensor> blobs(int64_t n, uint64_t seed) {
  Tensor labels = convert(random_bernoulli({n}, seed, 0.5), i32);
  Tensor centers = expand_dims(convert(labels, f32) * 4.0 - 2.0, 1);
  Tensor x = random_normal({n, 4}, seed + 1) * 0.5 + centers;
  return {x, labels};
}

// Dropout draws random numbers and batch normalization updates non-trainable state each step.
std::unique_ptr<Sequential> make_model() {
  auto model = std::make_unique<Sequential>(
      std::vector<LayerRef>{Dense(16, "relu"), BatchNormalization(), Dropout(0.2), Dense(2)});
  model->set_seed(7);
  model->compile(optim::Adam(1e-2), SparseCategoricalCrossentropy(true), {"accuracy"});
  return model;
}

const FitOptions kFit{.epochs = 3, .batch_size = 16, .seed = 7, .verbose = 0};

std::vector<std::vector<float>> values(const std::vector<Tensor>& ts) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : ts) out.push_back(t.to_vector<float>());
  return out;
}

std::vector<Tensor> weight_values(const Model& m) {
  std::vector<Tensor> out;
  for (const Variable& v : m.weights()) out.push_back(v.value());  // copies: snapshots
  return out;
}

// Records the weights fit leaves after every step (on fit's own thread, between steps). After
// the fifth step it waits until the readers have run `reads` more times, so that some reads
// surely happen while fit runs, however the threads are scheduled.
class RecordWeights : public Callback {
 public:
  explicit RecordWeights(std::atomic<int>& reads) : reads_(reads) {}
  void on_train_begin(Logs&) override { states.push_back(weight_values(*model())); }
  void on_train_batch_end(int64_t batch, Logs&) override {
    states.push_back(weight_values(*model()));
    if (states.size() != 6) return;
    for (int start = reads_; reads_ < start + 6;) std::this_thread::yield();
  }
  std::vector<std::vector<Tensor>> states;

 private:
  std::atomic<int>& reads_;
};

TEST(ModelThreads, PredictAndEvaluateDuringFitSeeWholeStepsAndLeaveFitUnchanged) {
  auto [x, y] = blobs(320, 3);
  auto [probe_x, probe_y] = blobs(64, 11);

  // The single-threaded run.
  auto alone = make_model();
  History alone_history = alone->fit(x, y, kFit);

  auto model = make_model();
  model->build({4});
  // Compiled before fit starts, so that reads run throughout fit (not only once compiled).
  model->predict(probe_x, 64);
  model->evaluate(probe_x, probe_y, 64);
  std::atomic<int> reads{0};
  auto record = std::make_shared<RecordWeights>(reads);
  FitOptions options = kFit;
  options.callbacks = {record};
  std::atomic<bool> done{false};
  History history;
  std::thread trainer([&] {
    history = model->fit(x, y, options);
    done = true;
  });
  std::mutex mu;
  std::vector<std::vector<float>> predictions;
  std::vector<std::pair<double, double>> evaluations;  // loss, accuracy
  std::vector<std::string> errors;
  auto reader = [&](bool evaluating) {
    int runs = 0;
    while (!done || runs < 3) {
      try {
        if (evaluating) {
          auto scores = model->evaluate(probe_x, probe_y, 64);
          std::lock_guard lock(mu);
          evaluations.emplace_back(scores.at("loss"), scores.at("accuracy"));
        } else {
          std::vector<float> p = model->predict(probe_x, 64).to_vector<float>();
          std::lock_guard lock(mu);
          predictions.push_back(std::move(p));
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        errors.push_back(e.what());
      }
      ++runs;
      ++reads;
    }
  };
  std::thread p1(reader, false), p2(reader, false), e1(reader, true);
  trainer.join();
  p1.join();
  p2.join();
  e1.join();

  EXPECT_THAT(errors, ::testing::IsEmpty());
  // fit is undisturbed: the same losses, metrics and final weights, bit for bit.
  EXPECT_EQ(history.history, alone_history.history);
  EXPECT_EQ(values(weight_values(*model)), values(weight_values(*alone)));
  ASSERT_EQ(record->states.size(), 1u + 3u * 20u);  // before the first step, after each

  // Every read saw the weights of one state between steps: its outputs are those of a model
  // holding that state, bit for bit.
  auto reference = make_model();
  reference->build({4});
  std::set<std::vector<float>> state_predictions;
  std::set<std::pair<double, double>> state_evaluations;
  std::vector<float> final_prediction;
  std::pair<double, double> final_evaluation;
  for (const auto& state : record->states) {
    std::vector<Variable> vars = reference->weights();
    ASSERT_EQ(vars.size(), state.size());
    for (size_t i = 0; i < vars.size(); ++i) vars[i].assign(state[i]);
    final_prediction = reference->predict(probe_x, 64).to_vector<float>();
    state_predictions.insert(final_prediction);
    auto scores = reference->evaluate(probe_x, probe_y, 64);
    final_evaluation = {scores.at("loss"), scores.at("accuracy")};
    state_evaluations.insert(final_evaluation);
  }
  EXPECT_GE(predictions.size(), 6u);
  EXPECT_GE(evaluations.size(), 3u);
  int unmatched = 0, during_fit = 0;
  for (const auto& p : predictions) {
    unmatched += !state_predictions.count(p);
    during_fit += p != final_prediction;
  }
  for (const auto& e : evaluations) {
    unmatched += !state_evaluations.count(e);
    during_fit += e != final_evaluation;
  }
  EXPECT_EQ(unmatched, 0) << "of " << predictions.size() << " predictions and "
                          << evaluations.size() << " evaluations";
  EXPECT_GE(during_fit, 6);  // at least those made while fit waited after its fifth step
  RecordProperty("predictions", static_cast<int>(predictions.size()));
  RecordProperty("evaluations", static_cast<int>(evaluations.size()));
  RecordProperty("reads_during_fit", during_fit);
}

// A model's state() as plain numbers, to compare bit for bit.
std::map<std::string, std::vector<double>> numbers(const std::map<std::string, Tensor>& state) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [name, value] : state) out[name] = value.to_vector<double>();
  return out;
}

// Records the whole state (weights, optimizer slots, iterations) fit leaves before its first step
// and after each; after the fifth step it waits until `saves` has grown by 6, so that some saves
// surely happen while fit runs.
class RecordStates : public Callback {
 public:
  explicit RecordStates(std::atomic<int>& saves) : saves_(saves) {}
  void on_train_begin(Logs&) override { states.push_back(numbers(model()->state())); }
  void on_train_batch_end(int64_t, Logs&) override {
    states.push_back(numbers(model()->state()));
    if (states.size() != 6) return;
    for (int start = saves_; saves_ < start + 6;) std::this_thread::yield();
    waited = true;
  }
  std::vector<std::map<std::string, std::vector<double>>> states;
  std::atomic<bool> waited{false};  // the saves after the fifth step are done

 private:
  std::atomic<int>& saves_;
};

TEST(ModelThreads, SaveDuringFitWritesTheStateOfOneStepEveryTime) {
  const std::filesystem::path dir = testing_util::per_test_dir("model_threads");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto [x, y] = blobs(256, 3);
  auto model = make_model();
  model->build({4});  // saves before fit starts hold the weights too
  // Compiled, fit lends the variables (and Adam's slots) to each step, which updates them in place.
  model->set_execution_mode(ExecutionMode::kCompiled);
  std::atomic<int> saves{0};
  auto record = std::make_shared<RecordStates>(saves);
  FitOptions options{.epochs = 4, .batch_size = 2, .seed = 7, .verbose = 0};
  options.callbacks = {record};
  std::atomic<bool> done{false};
  std::thread trainer([&] {
    model->fit(x, y, options);
    done = true;
  });
  // At most kMaxSaves files, but never stop before the callback has seen its 6 saves (fit may
  // still be compiling when the first few hundred are written).
  constexpr int kMaxSaves = 300;
  std::vector<std::string> saved, errors;
  while (!done && (saves < kMaxSaves || !record->waited)) {
    const std::string path = (dir / ("save_" + std::to_string(saves) + ".kiln")).string();
    try {
      model->save(path);
      saved.push_back(path);
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
    ++saves;
  }
  trainer.join();

  EXPECT_THAT(errors, ::testing::IsEmpty()) << errors.size() << " of " << saves << " saves failed";
  ASSERT_EQ(record->states.size(), 1u + 4u * 128u);
  // Each file holds the state between two steps, whole: weights, slots and iteration count of
  // the same step.
  int unmatched = 0, during_fit = 0;
  for (const std::string& path : saved) {
    std::map<std::string, std::vector<double>> loaded = numbers(load_model(path)->state());
    auto it = std::find(record->states.begin(), record->states.end(), loaded);
    unmatched += it == record->states.end();
    // Neither the state before the first step nor the one fit ends with.
    during_fit += it != record->states.end() && it != record->states.begin() &&
                  it + 1 != record->states.end();
  }
  EXPECT_EQ(unmatched, 0) << "of " << saved.size() << " saves";
  EXPECT_GE(during_fit, 6);  // at least those made while fit waited after its fifth step
  RecordProperty("saves", static_cast<int>(saved.size()));
  std::filesystem::remove_all(dir);
}

// Calls `during` on another thread while fit is between its first two steps.
class DuringFit : public Callback {
 public:
  explicit DuringFit(std::function<void()> during) : during_(std::move(during)) {}
  void on_train_batch_end(int64_t batch, Logs&) override {
    if (batch != 0) return;
    std::thread t(during_);
    t.join();
  }

 private:
  std::function<void()> during_;
};

TEST(ModelThreads, ASecondFitOnAnotherThreadIsRefused) {
  auto [x, y] = blobs(64, 3);
  auto model = make_model();
  std::string error;
  auto during = std::make_shared<DuringFit>([&] {
    try {
      model->fit(x, y, {.verbose = 0});
    } catch (const Error& e) {
      error = e.what();
    }
  });
  FitOptions options = kFit;
  options.callbacks = {during};
  model->fit(x, y, options);
  EXPECT_THAT(error, HasSubstr("fit: model 'sequential' is already training"));
  // Refused before it touched anything: the first fit's weights are those of a run alone.
  auto alone = make_model();
  alone->fit(x, y, kFit);
  EXPECT_EQ(values(weight_values(*model)), values(weight_values(*alone)));
}

TEST(ModelThreads, CompileDuringFitIsRefused) {
  auto [x, y] = blobs(64, 3);
  auto model = make_model();
  std::string error;
  auto during = std::make_shared<DuringFit>([&] {
    try {
      model->compile(optim::SGD(), MeanSquaredError());
    } catch (const Error& e) {
      error = e.what();
    }
  });
  FitOptions options = kFit;
  options.callbacks = {during};
  model->fit(x, y, options);
  EXPECT_THAT(error, HasSubstr("compile: model 'sequential' is training"));
}

}  // namespace
}  // namespace kiln::nn
