// On a GPU (#30), four measurements, each of several trials in one process, printed as JSON
// lines with medians and ranges. Without a GPU it says so and exits 0. Run by scripts/gpu_check.sh,
// which times torch.matmul on the same shape in the same run for the ratio.
// 1. The CUDA backend's fused elementwise kernel, y = max(x * a + b, 0) * c - x over 64M floats
//    (four inputs read, one output written: 1.25 GB a run), alternated with a device-to-device
//    copy of 1 GB (cuMemcpyDtoD): each one's effective bandwidth (bytes read and written / time)
//    and their ratio (the target: at least 0.8).
// 2. cuBLASLt matmuls (compiler/cuda/blas.h) of 8192^3 in bf16 and f32 (f32 sums, no TF32):
//    TFLOP/s, 2 m n k / time.
// 3. The MLP training step (784-128-10, dropout, cross-entropy, gradients, Adam; batch 1024,
//    f32) as a device program on cuda:0 against the same step compiled for this host's CPU,
//    alternated: ms a step each (20 steps a trial; feeds and results are host tensors, so
//    each step copies its parameters down and their new values up) and the speedup; and the
//    same step with its parameters and Adam slots resident on the GPU (device tensors fed back
//    from outputs_on_device, as a training loop keeps them; only the batch crosses), against
//    the same CPU step.
// 4. The CNN trainer's model (examples/fashion_mnist_cnn: conv 32 3x3 relu, max pool, conv 64
//    3x3 relu, max pool, dense 128 relu, dense 10; Adam) trained by Model::fit on random
//    28x28 images, batch 256, on cuda:0 (its convolutions through cuDNN, its pooling still on
//    the host) and on this host's CPU, alternated: ms a step each, 3 trials of 8 steps.
// 5. A text classifier (Embedding(30000, 128), average over the sequence, dense 2; Adam)
//    trained by Model::fit on random ids, batch 256 x 64 ids, on cuda:0 (its lookups gathered
//    in loops, their gradient the device's scatter_add loop) and on this host's CPU,
//    alternated: ms a step each, 3 trials of 8 steps.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <chrono>

#include "compiler/cuda/blas.h"
#include "compiler/cuda/ptx.h"
#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "runtime/cuda/driver.h"
#include "tests/compiler/mlp_step.h"

namespace {

using kiln::Prim;
using kiln::compiler::FusedSubgraph;

struct Stat {
  double median, lo, hi;
};

Stat stat(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

double ms_per_step(const kiln::compiler::Executable& e, const kiln::FeedList& feeds, int steps) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) e.run(feeds);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
         steps;
}

// Alternates `gpu` and `cpu` (each the ms of a step) for `trials` trials, and prints
// {"<name>": the speedups, "gpu_ms": ..., "cpu_ms": ..., "trials": n}: medians and ranges.
void print_vs_cpu(const char* name, int trials, const std::function<double()>& gpu,
                  const std::function<double()>& cpu) {
  std::vector<double> gpu_ms, cpu_ms, speedup;
  for (int trial = 0; trial < trials; ++trial) {
    gpu_ms.push_back(gpu());
    cpu_ms.push_back(cpu());
    speedup.push_back(cpu_ms.back() / gpu_ms.back());
  }
  Stat g = stat(gpu_ms), c = stat(cpu_ms), sp = stat(speedup);
  std::printf(
      "{\"%s\": {\"median\": %.2f, \"min\": %.2f, \"max\": %.2f}, "
      "\"gpu_ms\": {\"median\": %.3f, \"min\": %.3f, \"max\": %.3f}, "
      "\"cpu_ms\": {\"median\": %.3f, \"min\": %.3f, \"max\": %.3f}, \"trials\": %d}\n",
      name, sp.median, sp.lo, sp.hi, g.median, g.lo, g.hi, c.median, c.lo, c.hi, trials);
  std::fflush(stdout);
}

// ms a training step of the model `layers` makes (sparse cross-entropy, Adam) on `device`, after
// a first fit that compiles it.
double fit_ms_per_step(const std::function<std::vector<kiln::nn::LayerRef>()>& layers,
                       kiln::Device device, const kiln::Tensor& x, const kiln::Tensor& y,
                       int64_t batch) {
  using namespace kiln::nn;
  Sequential model(layers());
  model.set_seed(1);
  model.compile(kiln::optim::Adam(1e-3), SparseCategoricalCrossentropy(true), {},
                {.device = device});
  const FitOptions options{.epochs = 1, .batch_size = batch, .seed = 1, .verbose = 0};
  model.fit(x, y, options);  // compiles the step
  auto t0 = std::chrono::steady_clock::now();
  model.fit(x, y, options);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return ms / static_cast<double>(x.dim(0) / batch);
}

std::vector<kiln::nn::LayerRef> cnn_layers() {
  using namespace kiln::nn;
  return {Conv2D(32, {3, 3}, "relu"),
          MaxPool2D({2, 2}),
          Conv2D(64, {3, 3}, "relu"),
          MaxPool2D({2, 2}),
          Flatten(),
          Dense(128, "relu"),
          Dense(10)};
}

std::vector<kiln::nn::LayerRef> text_layers() {
  using namespace kiln::nn;
  return {Embedding(30000, 128), GlobalAveragePooling1D(), Dense(2)};
}

}  // namespace

int main() {
  std::string why;
  if (kiln::runtime::cuda::driver(&why) == nullptr) {
    std::printf("gpu_bench: skipped: %s\n", why.c_str());
    return 0;
  }
  constexpr int64_t kN = int64_t{1} << 26;
  FusedSubgraph sg;
  sg.name = "chain";
  int x = sg.add_input(kiln::f32, {kN});
  int a = sg.add_input(kiln::f32, {kN});
  int b = sg.add_input(kiln::f32, {kN});
  int c = sg.add_input(kiln::f32, {kN});
  int z = sg.add(Prim::kAdd, {sg.add(Prim::kMul, {x, a}), b});
  int zero = sg.add(Prim::kSub, {x, x});
  int r = sg.add(Prim::kMax, {z, zero});
  sg.add_output(sg.add(Prim::kSub, {sg.add(Prim::kMul, {r, c}), x}));
  auto module = kiln::compiler::cuda::compile_ptx({sg});
  auto gpu = kiln::compiler::cuda::LoadedPtx::load(module);
  std::vector<kiln::Tensor> inputs;
  for (int i = 0; i < 4; ++i)
    inputs.push_back(kiln::random_uniform({kN}, /*seed=*/i + 1, -1.0, 1.0));
  const double chain_bytes = 5.0 * 4 * kN;
  const size_t copy_bytes = size_t{1} << 30;
  std::vector<double> chain_gbps, copy_gbps, ratio;
  for (int trial = 0; trial < 7; ++trial) {
    double t_chain = gpu->seconds_per_run(0, inputs, 20);
    double t_copy = kiln::compiler::cuda::device_copy_seconds(copy_bytes, 20);
    chain_gbps.push_back(chain_bytes / t_chain / 1e9);
    copy_gbps.push_back(2.0 * copy_bytes / t_copy / 1e9);
    ratio.push_back(chain_gbps.back() / copy_gbps.back());
  }
  Stat ch = stat(chain_gbps), cp = stat(copy_gbps), ra = stat(ratio);
  std::printf(
      "{\"gpu_fused_chain_vs_d2d_copy\": {\"median\": %.3f, \"min\": %.3f, \"max\": %.3f}, "
      "\"chain_GBps\": {\"median\": %.1f, \"min\": %.1f, \"max\": %.1f}, "
      "\"copy_GBps\": {\"median\": %.1f, \"min\": %.1f, \"max\": %.1f}, \"trials\": 7, "
      "\"compile_ms\": %.1f}\n",
      ra.median, ra.lo, ra.hi, ch.median, ch.lo, ch.hi, cp.median, cp.lo, cp.hi,
      module.compile_ms);
  std::fflush(stdout);
  constexpr int64_t kM = 8192;
  for (kiln::DType t : {kiln::bf16, kiln::f32}) {
    std::vector<double> tflops;
    for (int trial = 0; trial < 7; ++trial) {
      double s = kiln::compiler::cuda::matmul_seconds_on_gpu(t, kM, kM, kM, 10);
      tflops.push_back(2.0 * kM * kM * kM / s / 1e12);
    }
    Stat st = stat(tflops);
    std::printf("{\"gpu_matmul_%s_8192_tflops\": {\"median\": %.1f, \"min\": %.1f, \"max\": %.1f}}\n",
                kiln::dtype_name(t), st.median, st.lo, st.hi);
  }
  std::fflush(stdout);
  kiln::test_models::MlpStep step = kiln::test_models::make_mlp_step(784, 128, 10, 1024);
  namespace kc = kiln::compiler;
  const kc::Executable cpu = kc::compile(step.graph, step.fetches, step.feeds);
  const kc::Executable gpu_step = kc::compile(step.graph, step.fetches, step.feeds, {},
                                              kc::CompileOptions{kiln::Device::cuda(0)});
  ms_per_step(cpu, step.feeds, 3);  // warm-up
  ms_per_step(gpu_step, step.feeds, 3);
  print_vs_cpu(
      "gpu_mlp_step_b1024_vs_cpu", 7, [&] { return ms_per_step(gpu_step, step.feeds, 20); },
      [&] { return ms_per_step(cpu, step.feeds, 20); });
  {
    // The resident variant: the state lives on the GPU, each step's new state fed to the next.
    const kc::Executable resident = kc::compile(
        step.graph, step.fetches, step.feeds, {},
        kc::CompileOptions{.device = kiln::Device::cuda(0), .outputs_on_device = true});
    constexpr size_t kFirstState = 5;  // x, seed, lr, iteration, y, then the state
    kiln::FeedList feeds = step.feeds;
    for (size_t i = kFirstState; i < feeds.size(); ++i)
      feeds[i].second = feeds[i].second.to(kiln::Device::cuda(0));
    auto resident_ms = [&](int steps) {
      auto t0 = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) {
        std::vector<kiln::Tensor> out = resident.run(feeds);
        for (size_t i = 1; i < out.size(); ++i) feeds[kFirstState + i - 1].second = out[i];
      }
      feeds[kFirstState].second.to(kiln::Device::cpu());  // a download: waits for the GPU
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                 .count() /
             steps;
    };
    resident_ms(3);  // warm-up
    print_vs_cpu("gpu_mlp_step_b1024_resident_vs_cpu", 7, [&] { return resident_ms(20); },
                 [&] { return ms_per_step(cpu, step.feeds, 20); });
  }
  constexpr int64_t kBatch = 256, kSteps = 8;
  const kiln::Tensor images = kiln::random_uniform({kBatch * kSteps, 28, 28, 1}, 5, 0.0, 1.0);
  std::vector<int64_t> labels(kBatch * kSteps);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7) % 10);
  const kiln::Tensor classes = kiln::Tensor::from_vector(labels);
  print_vs_cpu(
      "gpu_cnn_fit_step_b256_vs_cpu", 3,
      [&] { return fit_ms_per_step(cnn_layers, kiln::Device::cuda(0), images, classes, kBatch); },
      [&] { return fit_ms_per_step(cnn_layers, kiln::Device::cpu(), images, classes, kBatch); });
  constexpr int64_t kSeq = 64;
  std::vector<int32_t> ids(kBatch * kSteps * kSeq);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919) % 30000);
  const kiln::Tensor tokens = kiln::Tensor::from_vector(ids, {kBatch * kSteps, kSeq});
  std::vector<int64_t> sentiment(kBatch * kSteps);
  for (size_t i = 0; i < sentiment.size(); ++i) sentiment[i] = static_cast<int64_t>(i % 2);
  const kiln::Tensor polarity = kiln::Tensor::from_vector(sentiment);
  print_vs_cpu(
      "gpu_text_fit_step_b256_vs_cpu", 3,
      [&] { return fit_ms_per_step(text_layers, kiln::Device::cuda(0), tokens, polarity, kBatch); },
      [&] { return fit_ms_per_step(text_layers, kiln::Device::cpu(), tokens, polarity, kBatch); });
  return 0;
}
