// bf16 GEMM throughput (issue #16): Kiln's bf16 matmul 2048^3 against its own f32 matmul of the
// same size, in the same process, calls alternated, medians (and the per-call range) of each.
// The bf16 product runs on the path ops/onednn_matmul.h reports (printed, and passed to
// results.json as an INFO line); LibTorch's bf16 at::matmul is benchmarks/peers'
// bf16_gemm_2048 case. Prints `RESULT key=value` lines for benchmarks/run.sh.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "kiln/kiln.h"
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
      runtime::ThreadPool::global().num_threads(), kCalls, gflops(bf16_med),
      gflops(t.bf16.back()), gflops(t.bf16.front()), on_onednn ? path.c_str() : "the f32 fallback",
      gflops(f32_med), gflops(t.f32.back()), gflops(t.f32.front()), f32_med / bf16_med);
  bench::result("kiln_bf16_gemm_2048_gflops", gflops(bf16_med));
  bench::result("kiln_f32_gemm_2048_gflops", gflops(f32_med));
  std::printf("INFO lowp_matmul_path=%s\n", on_onednn ? path.c_str() : "widen to f32");
  std::printf("INFO onednn_cpu_isa=%s\n", ops::onednn::cpu_isa().c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const auto cases = bench::selected_cases(argc, argv, {"bf16_gemm_2048"});
  if (cases.empty()) return 2;
  for (const std::string& c : cases) {
    if (c == "bf16_gemm_2048") bf16_gemm_2048();
  }
  return 0;
}
