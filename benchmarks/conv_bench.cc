// The CNN trainer's convolutions with oneDNN (ops/onednn_conv.h) against Kiln's own im2col +
// GEMM kernels, alternated in one process: whole fit() epochs of examples/fashion_mnist_cnn's
// model at batch 128 on synthetic data, and each convolution pass of its step alone (eager).
// Prints medians and ranges; `RESULT` lines for benchmarks/run.sh. `conv_bench profile on|off S`
// only runs fit() for S seconds on one path, for perf.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/op_registry.h"
#include "ops/onednn_conv.h"
#include "runtime/thread_pool.h"

namespace {

using namespace kiln;

struct Stats {
  double median, low, high;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

double seconds(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Times f with Kiln's kernels and with oneDNN, alternating `rounds` times; returns both
// stats of seconds per call (each sample the mean of `calls` calls).
std::pair<Stats, Stats> alternate(const std::function<void()>& f, int rounds, int calls) {
  std::vector<double> kiln, dnnl;
  for (bool on : {false, true}) {  // warm up both (primitive creation, compilation)
    ops::onednn::set_enabled(on);
    f();
  }
  for (int r = 0; r < rounds; ++r) {
    for (bool on : {false, true}) {
      ops::onednn::set_enabled(on);
      const double s = seconds([&] {
        for (int i = 0; i < calls; ++i) f();
      });
      (on ? dnnl : kiln).push_back(s / calls);
    }
  }
  ops::onednn::set_enabled(true);
  return {stats(kiln), stats(dnnl)};
}

// Times a and b alternately `rounds` times (oneDNN on); returns both stats of seconds per call.
std::pair<Stats, Stats> alternate(const std::function<void()>& a, const std::function<void()>& b,
                                  int rounds, int calls) {
  std::vector<double> ta, tb;
  a();
  b();
  for (int r = 0; r < rounds; ++r) {
    ta.push_back(seconds([&] {
                   for (int i = 0; i < calls; ++i) a();
                 }) /
                 calls);
    tb.push_back(seconds([&] {
                   for (int i = 0; i < calls; ++i) b();
                 }) /
                 calls);
  }
  return {stats(ta), stats(tb)};
}

void report(const std::string& name, const std::pair<Stats, Stats>& s, double scale,
            const char* unit, const char* a = "kiln", const char* b = "onednn") {
  const Stats &k = s.first, &d = s.second;
  std::printf("%-32s %s %7.2f %s [%.2f-%.2f]   %s %7.2f %s [%.2f-%.2f]   %.2fx\n", name.c_str(), a,
              k.median * scale, unit, k.low * scale, k.high * scale, d.median * scale, b, unit,
              d.low * scale, d.high * scale, k.median / d.median);
}

std::unique_ptr<nn::Sequential> cnn() {
  using namespace kiln::nn;
  return std::make_unique<Sequential>(std::vector<LayerRef>{
      Conv2D(32, {3, 3}, "relu"), MaxPool2D({2, 2}), Conv2D(64, {3, 3}, "relu"), MaxPool2D({2, 2}),
      Flatten(), Dense(128, "relu"), Dense(10)});
}

Attrs conv_attrs(const char* size_name, Axes sizes) {
  Attrs a{{"strides", Axes{1, 1}},  {"padding_low", Axes{0, 0}},  {"padding_high", Axes{0, 0}},
          {"dilation", Axes{1, 1}}, {"lhs_dilation", Axes{1, 1}}, {"groups", int64_t{1}}};
  if (size_name != nullptr) a.set(size_name, sizes);
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const bool profile = argc > 3 && std::string(argv[1]) == "profile";
  const int rounds = argc > 1 && !profile ? std::atoi(argv[1]) : 7;
  if (!ops::onednn::built()) {
    std::printf("Kiln is built without oneDNN: nothing to compare\n");
    return 0;
  }
  const int64_t batch = 128, steps = 8;
  if (profile) {
    auto model = cnn();
    const Tensor x = random_uniform({batch * steps, 28, 28, 1}, 1);
    const Tensor y = convert(random_uniform({batch * steps}, 2, 0, 10), i32);
    model->compile(optim::Adam(1e-3), nn::SparseCategoricalCrossentropy(true));
    ops::onednn::set_enabled(std::string(argv[2]) == "on");
    const nn::FitOptions options{.epochs = 1, .batch_size = batch, .shuffle = false, .verbose = 0};
    const auto start = std::chrono::steady_clock::now();
    int64_t epochs = 0;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
           std::atof(argv[3])) {
      model->fit(x, y, options);
      ++epochs;
    }
    std::printf("%lld epochs\n", static_cast<long long>(epochs));
    return 0;
  }
  std::printf("threads %d; %d rounds alternated; medians [min-max]\n",
              runtime::ThreadPool::global().num_threads(), rounds);

  // Whole fit() epochs of `steps` batches.
  auto model = cnn();
  const Tensor x = random_uniform({batch * steps, 28, 28, 1}, 1);
  const Tensor y = convert(random_uniform({batch * steps}, 2, 0, 10), i32);
  model->compile(optim::Adam(1e-3), nn::SparseCategoricalCrossentropy(true));
  const nn::FitOptions options{.epochs = 1, .batch_size = batch, .shuffle = false, .verbose = 0};
  const auto fit = alternate([&] { model->fit(x, y, options); }, rounds, 1);
  report("fit epoch (8 steps), per step", fit, 1e3 / steps, "ms");
  const double kiln_eps = batch * steps / fit.first.median;
  const double dnnl_eps = batch * steps / fit.second.median;
  std::printf("examples/s: kiln %.0f, onednn %.0f\n", kiln_eps, dnnl_eps);

  // Each convolution pass of the step, eager.
  const Tensor x1 = random_uniform({batch, 28, 28, 1}, 3), w1 = random_uniform({3, 3, 1, 32}, 4);
  const Tensor x2 = random_uniform({batch, 13, 13, 32}, 5), w2 = random_uniform({3, 3, 32, 64}, 6);
  const Tensor dy1 = random_uniform({batch, 26, 26, 32}, 7);
  const Tensor dy2 = random_uniform({batch, 11, 11, 64}, 8);
  auto run = [](const std::string& op, std::vector<Tensor> in, const Attrs& a) {
    (void)call_op(op, in, a)[0].raw_data();
  };
  const Attrs fwd = conv_attrs(nullptr, {});
  const Attrs ig2 = conv_attrs("input_spatial", {13, 13});
  const Attrs kg1 = conv_attrs("kernel_spatial", {3, 3}), kg2 = kg1;
  const int calls = 5;
  report("conv1 forward [128,28,28,1]x32",
         alternate(
             [&] {
               run("convolution", {x1, w1}, fwd);
             },
             rounds, calls),
         1e3, "ms");
  report("conv2 forward [128,13,13,32]x64",
         alternate(
             [&] {
               run("convolution", {x2, w2}, fwd);
             },
             rounds, calls),
         1e3, "ms");
  report("conv2 input grad",
         alternate(
             [&] {
               run("convolution_input_grad", {dy2, w2}, ig2);
             },
             rounds, calls),
         1e3, "ms");
  report("conv1 kernel grad",
         alternate(
             [&] {
               run("convolution_kernel_grad", {x1, dy1}, kg1);
             },
             rounds, calls),
         1e3, "ms");
  report("conv2 kernel grad",
         alternate(
             [&] {
               run("convolution_kernel_grad", {x2, dy2}, kg2);
             },
             rounds, calls),
         1e3, "ms");
  const Tensor p1 = random_uniform({batch, 26, 26, 32}, 9);
  report("max_pool2d [128,26,26,32] (either)",
         alternate([&] { (void)max_pool2d(p1).raw_data(); }, rounds, calls), 1e3, "ms");

  // bf16 on oneDNN against f32 on oneDNN (first column), the trainer's second convolution.
  auto bf16_vs_f32 = [&](const std::string& name, const std::string& op, std::vector<Tensor> in,
                         const Attrs& a) {
    std::vector<Tensor> half;
    for (const Tensor& t : in) half.push_back(t.to(bf16));
    report(name + " bf16 vs f32",
           alternate([&] { run(op, in, a); }, [&] { run(op, half, a); }, rounds, calls), 1e3, "ms",
           "f32", "bf16");
  };
  bf16_vs_f32("conv2 forward", "convolution", {x2, w2}, fwd);
  bf16_vs_f32("conv2 input grad", "convolution_input_grad", {dy2, w2}, ig2);
  bf16_vs_f32("conv2 kernel grad", "convolution_kernel_grad", {x2, dy2}, kg2);

  bench::result("kiln_cnn_b128_examples_per_s_own_conv", kiln_eps);
  bench::result("kiln_cnn_b128_examples_per_s_onednn_conv", dnnl_eps);
  return 0;
}
