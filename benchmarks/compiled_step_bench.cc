// The MLP training step (Dense(128, relu), Dropout(0.5), Dense(10), sparse cross-entropy, Adam;
// traced by tests/compiler/mlp_step.h) at batch 64: the reference interpreter vs the
// compiled Executable (fused JIT kernels + reference-kernel thunks over one planned arena).
// Prints mlp_b64_compiled_vs_interpreted (interpreter time / compiled time; > 1 means compiled
// wins) and arena_peak_vs_live_min (the memory plan's peak / the live minimum).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <random>

#include "compiler/executable.h"
#include "tests/compiler/mlp_step.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"

namespace {

using namespace kiln;

using Step = test_models::MlpStep;

Step& step() {
  static Step* s = new Step(test_models::make_mlp_step(/*in=*/784, /*hidden_units=*/128,
                                                   /*classes=*/10, /*batch=*/64));
  return *s;
}

void mlp_b64_interpreted(benchmark::State& state) {
  Step& s = step();
  for (auto _ : state) benchmark::DoNotOptimize(s.graph.run(s.feeds, s.fetches));
}

// The optimized graph (optimize() only) under the interpreter: separates fusion's share.
void mlp_b64_optimized_interpreted(benchmark::State& state) {
  Step& s = step();
  compiler::CompiledGraph c = compiler::optimize(s.graph, s.fetches);
  for (auto _ : state) benchmark::DoNotOptimize(c.run(s.feeds));
}

void mlp_b64_compiled(benchmark::State& state) {
  Step& s = step();
  compiler::Executable e = compiler::compile(s.graph, s.fetches, s.feeds);
  state.counters["thunks"] = e.num_thunks();
  state.counters["fused_thunks"] = e.num_fused_thunks();
  for (auto _ : state) benchmark::DoNotOptimize(e.run(s.feeds));
}

// A tiny step (16-32-10, batch 8) where kernels cost little: the per-run overhead shows.
Step& tiny_step() {
  static Step* s = new Step(test_models::make_mlp_step(16, 32, 10, 8));
  return *s;
}

void mlp_tiny_interpreted(benchmark::State& state) {
  Step& s = tiny_step();
  for (auto _ : state) benchmark::DoNotOptimize(s.graph.run(s.feeds, s.fetches));
}

void mlp_tiny_compiled(benchmark::State& state) {
  Step& s = tiny_step();
  compiler::Executable e = compiler::compile(s.graph, s.fetches, s.feeds);
  for (auto _ : state) benchmark::DoNotOptimize(e.run(s.feeds));
}

BENCHMARK(mlp_b64_interpreted)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(mlp_b64_optimized_interpreted)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(mlp_b64_compiled)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(mlp_tiny_interpreted)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(mlp_tiny_compiled)->UseRealTime()->Unit(benchmark::kMicrosecond);

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration && !r.error_occurred)
        seconds_[r.run_name.function_name] =
            r.real_accumulated_time / static_cast<double>(r.iterations);
    }
  }
  void print_ratios() const {
    auto it = seconds_.find("mlp_b64_interpreted"), jt = seconds_.find("mlp_b64_compiled");
    if (it == seconds_.end() || jt == seconds_.end() || jt->second <= 0) return;
    std::printf("\nmlp_b64_compiled_vs_interpreted %.2f (interpreted %.1f us, compiled %.1f us)\n",
                it->second / jt->second, it->second * 1e6, jt->second * 1e6);
    if (auto a = seconds_.find("mlp_tiny_interpreted"), b = seconds_.find("mlp_tiny_compiled");
        a != seconds_.end() && b != seconds_.end() && b->second > 0)
      std::printf("mlp_tiny_compiled_vs_interpreted %.2f (interpreted %.1f us, compiled %.1f us)\n",
                  a->second / b->second, a->second * 1e6, b->second * 1e6);
    if (auto kt = seconds_.find("mlp_b64_optimized_interpreted"); kt != seconds_.end())
      std::printf("mlp_b64_compiled_vs_optimized_interpreted %.2f (optimized graph, %.1f us)\n",
                  kt->second / jt->second, kt->second * 1e6);
  }

 private:
  std::map<std::string, double> seconds_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  Step& s = step();
  compiler::MemoryStats m = compiler::compile(s.graph, s.fetches, s.feeds).memory_stats();
  std::printf("arena_peak_vs_live_min %.3f (arena %lld bytes, live minimum %lld, without reuse "
              "%lld; %d buffers, %d reused, %d in place; outside the arena %lld)\n",
              m.peak_vs_live_min(), static_cast<long long>(m.arena_bytes),
              static_cast<long long>(m.live_min_bytes), static_cast<long long>(m.no_reuse_bytes),
              m.num_buffers, m.num_reused, m.num_in_place,
              static_cast<long long>(m.outside_bytes()));
  benchmark::Shutdown();
  return 0;
}
