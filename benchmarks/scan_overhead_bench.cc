// scan_overhead (#28): a compiled scan whose body is one small fused kernel, per step, against
// the same kernel stepped from a host loop (a kiln::function called once per step). The
// control-flow thunk should cost less per step than a host round trip.
#include <benchmark/benchmark.h>

#include "kiln/control_flow.h"
#include "kiln/kiln.h"

namespace {

using kiln::Tensor;
using Ts = std::vector<Tensor>;
constexpr int64_t kSteps = 256;

Tensor step(const Tensor& c, const Tensor& x) { return kiln::tanh(c * 0.5f + x); }

void BM_ScanCompiled(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto f = kiln::function([](const Tensor& c, const Tensor& xs) {
    return kiln::scan([](const Ts& carry,
                         const Ts& x) { return std::make_pair(Ts{step(carry[0], x[0])}, Ts{}); },
                      {c}, {xs})
        .carry[0];
  });
  Tensor c = kiln::zeros({n}), xs = kiln::random_normal({kSteps, n}, 1);
  f(c, xs);
  for (auto _ : state) benchmark::DoNotOptimize(f(c, xs));
  state.counters["us_per_step"] =
      benchmark::Counter(static_cast<double>(kSteps) * state.iterations(),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_HostLoop(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto f = kiln::function([](const Tensor& c, const Tensor& x) { return step(c, x); });
  Tensor c = kiln::zeros({n}), xs = kiln::random_normal({kSteps, n}, 1);
  Ts rows;
  for (int64_t t = 0; t < kSteps; ++t)
    rows.push_back(kiln::reshape(kiln::slice(xs, {t, 0}, {t + 1, n}), {n}));
  f(c, rows[0]);
  for (auto _ : state) {
    Tensor h = c;
    for (const Tensor& r : rows) h = f(h, r);
    benchmark::DoNotOptimize(h);
  }
  state.counters["us_per_step"] =
      benchmark::Counter(static_cast<double>(kSteps) * state.iterations(),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK(BM_ScanCompiled)->Arg(64)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_HostLoop)->Arg(64)->Arg(4096)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
