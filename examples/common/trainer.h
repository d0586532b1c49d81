// What the Fashion-MNIST trainers share: the flags they all take, the callbacks those flags ask
// for (backups to resume a killed run, TensorBoard logs), the distribution strategy a trainer
// may offer (--strategy), the shuffled and prefetched input pipeline, and the final test-set
// report.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "examples/common/flags.h"
#include "kiln/data/dataset.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/distribute/mirrored_strategy.h"
#include "kiln/distribute/multi_worker_mirrored_strategy.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace examples {

struct TrainerFlags {
  int epochs;
  int64_t batch_size;
  double learning_rate;
  uint64_t seed;
  std::string data_dir;
  int64_t train_limit;  // 0: all 60000 training examples
  int verbose;
  std::string checkpoint_dir;      // backups: a killed run started again resumes
  int64_t checkpoint_every_steps;  // 0: a backup per epoch
  std::string logdir;              // TensorBoard logs, when set
  std::string export_dir;          // the trained model exported here for kiln-serve, when set
  // Data-parallel training, for trainers that offer it: "none", "mirrored" (--replicas CPU
  // replicas in this process) or "multi_worker" (one worker per process of `mpirun -np N`).
  // --batch_size stays the global batch.
  std::string strategy;
  int replicas;
  // Mixed precision (kiln/nn/policy.h): "float32", "mixed_bfloat16" or "mixed_float16" (which
  // scales the loss). Layers made after apply_dtype_policy() take it.
  std::string dtype_policy;
  // --profile: where the training time went (kiln/profiler.h), printed after training.
  bool profile;
  // --device: "cpu", or "gpu" (cuda:0: the compiled steps' loops and matmuls run on the GPU;
  // model.compile reports a machine without one).
  std::string device;

  // Reads the flags (with these defaults) and rejects unknown ones and bad values (exit 2),
  // before any data is loaded. --strategy and --replicas only where `distributable`.
  TrainerFlags(Flags& flags, int64_t default_batch_size, bool distributable = false,
               double default_learning_rate = 1e-3)
      : epochs(static_cast<int>(flags.integer("epochs", 5, 1, kMaxInt))),
        batch_size(flags.integer("batch_size", default_batch_size, 1, kMaxInt)),
        learning_rate(flags.positive("learning_rate", default_learning_rate)),
        seed(static_cast<uint64_t>(flags.integer("seed", 1, 0, kMaxInt64))),
        data_dir(flags.str("data_dir", kiln::data::default_fashion_mnist_dir())),
        train_limit(flags.integer("train_limit", 0, 0, kMaxInt64)),
        verbose(static_cast<int>(flags.integer("verbose", 1, 0, 2))),
        checkpoint_dir(flags.str("checkpoint_dir", "")),
        checkpoint_every_steps(flags.integer("checkpoint_every_steps", 0, 0, kMaxInt64)),
        logdir(flags.str("logdir", "")),
        export_dir(flags.str("export_dir", "")),
        strategy(distributable
                     ? flags.choice("strategy", "none", {"none", "mirrored", "multi_worker"})
                     : "none"),
        replicas(distributable
                     ? static_cast<int>(flags.integer(
                           "replicas", 2, 1, kiln::distribute::MirroredStrategy::max_replicas()))
                     : 1),
        dtype_policy(flags.choice("dtype_policy", "float32",
                                  {"float32", "mixed_bfloat16", "mixed_float16"})),
        profile(flags.integer("profile", 0, 0, 1) == 1),
        device(flags.choice("device", "cpu", {"cpu", "gpu"})) {
    if (device == "gpu" && strategy != "none") {
      Flags::bad("--device=gpu with --strategy=" + strategy +
                 ": a strategy's replicas run on the host so far");
    }
    if (flags.given("replicas") && strategy != "mirrored") {
      Flags::bad("--replicas=" + std::to_string(replicas) +
                 " needs --strategy=mirrored (got --strategy=" + strategy + ")");
    }
    flags.check();
  }

  // Where model.compile puts the steps: --device as a kiln::Device.
  kiln::Device compile_device() const {
    return device == "gpu" ? kiln::Device::cuda(0) : kiln::Device::cpu();
  }

  // Makes --dtype_policy the global policy: call before building the model.
  void apply_dtype_policy() const { kiln::nn::set_global_policy(dtype_policy); }

  // The strategy the flags ask for (null for none). multi_worker starts MPI: kiln::Error when
  // Kiln was built without it.
  std::shared_ptr<kiln::distribute::Strategy> make_strategy() const {
    if (strategy == "mirrored")
      return std::make_shared<kiln::distribute::MirroredStrategy>(replicas);
    if (strategy == "multi_worker") {
      return std::make_shared<kiln::distribute::MultiWorkerMirroredStrategy>();
    }
    return nullptr;
  }

  std::vector<kiln::nn::CallbackRef> callbacks() const {
    std::vector<kiln::nn::CallbackRef> list;
    if (!checkpoint_dir.empty()) {
      kiln::nn::SaveFreq freq = std::string("epoch");
      if (checkpoint_every_steps > 0) freq = checkpoint_every_steps;
      list.push_back(kiln::nn::BackupAndRestore(checkpoint_dir, freq));
    }
    if (!logdir.empty()) list.push_back(kiln::nn::TensorBoard(logdir));
    return list;
  }
};

// Fashion-MNIST with images reshaped to `image_shape` (after the batch dimension), the
// training set cut to --train_limit examples when set.
struct TrainerData {
  kiln::Tensor x_train, y_train, x_test, y_test;
};

// --learning_rate decayed along a cosine to 0 over the run's steps (--epochs of the training
// data in --batch_size batches): the last epochs settle instead of oscillating between nearby
// minima, so the reported accuracy does not hang on where the last step lands.
inline kiln::optim::Schedule cosine_learning_rate(const TrainerFlags& flags, int64_t examples) {
  const int64_t steps_per_epoch = (examples + flags.batch_size - 1) / flags.batch_size;
  return kiln::optim::cosine_decay(flags.learning_rate, steps_per_epoch * flags.epochs);
}

inline TrainerData load_trainer_data(const TrainerFlags& flags, kiln::Shape image_shape) {
  kiln::data::FashionMnist data = kiln::data::load_fashion_mnist(flags.data_dir);
  std::vector<int64_t> dims = {-1};
  dims.insert(dims.end(), image_shape.begin(), image_shape.end());
  TrainerData d{kiln::reshape(data.train_images, dims), data.train_labels,
                kiln::reshape(data.test_images, dims), data.test_labels};
  if (flags.train_limit > 0 && flags.train_limit < d.x_train.dim(0)) {
    std::vector<int64_t> begin(dims.size(), 0), end = dims;
    end[0] = flags.train_limit;
    d.x_train = kiln::slice(d.x_train, begin, end);
    d.y_train = kiln::slice(d.y_train, {0}, {flags.train_limit});
  }
  return d;
}

// "MirroredStrategy(2 replicas): 2 local replicas, weights identical": the strategy a trainer
// ran under, and whether its local replicas ended with the same weights byte for byte, as
// mirrored replicas must (each applies the same all-reduced update to its own copy).
inline std::string replica_report(const kiln::nn::Sequential& model,
                                  const kiln::distribute::Strategy& strategy) {
  const int n = strategy.num_local_replicas();
  const std::vector<kiln::Tensor> first = model.replica_weights(0);
  bool same = true;
  for (int r = 1; r < n; ++r) {
    const std::vector<kiln::Tensor> other = model.replica_weights(r);
    for (size_t i = 0; i < first.size(); ++i) {
      same = same && other[i].nbytes() == first[i].nbytes() &&
             std::memcmp(other[i].raw_data(), first[i].raw_data(), first[i].nbytes()) == 0;
    }
  }
  return strategy.name() + ": " + std::to_string(n) + " local replica" + (n == 1 ? "" : "s") +
         ", weights " + (same ? "identical" : "DIFFER");
}

// The wall time of each epoch of a fit, from its start to its end (the first includes tracing
// and compiling the step).
class EpochTimer : public kiln::nn::Callback {
 public:
  void on_epoch_begin(int, kiln::nn::Logs&) override { start_ = Clock::now(); }
  void on_epoch_end(int, kiln::nn::Logs&) override {
    seconds_.push_back(std::chrono::duration<double>(Clock::now() - start_).count());
  }
  // "0.912,0.604,...": milliseconds resolution.
  std::string text() const {
    std::string out;
    char buf[32];
    for (double s : seconds_) {
      std::snprintf(buf, sizeof buf, "%s%.3f", out.empty() ? "" : ",", s);
      out += buf;
    }
    return out;
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
  std::vector<double> seconds_;
};

// Trains `model` (compiled by the caller) with the flags' callbacks on an input pipeline that
// is reshuffled every epoch (reproducibly for the seed), batched, and prepared on a background
// thread while the previous step trains; then prints the test accuracy, the training time, the
// training examples and each epoch's seconds (benchmarks/run.sh reads them from this line).
// Under a strategy it also prints replica_report's line; under several workers only the chief
// prints.
inline void train_and_report(kiln::nn::Sequential& model, const TrainerFlags& flags,
                             const TrainerData& data, int64_t eval_batch_size,
                             const kiln::distribute::Strategy* strategy = nullptr) {
  const bool chief = !strategy || strategy->is_chief();
  if (flags.profile) kiln::profiler::start();
  auto start = std::chrono::steady_clock::now();
  kiln::data::Dataset train = kiln::data::Dataset::from_tensors({data.x_train, data.y_train})
                                  .shuffle(data.x_train.dim(0), flags.seed)
                                  .batch(flags.batch_size)
                                  .prefetch(kiln::data::kAutotune);
  std::vector<kiln::nn::CallbackRef> callbacks = flags.callbacks();
  auto timer = std::make_shared<EpochTimer>();
  callbacks.push_back(timer);
  model.fit(train, {.epochs = flags.epochs,
                    .seed = flags.seed,
                    .callbacks = callbacks,
                    .verbose = flags.verbose});
  double train_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (flags.profile) {
    for (const kiln::profiler::ProgramProfile& p : kiln::profiler::stop()) {
      if (chief) std::cout << kiln::profiler::format(p);
    }
  }
  if (flags.verbose && chief) std::cout << model.summary();
  if (strategy && chief) std::cout << "strategy: " << replica_report(model, *strategy) << "\n";

  auto scores = model.evaluate(data.x_test, data.y_test, eval_batch_size);
  if (!chief) return;
  std::printf(
      "result: test_accuracy=%.4f test_loss=%.4f train_seconds=%.1f examples=%lld "
      "epoch_seconds=%s\n",
      scores["accuracy"], scores["loss"], train_seconds,
      static_cast<long long>(data.x_train.dim(0)), timer->text().c_str());
  // TF Serving's layout: <export_dir>/<version>/, the next version each run.
  if (!flags.export_dir.empty())
    std::cout << "exported: " << kiln::io::save_model(model, flags.export_dir) << "\n";
}

}  // namespace examples
