// The f32 approximations of ops/approximations.h: every one of the 2^32 inputs gives the same
// bits from the scalar definition (the reference kernels') and from the JIT'd vectorised kernel
// (large eager tensors, compiled graphs), within the ulp bound docs/numerics.md states of the
// double-precision std:: function; and small eager tensors, large ones, interpreted and compiled
// graphs agree bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <mutex>
#include <random>
#include <vector>

#include "compiler/cpu/fused_kernel.h"
#include "compiler/cpu/eager.h"
#include "kiln/function.h"
#include "kiln/kiln.h"
#include "ops/approximations.h"
#include "runtime/thread_pool.h"

namespace kiln {
namespace {

using compiler::EltOp;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A result's bits, every NaN as the default one: NaN in gives NaN out, its payload unspecified.
uint32_t bits_of(float v) { return std::isnan(v) ? 0x7fc00000u : std::bit_cast<uint32_t>(v); }

// The spacing of floats at |v|: 2^-149 among the subnormals.
double ulp_of(float v) {
  const int e = static_cast<int>((std::bit_cast<uint32_t>(v) >> 23) & 0xff);
  return std::bit_cast<double>(static_cast<uint64_t>(std::max(e, 1) - 150 + 1023) << 52);
}

// Runs `f` with the reference kernels (interpreted mode), whatever the tensors' size.
template <class F>
Tensor with_reference_kernels(F f) {
  const ExecutionMode before = default_execution_mode();
  set_default_execution_mode(ExecutionMode::kInterpreted);
  Tensor out = f();
  set_default_execution_mode(before);
  return out;
}

struct Approximation {
  const char* name;
  EltOp op;
  Tensor (*fn)(const Tensor&);  // the public function
  float (*scalar)(float);
  double (*reference)(double);
  double ulp_bound;  // docs/numerics.md's
};

const Approximation kExp = {"exp", EltOp::kExp, [](const Tensor& x) { return exp(x); },
                            ops::exp_f32, [](double x) { return std::exp(x); }, 0.98};
const Approximation kLog = {"log", EltOp::kLog, [](const Tensor& x) { return log(x); },
                            ops::log_f32, [](double x) { return std::log(x); }, 0.83};
const Approximation kLogistic = {"logistic", EltOp::kLogistic,
                                 [](const Tensor& x) { return logistic(x); }, ops::logistic_f32,
                                 [](double x) { return 1 / (1 + std::exp(-x)); }, 2.41};
const Approximation kTanh = {"tanh", EltOp::kTanh, [](const Tensor& x) { return tanh(x); },
                             ops::tanh_f32, [](double x) { return std::tanh(x); }, 5.70};
const Approximation kErf = {"erf", EltOp::kErf, [](const Tensor& x) { return erf(x); },
                            ops::erf_f32, [](double x) { return std::erf(x); }, 7.49};

// What one sweep over a range of inputs found.
struct Found {
  int64_t differing = 0;   // inputs where the JIT'd and the scalar bits differ
  uint32_t first_differing = 0;
  int64_t out_of_bound = 0;  // inputs over the ulp bound, or finite where the reference is not
  uint32_t first_out_of_bound = 0;
  double max_ulp = 0;
  float max_ulp_at = 0;

  void merge(const Found& o) {
    if (o.differing && !differing) first_differing = o.first_differing;
    if (o.out_of_bound && !out_of_bound) first_out_of_bound = o.first_out_of_bound;
    differing += o.differing;
    out_of_bound += o.out_of_bound;
    if (o.max_ulp > max_ulp) max_ulp = o.max_ulp, max_ulp_at = o.max_ulp_at;
  }
};

// The f32 bit patterns [lo, hi) through a JIT'd kernel of `op` applied to x (or, with
// `neg_abs`, to -|x|, which the code generator emits with its cheaper non-positive variant of
// exp; for negative x that is x), compared bit for bit with the reference kernel on x (the
// scalar definition, built with the library's flags) and, unless `neg_abs`, in ulps with the
// double-precision reference.
Found sweep(const Approximation& a, int64_t lo, int64_t hi, bool neg_abs = false) {
  compiler::FusedSubgraph sg;
  // 1 MiB of f32: the largest block the host allocator caches, so each chunk's tensors reuse
  // the last one's memory (4 MiB went to the system and back, page faults every chunk).
  constexpr int64_t kChunk = int64_t{1} << 18;
  int x = sg.add_input(f32, {kChunk});
  if (neg_abs) x = sg.add(EltOp::kNeg, {sg.add(EltOp::kAbs, {x})});
  sg.add_output(sg.add(a.op, {x}));
  compiler::cpu::FusedKernel kernel = compiler::cpu::compile_elementwise(sg);

  Found found;
  std::mutex mu;
  for (int64_t base = lo; base < hi; base += kChunk) {
    Tensor in = Tensor::empty(f32, {kChunk});
    float* xs = in.mutable_data<float>().data();
    runtime::parallel_for(kChunk, 1 << 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) xs[i] = std::bit_cast<float>(static_cast<uint32_t>(base + i));
    });
    const Tensor jit = kernel.run({in})[0];
    const Tensor scalar = with_reference_kernels([&] { return a.fn(in); });
    const float* xv = in.data<float>().data();
    const float* ys = jit.data<float>().data();
    const float* zs = scalar.data<float>().data();
    runtime::parallel_for(kChunk, 1 << 16, [&](int64_t b, int64_t e) {
      Found f;
      for (int64_t i = b; i < e; ++i) {
        const uint32_t u = static_cast<uint32_t>(base + i);
        if (bits_of(ys[i]) != bits_of(zs[i]) && !f.differing++) f.first_differing = u;
        if (neg_abs) continue;
        const double r = a.reference(xv[i]);
        const float rf = static_cast<float>(r);
        bool ok;
        if (std::isnan(r) || std::isinf(rf)) {  // NaN, or overflowed in f32: exactly so
          ok = bits_of(ys[i]) == bits_of(rf);
        } else {
          const double ulps = std::abs(static_cast<double>(ys[i]) - r) / ulp_of(rf);
          ok = ulps <= a.ulp_bound;  // false for NaN or inf where the reference is finite
          if (ulps > f.max_ulp) f.max_ulp = ulps, f.max_ulp_at = xv[i];
        }
        if (!ok && !f.out_of_bound++) f.first_out_of_bound = u;
      }
      std::lock_guard<std::mutex> lock(mu);
      found.merge(f);
    });
  }
  return found;
}

void expect_exhaustively_consistent(const Approximation& a) {
  auto t0 = std::chrono::steady_clock::now();
  Found f = sweep(a, 0, int64_t{1} << 32);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  %s: max %.3f ulp (at x = %.9g; bound %.2f), %.1f s\n", a.name, f.max_ulp,
              f.max_ulp_at, a.ulp_bound, s);
  EXPECT_EQ(f.differing, 0) << a.name << ": JIT'd and scalar bits differ, first at x = "
                            << std::bit_cast<float>(f.first_differing);
  EXPECT_EQ(f.out_of_bound, 0) << a.name << ": over " << a.ulp_bound
                               << " ulp or not inf/NaN with the reference, first at x = "
                               << std::bit_cast<float>(f.first_out_of_bound);
}

// Special values, exactly.
void expect_special_values(const Approximation& a,
                           std::initializer_list<std::pair<float, float>> cases) {
  for (auto [x, want] : cases)
    EXPECT_EQ(bits_of(a.scalar(x)), bits_of(want)) << a.name << "(" << x << ") = " << a.scalar(x);
}

TEST(Approximations, ExpEveryFloat) {
  const float max_finite_arg = std::nextafter(88.72283935546875f, 0.0f);  // e^x < FLT_MAX
  expect_special_values(kExp, {{0.0f, 1.0f},
                               {-0.0f, 1.0f},
                               {kInf, kInf},
                               {-kInf, 0.0f},
                               {kNaN, kNaN},
                               {1e-45f, 1.0f},
                               {-1e-45f, 1.0f},
                               {88.72283935546875f, kInf},
                               {-103.8f, 1e-45f},  // e^x rounds to the smallest subnormal
                               {-104.0f, 0.0f}});
  EXPECT_TRUE(std::isfinite(ops::exp_f32(max_finite_arg)));
  expect_exhaustively_consistent(kExp);
  // e^(-|x|) (as in logistic, or exp(-(x*x))): the code generator's non-positive variant gives
  // the same bits as the general one. -|x| takes every non-positive value on the negative x.
  Found f = sweep(kExp, int64_t{1} << 31, int64_t{1} << 32, /*neg_abs=*/true);
  EXPECT_EQ(f.differing, 0) << "first at x = -|" << std::bit_cast<float>(f.first_differing) << "|";
}

TEST(Approximations, LogEveryFloat) {
  expect_special_values(kLog, {{0.0f, -kInf},
                               {-0.0f, -kInf},
                               {1.0f, 0.0f},
                               {kInf, kInf},
                               {-kInf, kNaN},
                               {-1.0f, kNaN},
                               {-1e-45f, kNaN},
                               {kNaN, kNaN}});
  expect_exhaustively_consistent(kLog);
}

TEST(Approximations, LogisticEveryFloat) {
  expect_special_values(kLogistic, {{0.0f, 0.5f},
                                    {-0.0f, 0.5f},
                                    {kInf, 1.0f},
                                    {-kInf, 0.0f},
                                    {kNaN, kNaN},
                                    {1e-45f, 0.5f},
                                    {20.0f, 1.0f},
                                    {-103.8f, 1e-45f},
                                    {-104.0f, 0.0f}});
  expect_exhaustively_consistent(kLogistic);
}

TEST(Approximations, TanhEveryFloat) {
  expect_special_values(kTanh, {{0.0f, 0.0f},
                                {-0.0f, -0.0f},
                                {kInf, 1.0f},
                                {-kInf, -1.0f},
                                {kNaN, kNaN},
                                {1e-45f, 1e-45f},
                                {-1e-45f, -1e-45f},
                                {9.1f, 1.0f},
                                {-9.1f, -1.0f}});
  expect_exhaustively_consistent(kTanh);
}

TEST(Approximations, ErfEveryFloat) {
  expect_special_values(kErf, {{0.0f, 0.0f},
                               {-0.0f, -0.0f},
                               {kInf, 1.0f},
                               {-kInf, -1.0f},
                               {kNaN, kNaN},
                               {1e-45f, 1e-45f},
                               {-1e-45f, -1e-45f},
                               {4.0f, 1.0f},
                               {-4.0f, -1.0f}});
  expect_exhaustively_consistent(kErf);
}

// Inputs every path must agree on: special values, the edges of each function's pieces, and
// random bit patterns.
std::vector<float> probe_inputs() {
  std::vector<float> xs = {0.0f, -0.0f, kInf, -kInf, kNaN, -kNaN,
                           1e-45f, -1e-45f, 1.17549435e-38f, -1.17549435e-38f,
                           std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(),
                           88.7228394f, 88.7228317f, 89.0f, -64.0f, -87.3365f, -103.97f,
                           -104.0f, 0.5f, 1.0f, -1.0f, 4.0f, -4.0f, 9.0f, 9.5f, -9.5f, 0.70710677f};
  std::mt19937 rng(17);
  for (int i = 0; i < 2000; ++i) xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  std::uniform_real_distribution<float> moderate(-20.0f, 20.0f);
  for (int i = 0; i < 2000; ++i) xs.push_back(moderate(rng));
  return xs;
}

// The first of `xs` where `got` has other bits than `want`, and how many there are.
void expect_bits(const Tensor& got, const std::vector<uint32_t>& want, const std::vector<float>& xs,
                 const char* path) {
  int64_t differing = 0;
  size_t first = 0;
  for (size_t i = 0; i < xs.size(); ++i)
    if (bits_of(got.data<float>()[i]) != want[i] && !differing++) first = i;
  EXPECT_EQ(differing, 0) << path << ": first at x = " << xs[first] << ", got "
                          << got.data<float>()[first] << ", want " << std::bit_cast<float>(want[first]);
}

// Small eager tensors (the reference kernels), large ones (JIT'd kernels), interpreted and
// compiled graphs, against the scalar definition: the same bits. exp(-(x*x)) also takes the
// code generator's non-positive exp when compiled.
TEST(Approximations, EveryPathGivesTheSameBits) {
  ASSERT_TRUE(compiler::eager_runner_installed());
  const ExecutionMode before = default_execution_mode();
  set_default_execution_mode(ExecutionMode::kCompiled);
  const std::vector<float> xs = probe_inputs();
  std::vector<float> tiled;  // large enough for eager to JIT
  while (static_cast<int64_t>(tiled.size()) < compiler::kEagerCompileMinElements)
    tiled.insert(tiled.end(), xs.begin(), xs.end());
  const Tensor small = Tensor::from_vector(xs), large = Tensor::from_vector(tiled);

  struct Path {
    const char* name;
    Tensor (*fn)(const Tensor&);
    float (*scalar)(float);
  };
  const Path paths[] = {
      {"exp", [](const Tensor& x) { return exp(x); }, ops::exp_f32},
      {"exp(-x*x)", [](const Tensor& x) { return exp(-(x * x)); },
       [](float x) { return ops::exp_f32(-(x * x)); }},
      {"log", [](const Tensor& x) { return log(x); }, ops::log_f32},
      {"logistic", [](const Tensor& x) { return logistic(x); }, ops::logistic_f32},
      {"tanh", [](const Tensor& x) { return tanh(x); }, ops::tanh_f32},
      {"erf", [](const Tensor& x) { return erf(x); }, ops::erf_f32},
  };
  for (const Path& p : paths) {
    SCOPED_TRACE(p.name);
    std::vector<uint32_t> want;
    for (float x : xs) want.push_back(bits_of(p.scalar(x)));
    expect_bits(p.fn(small), want, xs, "small eager");
    expect_bits(p.fn(large), want, xs, "large eager");
    for (ExecutionMode mode : {ExecutionMode::kInterpreted, ExecutionMode::kCompiled}) {
      Tensor got = function([&](const Tensor& x) { return p.fn(x); }, {.mode = mode})(small);
      expect_bits(got, want, xs, execution_mode_name(mode));
    }
  }
  set_default_execution_mode(before);
}

}  // namespace
}  // namespace kiln
