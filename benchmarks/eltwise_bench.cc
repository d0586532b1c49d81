// An eager chain of elementwise ops, y = (x * a + b) * x - c, against the same computation as
// one hand-written loop, measured in the same run; prints the eager/loop time ratio per size.
// The ratio is the cost of op-at-a-time execution (a temporary per op) that fusion removes.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace {

constexpr float kA = 1.5f, kB = 0.25f, kC = 2.0f;

kiln::Tensor input(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 97) / 97.0f - 0.5f;
  return kiln::Tensor::from_vector(v);
}

void eager_chain(benchmark::State& state) {
  kiln::Tensor x = input(state.range(0));
  kiln::Tensor a = kiln::Tensor::scalar(kA), b = kiln::Tensor::scalar(kB);
  kiln::Tensor c = kiln::Tensor::scalar(kC);
  for (auto _ : state) {
    kiln::Tensor y = (x * a + b) * x - c;
    benchmark::DoNotOptimize(y.raw_data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void hand_loop(benchmark::State& state) {
  kiln::Tensor x = input(state.range(0));
  for (auto _ : state) {
    kiln::Tensor y = kiln::Tensor::empty(kiln::f32, x.shape());
    const float* px = x.data<float>().data();
    float* py = y.mutable_data<float>().data();
    for (int64_t i = 0, n = x.size(); i < n; ++i) py[i] = (px[i] * kA + kB) * px[i] - kC;
    benchmark::DoNotOptimize(y.raw_data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

BENCHMARK(eager_chain)->RangeMultiplier(32)->Range(1 << 10, 1 << 20);
BENCHMARK(hand_loop)->RangeMultiplier(32)->Range(1 << 10, 1 << 20);

// Prints as usual and remembers each benchmark's time per iteration.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration && !r.error_occurred)
        times_[r.run_name.function_name][std::stoll(r.run_name.args)] = r.GetAdjustedRealTime();
    }
  }
  void print_ratios() const {
    auto eager = times_.find("eager_chain"), loop = times_.find("hand_loop");
    if (eager == times_.end() || loop == times_.end()) return;
    std::printf("\n%-10s %12s\n", "elements", "eager/loop");
    for (const auto& [n, t] : eager->second) {
      auto it = loop->second.find(n);
      if (it != loop->second.end() && it->second > 0)
        std::printf("%-10lld %12.2f\n", static_cast<long long>(n), t / it->second);
    }
  }

 private:
  std::map<std::string, std::map<int64_t, double>> times_;  // name -> size -> time
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  benchmark::Shutdown();
  return 0;
}
