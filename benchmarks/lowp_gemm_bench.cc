// bf16 GEMM throughput (issue #16): Kiln's bf16 matmul 2048^3 against its own f32 matmul of the
// same size, in the same process, calls alternated, medians (and the per-call range) of each.
// The bf16 product runs on the path ops/onednn_matmul.h reports (printed, and passed to
// results.json as an INFO line); LibTorch's bf16 at::matmul is benchmarks/peers'
// bf16_gemm_2048 case. bf16_gemm_mlp: the MLP step's smaller GEMMs on oneDNN against widening.
// bf16_dense_1024: a compiled bf16 dense layer against its bare GEMM.
// Prints `RESULT key=value` lines for benchmarks/run.sh.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "ops/onednn_conv.h"
#include "ops/onednn_matmul.h"
#include "runtime/thread_pool.h"

namespace {

using namespace kiln;

constexpr int64_t kN = 2048;
constexpr double kFlop = 2.0 * kN * kN * kN;
constexpr int kCalls = 15;

struct Times {
  std::vector<double> bf16, f32;
};

// Each side's per-call seconds, the two alternated after one warm-up call each.
Times alternated(const Tensor& a16, const Tensor& b16, const Tensor& a32, const Tensor& b32) {
  using Clock = std::chrono::steady_clock;
  auto once = [](const Tensor& a, const Tensor& b) {
    const auto start = Clock::now();
    (void)matmul(a, b).raw_data();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  once(a16, b16);
  once(a32, b32);
  Times t;
  for (int i = 0; i < kCalls; ++i) {
    t.bf16.push_back(once(a16, b16));
    t.f32.push_back(once(a32, b32));
  }
  std::sort(t.bf16.begin(), t.bf16.end());
  std::sort(t.f32.begin(), t.f32.end());
  return t;
}

double gflops(double seconds) { return kFlop / seconds / 1e9; }

void bf16_gemm_2048() {
  Tensor a32 = random_uniform({kN, kN}, 1), b32 = random_uniform({kN, kN}, 2);
  Tensor a16 = convert(a32, bf16), b16 = convert(b32, bf16);
  (void)a16.raw_data();
  (void)b16.raw_data();
  const std::string path = ops::onednn::matmul_path(bf16);
  const int64_t before = ops::onednn::matmul_count();
  const Times t = alternated(a16, b16, a32, b32);
  const bool on_onednn = ops::onednn::matmul_count() > before;
  const double bf16_med = t.bf16[kCalls / 2], f32_med = t.f32[kCalls / 2];
  std::printf(
      "matmul 2048^3, %d threads, %d alternated calls each (median, range GFLOP/s): bf16 %.1f "
      "(%.1f-%.1f) on %s; f32 %.1f (%.1f-%.1f); bf16 / f32 %.2f\n",
      runtime::ThreadPool::global().num_threads(), kCalls, gflops(bf16_med), gflops(t.bf16.back()),
      gflops(t.bf16.front()), on_onednn ? path.c_str() : "the f32 fallback", gflops(f32_med),
      gflops(t.f32.back()), gflops(t.f32.front()), f32_med / bf16_med);
  bench::result("kiln_bf16_gemm_2048_gflops", gflops(bf16_med));
  bench::result("kiln_f32_gemm_2048_gflops", gflops(f32_med));
  std::printf("INFO lowp_matmul_path=%s\n", on_onednn ? path.c_str() : "widen to f32");
  std::printf("INFO onednn_cpu_isa=%s\n", ops::onednn::cpu_isa().c_str());
  std::fflush(stdout);
}

// The MLP step's GEMMs in bf16 at batch 64 and 1024 (784-128: the forward product, the input
// gradient (b stored [n, k]) and the kernel gradient (a stored [k, m])): the time with oneDNN
// switched off (widening to f32, the path before oneDNN) over the time with it on, per GEMM
// (medians of alternated calls) and for the three together.
void bf16_gemm_mlp() {
  const bool saved = ops::onednn::enabled();
  for (int64_t batch : {64, 1024}) {
    Tensor x = convert(random_uniform({batch, 784}, 3), bf16);
    Tensor w = convert(random_uniform({784, 128}, 4), bf16);
    Tensor dy = convert(random_uniform({batch, 128}, 5), bf16);
    const std::pair<const char*, std::function<Tensor()>> gemms[] = {
        {"forward", [&] { return matmul(x, w); }},
        {"input_grad", [&] { return dot(dy, w, {1}, {1}); }},
        {"kernel_grad", [&] { return dot(x, dy, {0}, {0}); }}};
    double total_on = 0, total_off = 0;
    std::printf("bf16 MLP GEMMs, batch %lld, widening / oneDNN (median us):", (long long)batch);
    for (const auto& [name, f] : gemms) {
      auto [t_on, t_off] = bench::interleaved_median_seconds(
          [&] {
            ops::onednn::set_enabled(true);
            (void)f().raw_data();
          },
          [&] {
            ops::onednn::set_enabled(false);
            (void)f().raw_data();
          },
          101);
      total_on += t_on;
      total_off += t_off;
      std::printf(" %s %.0f / %.0f = %.2f;", name, t_off * 1e6, t_on * 1e6, t_off / t_on);
    }
    std::printf(" together %.2f\n", total_off / total_on);
    bench::result("bf16_mlp_b" + std::to_string(batch) + "_gemms_widen_vs_onednn",
                  total_off / total_on);
  }
  ops::onednn::set_enabled(saved);
}

// A compiled bf16 dense layer, relu(x w + b) at [1024, 784] x [784, 128], against its bare dot
// compiled alone, medians of alternated runs: what the bias and relu add to the GEMM (a fused
// oneDNN epilogue, or before it a separate loop over the output).
void bf16_dense_1024() {
  Graph g("bf16_dense");
  Tensor px = g.placeholder(bf16, {1024, 784}, "x"), pw = g.placeholder(bf16, {784, 128}, "w");
  Tensor pb = g.placeholder(bf16, {128}, "b");
  Tensor product = matmul(px, pw);
  Tensor dense = relu(product + pb);
  const FeedList feeds = {{px, convert(random_uniform({1024, 784}, 6, -1, 1), bf16)},
                          {pw, convert(random_uniform({784, 128}, 7, -1, 1), bf16)},
                          {pb, convert(random_uniform({128}, 8, -1, 1), bf16)}};
  compiler::Executable dense_exe = compiler::compile(g, {dense}, feeds);
  compiler::Executable dot_exe = compiler::compile(g, {product}, feeds);
  auto [t_dense, t_dot] =
      bench::interleaved_median_seconds([&] { (void)dense_exe.run(feeds)[0].raw_data(); },
                                        [&] { (void)dot_exe.run(feeds)[0].raw_data(); }, 201);
  bool one_kernel = false;
  for (const std::string& t : dense_exe.thunk_descriptions())
    one_kernel |= t.find("kernel fused_dot") != std::string::npos;
  std::printf(
      "bf16 dense 1024x784x128 (compiled, median us): relu(x w + b) %.0f, x w alone %.0f; "
      "dense / dot %.3f (%s)\n",
      t_dense * 1e6, t_dot * 1e6, t_dense / t_dot,
      one_kernel ? "one fused_dot kernel" : "dot, then a loop for bias and relu");
  bench::result("bf16_dense_1024_vs_dot", t_dense / t_dot);
}

}  // namespace

int main(int argc, char** argv) {
  const auto cases =
      bench::selected_cases(argc, argv, {"bf16_gemm_2048", "bf16_gemm_mlp", "bf16_dense_1024"});
  if (cases.empty()) return 2;
  for (const std::string& c : cases) {
    if (c == "bf16_gemm_2048") bf16_gemm_2048();
    if (c == "bf16_gemm_mlp") bf16_gemm_mlp();
    if (c == "bf16_dense_1024") bf16_dense_1024();
  }
  return 0;
}
