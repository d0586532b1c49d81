// Training throughput (examples/s) through the public API, nn::Model::fit on synthetic data:
// the MLP 784-128-10 (ReLU, dropout 0.2) at batch 64 and 1024 and the fashion_mnist_cnn model at
// batch 128, sparse softmax cross-entropy and Adam; fit runs whatever path it runs by default
// (KILN_INTERPRET=1 selects the interpreter). The baseline in the same run is the MLP's
// first-layer GEMM alone. Prints `RESULT kiln_<case>_examples_per_s=...` for benchmarks/run.sh,
// which sets these against benchmarks/peers/libtorch_bench.
#include <cstdio>
#include <memory>
#include <string>

#include "benchmarks/bench_util.h"
#include "benchmarks/bench_models.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace {

using namespace kiln;

using bench::cnn;
using bench::mlp;

// Examples per second of fit() over `steps` batches per call (no shuffling, as in the peer).
double train_examples_per_s(std::unique_ptr<nn::Sequential> model, Shape example, int64_t batch,
                            int64_t steps) {
  Shape shape = {batch * steps};
  shape.insert(shape.end(), example.begin(), example.end());
  Tensor x = random_uniform(shape, 1);
  Tensor y = convert(random_uniform({batch * steps}, 2, 0, 10), i32);
  model->compile(optim::Adam(1e-3), nn::SparseCategoricalCrossentropy(true));
  const nn::FitOptions options{.epochs = 1, .batch_size = batch, .shuffle = false, .verbose = 0};
  const double seconds = bench::best_seconds_per_call([&] { model->fit(x, y, options); });
  return static_cast<double>(batch * steps) / seconds;
}

// The baseline: the MLP's first-layer forward GEMM alone, [batch, 784] x [784, 128].
double first_gemm_examples_per_s(int64_t batch) {
  Tensor a = random_uniform({batch, 784}, 1), b = random_uniform({784, 128}, 2);
  return batch / bench::best_seconds_per_call([&] { (void)matmul(a, b).raw_data(); });
}

}  // namespace

int main(int argc, char** argv) {
  const auto cases = bench::selected_cases(argc, argv, {"mlp_b64", "mlp_b1024", "cnn_b128"});
  if (cases.empty()) return 2;
  for (const std::string& c : cases) {
    if (c == "mlp_b64" || c == "mlp_b1024") {
      const int64_t batch = c == "mlp_b64" ? 64 : 1024;
      const double step = train_examples_per_s(mlp(), {784}, batch, batch == 64 ? 32 : 4);
      const double gemm = first_gemm_examples_per_s(batch);
      std::printf("%s: %.0f examples/s; the step takes %.1fx its first-layer GEMM\n", c.c_str(),
                  step, gemm / step);
      bench::result("kiln_" + c + "_examples_per_s", step);
      bench::result("kiln_" + c + "_first_gemm_examples_per_s", gemm);
    } else if (c == "cnn_b128") {
      const double step = train_examples_per_s(cnn(), {28, 28, 1}, 128, 2);
      std::printf("%s: %.0f examples/s\n", c.c_str(), step);
      bench::result("kiln_cnn_b128_examples_per_s", step);
    }
  }
  return 0;
}
