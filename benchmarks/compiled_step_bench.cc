// The MLP training step (Dense(128, relu), Dropout(0.5), Dense(10), sparse cross-entropy, Adam;
// traced as tests/compiler/mlp_step_test.cc does) at batch 64: the reference interpreter vs the
// compiled Executable (fused JIT kernels + reference-kernel thunks). Prints
// mlp_b64_compiled_vs_interpreted (interpreter time / compiled time; > 1 means compiled wins).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <random>

#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"

namespace {

using namespace kiln;

Tensor random_tensor(Shape shape, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0, scale);
  std::vector<float> v(num_elements(shape));
  for (float& x : v) x = normal(rng);
  return Tensor::from_vector(v, shape);
}

struct Step {
  Graph g{"step"};
  std::vector<Tensor> fetches;
  FeedList feeds;
};

Step& step() {
  static Step* s = [] {
    constexpr int64_t kIn = 784, kHidden = 128, kClasses = 10, kBatch = 64;
    auto* st = new Step;
    Graph& g = st->g;
    Tensor x = g.placeholder(f32, {kUnknownDim, kIn}, "x");
    Tensor y = g.placeholder(i64, {kUnknownDim}, "y");
    Tensor seed = g.placeholder(i64, {}, "seed");
    Tensor lr = g.placeholder(f32, {}, "learning_rate");
    Tensor iteration = g.placeholder(f32, {}, "iteration");
    std::vector<Shape> shapes = {{kIn, kHidden}, {kHidden}, {kHidden, kClasses}, {kClasses}};
    std::vector<Tensor> params, m, v;
    for (size_t i = 0; i < shapes.size(); ++i) {
      params.push_back(g.placeholder(f32, shapes[i], "param" + std::to_string(i)));
      m.push_back(g.placeholder(f32, shapes[i], "param" + std::to_string(i) + "/Adam/m"));
      v.push_back(g.placeholder(f32, shapes[i], "param" + std::to_string(i) + "/Adam/v"));
    }
    Tensor hidden = relu(matmul(x, params[0]) + params[1]);
    Tensor keep = random_bernoulli_like(hidden, seed + Tensor::scalar<int64_t>(1), 0.5, bool_);
    Tensor dropped = where(keep, hidden * (1.0 / 0.5), zeros_like(hidden));
    Tensor logits = matmul(dropped, params[2]) + params[3];
    Tensor loss = nn::SparseCategoricalCrossentropy(/*from_logits=*/true)(y, logits);
    std::vector<Tensor> grads = gradients(loss, params);
    optim::Adam adam(1e-3);
    st->fetches = {loss};
    for (size_t i = 0; i < params.size(); ++i) {
      auto [value, slots] = adam.apply(params[i], grads[i], {m[i], v[i]}, lr, iteration);
      st->fetches.push_back(value);
      for (const Tensor& sl : slots) st->fetches.push_back(sl);
    }
    std::mt19937 rng(42);
    st->feeds = {{x, random_tensor({kBatch, kIn}, rng, 1)},
                 {seed, Tensor::scalar<int64_t>(1234)},
                 {lr, Tensor::scalar<float>(1e-3f)},
                 {iteration, Tensor::scalar<float>(3)}};
    std::vector<int64_t> labels(kBatch);
    for (int64_t& l : labels) l = static_cast<int64_t>(rng() % kClasses);
    st->feeds.push_back({y, Tensor::from_vector(labels)});
    for (size_t i = 0; i < params.size(); ++i) {
      st->feeds.push_back({params[i], random_tensor(shapes[i], rng, 0.1f)});
      st->feeds.push_back({m[i], random_tensor(shapes[i], rng, 0.01f)});
      st->feeds.push_back({v[i], abs(random_tensor(shapes[i], rng, 0.01f))});
    }
    return st;
  }();
  return *s;
}

void mlp_b64_interpreted(benchmark::State& state) {
  Step& s = step();
  for (auto _ : state) benchmark::DoNotOptimize(s.g.run(s.feeds, s.fetches));
}

// The optimized graph (optimize() only) under the interpreter: separates fusion's share.
void mlp_b64_optimized_interpreted(benchmark::State& state) {
  Step& s = step();
  compiler::CompiledGraph c = compiler::optimize(s.g, s.fetches);
  for (auto _ : state) benchmark::DoNotOptimize(c.run(s.feeds));
}

void mlp_b64_compiled(benchmark::State& state) {
  Step& s = step();
  compiler::Executable e = compiler::compile(s.g, s.fetches, s.feeds);
  state.counters["thunks"] = e.num_thunks();
  state.counters["fused_thunks"] = e.num_fused_thunks();
  for (auto _ : state) benchmark::DoNotOptimize(e.run(s.feeds));
}

BENCHMARK(mlp_b64_interpreted)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(mlp_b64_optimized_interpreted)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(mlp_b64_compiled)->UseRealTime()->Unit(benchmark::kMicrosecond);

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
  benchmark::Shutdown();
  return 0;
}
