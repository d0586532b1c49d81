// The MLP trainer's fit over 10k Fashion-MNIST-like examples fed by a Dataset, against the same
// examples pre-loaded as tensors, in the same run. Three pipelines:
//  - vectorized: TFRecord -> ragged_batch(64) -> parse_example(spec) -> map(scale_images) ->
//    prefetch(2): records are batched first and each batch parsed in one call, as tf.data's
//    guide recommends ("vectorizing mapping"); scale_images is a compiled function;
//  - per-record: TFRecord -> map(parse one record, 2) -> batch(64) -> prefetch(2);
//  - the TFRecord trainer's (examples/fashion_mnist_tfrecord_mlp): the vectorized pipeline with
//    shuffle(10000) of the serialized records first, against pre-loaded tensors that fit
//    shuffles too;
//  - the in-memory trainers' (examples/common/trainer.h): from_tensors -> shuffle -> batch ->
//    prefetch, against the same shuffled tensors.
// Each fit is one epoch. Two times are kept: the step time in the steady state (from the end
// of the first step to the end of the last, per step: what the target, within 5%,
// is about: prefetch hiding the input while the model trains), and the whole epoch, which also
// counts the wait for the first batch (for the shuffled pipeline: reading its 10000-record
// buffer). The benchmarks are interleaved at random and repeated, and each ratio uses the best
// run of each: other work on a shared machine only slows runs down. Each run also reports the
// process CPU time per example (all threads, getrusage).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>

#include "benchmarks/bench_util.h"
#include "benchmarks/fashion_records.h"
#include "kiln/data/dataset.h"
#include "kiln/io/example.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace {

using namespace kiln;
constexpr int64_t kRecords = 10000, kBatch = 64;

const std::vector<io::FeatureSpec> kSpec = {
    io::FixedLen{"image", u8, {784}, std::nullopt},
    io::FixedLen{"label", i64, {}, std::nullopt},
};

// One record -> {f32 [784] in [0, 1], i64 label}.
data::Element parse(data::Element e) {
  const std::string_view record(static_cast<const char*>(e[0].raw_data()), e[0].nbytes());
  std::map<std::string, Tensor> parsed =
      io::parse_example(std::span<const std::string_view>(&record, 1), kSpec);
  return {reshape(parsed["image"].to(f32) / 255.0, {784}), reshape(parsed["label"], {})};
}

data::Dataset vectorized_pipeline() {
  return data::Dataset::tfrecord({bench::fashion_records_file(kRecords)})
      .ragged_batch(kBatch)
      .parse_example(kSpec)
      .map(bench::scale_images)
      .prefetch(2);
}

data::Dataset trainer_pipeline() {
  return data::Dataset::tfrecord({bench::fashion_records_file(kRecords)})
      .shuffle(10000, 1)
      .ragged_batch(kBatch)
      .parse_example(kSpec)
      .map(bench::scale_images)
      .prefetch(data::kAutotune);
}

data::Dataset per_record_pipeline() {
  return data::Dataset::tfrecord({bench::fashion_records_file(kRecords)})
      .map(parse, 2)
      .batch(kBatch)
      .prefetch(2);
}

std::unique_ptr<nn::Sequential> mlp() {
  auto m = std::make_unique<nn::Sequential>(
      std::vector<nn::LayerRef>{nn::Dense(128, "relu"), nn::Dropout(0.2), nn::Dense(10)});
  m->compile(optim::Adam(1e-3), nn::SparseCategoricalCrossentropy(true));
  return m;
}

struct Best {
  double epoch_ms = 0;
  double step_us = 0;  // per step in the steady state
  double cpu_us_per_example = 0;
};
std::map<std::string, Best> g_best;

// The steady state of a fit: the time from the end of its first step to the end of its last.
class StepClock : public nn::Callback {
 public:
  void on_train_batch_end(int64_t batch, nn::Logs&) override {
    const auto now = std::chrono::steady_clock::now();
    if (batch == 0) {
      first_ = now;
    } else {
      seconds_ += std::chrono::duration<double>(now - std::exchange(first_, now)).count();
      ++steps_;
    }
  }
  double seconds() const { return seconds_; }
  int64_t steps() const { return steps_; }

 private:
  std::chrono::steady_clock::time_point first_;
  double seconds_ = 0;
  int64_t steps_ = 0;
};

// Runs fit(options) once to trace and compile the step, then as often as the benchmark wants.
template <class Fit>
void timed(benchmark::State& state, Fit&& fit) {
  fit(nn::FitOptions{.epochs = 1, .verbose = 0});
  auto clock = std::make_shared<StepClock>();
  const nn::FitOptions options{.epochs = 1, .callbacks = {clock}, .verbose = 0};
  const double cpu_start = bench::process_cpu_seconds();
  for (auto _ : state) fit(options);
  const double examples = static_cast<double>(state.iterations() * kRecords);
  state.SetItemsProcessed(state.iterations() * kRecords);
  state.counters["cpu_us/example"] = 1e6 * (bench::process_cpu_seconds() - cpu_start) / examples;
  state.counters["step_us"] = 1e6 * clock->seconds() / static_cast<double>(clock->steps());
}

void fit_from_vectorized_pipeline(benchmark::State& state) {
  auto model = mlp();
  timed(state, [&](const nn::FitOptions& o) { model->fit(vectorized_pipeline(), o); });
}

void fit_from_per_record_pipeline(benchmark::State& state) {
  auto model = mlp();
  timed(state, [&](const nn::FitOptions& o) { model->fit(per_record_pipeline(), o); });
}

void fit_from_trainer_pipeline(benchmark::State& state) {
  auto model = mlp();
  timed(state, [&](const nn::FitOptions& o) { model->fit(trainer_pipeline(), o); });
}

// The same examples, parsed up front and already in memory.
data::Element preloaded() {
  data::Iterator it = data::Dataset::tfrecord({bench::fashion_records_file(kRecords)})
                          .ragged_batch(kRecords)
                          .parse_example(kSpec)
                          .map(bench::scale_images)
                          .begin_epoch();
  return *it.next();
}

// The in-memory trainers' pipeline (examples/common/trainer.h): tensors sliced into elements,
// shuffled, batched again and prefetched.
void fit_from_sliced_tensors(benchmark::State& state) {
  data::Element all = preloaded();
  auto model = mlp();
  timed(state, [&](const nn::FitOptions& o) {
    model->fit(data::Dataset::from_tensors({all[0], all[1]})
                   .shuffle(kRecords, 1)
                   .batch(kBatch)
                   .prefetch(data::kAutotune),
               o);
  });
}

void fit_from_tensors(benchmark::State& state, bool shuffle) {
  data::Element all = preloaded();
  auto model = mlp();
  timed(state, [&](nn::FitOptions o) {
    o.batch_size = kBatch;
    o.shuffle = shuffle;
    model->fit(all[0], all[1], o);
  });
}
void fit_from_tensors(benchmark::State& state) { fit_from_tensors(state, false); }
void fit_from_shuffled_tensors(benchmark::State& state) { fit_from_tensors(state, true); }

// Each fit benchmark: at least a second per repetition, 3 repetitions (best of them kept).
void fit_settings(benchmark::internal::Benchmark* b) {
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0)->Repetitions(3);
}
BENCHMARK(fit_from_tensors)->Apply(fit_settings);
BENCHMARK(fit_from_shuffled_tensors)->Apply(fit_settings);
BENCHMARK(fit_from_trainer_pipeline)->Apply(fit_settings);
BENCHMARK(fit_from_sliced_tensors)->Apply(fit_settings);
BENCHMARK(fit_from_vectorized_pipeline)->Apply(fit_settings);
BENCHMARK(fit_from_per_record_pipeline)->Apply(fit_settings);

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      Best& best = g_best[r.run_name.function_name];
      const double epoch_ms = r.GetAdjustedRealTime();  // the benchmarks' unit: ms
      if (best.epoch_ms == 0 || epoch_ms < best.epoch_ms) {
        auto cpu = r.counters.find("cpu_us/example");
        best.epoch_ms = epoch_ms;
        best.cpu_us_per_example = cpu == r.counters.end() ? 0 : cpu->second.value;
      }
      auto step = r.counters.find("step_us");
      if (step != r.counters.end() && (best.step_us == 0 || step->second.value < best.step_us)) {
        best.step_us = step->second.value;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

void print_ratio(const char* what, const std::string& name,
                 const std::string& baseline = "fit_from_tensors") {
  auto pipeline = g_best.find(name), tensors = g_best.find(baseline);
  if (pipeline == g_best.end() || tensors == g_best.end()) return;
  const Best &p = pipeline->second, &t = tensors->second;
  std::printf(
      "fit step time, %s vs pre-loaded tensors: %.3fx (best %.1f vs %.1f us per step; target <= "
      "1.05); whole epoch %.3fx (%.1f vs %.1f ms; CPU %.2f vs %.2f us/example)\n",
      what, p.step_us / t.step_us, p.step_us, t.step_us, p.epoch_ms / t.epoch_ms, p.epoch_ms,
      t.epoch_ms, p.cpu_us_per_example, t.cpu_us_per_example);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  args.insert(args.begin() + 1, interleave.data());  // the command line may still override it
  argc = static_cast<int>(args.size());
  argv = args.data();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  print_ratio("vectorized pipeline (ragged_batch -> parse_example)",
              "fit_from_vectorized_pipeline");
  print_ratio("per-record pipeline (map(parse, 2) -> batch)", "fit_from_per_record_pipeline");
  print_ratio("TFRecord trainer's pipeline (shuffle -> ragged_batch -> parse_example)",
              "fit_from_trainer_pipeline", "fit_from_shuffled_tensors");
  print_ratio("in-memory trainers' pipeline (from_tensors -> shuffle -> batch)",
              "fit_from_sliced_tensors", "fit_from_shuffled_tensors");
  // For benchmarks/run.sh: e.g. RESULT fit_vectorized_pipeline_step_us=...
  for (const auto& [name, best] : g_best) {
    const std::string key = name.substr(std::string("fit_from_").size());
    std::printf("RESULT fit_%s_step_us=%.1f\nRESULT fit_%s_epoch_ms=%.2f\n", key.c_str(),
                best.step_us, key.c_str(), best.epoch_ms);
  }
  return 0;
}
