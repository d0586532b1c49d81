// Where the bundled trainers' fit() time goes (issue #12), at batch sizes 32 to 1024: one fit()
// call over synthetic data, as train_step_bench times it, watched by kiln::profiler. For each
// case it prints examples/s and the shares of the fit's wall time spent in GEMMs and
// convolutions, in the JIT'd fused loops, in other kernels (pooling, gathers, the RNG), in the
// compiled step's host work (binding feeds, arena, dispatch), and outside the compiled step
// altogether (the input pipeline slicing and copying each batch, fit's loop, callbacks, metric
// read-back). The shares add up to 1. The fit with the median wall time of `rounds` is reported,
// with its top thunks (5, or KILN_BREAKDOWN_TOP). Cases: mlp_b32 mlp_b64 mlp_b256 mlp_b1024 cnn_b32 cnn_b128 cnn_b256
// (default: all). Prints `RESULT kiln_<case>_...` lines for benchmarks/run.sh.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "benchmarks/bench_models.h"
#include "benchmarks/bench_util.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"

namespace {

using namespace kiln;

struct Fit {
  double wall_s = 0;
  std::vector<profiler::ProgramProfile> programs;
};

// The programs' time summed over their runs, in seconds, by kind.
struct Split {
  double gemm_conv = 0, fused = 0, other = 0, host = 0, step = 0;
  int64_t runs = 0;
};

Split split_of(const Fit& f) {
  Split s;
  for (const profiler::ProgramProfile& p : f.programs) {
    const double n = static_cast<double>(p.runs) * 1e-6;
    s.gemm_conv += p.gemm_conv_us * n;
    s.fused += p.fused_loops_us * n;
    s.other += p.other_kernels_us * n;
    s.host += p.host_us * n;
    s.step += p.step_us * n;
    s.runs += p.runs;
  }
  return s;
}

void run_case(const bench::TrainerCase& c, int rounds) {
  std::unique_ptr<nn::Sequential> model = c.cnn ? bench::cnn() : bench::mlp();
  Shape shape = {c.batch * c.steps};
  const Shape example = c.cnn ? Shape{28, 28, 1} : Shape{784};
  shape.insert(shape.end(), example.begin(), example.end());
  const Tensor x = random_uniform(shape, 1);
  const Tensor y = convert(random_uniform({c.batch * c.steps}, 2, 0, 10), i32);
  const nn::FitOptions options{.epochs = 1, .batch_size = c.batch, .shuffle = false, .verbose = 0};
  model->compile(optim::Adam(1e-3), nn::SparseCategoricalCrossentropy(true));
  model->fit(x, y, options);  // compiles the step

  std::vector<Fit> fits;
  for (int r = 0; r < rounds; ++r) {
    Fit f;
    profiler::start();
    const auto t0 = std::chrono::steady_clock::now();
    model->fit(x, y, options);
    f.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    f.programs = profiler::stop();
    fits.push_back(std::move(f));
  }
  std::sort(fits.begin(), fits.end(),
            [](const Fit& a, const Fit& b) { return a.wall_s < b.wall_s; });
  const Fit& f = fits[fits.size() / 2];
  const Split s = split_of(f);
  const double w = f.wall_s;
  const std::string name = c.name, k = "kiln_" + name + "_";
  std::printf(
      "%s: %.0f examples/s (median of %d fits of %lld steps); step %.0f us; shares: "
      "gemm/conv %.2f, fused loops %.2f, other kernels %.2f, step host %.2f, outside "
      "the step %.2f\n",
      c.name, static_cast<double>(c.batch * c.steps) / w, rounds, static_cast<long long>(c.steps),
      s.runs ? s.step / s.runs * 1e6 : 0.0, s.gemm_conv / w, s.fused / w, s.other / w, s.host / w,
      1 - s.step / w);
  const char* top_env = std::getenv("KILN_BREAKDOWN_TOP");  // thunks listed per program
  const int top = top_env != nullptr ? std::max(1, std::atoi(top_env)) : 5;
  for (const profiler::ProgramProfile& p : f.programs) {
    std::printf("%s", profiler::format(p, top).c_str());
  }
  bench::result(k + "breakdown_examples_per_s", static_cast<double>(c.batch * c.steps) / w);
  bench::result(k + "step_us", s.runs ? s.step / s.runs * 1e6 : 0.0);
  bench::result(k + "share_gemm_conv", s.gemm_conv / w);
  bench::result(k + "share_fused_loops", s.fused / w);
  bench::result(k + "share_other_kernels", s.other / w);
  bench::result(k + "share_step_host", s.host / w);
  bench::result(k + "share_outside_step", 1 - s.step / w);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> chosen =
      bench::selected_cases(argc, argv, bench::trainer_case_names());
  if (chosen.empty()) return 2;
  try {
    for (const bench::TrainerCase& c : bench::trainer_cases()) {
      if (std::find(chosen.begin(), chosen.end(), c.name) != chosen.end()) run_case(c, 7);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "step_breakdown: %s\n", e.what());
    return 1;
  }
  return 0;
}
