// The peer baseline: Kiln's benchmark workloads written in LibTorch C++ (Debian libtorch-dev),
// configured at its best: 2 intra-op threads on one OpenMP pool that OpenBLAS shares (run.sh
// loads libopenblas0-openmp; run.sh runs each case under both OpenMP wait policies and keeps the
// better). Cases: mlp_b64, mlp_b1024 (784-128-10, ReLU, dropout 0.2), cnn_b128 (the
// fashion_mnist_cnn model), all trained with softmax cross-entropy and Adam; eltwise_chain and
// eltwise_compute_chain (sgemm_bench's two chains over 16M floats); bf16_gemm_2048
// (lowp_gemm_bench's); mlp_b1024_bf16 and cnn_b256_bf16 (train_step_bench's, issue #16): the MLP
// at batch 1024 and the CNN at batch 256 under CPU autocast to bf16 against the same model in
// f32, fit calls alternated. Prints `RESULT torch_<case>_...` lines, and INFO lines for the ISA
// path (ATen's vector ISA from show_config(), and oneDNN's, which LibTorch's bf16 linear and
// convolution run on).
#include <ATen/Version.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#ifdef KILN_PEER_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include "benchmarks/bench_util.h"

namespace {

struct Mlp : torch::nn::Module {
  torch::nn::Linear fc1{784, 128}, fc2{128, 10};
  torch::nn::Dropout dropout{0.2};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("dropout", dropout);
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(dropout(torch::relu(fc1(x)))); }
};

// Kiln's Conv2D(32, 3x3, relu), MaxPool2D(2x2), Conv2D(64, 3x3, relu), MaxPool2D(2x2), Flatten,
// Dense(128, relu), Dense(10); 'valid' padding. NCHW, LibTorch's native CPU layout.
struct Cnn : torch::nn::Module {
  torch::nn::Conv2d conv1{torch::nn::Conv2dOptions(1, 32, 3)};
  torch::nn::Conv2d conv2{torch::nn::Conv2dOptions(32, 64, 3)};
  torch::nn::Linear fc1{64 * 5 * 5, 128}, fc2{128, 10};
  Cnn() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::max_pool2d(torch::relu(conv1(x)), 2);
    h = torch::max_pool2d(torch::relu(conv2(h)), 2);
    return fc2(torch::relu(fc1(h.flatten(1))));
  }
};

// Trains `model` on `steps` batches per call as a training loop does it: a batch is a view of the
// data set, the loss is read back every step. The same work as Kiln's side
// (benchmarks/train_step_bench.cc): batches in data-set order, no shuffle or gather on either
// side. With `bf16`, the forward pass runs under CPU autocast to bf16 (as `with
// torch.autocast("cpu", dtype=torch.bfloat16)` does: the cast-weight cache is cleared when it
// ends), and the logits are cast to f32 for the loss, as Kiln's mixed_bfloat16 does.
template <class Model>
struct Trainer {
  std::shared_ptr<Model> model;
  torch::Tensor x, y;
  int64_t batch, steps;
  bool bf16;
  torch::optim::Adam adam;
  double loss_sum = 0;

  Trainer(std::shared_ptr<Model> m, std::vector<int64_t> example, int64_t batch, int64_t steps,
          bool bf16 = false)
      : model(std::move(m)),
        batch(batch),
        steps(steps),
        bf16(bf16),
        adam(model->parameters(), torch::optim::AdamOptions(1e-3)) {
    std::vector<int64_t> shape = {batch * steps};
    shape.insert(shape.end(), example.begin(), example.end());
    x = torch::rand(shape);
    y = torch::randint(0, 10, {batch * steps}, torch::kLong);
    model->train();
  }
  torch::Tensor logits(const torch::Tensor& xb) {
    if (!bf16) return model->forward(xb);
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::increment_nesting();
    torch::Tensor out = model->forward(xb);
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(false);
    return out.to(torch::kFloat);
  }
  void epoch() {
    for (int64_t s = 0; s < steps; ++s) {
      adam.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          logits(x.narrow(0, s * batch, batch)), y.narrow(0, s * batch, batch));
      loss.backward();
      adam.step();
      loss_sum += loss.item<double>();
    }
  }
  double examples() const { return static_cast<double>(batch * steps); }
};

// Examples per second, the best of several timed blocks of epochs.
template <class Model>
double train_examples_per_s(std::shared_ptr<Model> model, std::vector<int64_t> example,
                            int64_t batch, int64_t steps) {
  Trainer<Model> t(std::move(model), std::move(example), batch, steps);
  return t.examples() / kiln::bench::best_seconds_per_call([&] { t.epoch(); });
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// train_step_bench's bf16_vs_f32 in LibTorch: the model in f32 and a copy under bf16 autocast,
// one warm-up epoch each, then `rounds` alternated timed epochs. Prints the medians and the
// median (range) of the per-round ratios.
template <class Model>
void bf16_vs_f32(const std::string& name, std::vector<int64_t> example, int64_t batch,
                 int64_t steps, int rounds) {
  Trainer<Model> f32(std::make_shared<Model>(), example, batch, steps);
  Trainer<Model> b16(std::make_shared<Model>(), example, batch, steps, /*bf16=*/true);
  auto seconds = [](auto& t) {
    const auto start = std::chrono::steady_clock::now();
    t.epoch();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  seconds(f32);
  seconds(b16);
  std::vector<double> t32, t16, ratio;
  for (int r = 0; r < rounds; ++r) {
    t32.push_back(seconds(f32));
    t16.push_back(seconds(b16));
    ratio.push_back(t32.back() / t16.back());
  }
  const auto [lo, hi] = std::minmax_element(ratio.begin(), ratio.end());
  std::printf(
      "%s: %d alternated rounds: f32 %.0f examples/s, bf16 autocast %.0f examples/s; "
      "bf16 / f32 %.2f (%.2f-%.2f)\n",
      name.c_str(), rounds, f32.examples() / median(t32), b16.examples() / median(t16),
      median(ratio), *lo, *hi);
  kiln::bench::result("torch_" + name + "_examples_per_s", b16.examples() / median(t16));
  kiln::bench::result("torch_" + name + "_f32_examples_per_s", f32.examples() / median(t32));
  kiln::bench::result("torch_" + name + "_vs_f32_in_process", median(ratio));
}

// The ISA paths LibTorch runs here, as INFO lines: ATen's vector kernels (show_config()'s "CPU
// capability usage") and oneDNN's ISA (the libdnnl LibTorch links; Debian's is the one Kiln uses).
void print_isa_info() {
  std::istringstream config(at::show_config());
  for (std::string line; std::getline(config, line);) {
    const auto at = line.find("CPU capability usage: ");
    if (at != std::string::npos) {
      std::printf("INFO torch_aten_cpu_capability=%s\n", line.substr(at + 22).c_str());
    }
  }
  std::printf("INFO torch_mkldnn=%s (enabled %d)\n", at::get_mkldnn_version().c_str(),
              at::globalContext().userEnabledMkldnn() ? 1 : 0);
#ifdef KILN_PEER_HAVE_DNNL
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const char* name =
      isa == static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx)    ? "avx512_core_amx"
      : isa == static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16) ? "avx512_core_bf16"
      : isa == static_cast<unsigned>(dnnl::cpu_isa::avx512_core)      ? "avx512_core"
      : isa == static_cast<unsigned>(dnnl::cpu_isa::avx2)             ? "avx2"
                                                                      : "other";
  std::printf("INFO torch_onednn_cpu_isa=%s (0x%x)\n", name, isa);
#endif
  std::fflush(stdout);
}

torch::Tensor chain_input() {
  return torch::arange(int64_t{1} << 24, torch::kFloat).fmod(1013).div(1013).mul(6).sub(3);
}

// Kiln's reference chain (sgemm_bench): h = relu(x*a + b), then tanh-GELU written as its 9 ops,
// 12 eager ops in all; and LibTorch at its best on the same function, relu then its built-in
// gelu(approximate="tanh"), one kernel each. Median milliseconds per call.
std::pair<double, double> eltwise_chain_ms() {
  constexpr double kA = 0.75, kB = 0.125, kC = 0.7978845608, kK = 0.044715;
  torch::NoGradGuard no_grad;
  torch::Tensor x = chain_input();
  auto ops = [&] {
    torch::Tensor h = torch::relu(x * kA + kB);
    torch::Tensor y = h * (torch::tanh((h + h * h * h * kK) * kC) + 1) * 0.5;
    (void)y.data_ptr();
  };
  auto builtin = [&] {
    torch::Tensor y = torch::gelu(torch::relu(x * kA + kB), "tanh");
    (void)y.data_ptr();
  };
  auto [t_ops, t_builtin] = kiln::bench::interleaved_median_seconds(ops, builtin, 7);
  return {t_ops * 1e3, t_builtin * 1e3};
}

// Kiln's compute-bound chain: y = erf(max(tanh(x*a + b) * logistic(x) + exp(-x*x), b)), y > b.
double eltwise_compute_chain_ms() {
  constexpr double kA = 0.75, kB = 0.125;
  torch::NoGradGuard no_grad;
  torch::Tensor x = chain_input();
  auto chain = [&] {
    torch::Tensor v = torch::erf(
        torch::clamp_min(torch::tanh(x * kA + kB) * torch::sigmoid(x) + torch::exp(-(x * x)), kB));
    torch::Tensor p = v > kB;
    (void)p.data_ptr();
  };
  return kiln::bench::interleaved_median_seconds(
             chain, [] {}, 7)
             .first *
         1e3;
}

// lowp_gemm_bench's bf16 matmul 2048^3 through at::matmul, and f32 beside it: GFLOP/s from the
// median of alternated calls.
std::pair<double, double> bf16_gemm_2048_gflops() {
  constexpr int64_t kN = 2048;
  constexpr double kFlop = 2.0 * kN * kN * kN;
  torch::NoGradGuard no_grad;
  torch::Tensor a = torch::rand({kN, kN}), b = torch::rand({kN, kN});
  torch::Tensor a16 = a.to(torch::kBFloat16), b16 = b.to(torch::kBFloat16);
  auto [t16, t32] =
      kiln::bench::interleaved_median_seconds([&] { (void)torch::matmul(a16, b16).data_ptr(); },
                                              [&] { (void)torch::matmul(a, b).data_ptr(); }, 15);
  return {kFlop / t16 / 1e9, kFlop / t32 / 1e9};
}

}  // namespace

int main(int argc, char** argv) {
  const auto cases = kiln::bench::selected_cases(
      argc, argv,
      kiln::bench::trainer_case_names({"eltwise_chain", "eltwise_compute_chain", "bf16_gemm_2048",
                                       "mlp_b1024_bf16", "cnn_b256_bf16"}));
  if (cases.empty()) return 2;
  // KILN_PEER_THREADS (run.sh): LibTorch's intra-op threads, 2 (the host's cores) by default;
  // run.sh also tries 1, which can win on small batches where a second thread costs more in
  // hand-overs than it brings.
  const char* threads_env = std::getenv("KILN_PEER_THREADS");
  torch::set_num_threads(threads_env ? std::max(1, std::atoi(threads_env)) : 2);
  torch::manual_seed(0);
  std::printf("libtorch %s, %d intra-op threads\n", TORCH_VERSION, torch::get_num_threads());
  for (const std::string& c : cases) {
    if (const kiln::bench::TrainerCase* t = kiln::bench::find_trainer_case(c)) {
      // The batches train_step_bench trains (benchmarks/bench_util.h).
      const double eps =
          t->cnn ? train_examples_per_s(std::make_shared<Cnn>(), {1, 28, 28}, t->batch, t->steps)
                 : train_examples_per_s(std::make_shared<Mlp>(), {784}, t->batch, t->steps);
      kiln::bench::result("torch_" + c + "_examples_per_s", eps);
    } else if (c == "eltwise_chain") {
      auto [ops, builtin] = eltwise_chain_ms();
      kiln::bench::result("torch_eltwise_chain_ms", ops);
      kiln::bench::result("torch_eltwise_chain_builtin_gelu_ms", builtin);
    } else if (c == "eltwise_compute_chain") {
      kiln::bench::result("torch_eltwise_compute_chain_ms", eltwise_compute_chain_ms());
    } else if (c == "bf16_gemm_2048") {
      auto [bf16, f32] = bf16_gemm_2048_gflops();
      kiln::bench::result("torch_bf16_gemm_2048_gflops", bf16);
      kiln::bench::result("torch_f32_gemm_2048_gflops", f32);
    } else if (c == "mlp_b1024_bf16") {
      print_isa_info();
      bf16_vs_f32<Mlp>(c, {784}, 1024, 8, 15);
    } else if (c == "cnn_b256_bf16") {
      print_isa_info();
      bf16_vs_f32<Cnn>(c, {1, 28, 28}, 256, 4, 9);
    }
  }
  return 0;
}
