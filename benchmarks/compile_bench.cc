// The compiler's own figures for the MLP training step (tests/compiler/mlp_step.h: 784-128-10,
// dropout, sparse cross-entropy, Adam; batch 64): compile time (the first compile in the process,
// which pays the JIT's start-up, and the best of later ones), the compiled Executable's step time
// against the reference interpreter's (interleaved, best of each), and the arena's planned peak
// against the live minimum. Prints `RESULT key=value` lines for benchmarks/run.sh.
#include <algorithm>
#include <cstdio>
#include <optional>

#include "benchmarks/bench_util.h"
#include "compiler/executable.h"
#include "tests/compiler/mlp_step.h"

namespace {

using namespace kiln;

struct ArenaFigures {
  double planned_peak_bytes;
  double live_min_bytes;  // the largest set of values live at once: no plan can go below it
};

// The buffer assignment's plan for the step, from Executable::memory_stats().
std::optional<ArenaFigures> arena_figures(const compiler::Executable& exe) {
  compiler::MemoryStats m = exe.memory_stats();
  std::printf("arena: planned peak %lld bytes, live minimum %lld, without reuse %lld\n",
              static_cast<long long>(m.arena_bytes), static_cast<long long>(m.live_min_bytes),
              static_cast<long long>(m.no_reuse_bytes));
  return ArenaFigures{static_cast<double>(m.arena_bytes), static_cast<double>(m.live_min_bytes)};
}

}  // namespace

int main() {
  test_models::MlpStep s = test_models::make_mlp_step(784, 128, 10, 64);

  const double first_s =
      bench::seconds_once([&] { compiler::compile(s.graph, s.fetches, s.feeds); });
  double warm_s = 1e30;
  for (int i = 0; i < 5; ++i) {
    warm_s = std::min(warm_s,
                      bench::seconds_once([&] { compiler::compile(s.graph, s.fetches, s.feeds); }));
  }
  const compiler::Executable exe = compiler::compile(s.graph, s.fetches, s.feeds);
  std::printf("mlp train step b64: %d thunks, %d fused; compile %.1f ms first, %.1f ms warm\n",
              exe.num_thunks(), exe.num_fused_thunks(), first_s * 1e3, warm_s * 1e3);
  bench::result("compile_ms_mlp_train_step", first_s * 1e3);
  bench::result("compile_ms_mlp_train_step_warm", warm_s * 1e3);

  double interpreted = 1e30, compiled = 1e30;
  for (int round = 0; round < 3; ++round) {
    interpreted = std::min(interpreted, bench::best_seconds_per_call(
                                            [&] { s.graph.run(s.feeds, s.fetches); }, 1, 0.3));
    compiled = std::min(compiled, bench::best_seconds_per_call([&] { exe.run(s.feeds); }, 1, 0.3));
  }
  std::printf("step: interpreted %.1f us, compiled %.1f us (%.2fx)\n", interpreted * 1e6,
              compiled * 1e6, interpreted / compiled);
  bench::result("mlp_b64_interpreted_us", interpreted * 1e6);
  bench::result("mlp_b64_compiled_us", compiled * 1e6);

  // Where the compiled step's time goes (Executable::profile, a clock read per thunk), per run.
  exe.set_profiling(true);
  for (int i = 0; i < 200; ++i) exe.run(s.feeds);
  const compiler::StepProfile p = exe.profile();
  exe.set_profiling(false);
  const double n = static_cast<double>(p.runs);
  std::printf("step breakdown (mean of %ld profiled runs): %.1f us = GEMMs %.1f + fused loops %.1f "
              "+ other kernels %.1f + host %.1f\n",
              static_cast<long>(p.runs), p.total_us / n, p.gemm_conv_us / n, p.fused_loops_us / n,
              p.other_kernels_us / n, p.host_us() / n);
  bench::result("mlp_b64_step_profiled_us", p.total_us / n);
  bench::result("mlp_b64_step_gemm_us", p.gemm_conv_us / n);
  bench::result("mlp_b64_step_fused_loops_us", p.fused_loops_us / n);
  bench::result("mlp_b64_step_other_kernels_us", p.other_kernels_us / n);
  bench::result("mlp_b64_step_host_us", p.host_us() / n);

  if (std::optional<ArenaFigures> a = arena_figures(exe)) {
    bench::result("arena_planned_peak_bytes", a->planned_peak_bytes);
    bench::result("arena_live_min_bytes", a->live_min_bytes);
  } else {
    bench::result_null("arena_peak_vs_live_min",
                       "Executable::memory_stats() (planned arena peak, live minimum) not yet in "
                       "compiler/executable.h");
  }
  return 0;
}
