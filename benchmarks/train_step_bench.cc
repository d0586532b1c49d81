// Training throughput (examples/s) through the public API, nn::Model::fit on synthetic data:
// the MLP 784-128-10 (ReLU, dropout 0.2) at batch 64 and 1024, the fashion_mnist_cnn model at
// batch 128 and the fashion_mnist_lstm model at batch 128 (lstm_b128: LSTM(128) over 28 steps of
// 28, Dense(10)), sparse softmax cross-entropy and Adam; fit runs whatever path it runs by default
// (KILN_INTERPRET=1 selects the interpreter). The baseline in the same run is the MLP's
// first-layer GEMM alone. Prints `RESULT kiln_<case>_examples_per_s=...` for benchmarks/run.sh,
// which sets these against benchmarks/peers/libtorch_bench.
// Issue #16: cnn_b256_bf16 and mlp_b1024_bf16 train the same model under mixed_bfloat16 and
// float32 in one process, fit calls alternated, and print both throughputs (medians) and the
// median of the per-round ratios with its range; INFO lines name the bf16 path that ran.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/bench_models.h"
#include "benchmarks/bench_util.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "ops/onednn_conv.h"
#include "ops/onednn_matmul.h"

namespace {

using namespace kiln;

using bench::cnn;
using bench::lstm;
using bench::mlp;

// A model compiled for training on synthetic data, `steps` batches per fit() call (no shuffling,
// as in the peer).
struct Trainer {
  std::unique_ptr<nn::Sequential> model;
  Tensor x, y;
  nn::FitOptions options;
  int64_t examples = 0;  // per fit() call
  void fit() { model->fit(x, y, options); }
};

Trainer make_trainer(std::unique_ptr<nn::Sequential> model, Shape example, int64_t batch,
                     int64_t steps) {
  Shape shape = {batch * steps};
  shape.insert(shape.end(), example.begin(), example.end());
  Trainer t{std::move(model), random_uniform(shape, 1),
            convert(random_uniform({batch * steps}, 2, 0, 10), i32),
            nn::FitOptions{.epochs = 1, .batch_size = batch, .shuffle = false, .verbose = 0},
            batch * steps};
  t.model->compile(optim::Adam(1e-3), nn::SparseCategoricalCrossentropy(true));
  return t;
}

// Examples per second of fit() over `steps` batches per call.
double train_examples_per_s(std::unique_ptr<nn::Sequential> model, Shape example, int64_t batch,
                            int64_t steps) {
  Trainer t = make_trainer(std::move(model), example, batch, steps);
  const double seconds = bench::best_seconds_per_call([&] { t.fit(); });
  return static_cast<double>(t.examples) / seconds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One model built twice, under float32 and under mixed_bfloat16 (the policy a layer takes when it
// is made), trained on the same data: one warm-up fit() each (the compile), then `rounds` rounds
// of one timed fit() each, the two alternated. Prints the medians and the median (range) of the
// per-round ratios bf16 / f32, and which path the bf16 GEMMs and convolutions took.
void bf16_vs_f32(const std::string& name,
                 const std::function<std::unique_ptr<nn::Sequential>()>& make, Shape example,
                 int64_t batch, int64_t steps, int rounds) {
  nn::set_global_policy("float32");
  Trainer f32 = make_trainer(make(), example, batch, steps);
  nn::set_global_policy("mixed_bfloat16");
  Trainer b16 = make_trainer(make(), example, batch, steps);
  nn::set_global_policy("float32");
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Trainer& t) {
    const auto start = Clock::now();
    t.fit();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  seconds(f32);
  const int64_t matmuls = ops::onednn::matmul_count();
  const int64_t fused = ops::onednn::fused_matmul_count();
  const int64_t convs = ops::onednn::counts().forward;
  seconds(b16);
  const int64_t bf16_matmuls = ops::onednn::matmul_count() - matmuls;
  const int64_t bf16_fused = ops::onednn::fused_matmul_count() - fused;
  const int64_t bf16_convs = ops::onednn::counts().forward - convs;
  std::vector<double> t32, t16, ratio;
  for (int r = 0; r < rounds; ++r) {
    t32.push_back(seconds(f32));
    t16.push_back(seconds(b16));
    ratio.push_back(t32.back() / t16.back());
  }
  const double eps32 = f32.examples / median(t32), eps16 = b16.examples / median(t16);
  const auto [lo, hi] = std::minmax_element(ratio.begin(), ratio.end());
  std::printf(
      "%s: %d alternated rounds of %lld examples: float32 %.0f examples/s, mixed_bfloat16 %.0f "
      "examples/s; bf16 / f32 %.2f (%.2f-%.2f); one bf16 fit ran %lld matmuls (%lld with their "
      "bias/activation) and %lld forward convolutions on oneDNN\n",
      name.c_str(), rounds, static_cast<long long>(f32.examples), eps32, eps16, median(ratio), *lo,
      *hi, static_cast<long long>(bf16_matmuls), static_cast<long long>(bf16_fused),
      static_cast<long long>(bf16_convs));
  bench::result("kiln_" + name + "_examples_per_s", eps16);
  bench::result("kiln_" + name + "_f32_examples_per_s", eps32);
  bench::result("kiln_" + name + "_vs_f32_in_process", median(ratio));
  std::printf("INFO kiln_%s_matmul_path=%s\n", name.c_str(),
              bf16_matmuls > 0 ? ops::onednn::matmul_path(bf16).c_str() : "widen to f32");
  std::printf("INFO kiln_onednn_cpu_isa=%s\n", ops::onednn::cpu_isa().c_str());
  std::fflush(stdout);
}

// The baseline: the MLP's first-layer forward GEMM alone, [batch, 784] x [784, 128].
double first_gemm_examples_per_s(int64_t batch) {
  Tensor a = random_uniform({batch, 784}, 1), b = random_uniform({784, 128}, 2);
  return batch / bench::best_seconds_per_call([&] { (void)matmul(a, b).raw_data(); });
}

}  // namespace

int main(int argc, char** argv) {
  const auto cases = bench::selected_cases(
      argc, argv, bench::trainer_case_names({"mlp_b1024_bf16", "cnn_b256_bf16", "lstm_b128"}));
  if (cases.empty()) return 2;
  for (const std::string& c : cases) {
    if (const bench::TrainerCase* t = bench::find_trainer_case(c)) {
      const Shape example = t->cnn ? Shape{28, 28, 1} : Shape{784};
      const double step = train_examples_per_s(t->cnn ? cnn() : mlp(), example, t->batch, t->steps);
      bench::result("kiln_" + c + "_examples_per_s", step);
      if (c != "mlp_b64" && c != "mlp_b1024") {
        std::printf("%s: %.0f examples/s\n", c.c_str(), step);
        continue;
      }
      const double gemm = first_gemm_examples_per_s(t->batch);
      std::printf("%s: %.0f examples/s; the step takes %.1fx its first-layer GEMM\n", c.c_str(),
                  step, gemm / step);
      bench::result("kiln_" + c + "_first_gemm_examples_per_s", gemm);
    } else if (c == "lstm_b128") {
      // examples/fashion_mnist_lstm's model (issue #28), 8 batches of 128 per fit() call.
      const double step = train_examples_per_s(lstm(), {28, 28}, 128, 8);
      std::printf("%s: %.0f examples/s\n", c.c_str(), step);
      bench::result("kiln_" + c + "_examples_per_s", step);
    } else if (c == "mlp_b1024_bf16") {
      bf16_vs_f32(c, mlp, {784}, 1024, 8, 15);
    } else if (c == "cnn_b256_bf16") {
      bf16_vs_f32(c, cnn, {28, 28, 1}, 256, 4, 9);
    }
  }
  return 0;
}
