// Training throughput (examples/s) of the bundled trainers' models on synthetic data: the MLP
// at batch 64 and 1024 and the CNN at batch 128, each step one graph (forward, loss,
// backward, Adam). The baseline in the same run is the time of the step's largest matmul
// done alone, so the printed ratio says how far the whole step is from its biggest GEMM.
#include <benchmark/benchmark.h>

#include <memory>

#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace {

using namespace kiln;

std::unique_ptr<nn::Sequential> mlp() {
  return std::make_unique<nn::Sequential>(
      std::vector<nn::LayerRef>{nn::Dense(128, "relu"), nn::Dropout(0.2), nn::Dense(10)});
}

std::unique_ptr<nn::Sequential> cnn() {
  using namespace kiln::nn;
  return std::make_unique<Sequential>(std::vector<LayerRef>{
      Conv2D(32, {3, 3}, "relu"), MaxPool2D({2, 2}), Conv2D(64, {3, 3}, "relu"),
      MaxPool2D({2, 2}), Flatten(), Dense(128, "relu"), Dense(10)});
}

void train(benchmark::State& state, std::unique_ptr<nn::Sequential> model, Shape example) {
  const int64_t batch = state.range(0), steps = 8;
  Shape shape = {batch * steps};
  shape.insert(shape.end(), example.begin(), example.end());
  Tensor x = random_uniform(shape, 1);
  Tensor y = convert(random_uniform({batch * steps}, 2, 0, 10), i32);
  model->compile(optim::Adam(1e-3), nn::SparseCategoricalCrossentropy(true));
  model->fit(slice(x, Shape(shape.size(), 0), [&] { Shape s = shape; s[0] = batch; return s; }()),
             slice(y, {0}, {batch}), {.epochs = 1, .batch_size = batch, .verbose = 0});  // trace
  for (auto _ : state) {
    model->fit(x, y, {.epochs = 1, .batch_size = batch, .verbose = 0});
  }
  state.SetItemsProcessed(state.iterations() * batch * steps);
}

void mlp_train(benchmark::State& state) { train(state, mlp(), {784}); }
void cnn_train(benchmark::State& state) { train(state, cnn(), {28, 28, 1}); }

// The baseline: the MLP's first-layer forward GEMM alone, [batch, 784] x [784, 128].
void mlp_first_gemm(benchmark::State& state) {
  Tensor a = random_uniform({state.range(0), 784}, 1), b = random_uniform({784, 128}, 2);
  for (auto _ : state) benchmark::DoNotOptimize(matmul(a, b).raw_data());
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

BENCHMARK(mlp_train)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(mlp_first_gemm)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(cnn_train)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
