// Kernel figures against baselines measured in the same process: Kiln's matmul 1024x1024x1024
// f32 against Eigen called directly (a Tensor contraction on an Eigen thread pool, and a Matrix
// product, on OpenMP when built with it), and the 12-op elementwise chain over 16M floats
// (fused_eltwise_bench's chain) against a STREAM triad on Kiln's pool: the JIT-fused kernel with
// its outputs reused, the whole compiled Executable, and the eager ops. Kiln and baseline
// alternate, best of each. Prints `RESULT key=value` lines for benchmarks/run.sh.
#define EIGEN_USE_THREADS
#include <Eigen/Dense>
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <unsupported/Eigen/CXX11/Tensor>
#include <vector>

#include "benchmarks/bench_util.h"
#include "compiler/codegen/cpu/fused_kernel.h"
#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "runtime/thread_pool.h"

namespace {

using namespace kiln;
using compiler::cpu::EltOp;

constexpr int kRounds = 3;  // alternations of Kiln and baseline; each keeps its best

// Best of `kRounds` alternations of a and b: {seconds per call of a, of b}.
template <class A, class B>
std::pair<double, double> alternate(A&& a, B&& b, double min_seconds = 0.3) {
  double ta = 1e30, tb = 1e30;
  for (int r = 0; r < kRounds; ++r) {
    ta = std::min(ta, bench::best_seconds_per_call(a, 1, min_seconds));
    tb = std::min(tb, bench::best_seconds_per_call(b, 1, min_seconds));
  }
  return {ta, tb};
}

void sgemm() {
  constexpr int64_t kN = 1024;
  constexpr double kFlop = 2.0 * kN * kN * kN;
  Tensor a = random_uniform({kN, kN}, 1), b = random_uniform({kN, kN}, 2);
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const RowMat> ea(a.data<float>().data(), kN, kN), eb(b.data<float>().data(), kN, kN);
  RowMat ec(kN, kN);
  using TMap = Eigen::TensorMap<Eigen::Tensor<const float, 2, Eigen::RowMajor>>;
  TMap ta(a.data<float>().data(), kN, kN), tb(b.data<float>().data(), kN, kN);
  Eigen::Tensor<float, 2, Eigen::RowMajor> tc(kN, kN);
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  Eigen::ThreadPool pool(threads);
  Eigen::ThreadPoolDevice device(&pool, threads);
  const Eigen::array<Eigen::IndexPair<int>, 1> dims = {Eigen::IndexPair<int>(1, 0)};

  auto kiln_mm = [&] { (void)matmul(a, b).raw_data(); };
  auto [t_kiln, t_contract] =
      alternate(kiln_mm, [&] { tc.device(device) = ta.contract(tb, dims); });
  auto [t_kiln2, t_product] = alternate(kiln_mm, [&] { ec.noalias() = ea * eb; });
  t_kiln = std::min(t_kiln, t_kiln2);
  std::printf(
      "sgemm 1024^3: kiln %.1f, eigen contraction (%d-thread pool) %.1f, eigen product "
      "(%d OpenMP threads) %.1f GFLOP/s; kiln / best eigen %.2f\n",
      kFlop / t_kiln / 1e9, threads, kFlop / t_contract / 1e9, Eigen::nbThreads(),
      kFlop / t_product / 1e9, std::min(t_contract, t_product) / t_kiln);
  bench::result("kiln_sgemm_1024_gflops", kFlop / t_kiln / 1e9);
  bench::result("eigen_contraction_sgemm_1024_gflops", kFlop / t_contract / 1e9);
  bench::result("eigen_product_sgemm_1024_gflops", kFlop / t_product / 1e9);
}

constexpr int64_t kN = int64_t{1} << 24;
constexpr float kA = 0.75f, kB = 0.125f;
// Bytes moved per run of the chain: x read, y (f32) and y > b (bool) written; of the triad:
// two arrays read, one written.
constexpr double kChainBytes = kN * (4.0 + 4.0 + 1.0);
constexpr double kTriadBytes = kN * 3 * 4.0;

// y = erf(max(tanh(x*a + b) * logistic(x) + exp(-x*x), b)), y > b: 12 ops, as in
// fused_eltwise_bench.
compiler::cpu::FusedSubgraph chain_subgraph() {
  compiler::cpu::FusedSubgraph sg;
  sg.name = "bench_chain";
  int x = sg.add_input(f32, {kN});
  int a = sg.add_input(f32, {});
  int b = sg.add_input(f32, {});
  int v = sg.add(EltOp::kTanh, {sg.add(EltOp::kAdd, {sg.add(EltOp::kMul, {x, a}), b})});
  v = sg.add(EltOp::kMul, {v, sg.add(EltOp::kLogistic, {x})});
  v = sg.add(EltOp::kAdd,
             {v, sg.add(EltOp::kExp, {sg.add(EltOp::kNeg, {sg.add(EltOp::kMul, {x, x})})})});
  v = sg.add(EltOp::kErf, {sg.add(EltOp::kMax, {v, b})});
  sg.add_output(v);
  sg.add_output(sg.add(EltOp::kGt, {v, b}));
  return sg;
}

std::vector<Tensor> chain(const Tensor& x) {
  Tensor a = Tensor::scalar(kA), b = Tensor::scalar(kB);
  Tensor y = erf(maximum(tanh(x * a + b) * logistic(x) + exp(-(x * x)), b));
  return {y, y > b};
}

void eltwise_chain() {
  std::vector<float> xv(kN);
  for (int64_t i = 0; i < kN; ++i) xv[i] = static_cast<float>(i % 1013) / 1013.0f * 6.0f - 3.0f;
  Tensor x = Tensor::from_vector(xv);

  std::vector<float> ta(kN), tb(kN, 1.0f), tc(kN, 2.0f);
  auto triad = [pa = ta.data(), pb = tb.data(), pc = tc.data()] {
    runtime::parallel_for(kN, 1 << 16, [=](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    });
  };

  compiler::cpu::FusedKernel kernel = compiler::cpu::compile_elementwise(chain_subgraph());
  const std::vector<Tensor> in = {x, Tensor::scalar(kA), Tensor::scalar(kB)};
  std::vector<Tensor> out;
  auto [t_kernel, t_triad] = alternate([&] { kernel.run(in, &out); }, triad);

  Graph g("eltwise_chain");
  Tensor xs = g.placeholder(f32, {kN}, "x");
  compiler::Executable exe = compiler::compile(g, chain(xs), {{xs, x}});
  auto [t_exe, t_triad2] = alternate([&] { exe.run({{xs, x}}); }, triad);
  t_triad = std::min(t_triad, t_triad2);
  const double t_eager = bench::best_seconds_per_call([&] { chain(x); }, 2, 0.5);

  const double triad_gbps = kTriadBytes / t_triad / 1e9;
  std::printf(
      "12-op chain, 16M floats, %d threads: triad %.1f GB/s; fused kernel %.2f ms "
      "(%.1f GB/s, %.2f of triad), compiled executable %.2f ms, eager %.1f ms\n",
      runtime::ThreadPool::global().num_threads(), triad_gbps, t_kernel * 1e3,
      kChainBytes / t_kernel / 1e9, kChainBytes / t_kernel / 1e9 / triad_gbps, t_exe * 1e3,
      t_eager * 1e3);
  bench::result("triad_gbps", triad_gbps);
  bench::result("eltwise_chain_kernel_gbps", kChainBytes / t_kernel / 1e9);
  bench::result("eltwise_chain_executable_gbps", kChainBytes / t_exe / 1e9);
  bench::result("kiln_eltwise_chain_kernel_ms", t_kernel * 1e3);
  bench::result("kiln_eltwise_chain_eager_ms", t_eager * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  const auto cases = bench::selected_cases(argc, argv, {"sgemm", "eltwise_chain"});
  if (cases.empty()) return 2;
  for (const std::string& c : cases) c == "sgemm" ? sgemm() : eltwise_chain();
  return 0;
}
