// The MLP trainer's fit time for one epoch over 10k Fashion-MNIST-like examples, fed by a
// Dataset (TFRecord -> map(parse, 2) -> batch(64) -> prefetch(2)) against the same examples
// pre-loaded as tensors, in the same run. The printed ratio says how much of the input cost
// the pipeline hides behind training (target: within 5%, a ratio <= 1.05).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>

#include "benchmarks/fashion_records.h"
#include "kiln/data/dataset.h"
#include "kiln/io/example.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace {

using namespace kiln;
constexpr int64_t kRecords = 10000, kBatch = 64;

data::Element parse(data::Element e) {
  static const std::vector<io::FeatureSpec> spec = {
      io::FixedLen{"image", u8, {784}, std::nullopt},
      io::FixedLen{"label", i64, {}, std::nullopt},
  };
  auto bytes = e[0].data<uint8_t>();
  std::string record(bytes.begin(), bytes.end());
  std::map<std::string, Tensor> parsed = io::parse_example({&record, 1}, spec);
  return {reshape(parsed["image"].to(f32) / 255.0, {784}), reshape(parsed["label"], {})};
}

data::Dataset pipeline() {
  return data::Dataset::tfrecord({bench::fashion_records_file(kRecords)}).map(parse, 2).batch(kBatch).prefetch(2);
}

std::unique_ptr<nn::Sequential> mlp() {
  auto m = std::make_unique<nn::Sequential>(
      std::vector<nn::LayerRef>{nn::Dense(128, "relu"), nn::Dropout(0.2), nn::Dense(10)});
  m->compile(optim::Adam(1e-3), nn::SparseCategoricalCrossentropy(true));
  return m;
}

std::map<std::string, double> g_seconds;

void fit_from_pipeline(benchmark::State& state) {
  auto model = mlp();
  const nn::FitOptions options{.epochs = 1, .verbose = 0};
  for (auto _ : state) model->fit(pipeline(), options);
  state.SetItemsProcessed(state.iterations() * kRecords);
}

void fit_from_tensors(benchmark::State& state) {
  // Parse everything up front: the same examples, already in memory.
  std::vector<Tensor> images, labels;
  data::Iterator it = data::Dataset::tfrecord({bench::fashion_records_file(kRecords)}).map(parse).batch(kRecords)
                          .begin_epoch();
  data::Element all = *it.next();
  auto model = mlp();
  const nn::FitOptions options{.epochs = 1, .batch_size = kBatch, .shuffle = false, .verbose = 0};
  for (auto _ : state) model->fit(all[0], all[1], options);
  state.SetItemsProcessed(state.iterations() * kRecords);
}

BENCHMARK(fit_from_tensors)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);
BENCHMARK(fit_from_pipeline)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (!r.error_occurred) g_seconds[r.run_name.function_name] = r.GetAdjustedRealTime();
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  if (g_seconds.count("fit_from_pipeline") && g_seconds.count("fit_from_tensors")) {
    std::printf("fit epoch time, pipeline vs pre-loaded tensors: %.3fx (target <= 1.05)\n",
                g_seconds["fit_from_pipeline"] / g_seconds["fit_from_tensors"]);
  }
  return 0;
}
