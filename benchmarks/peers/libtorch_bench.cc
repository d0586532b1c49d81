// The peer baseline: Kiln's benchmark workloads written in LibTorch C++ (Debian libtorch-dev),
// configured at its best: 2 intra-op threads on one OpenMP pool that OpenBLAS shares (run.sh
// loads libopenblas0-openmp; run.sh runs each case under both OpenMP wait policies and keeps the
// better). Cases: mlp_b64, mlp_b1024 (784-128-10, ReLU, dropout 0.2), cnn_b128 (the
// fashion_mnist_cnn model), all trained with softmax cross-entropy and Adam; eltwise_chain and
// eltwise_compute_chain (sgemm_bench's two chains over 16M floats); bf16_gemm_2048
// (lowp_gemm_bench's); mlp_b1024_bf16 and cnn_b256_bf16 (train_step_bench's, issue #16): the MLP
// at batch 1024 and the CNN at batch 256 under CPU autocast to bf16 against the same model in
// f32, fit calls alternated; trainer_mlp_b64 ... trainer_cnn_b128 (issue #27): whole epochs on
// Fashion-MNIST as the bundled trainers run them (whole_trainer); lstm_b128 (issue #28): the
// fashion_mnist_lstm model, 8 batches of 128 per timed call. Prints `RESULT
// torch_<case>_...` lines, and INFO lines for the ISA path (ATen's vector ISA from
// show_config(), and oneDNN's, which LibTorch's bf16 linear and convolution run on).
#include <ATen/Version.h>
#include <ATen/autocast_mode.h>
#include <malloc.h>
#include <sys/resource.h>
#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
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

// examples/fashion_mnist_lstm's model: torch::nn::LSTM (one layer, 128 units, batch first) over
// 28 steps of 28 features, then a Linear(128, 10) on the last step's output. LibTorch runs it on
// its fused CPU LSTM (at::lstm: the input projection of all steps at once, one GEMM per step).
struct Lstm : torch::nn::Module {
  torch::nn::LSTM lstm{torch::nn::LSTMOptions(28, 128).batch_first(true)};
  torch::nn::Linear fc{128, 10};
  Lstm() {
    register_module("lstm", lstm);
    register_module("fc", fc);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor seq = std::get<0>(lstm(x));  // [batch, 28, 128]
    return fc(seq.select(1, seq.size(1) - 1));
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Fashion-MNIST as the bundled trainers read it: the IDX files of the Debian package
// dataset-fashion-mnist (gzip or not: gzread reads both), pixels scaled to [0, 1].
struct FashionMnist {
  torch::Tensor x_train, y_train, x_test, y_test;
};

std::vector<uint8_t> read_idx(const std::string& dir, const std::string& name, int rank,
                              std::vector<int64_t>* dims) {
  std::string path = dir + "/" + name + ".gz";
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) {
    path = dir + "/" + name;
    f = gzopen(path.c_str(), "rb");
  }
  if (!f) throw std::runtime_error("cannot open " + dir + "/" + name + "[.gz]");
  auto read_exact = [&](void* p, size_t n) {
    if (gzread(f, p, static_cast<unsigned>(n)) != static_cast<int>(n)) {
      gzclose(f);
      throw std::runtime_error(path + ": truncated");
    }
  };
  unsigned char header[4];
  read_exact(header, 4);
  if (header[0] != 0 || header[1] != 0 || header[2] != 8 || header[3] != rank) {
    gzclose(f);
    throw std::runtime_error(path + ": not an IDX file of unsigned bytes of rank " +
                             std::to_string(rank));
  }
  int64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    unsigned char b[4];
    read_exact(b, 4);
    dims->push_back((int64_t{b[0]} << 24) | (b[1] << 16) | (b[2] << 8) | b[3]);
    total *= dims->back();
  }
  std::vector<uint8_t> data(static_cast<size_t>(total));
  read_exact(data.data(), data.size());
  gzclose(f);
  return data;
}

FashionMnist load_fashion_mnist(bool cnn) {
  const char* env = std::getenv("KILN_FASHION_MNIST_DIR");
  const std::string dir = env ? env : "/usr/share/datasets/fashion-mnist";
  auto images = [&](const std::string& name) {
    std::vector<int64_t> dims;
    std::vector<uint8_t> bytes = read_idx(dir, name, 3, &dims);
    torch::Tensor x = torch::from_blob(bytes.data(), {dims[0], dims[1] * dims[2]}, torch::kUInt8)
                          .to(torch::kFloat32)
                          .div_(255.0f);
    return cnn ? x.view({dims[0], 1, dims[1], dims[2]}).contiguous() : x;
  };
  auto labels = [&](const std::string& name) {
    std::vector<int64_t> dims;
    std::vector<uint8_t> bytes = read_idx(dir, name, 1, &dims);
    return torch::from_blob(bytes.data(), {dims[0]}, torch::kUInt8).to(torch::kLong);
  };
  return {images("train-images-idx3-ubyte"), labels("train-labels-idx1-ubyte"),
          images("t10k-images-idx3-ubyte"), labels("t10k-labels-idx1-ubyte")};
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports kilobytes
}

// A bundled trainer's work in LibTorch, as a LibTorch user writes it (and as the independent
// program ../shared/peers/train_torch.cpp does): every epoch a fresh permutation, each batch
// gathered with index_select (the last partial batch kept), then zero_grad, forward, cross
// entropy, backward and Adam's step; the loss read back every 50 steps. `epochs` timed epochs;
// the figures are the examples per second of the median epoch after the first (as
// benchmarks/measure.py reads Kiln's trainers), the first epoch's seconds, the peak resident
// memory, and the test accuracy (evaluated in batches of 1000 under NoGradGuard).
template <class Model>
void whole_trainer(const std::string& name, bool cnn, int64_t batch, int epochs) {
  const FashionMnist data = load_fashion_mnist(cnn);
  auto model = std::make_shared<Model>();
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
  const int64_t n = data.x_train.size(0);
  std::vector<double> seconds;
  double loss_sum = 0;
  for (int e = 0; e < epochs; ++e) {
    model->train();
    const auto start = std::chrono::steady_clock::now();
    torch::Tensor perm = torch::randperm(n, torch::kLong);
    int64_t step = 0;
    for (int64_t i = 0; i < n; i += batch, ++step) {
      torch::Tensor idx = perm.slice(0, i, std::min(i + batch, n));
      torch::Tensor xb = data.x_train.index_select(0, idx), yb = data.y_train.index_select(0, idx);
      adam.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(xb), yb);
      loss.backward();
      adam.step();
      if (step % 50 == 0) loss_sum += loss.item<double>();
    }
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  model->eval();
  torch::NoGradGuard no_grad;
  int64_t correct = 0;
  for (int64_t i = 0; i < data.x_test.size(0); i += 1000) {
    torch::Tensor out = model->forward(data.x_test.slice(0, i, i + 1000));
    correct += out.argmax(1).eq(data.y_test.slice(0, i, i + 1000)).sum().item<int64_t>();
  }
  std::printf("%s: %d epochs of %lld examples, batch %lld, test accuracy %.4f, epoch seconds",
              name.c_str(), epochs, static_cast<long long>(n), static_cast<long long>(batch),
              static_cast<double>(correct) / static_cast<double>(data.x_test.size(0)));
  for (double s : seconds) std::printf(" %.3f", s);
  std::printf(" (sampled loss %.4g)\n", loss_sum);
  std::vector<double> steady(seconds.size() > 1 ? seconds.begin() + 1 : seconds.begin(),
                             seconds.end());
  kiln::bench::result("torch_" + name + "_examples_per_s",
                      static_cast<double>(n) / median(std::move(steady)));
  kiln::bench::result("torch_" + name + "_first_epoch_s", seconds[0]);
  kiln::bench::result("torch_" + name + "_peak_rss_mib", peak_rss_mib());
}

// Examples per second, the best of several timed blocks of epochs.
template <class Model>
double train_examples_per_s(std::shared_ptr<Model> model, std::vector<int64_t> example,
                            int64_t batch, int64_t steps) {
  Trainer<Model> t(std::move(model), std::move(example), batch, steps);
  return t.examples() / kiln::bench::best_seconds_per_call([&] { t.epoch(); });
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
                                       "mlp_b1024_bf16", "cnn_b256_bf16", "trainer_mlp_b64",
                                       "trainer_mlp_b256", "trainer_mlp_b1024", "trainer_cnn_b32",
                                       "trainer_cnn_b128", "lstm_b128"}));
  if (cases.empty()) return 2;
  // KILN_PEER_THREADS (run.sh): LibTorch's intra-op threads, 2 (the host's cores) by default;
  // run.sh also tries 1, which can win on small batches where a second thread costs more in
  // hand-overs than it brings.
  // LibTorch's CPU tensors come from malloc. glibc hands every block above its mmap threshold
  // (128 KiB, raised only when such a block is freed and only up to 32 MiB) to the kernel on free,
  // so a process whose history never raised it maps and faults in every activation afresh each
  // step: the CNN peer took 4.7 M page faults and 3-4x the time of the independent program
  // (../shared/peers/train_torch.cpp), whose data loading happened to raise it (issue #27). Fixed
  // thresholds keep freed blocks in the heap, as jemalloc or tcmalloc (PyTorch's CPU tuning
  // guide) would; KILN_PEER_GLIBC_MALLOC_DEFAULTS=1 keeps glibc's defaults to show the difference.
  if (!std::getenv("KILN_PEER_GLIBC_MALLOC_DEFAULTS")) {
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    std::printf("INFO peer malloc: mmap threshold 256 MiB, trim threshold 1 GiB\n");
  }
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
    } else if (c.rfind("trainer_", 0) == 0) {
      // trainer_{mlp,cnn}_b<batch>, for KILN_TRAINER_EPOCHS epochs (run.sh: as many as the
      // Kiln trainer it is compared with; 3 by default).
      const bool cnn = c.rfind("trainer_cnn_", 0) == 0;
      const int64_t batch = std::atoll(c.substr(c.find("_b") + 2).c_str());
      const char* epochs_env = std::getenv("KILN_TRAINER_EPOCHS");
      const int epochs = epochs_env ? std::max(1, std::atoi(epochs_env)) : 3;
      try {
        if (cnn) {
          whole_trainer<Cnn>(c, cnn, batch, epochs);
        } else {
          whole_trainer<Mlp>(c, cnn, batch, epochs);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "libtorch_bench %s: %s\n", c.c_str(), e.what());
        return 1;
      }
    } else if (c == "lstm_b128") {
      kiln::bench::result("torch_" + c + "_examples_per_s",
                          train_examples_per_s(std::make_shared<Lstm>(), {28, 28}, 128, 8));
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
