// scan_overhead (#28): a compiled scan whose body is one small fused kernel, per step, against
// the same kernel stepped from a host loop (a kiln::function called once per step, the rows of
// xs prepared beforehand). The control-flow thunk should cost less per step than a host round
// trip. Both over 256 steps of vectors of 64 and of 4096 floats; 15 rounds alternating one call
// of each side, medians per step, and the median and range of the per-round ratios. Prints
// `RESULT kiln_scan_overhead_n<N>_...` lines for benchmarks/run.sh.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "kiln/control_flow.h"
#include "kiln/kiln.h"

namespace {

using kiln::Tensor;
using Ts = std::vector<Tensor>;
constexpr int64_t kSteps = 256;
constexpr int kRounds = 15;

Tensor step(const Tensor& c, const Tensor& x) { return kiln::tanh(c * 0.5f + x); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void compare(int64_t n) {
  auto scanned = kiln::function([](const Tensor& c, const Tensor& xs) {
    return kiln::scan([](const Ts& carry,
                         const Ts& x) { return std::make_pair(Ts{step(carry[0], x[0])}, Ts{}); },
                      {c}, {xs})
        .carry[0];
  });
  auto one_step = kiln::function([](const Tensor& c, const Tensor& x) { return step(c, x); });
  const Tensor c = kiln::zeros({n}), xs = kiln::random_normal({kSteps, n}, 1);
  Ts rows;
  for (int64_t t = 0; t < kSteps; ++t)
    rows.push_back(kiln::reshape(kiln::slice(xs, {t, 0}, {t + 1, n}), {n}));
  auto scan_call = [&] { (void)scanned(c, xs).raw_data(); };
  auto host_call = [&] {
    Tensor h = c;
    for (const Tensor& r : rows) h = one_step(h, r);
    (void)h.raw_data();
  };
  // Each call takes ~0.1-1 ms: time blocks of calls, alternating the two sides per round.
  auto block_us_per_step = [](auto& fn) {
    constexpr int kCalls = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return s * 1e6 / kCalls / kSteps;
  };
  scan_call();
  host_call();
  std::vector<double> scan_us, host_us, ratio;
  for (int r = 0; r < kRounds; ++r) {
    scan_us.push_back(block_us_per_step(scan_call));
    host_us.push_back(block_us_per_step(host_call));
    ratio.push_back(scan_us.back() / host_us.back());
  }
  const auto [lo, hi] = std::minmax_element(ratio.begin(), ratio.end());
  std::printf("n=%lld: compiled scan %.3f us/step, host loop %.3f us/step; scan / host %.2f "
              "(%.2f-%.2f)\n",
              static_cast<long long>(n), median(scan_us), median(host_us), median(ratio), *lo,
              *hi);
  const std::string key = "kiln_scan_overhead_n" + std::to_string(n);
  kiln::bench::result(key + "_scan_us_per_step", median(scan_us));
  kiln::bench::result(key + "_host_loop_us_per_step", median(host_us));
  kiln::bench::result(key + "_scan_vs_host_loop", median(ratio));
}

}  // namespace

int main() {
  for (int64_t n : {64, 4096}) compare(n);
  return 0;
}
