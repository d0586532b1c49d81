// What fusing layout ops as index maps (#13 step 3) is worth: each workload compiled twice in
// one process, with index maps (default) and without (KILN_FUSE_LAYOUT=0 while it compiles),
// timed alternately. Workloads: the MLP and CNN training steps through Model::fit (as
// train_step_bench), and a transformer-style block (multi-head self-attention's reshapes and
// transposes, softmax, a residual, forward and backward) and a concatenate + pad join (#13's
// pieces) compiled from graphs. Prints
// `RESULT index_maps_<case>_speedup=<median>` (time without / time with; > 1: index maps win)
// with the range over rounds, and the thunk counts of the block.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/executable.h"
#include "benchmarks/bench_models.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;

double seconds(const std::function<void()>& fn, int reps) {
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) fn();
  return std::chrono::duration<double>(Clock::now() - t0).count() / reps;
}

// Runs `with` and `without` alternately for `rounds`, prints the median ratio and its range.
void report(const std::string& name, const std::function<void()>& with,
            const std::function<void()>& without, int reps, int rounds = 11) {
  with();
  without();  // warm
  std::vector<double> ratios;
  for (int r = 0; r < rounds; ++r) {
    const double a = seconds(with, reps), b = seconds(without, reps);
    ratios.push_back(b / a);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("RESULT index_maps_%s_speedup=%.3f\n", name.c_str(), ratios[ratios.size() / 2]);
  std::printf("  %s: without/with %.3f (range %.3f-%.3f over %zu rounds)\n", name.c_str(),
              ratios[ratios.size() / 2], ratios.front(), ratios.back(), ratios.size());
}

void set_layout_fusion(bool on) {
  if (on) {
    ::unsetenv("KILN_FUSE_LAYOUT");
  } else {
    ::setenv("KILN_FUSE_LAYOUT", "0", 1);
  }
}

using bench::cnn;
using bench::mlp;

// Two models trained on the same data; each compiles its step (at its first fit) with layout
// fusion on or off, and keeps that program.
void fit_case(const std::string& name, std::unique_ptr<nn::Sequential> (*make)(), Shape example,
              int64_t batch, int64_t steps, int reps) {
  Shape shape = {batch * steps};
  shape.insert(shape.end(), example.begin(), example.end());
  Tensor x = random_uniform(shape, 1);
  Tensor y = convert(random_uniform({batch * steps}, 2, 0, 10), i32);
  const nn::FitOptions options{.epochs = 1, .batch_size = batch, .shuffle = false, .verbose = 0};
  auto with = make(), without = make();
  for (auto* m : {with.get(), without.get()})
    m->compile(optim::Adam(1e-3), nn::SparseCategoricalCrossentropy(true));
  set_layout_fusion(true);
  with->fit(x, y, options);
  set_layout_fusion(false);
  without->fit(x, y, options);
  set_layout_fusion(true);
  report(name, [&] { with->fit(x, y, options); }, [&] { without->fit(x, y, options); }, reps);
}

// One transformer block, batch B, sequence T, width C = H * D: attention with its head split
// and merge (reshape + transpose), a scaled softmax, the output projection and a residual;
// the loss is the mean square of the block's output, differentiated for every weight.
void block_case(int reps) {
  const int64_t B = 8, T = 64, H = 4, D = 32, C = H * D;
  Graph g{"block"};
  Tensor x = g.placeholder(f32, {B, T, C}, "x");
  Tensor wq = g.placeholder(f32, {C, C}, "wq"), wk = g.placeholder(f32, {C, C}, "wk");
  Tensor wv = g.placeholder(f32, {C, C}, "wv"), wo = g.placeholder(f32, {C, C}, "wo");
  auto heads = [&](const Tensor& t) {  // [B, T, C] -> [B, H, T, D]
    return transpose(reshape(t, {B, T, H, D}), {0, 2, 1, 3});
  };
  Tensor q = heads(matmul(x, wq)) * (1.0f / std::sqrt(static_cast<float>(D)));
  Tensor k = heads(matmul(x, wk)), v = heads(matmul(x, wv));
  Tensor scores = matmul(q, transpose(k, {0, 1, 3, 2}));  // [B, H, T, T]
  Tensor p = softmax(scores, -1);
  Tensor o = transpose(matmul(p, v), {0, 2, 1, 3});        // [B, T, H, D]
  Tensor y = matmul(reshape(o, {B, T, C}), wo) + x;
  Tensor loss = mean(y * y);
  std::vector<Tensor> grads = gradients(loss, {wq, wk, wv, wo});
  std::vector<Tensor> fetches = {loss};
  fetches.insert(fetches.end(), grads.begin(), grads.end());
  FeedList feeds = {{x, random_normal({B, T, C}, 1)},
                    {wq, random_normal({C, C}, 2) * 0.05f},
                    {wk, random_normal({C, C}, 3) * 0.05f},
                    {wv, random_normal({C, C}, 4) * 0.05f},
                    {wo, random_normal({C, C}, 5) * 0.05f}};
  set_layout_fusion(true);
  compiler::Executable with = compiler::compile(g, fetches, feeds);
  set_layout_fusion(false);
  compiler::Executable without = compiler::compile(g, fetches, feeds);
  set_layout_fusion(true);
  std::printf("  block: %d thunks (%d fused) with index maps, %d (%d fused) without\n",
              with.num_thunks(), with.num_fused_thunks(), without.num_thunks(),
              without.num_fused_thunks());
  report("transformer_block", [&] { (void)with.run(feeds); }, [&] { (void)without.run(feeds); },
         reps);
}

// Concatenate and pad read as pieces inside their consumer's loop: two feature maps
// concatenated along channels, then a bias and relu (a DenseNet/Inception-style join), and a
// spatial zero-pad feeding a scale and shift, forward only.
void pieces_case(int reps) {
  const int64_t N = 32, H = 28, W = 28, C = 32;
  Graph g{"pieces"};
  Tensor a = g.placeholder(f32, {N, H, W, C}, "a"), b = g.placeholder(f32, {N, H, W, C}, "b");
  Tensor bias = g.placeholder(f32, {2 * C}, "bias");
  Tensor joined = relu(concatenate({a, b}, 3) + bias);
  Tensor padded = pad(a, {0, 1, 1, 0}, {0, 1, 1, 0}) * 0.5f + 1.0f;
  FeedList feeds = {{a, random_normal({N, H, W, C}, 1)},
                    {b, random_normal({N, H, W, C}, 2)},
                    {bias, random_normal({2 * C}, 3)}};
  set_layout_fusion(true);
  compiler::Executable with = compiler::compile(g, {joined, padded}, feeds);
  set_layout_fusion(false);
  compiler::Executable without = compiler::compile(g, {joined, padded}, feeds);
  set_layout_fusion(true);
  std::printf("  pieces: %d thunks (%d fused) with pieces, %d (%d fused) without\n",
              with.num_thunks(), with.num_fused_thunks(), without.num_thunks(),
              without.num_fused_thunks());
  report("concat_pad", [&] { (void)with.run(feeds); }, [&] { (void)without.run(feeds); }, reps);
}

}  // namespace

int main() {
  pieces_case(/*reps=*/20);
  block_case(/*reps=*/20);
  fit_case("mlp_b64", &mlp, {784}, 64, 50, /*reps=*/2);
  fit_case("cnn_b128", &cnn, {28, 28, 1}, 128, 4, /*reps=*/1);
  return 0;
}
