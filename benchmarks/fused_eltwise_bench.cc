// A 12-op elementwise chain over 16M floats, y = erf(max(tanh(x*a+b)*logistic(x) + exp(-x*x), b))
// plus the bool output y > b, three ways in the same run: one JIT-compiled fused kernel
// (compiler/cpu), the eager op-by-op chain, and a STREAM-triad loop a[i] = b[i] + s*c[i]
// (all on the thread pool). Prints the fused kernel's effective GB/s (bytes of its inputs and
// outputs per run / time) as a ratio to the triad's GB/s, and the speed-up over eager. The
// transcendental chain is compute-bound (three exps, erf, three divisions per element); a
// 12-op arithmetic-only chain is measured too, to show the memory-bound case.
// Reduction (input) fusion: softmax over rows of [1024, 4096] (and a column sum of squares),
// interpreted op by op vs compiled (fused loops with the reductions inside). Output (epilogue)
// fusion: relu(x W + b) at batch 64 and 1024, as dot then one fused add+relu loop (a second pass
// over the output) or the interpreter's three kernels, vs one fused_dot. Ratios use the best of
// --benchmark_repetitions (with --benchmark_enable_random_interleaving on a busy machine), in
// wall time and in process CPU time (all threads), which other load on the machine disturbs
// less. Generators: a dropout whose mask is drawn inside its loop vs by random_bernoulli's
// kernel before it. Gathers: an embedding bag (rows of a [30000, 128] table at [256, 64] ids,
// scaled and summed over the sequence) with the rows read inside its loop vs copied out by
// gather's kernel first.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "compiler/cpu/fused_kernel.h"
#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "runtime/thread_pool.h"

namespace {

using kiln::compiler::EltOp;
using kiln::compiler::FusedSubgraph;

constexpr int64_t kN = int64_t{1} << 24;
constexpr float kA = 0.75f, kB = 0.125f;

kiln::Tensor input() {
  std::vector<float> v(kN);
  for (int64_t i = 0; i < kN; ++i) v[i] = static_cast<float>(i % 1013) / 1013.0f * 6.0f - 3.0f;
  return kiln::Tensor::from_vector(v);
}

FusedSubgraph chain() {
  FusedSubgraph sg;
  sg.name = "bench_chain";
  int x = sg.add_input(kiln::f32, {kN});
  int a = sg.add_input(kiln::f32, {});
  int b = sg.add_input(kiln::f32, {});
  int v = sg.add(EltOp::kMul, {x, a});                                          // 1
  v = sg.add(EltOp::kAdd, {v, b});                                              // 2
  v = sg.add(EltOp::kTanh, {v});                                                // 3
  v = sg.add(EltOp::kMul, {v, sg.add(EltOp::kLogistic, {x})});                  // 4, 5
  int e = sg.add(EltOp::kExp, {sg.add(EltOp::kNeg, {sg.add(EltOp::kMul, {x, x})})});  // 6-8
  v = sg.add(EltOp::kAdd, {v, e});                                              // 9
  v = sg.add(EltOp::kMax, {v, b});                                              // 10
  v = sg.add(EltOp::kErf, {v});                                                 // 11
  sg.add_output(v);
  sg.add_output(sg.add(EltOp::kGt, {v, b}));                                    // 12
  return sg;
}

// A 12-op chain of cheap arithmetic (no transcendentals), one f32 output: memory-bound.
FusedSubgraph arith_chain() {
  FusedSubgraph sg;
  sg.name = "bench_arith";
  int x = sg.add_input(kiln::f32, {kN});
  int a = sg.add_input(kiln::f32, {});
  int b = sg.add_input(kiln::f32, {});
  int v = sg.add(EltOp::kAbs, {sg.add(EltOp::kAdd, {sg.add(EltOp::kMul, {x, a}), b})});  // 1-3
  int w = sg.add(EltOp::kMul, {sg.add(EltOp::kMul, {x, x}), a});                       // 4, 5
  v = sg.add(EltOp::kSub, {v, w});                                                     // 6
  v = sg.add(EltOp::kAdd, {v, sg.add(EltOp::kMul, {sg.add(EltOp::kMax, {x, b}), a})});  // 7-9
  v = sg.add(EltOp::kNeg, {v});                                                        // 10
  v = sg.add(EltOp::kClamp, {v, sg.add(EltOp::kNeg, {b}), b});                         // 11, 12
  sg.add_output(v);
  return sg;
}

// Bytes moved per run of the chain: x read, y (f32) and y > b (bool) written.
constexpr double kChainBytes = kN * (4.0 + 4.0 + 1.0);
constexpr double kTriadBytes = kN * 3 * 4.0;
constexpr double kArithBytes = kN * (4.0 + 4.0);

void fused_arith(benchmark::State& state) {
  auto k = kiln::compiler::cpu::compile_elementwise(arith_chain());
  std::vector<kiln::Tensor> in = {input(), kiln::Tensor::scalar(kA), kiln::Tensor::scalar(kB)};
  std::vector<kiln::Tensor> out;
  k.run(in, &out);
  for (auto _ : state) {
    k.run(in, &out);
    benchmark::DoNotOptimize(out[0].raw_data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kArithBytes));
}

void fused(benchmark::State& state) {
  auto k = kiln::compiler::cpu::compile_elementwise(chain());
  std::vector<kiln::Tensor> in = {input(), kiln::Tensor::scalar(kA), kiln::Tensor::scalar(kB)};
  std::vector<kiln::Tensor> out;
  k.run(in, &out);  // allocate (and fault in) the outputs once
  for (auto _ : state) {
    k.run(in, &out);
    benchmark::DoNotOptimize(out[0].raw_data());
  }
  state.counters["compile_ms"] = k.compile_ms();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kChainBytes));
}

void eager(benchmark::State& state) {
  kiln::Tensor x = input(), a = kiln::Tensor::scalar(kA), b = kiln::Tensor::scalar(kB);
  for (auto _ : state) {
    kiln::Tensor v = kiln::erf(kiln::maximum(
        kiln::tanh(x * a + b) * kiln::logistic(x) + kiln::exp(-(x * x)), b));
    kiln::Tensor p = v > b;
    benchmark::DoNotOptimize(p.raw_data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kChainBytes));
}

void triad(benchmark::State& state) {
  std::vector<float> a(kN), b(kN, 1.0f), c(kN, 2.0f);
  const float s = 3.0f;
  float *pa = a.data(), *pb = b.data(), *pc = c.data();
  for (auto _ : state) {
    kiln::runtime::parallel_for(kN, 1 << 16, [=](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
    benchmark::DoNotOptimize(pa);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kTriadBytes));
}

// ---- reductions: softmax rows, column sum of squares ----

constexpr int64_t kRows = 1024, kCols = 4096;

struct SoftmaxCase {
  kiln::Graph g{"softmax"};
  kiln::Tensor x, y, col;
  kiln::FeedList feeds;
  SoftmaxCase() {
    x = g.placeholder(kiln::f32, {kRows, kCols}, "x");
    y = kiln::softmax(x, -1);
    col = kiln::sum(x * x, {0});
    std::vector<float> v(kRows * kCols);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 977) / 977.0f * 8 - 4;
    feeds = {{x, kiln::Tensor::from_vector(v, {kRows, kCols})}};
  }
};

void softmax_unfused(benchmark::State& state) {
  SoftmaxCase c;
  kiln::Tensor out = state.range(0) ? c.col : c.y;
  for (auto _ : state) benchmark::DoNotOptimize(c.g.run(c.feeds, std::vector<kiln::Tensor>{out}));
}

void softmax_fused(benchmark::State& state) {
  SoftmaxCase c;
  kiln::Tensor out = state.range(0) ? c.col : c.y;
  kiln::compiler::Executable e = kiln::compiler::compile(c.g, {out}, c.feeds);
  for (auto _ : state) benchmark::DoNotOptimize(e.run(c.feeds));
  state.SetLabel(std::to_string(e.num_fused_thunks()) + " fused thunks");
}

// ---- dense + bias + relu ----

constexpr int64_t kIn = 784, kHidden = 512;

struct DenseCase {
  kiln::Tensor x, w, b;
  kiln::Attrs dot_attrs{{"lhs_contract", std::vector<int64_t>{1}},
                        {"rhs_contract", std::vector<int64_t>{0}}};
  explicit DenseCase(int64_t batch) {
    auto fill = [](int64_t n, int seed) {
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i)
        v[i] = static_cast<float>((i * 7 + seed) % 113) / 113.0f - 0.5f;
      return v;
    };
    x = kiln::Tensor::from_vector(fill(batch * kIn, 1), {batch, kIn});
    w = kiln::Tensor::from_vector(fill(kIn * kHidden, 2), {kIn, kHidden});
    b = kiln::Tensor::from_vector(fill(kHidden, 3), {kHidden});
  }
};

// The interpreter's way: dot, add, max as three kernels.
void dense_interpreted(benchmark::State& state) {
  DenseCase c(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(kiln::relu(kiln::matmul(c.x, c.w) + c.b));
}

// Compiled without epilogue fusion: the dot kernel, then add+relu as one JIT'd loop.
void dense_dot_then_loop(benchmark::State& state) {
  DenseCase c(state.range(0));
  FusedSubgraph sg;
  sg.name = "bias_relu";
  int v = sg.add_input(kiln::f32, {state.range(0), kHidden});
  int b = sg.add_input(kiln::f32, {kHidden});
  int zero = sg.add_input(kiln::f32, {});
  sg.add_output(sg.add(EltOp::kMax, {sg.add(EltOp::kAdd, {v, b}), zero}));
  auto k = kiln::compiler::cpu::compile_elementwise(sg);
  kiln::Tensor z = kiln::Tensor::scalar(0.0f);
  std::vector<kiln::Tensor> out;
  for (auto _ : state) {
    kiln::Tensor d = kiln::call_op("dot", {c.x, c.w}, c.dot_attrs)[0];
    k.run({d, c.b, z}, &out);
    benchmark::DoNotOptimize(out[0].raw_data());
  }
}

void dense_fused_dot(benchmark::State& state) {
  DenseCase c(state.range(0));
  kiln::Attrs attrs = c.dot_attrs;
  attrs.set("activation", std::string("relu"));
  for (auto _ : state) benchmark::DoNotOptimize(kiln::call_op("fused_dot", {c.x, c.w, c.b}, attrs));
}

// Dropout, where(bernoulli(seed, 0.8), x * 1.25, 0) over n floats, compiled two ways: the mask
// drawn by random_bernoulli's kernel and then read by the where-loop (what a compiled program
// did before random ops became generators, compiler/generator.h), or drawn inside the loop.
struct DropoutCase {
  kiln::Graph g{"dropout"};
  kiln::Tensor x, seed, mask, y_generated, y_masked;
  kiln::FeedList feeds;
  explicit DropoutCase(int64_t n) {
    x = g.placeholder(kiln::f32, {n}, "x");
    seed = g.placeholder(kiln::i64, {}, "seed");
    mask = g.placeholder(kiln::bool_, {n}, "mask");
    kiln::Tensor scaled = x * 1.25f;
    y_generated = kiln::where(kiln::random_bernoulli_like(x, seed, 0.8), scaled, kiln::zeros_like(x));
    y_masked = kiln::where(mask, scaled, kiln::zeros_like(x));
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 997) - 498.0f;
    feeds = {{x, kiln::Tensor::from_vector(v)}, {seed, kiln::Tensor::scalar(int64_t{42})}};
  }
};

void dropout_kernel_mask(benchmark::State& state) {
  DropoutCase c(state.range(0));
  kiln::FeedList feeds = c.feeds;
  feeds.push_back({c.mask, kiln::random_bernoulli_like(feeds[0].second, feeds[1].second, 0.8)});
  kiln::compiler::Executable e = kiln::compiler::compile(c.g, {c.y_masked}, {feeds[0], feeds[2]});
  for (auto _ : state) {
    feeds[2].second = kiln::random_bernoulli_like(feeds[0].second, feeds[1].second, 0.8);
    benchmark::DoNotOptimize(e.run({feeds[0], feeds[2]}));
  }
}

void dropout_generated(benchmark::State& state) {
  DropoutCase c(state.range(0));
  kiln::compiler::Executable e = kiln::compiler::compile(c.g, {c.y_generated}, c.feeds);
  for (auto _ : state) benchmark::DoNotOptimize(e.run(c.feeds));
}

BENCHMARK(dropout_kernel_mask)
    ->MeasureProcessCPUTime()
    ->Arg(256 * 1024)
    ->Arg(1 << 22)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(dropout_generated)
    ->MeasureProcessCPUTime()
    ->Arg(256 * 1024)
    ->Arg(1 << 22)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(softmax_unfused)
    ->MeasureProcessCPUTime()
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(softmax_fused)
    ->MeasureProcessCPUTime()
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(dense_interpreted)
    ->MeasureProcessCPUTime()
    ->Arg(64)
    ->Arg(1024)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(dense_dot_then_loop)
    ->MeasureProcessCPUTime()
    ->Arg(64)
    ->Arg(1024)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(dense_fused_dot)
    ->MeasureProcessCPUTime()
    ->Arg(64)
    ->Arg(1024)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// An embedding bag, sum(gather(table, ids) * w, {1}), compiled two ways: the rows copied out by
// gather's kernel and then read by the loop (what a compiled program did before gathers were
// read by loops), or read by the loop from the table.
constexpr int64_t kVocab = 30000, kWidth = 128, kBags = 256, kLength = 64;

struct BagCase {
  kiln::Graph g{"embedding_bag"};
  kiln::Tensor table, ids, w, rows, bag_gathered, bag_of_rows;
  kiln::FeedList feeds;
  BagCase() {
    table = g.placeholder(kiln::f32, {kVocab, kWidth}, "table");
    ids = g.placeholder(kiln::i32, {kBags, kLength}, "ids");
    w = g.placeholder(kiln::f32, {kWidth}, "w");
    rows = g.placeholder(kiln::f32, {kBags, kLength, kWidth}, "rows");
    bag_gathered = kiln::sum(kiln::gather(table, ids) * w, {1});
    bag_of_rows = kiln::sum(rows * w, {1});
    std::vector<float> t(kVocab * kWidth);
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(i % 97) * 0.01f;
    std::vector<int32_t> v(kBags * kLength);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>((i * 7919) % kVocab);
    feeds = {{table, kiln::Tensor::from_vector(t, {kVocab, kWidth})},
             {ids, kiln::Tensor::from_vector(v, {kBags, kLength})},
             {w, kiln::Tensor::from_vector(std::vector<float>(kWidth, 0.5f), {kWidth})}};
  }
};

void bag_kernel_rows(benchmark::State& state) {
  BagCase c;
  kiln::FeedList feeds = {c.feeds[2], {c.rows, kiln::gather(c.feeds[0].second, c.feeds[1].second)}};
  kiln::compiler::Executable e = kiln::compiler::compile(c.g, {c.bag_of_rows}, feeds);
  for (auto _ : state) {
    feeds[1].second = kiln::gather(c.feeds[0].second, c.feeds[1].second);
    benchmark::DoNotOptimize(e.run(feeds));
  }
}

void bag_gathered(benchmark::State& state) {
  BagCase c;
  kiln::compiler::Executable e = kiln::compiler::compile(c.g, {c.bag_gathered}, c.feeds);
  for (auto _ : state) benchmark::DoNotOptimize(e.run(c.feeds));
  state.SetLabel(std::to_string(e.num_thunks()) + " thunk(s)");
}

BENCHMARK(bag_kernel_rows)->MeasureProcessCPUTime()->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(bag_gathered)->MeasureProcessCPUTime()->UseRealTime()->Unit(benchmark::kMicrosecond);

BENCHMARK(triad)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(fused)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(fused_arith)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(eager)->UseRealTime()->Unit(benchmark::kMillisecond);

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      // The best of --benchmark_repetitions runs: other work on the machine only adds time.
      std::string key =
          r.run_name.function_name + (r.run_name.args.empty() ? "" : "/" + r.run_name.args);
      double t = r.real_accumulated_time / static_cast<double>(r.iterations);
      double c = r.cpu_accumulated_time / static_cast<double>(r.iterations);
      auto [it, fresh] = seconds_.emplace(key, t);
      if (!fresh) it->second = std::min(it->second, t);
      auto [jt, fresh_cpu] = cpu_seconds_.emplace(key, c);
      if (!fresh_cpu) jt->second = std::min(jt->second, c);
    }
  }
  void print_ratios() const {
    auto get = [&](const char* n) {
      auto it = seconds_.find(n);
      return it == seconds_.end() ? 0.0 : it->second;
    };
    auto cpu = [&](const std::string& n) {
      auto it = cpu_seconds_.find(n);
      return it == cpu_seconds_.end() ? 0.0 : it->second;
    };
    for (const char* arg : {"/0", "/1"}) {
      double u = get((std::string("softmax_unfused") + arg).c_str());
      double f = get((std::string("softmax_fused") + arg).c_str());
      double uc = cpu(std::string("softmax_unfused") + arg);
      double fc = cpu(std::string("softmax_fused") + arg);
      if (u > 0 && f > 0 && fc > 0)
        std::printf("%s [%lld, %lld]: interpreted %.2f ms, compiled (reductions fused) %.2f ms: "
                    "%.2fx (CPU time %.2fx)\n",
                    arg[1] == '0' ? "softmax rows" : "column sum of squares",
                    static_cast<long long>(kRows), static_cast<long long>(kCols), u * 1e3, f * 1e3,
                    u / f, uc / fc);
    }
    for (const char* arg : {"/64", "/1024"}) {
      double i = get((std::string("dense_interpreted") + arg).c_str());
      double l = get((std::string("dense_dot_then_loop") + arg).c_str());
      double f = get((std::string("dense_fused_dot") + arg).c_str());
      double ic = cpu(std::string("dense_interpreted") + arg);
      double lc = cpu(std::string("dense_dot_then_loop") + arg);
      double fc = cpu(std::string("dense_fused_dot") + arg);
      if (i > 0 && l > 0 && f > 0 && fc > 0)
        std::printf("relu(x W + b), batch %s, %lldx%lld: interpreted %.1f us, dot + fused loop "
                    "%.1f us, fused_dot %.1f us: %.2fx and %.2fx (CPU time %.2fx and %.2fx)\n",
                    arg + 1, static_cast<long long>(kIn), static_cast<long long>(kHidden), i * 1e6,
                    l * 1e6, f * 1e6, i / f, l / f, ic / fc, lc / fc);
    }
    for (const char* arg : {"/262144", "/4194304"}) {
      double k = get((std::string("dropout_kernel_mask") + arg).c_str());
      double gen = get((std::string("dropout_generated") + arg).c_str());
      double kc = cpu(std::string("dropout_kernel_mask") + arg);
      double gc = cpu(std::string("dropout_generated") + arg);
      if (k > 0 && gen > 0 && gc > 0)
        std::printf("dropout over %s floats: mask by kernel then loop %.1f us, mask generated in "
                    "the loop %.1f us: %.2fx (CPU time %.2fx)\n",
                    arg + 1, k * 1e6, gen * 1e6, k / gen, kc / gc);
    }
    if (double k = get("bag_kernel_rows"), gth = get("bag_gathered"); k > 0 && gth > 0)
      std::printf(
          "embedding bag, [%lld, %lld] ids into [%lld, %lld]: rows by gather's kernel "
          "then loop %.1f us, rows read by the loop %.1f us: %.2fx (CPU time %.2fx)\n",
          static_cast<long long>(kBags), static_cast<long long>(kLength),
          static_cast<long long>(kVocab), static_cast<long long>(kWidth), k * 1e6, gth * 1e6,
          k / gth, cpu("bag_kernel_rows") / cpu("bag_gathered"));
    double t_fused = get("fused"), t_eager = get("eager"), t_triad = get("triad");
    if (t_fused <= 0 || t_triad <= 0) return;
    double gbs_fused = kChainBytes / t_fused / 1e9, gbs_triad = kTriadBytes / t_triad / 1e9;
    std::printf("\n16M floats, 12-op chain, %d threads\n",
                kiln::runtime::ThreadPool::global().num_threads());
    std::printf("  triad  %8.2f ms  %7.2f GB/s\n", t_triad * 1e3, gbs_triad);
    std::printf("  fused  %8.2f ms  %7.2f GB/s effective = %.2f x triad GB/s\n", t_fused * 1e3,
                gbs_fused, gbs_fused / gbs_triad);
    if (double t = get("fused_arith"); t > 0)
      std::printf("  fused arithmetic-only 12-op chain  %8.2f ms  %7.2f GB/s = %.2f x triad GB/s\n",
                  t * 1e3, kArithBytes / t / 1e9, kArithBytes / t / 1e9 / gbs_triad);
    if (t_eager > 0)
      std::printf("  eager  %8.2f ms  (fused is %.1fx faster)\n", t_eager * 1e3, t_eager / t_fused);
  }

 private:
  std::map<std::string, double> seconds_;
  std::map<std::string, double> cpu_seconds_;  // process CPU time (all threads), where measured
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
