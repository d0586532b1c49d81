// Kernel figures against baselines measured in the same process, each side the median of calls
// alternated with the other's:
// - sgemm: Kiln's matmul 1024^3 f32 against Eigen called directly (a Tensor contraction on an
//   Eigen thread pool, and a Matrix product, on OpenMP when built with it).
// - eltwise_chain: the reference 12-op chain, relu(x*a + b) then tanh-GELU, over 16M floats
//   (memory-bound: x read, y written, 8 bytes per element), as one JIT-fused kernel, a compiled
//   Executable and eager ops, against a STREAM triad on Kiln's pool with 64M floats per array.
// - eltwise_compute_chain: erf(max(tanh(x*a + b) * logistic(x) + exp(-x*x), b)) and y > b,
//   four transcendentals and three divisions per element (compute-bound), against the pool's
//   FMA peak: the fused kernel's floating-point operations per element are counted from its
//   vectorised LLVM IR (an FMA counts two), so the ratio is the share of peak its work reaches.
// - mlp_step_gemms: the GEMMs of the MLP 784-128-10 training step at batch 64 (forward: x W1,
//   h W2; backward: h^T dy, dy W2^T, x^T dh), each at the best of the libraries here (Eigen's
//   OpenMP product, and oneDNN's sgemm on its OpenMP team where Kiln is built with oneDNN),
//   summed: the floor the issue sets the compiled step against (report.py: mlp_b64_step_vs_gemms
//   with compile_bench's mlp_b64_compiled_us).
// Prints `RESULT key=value` lines for benchmarks/run.sh.
#define EIGEN_USE_THREADS
#include <immintrin.h>
#include <stdlib.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <unsupported/Eigen/CXX11/Tensor>
#include <vector>

#if KILN_BENCH_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#include "benchmarks/bench_util.h"
#include "compiler/cpu/fused_kernel.h"
#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "runtime/thread_pool.h"

namespace {

using namespace kiln;
using compiler::EltOp;
using compiler::FusedSubgraph;

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
  auto [t_kiln, t_contract] = bench::interleaved_median_seconds(
      kiln_mm, [&] { tc.device(device) = ta.contract(tb, dims); }, 21);
  auto [t_kiln2, t_product] =
      bench::interleaved_median_seconds(kiln_mm, [&] { ec.noalias() = ea * eb; }, 21);
  t_kiln = 0.5 * (t_kiln + t_kiln2);
  std::printf(
      "sgemm 1024^3 (medians): kiln %.1f, eigen contraction (%d-thread pool) %.1f, eigen product "
      "(%d OpenMP threads) %.1f GFLOP/s; kiln / best eigen %.2f\n",
      kFlop / t_kiln / 1e9, threads, kFlop / t_contract / 1e9, Eigen::nbThreads(),
      kFlop / t_product / 1e9, std::min(t_contract, t_product) / t_kiln);
  bench::result("kiln_sgemm_1024_gflops", kFlop / t_kiln / 1e9);
  bench::result("eigen_contraction_sgemm_1024_gflops", kFlop / t_contract / 1e9);
  bench::result("eigen_product_sgemm_1024_gflops", kFlop / t_product / 1e9);
}

// One GEMM of the step: C [m, n] = op(A) op(B), A stored [m, k] or (ta) [k, m], B stored [k, n]
// or (tb) [n, k]; the median time of the best library.
double best_gemm_seconds(int64_t m, int64_t k, int64_t n, bool ta, bool tb, std::string* who) {
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  RowMat a = RowMat::Random(ta ? k : m, ta ? m : k), b = RowMat::Random(tb ? n : k, tb ? k : n);
  RowMat c(m, n);
  auto eigen = [&] {
    if (ta && tb) c.noalias() = a.transpose() * b.transpose();
    else if (ta) c.noalias() = a.transpose() * b;
    else if (tb) c.noalias() = a * b.transpose();
    else c.noalias() = a * b;
  };
#if KILN_BENCH_HAVE_DNNL
  auto dnnl = [&] {
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a.data(), ta ? m : k, b.data(),
               tb ? k : n, 0.0f, c.data(), n);
  };
  auto [t_dnnl, t_eigen] = bench::interleaved_median_seconds(dnnl, eigen, 31);
  *who = t_dnnl < t_eigen ? "onednn" : "eigen";
  return std::min(t_eigen, t_dnnl);
#else
  *who = "eigen";
  return bench::interleaved_median_seconds(eigen, [] {}, 31).first;
#endif
}

void mlp_step_gemms() {
  constexpr int64_t kBatch = 64, kIn = 784, kHidden = 128, kOut = 10;
  struct Gemm {
    const char* what;
    int64_t m, k, n;
    bool ta, tb;
  };
  const Gemm gemms[] = {{"x W1", kBatch, kIn, kHidden, false, false},
                        {"h W2", kBatch, kHidden, kOut, false, false},
                        {"h^T dy", kHidden, kBatch, kOut, true, false},
                        {"dy W2^T", kBatch, kOut, kHidden, false, true},
                        {"x^T dh", kIn, kBatch, kHidden, true, false}};
  double total = 0;
  for (const Gemm& g : gemms) {
    std::string who;
    const double t = best_gemm_seconds(g.m, g.k, g.n, g.ta, g.tb, &who);
    std::printf("mlp b64 step GEMM %-8s [%ld, %ld] x [%ld, %ld]: %.1f us (%s)\n", g.what,
                static_cast<long>(g.m), static_cast<long>(g.k), static_cast<long>(g.k),
                static_cast<long>(g.n), t * 1e6, who.c_str());
    total += t;
  }
  std::printf("mlp b64 step GEMMs alone at the libraries' best (%d OpenMP threads): %.1f us\n",
              Eigen::nbThreads(), total * 1e6);
  bench::result("mlp_b64_step_gemms_us", total * 1e6);
}

constexpr int64_t kN = int64_t{1} << 24;       // elements of a chain's input
constexpr int64_t kTriadN = int64_t{1} << 26;  // floats per triad array (STREAM: >= 4x the LLC)
constexpr float kA = 0.75f, kB = 0.125f;
constexpr float kGeluC = 0.7978845608f;  // sqrt(2 / pi)
constexpr float kGeluK = 0.044715f;

Tensor chain_input() {
  std::vector<float> xv(kN);
  for (int64_t i = 0; i < kN; ++i) xv[i] = static_cast<float>(i % 1013) / 1013.0f * 6.0f - 3.0f;
  return Tensor::from_vector(xv);
}

// The triad a[i] = b[i] + 3 c[i] on Kiln's pool: 12 bytes per element.
struct Triad {
  std::vector<float> a = std::vector<float>(kTriadN), b = std::vector<float>(kTriadN, 1.0f),
                     c = std::vector<float>(kTriadN, 2.0f);
  void operator()() {
    float *pa = a.data(), *pb = b.data(), *pc = c.data();
    runtime::parallel_for(kTriadN, 1 << 16, [=](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    });
  }
  double gbps(double seconds) const { return kTriadN * 12.0 / seconds / 1e9; }
};

// h = relu(x*a + b); y = 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3))): 12 ops.
FusedSubgraph reference_chain_subgraph() {
  FusedSubgraph sg;
  sg.name = "bench_reference_chain";
  int x = sg.add_input(f32, {kN});
  auto scalar = [&] { return sg.add_input(f32, {}); };
  int a = scalar(), b = scalar(), zero = scalar(), k = scalar(), c = scalar(), one = scalar(),
      half = scalar();
  int h = sg.add(EltOp::kMax, {sg.add(EltOp::kAdd, {sg.add(EltOp::kMul, {x, a}), b}), zero});
  int h3 = sg.add(EltOp::kMul, {sg.add(EltOp::kMul, {h, h}), h});
  int inner = sg.add(EltOp::kMul, {sg.add(EltOp::kAdd, {h, sg.add(EltOp::kMul, {h3, k})}), c});
  int t = sg.add(EltOp::kAdd, {sg.add(EltOp::kTanh, {inner}), one});
  sg.add_output(sg.add(EltOp::kMul, {sg.add(EltOp::kMul, {h, t}), half}));
  return sg;
}

Tensor reference_chain(const Tensor& x) {
  Tensor h = relu(x * Tensor::scalar(kA) + Tensor::scalar(kB));
  return h * (tanh((h + h * h * h * kGeluK) * kGeluC) + 1.0f) * 0.5f;
}

void eltwise_chain() {
  Tensor x = chain_input();
  Triad triad;
  compiler::cpu::FusedKernel kernel = compiler::cpu::compile_elementwise(reference_chain_subgraph());
  std::vector<Tensor> in = {x};
  for (float s : {kA, kB, 0.0f, kGeluK, kGeluC, 1.0f, 0.5f}) in.push_back(Tensor::scalar(s));
  std::vector<Tensor> out;
  auto [t_kernel, t_triad] = bench::interleaved_median_seconds([&] { kernel.run(in, &out); },
                                                               std::ref(triad));

  Graph g("eltwise_chain");
  Tensor xs = g.placeholder(f32, {kN}, "x");
  compiler::Executable exe = compiler::compile(g, {reference_chain(xs)}, {{xs, x}});
  auto [t_exe, t_triad2] =
      bench::interleaved_median_seconds([&] { exe.run({{xs, x}}); }, std::ref(triad));
  t_triad = 0.5 * (t_triad + t_triad2);
  auto [t_eager, unused] = bench::interleaved_median_seconds([&] { reference_chain(x); }, [] {}, 5);
  (void)unused;

  constexpr double kBytes = kN * 8.0;
  const double triad_gbps = triad.gbps(t_triad);
  std::printf(
      "reference chain relu(x*a+b) -> tanh-GELU, 16M floats, %d threads (medians): triad %.1f "
      "GB/s (64M floats per array); fused kernel %.2f ms (%.1f GB/s, %.2f of triad), compiled "
      "executable %.2f ms, eager %.1f ms\n",
      runtime::ThreadPool::global().num_threads(), triad_gbps, t_kernel * 1e3,
      kBytes / t_kernel / 1e9, kBytes / t_kernel / 1e9 / triad_gbps, t_exe * 1e3, t_eager * 1e3);
  bench::result("triad_gbps", triad_gbps);
  bench::result("eltwise_chain_kernel_gbps", kBytes / t_kernel / 1e9);
  bench::result("eltwise_chain_executable_gbps", kBytes / t_exe / 1e9);
  bench::result("kiln_eltwise_chain_kernel_ms", t_kernel * 1e3);
  bench::result("kiln_eltwise_chain_eager_ms", t_eager * 1e3);
}

// ---- the compute-bound chain and the FMA peak ------------------------------------------------

// y = erf(max(tanh(x*a + b) * logistic(x) + exp(-x*x), b)), y > b: 12 ops.
FusedSubgraph compute_chain_subgraph() {
  FusedSubgraph sg;
  sg.name = "bench_compute_chain";
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

// Floating-point operations per element of the vectorised loop in optimised LLVM IR: the vector
// fadd/fsub/fmul/fdiv/fneg and fma/fmuladd (two) in the blocks named vector.body*, divided by
// the elements one trip handles (the induction variable's step). 0 when no such loop is found.
double ir_flops_per_element(const std::string& ir) {
  static const std::regex kBlock(R"(^([\w.]+):)");
  static const std::regex kArith(R"(= (fadd|fsub|fmul|fdiv|fneg)\b[^<]*<(\d+) x float>)");
  static const std::regex kFma(R"(call[^@]*@llvm\.(fma|fmuladd)\.v(\d+)f32)");
  static const std::regex kStep(R"(%index\.next\S* = add (?:nuw )?(?:nsw )?i64 %index\S*, (\d+))");
  std::istringstream lines(ir);
  std::string line;
  bool in_body = false;
  double flops = 0, step = 0;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, m, kBlock)) in_body = m[1].str().rfind("vector.body", 0) == 0;
    if (!in_body) continue;
    if (std::regex_search(line, m, kFma)) {
      flops += 2.0 * std::stod(m[2].str());
    } else if (std::regex_search(line, m, kArith)) {
      flops += std::stod(m[2].str());
    } else if (std::regex_search(line, m, kStep)) {
      step = std::stod(m[1].str());
    }
  }
  return step > 0 ? flops / step : 0;
}

// Compiles the compute chain with KILN_DUMP set to a scratch directory and counts the flops per
// element in the optimised IR it writes (in a subdirectory of its own).
double compute_chain_flops_per_element() {
  char dir_template[] = "/tmp/kiln_bench_ir_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) return 0;
  const char* old = std::getenv("KILN_DUMP");
  const std::string saved = old ? old : "";
  setenv("KILN_DUMP", dir, 1);
  (void)compiler::cpu::compile_elementwise(compute_chain_subgraph());
  old ? setenv("KILN_DUMP", saved.c_str(), 1) : unsetenv("KILN_DUMP");
  double flops = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 7 || name.compare(name.size() - 7, 7, ".opt.ll") != 0) continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    flops = std::max(flops, ir_flops_per_element(text.str()));
  }
  std::filesystem::remove_all(dir);
  return flops;
}

// Independent FMA chains in registers, enough to cover the FMA latency on two pipes; returns a
// value that depends on every chain so that nothing is optimised away. Flops: iters * 12 * 2 *
// lanes.
constexpr int kChains = 12;
__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iters) {
  __m512 acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(1e-3f * k);
  const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_fmadd_ps(acc[k], m, c);
  }
  __m512 sum = acc[0];
  for (int k = 1; k < kChains; ++k) sum = _mm512_add_ps(sum, acc[k]);
  return _mm512_reduce_add_ps(sum);
}
__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iters) {
  __m256 acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_ps(1e-3f * k);
  const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_fmadd_ps(acc[k], m, c);
  }
  __m256 sum = acc[0];
  for (int k = 1; k < kChains; ++k) sum = _mm256_add_ps(sum, acc[k]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

// The pool's FMA peak in GFLOP/s: every pool thread runs the widest FMA loop the CPU has.
double fma_peak_gflops() {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("fma")) return 0;
  const int lanes = avx512 ? 16 : 8;
  const int threads = runtime::ThreadPool::global().num_threads();
  constexpr int64_t kIters = 20'000'000;
  std::vector<float> sink(threads);
  auto run = [&] {
    runtime::parallel_for(threads, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t)
        sink[t] = avx512 ? fma_loop_avx512(kIters) : fma_loop_avx2(kIters);
    });
  };
  auto [seconds, unused] = bench::interleaved_median_seconds(run, [] {}, 7);
  (void)unused;
  return threads * static_cast<double>(kIters) * kChains * 2 * lanes / seconds / 1e9;
}

std::vector<Tensor> compute_chain(const Tensor& x) {
  Tensor a = Tensor::scalar(kA), b = Tensor::scalar(kB);
  Tensor y = erf(maximum(tanh(x * a + b) * logistic(x) + exp(-(x * x)), b));
  return {y, y > b};
}

void eltwise_compute_chain() {
  Tensor x = chain_input();
  compiler::cpu::FusedKernel kernel = compiler::cpu::compile_elementwise(compute_chain_subgraph());
  const std::vector<Tensor> in = {x, Tensor::scalar(kA), Tensor::scalar(kB)};
  std::vector<Tensor> out;
  auto [t_kernel, t_eager] = bench::interleaved_median_seconds([&] { kernel.run(in, &out); },
                                                               [&] { compute_chain(x); }, 7);
  const double flops_per_element = compute_chain_flops_per_element();
  const double peak = fma_peak_gflops();
  const double gflops = flops_per_element * kN / t_kernel / 1e9;
  std::printf(
      "compute chain (4 transcendentals), 16M floats (medians): fused kernel %.2f ms, eager "
      "%.1f ms; %.0f flops per element in its vectorised IR -> %.1f GFLOP/s = %.2f of the pool's "
      "FMA peak %.1f GFLOP/s\n",
      t_kernel * 1e3, t_eager * 1e3, flops_per_element, gflops, peak > 0 ? gflops / peak : 0,
      peak);
  bench::result("kiln_eltwise_compute_chain_kernel_ms", t_kernel * 1e3);
  bench::result("kiln_eltwise_compute_chain_eager_ms", t_eager * 1e3);
  if (flops_per_element > 0 && peak > 0) {
    bench::result("eltwise_compute_chain_flops_per_element", flops_per_element);
    bench::result("eltwise_compute_chain_gflops", gflops);
    bench::result("fma_peak_gflops", peak);
  } else {
    bench::result_null("eltwise_compute_chain_gflops",
                       "no vectorised loop found in the kernel's IR, or no FMA unit");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto cases = bench::selected_cases(argc, argv,
                                           {"sgemm", "mlp_step_gemms", "eltwise_chain",
                                            "eltwise_compute_chain"});
  if (cases.empty()) return 2;
  for (const std::string& c : cases) {
    if (c == "sgemm") sgemm();
    if (c == "mlp_step_gemms") mlp_step_gemms();
    if (c == "eltwise_chain") eltwise_chain();
    if (c == "eltwise_compute_chain") eltwise_compute_chain();
  }
  return 0;
}
