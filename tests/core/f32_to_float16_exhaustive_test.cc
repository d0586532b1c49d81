// Every one of the 2^32 f32 bit patterns converted to f16 and to bf16, by every path Kiln has
// (half(float), bfloat16(float), half_from/bfloat16_from of the exact double, the convert op on
// small and large eager tensors, interpreted and compiled), against a reference written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/cpu/fused_kernel.h"
#include "kiln/function.h"
#include "kiln/ops.h"
#include "runtime/thread_pool.h"
#include "src/core/float16_rounding.h"

namespace kiln {
namespace {

// A binary format, described independently of the code under test.
struct Format {
  const char* name;
  int mantissa_bits;  // stored
  int min_exp;        // exponent of the smallest normal value
  int max_exp;        // exponent of the largest finite value
  uint16_t infinity;
};
constexpr Format kF16{"f16", 10, -14, 15, 0x7c00};
constexpr Format kBF16{"bf16", 7, -126, 127, 0x7f80};

// 2^e as a double, built in its exponent field (e within the normal doubles).
double pow2(int e) { return std::bit_cast<double>(static_cast<uint64_t>(e + 1023) << 52); }

// The nearest value of format `f` to the float x, ties to the even significand, as bits: the
// two multiples of the format's spacing around x are compared by their distances to x,
// computed in double (exact there: x has 24 significant bits, the candidates fewer, all
// within 2^-160..2^130). NaN gives 0xffff: checked apart.
uint16_t nearest(const Format& f, float x) {
  if (std::isnan(x)) return 0xffff;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isinf(x)) return sign | f.infinity;
  const double a = std::fabs(static_cast<double>(x));
  if (a == 0) return sign;
  // The spacing of the format's values at a: a is in [2^e, 2^(e+1)) (float subnormals, below
  // 2^-126, are subnormal in f16 and bf16 too), the spacing fixed among the subnormals.
  const int e =
      std::max(static_cast<int>((std::bit_cast<uint32_t>(x) >> 23) & 0xff) - 127, f.min_exp);
  const double quantum = pow2(e - f.mantissa_bits);
  const auto k = static_cast<int64_t>(a / quantum);  // a lies in [k, k + 1) quanta
  const double below = a - k * quantum, above = (k + 1) * quantum - a;
  const int64_t n = above < below || (above == below && k % 2 == 1) ? k + 1 : k;
  const double value = n * quantum;  // n is at most 2^(mantissa_bits + 1)
  // Past the largest finite value, (2^(m+1) - 1) quanta at max_exp, rounding goes up to the
  // next binade's first value: infinity.
  if (value >= pow2(f.max_exp + 1)) return sign | f.infinity;
  if (value < pow2(f.min_exp)) return sign | static_cast<uint16_t>(n);  // subnormal
  // n has mantissa_bits + 1 bits, the leading one implicit; or it carried into the next binade.
  const int64_t one = int64_t{1} << f.mantissa_bits;
  const bool carried = n == 2 * one;
  const int biased = e + (carried ? 1 : 0) - f.min_exp + 1;
  return sign | static_cast<uint16_t>((biased << f.mantissa_bits) + (carried ? 0 : n - one));
}

// Whether `got` is the right NaN for the float NaN with bits `u`: NaN, quiet, of u's sign and,
// for bf16, keeping the top six bits of u's payload below the quiet bit (as docs/numerics.md
// says; f16 gives its one default NaN).
bool right_nan(const Format& f, uint32_t u, uint16_t got) {
  const uint16_t sign = (u >> 16) & 0x8000;
  const uint16_t quiet = static_cast<uint16_t>(f.infinity | (1u << (f.mantissa_bits - 1)));
  if ((got & 0x8000) != sign || (got & quiet) != quiet) return false;
  if (&f == &kF16) return (got & 0x1ff) == 0;
  return (got & 0x3f) == ((u >> 16) & 0x3f);
}

uint16_t bits_of(half h) { return h.bits; }
uint16_t bits_of(bfloat16 b) { return b.bits; }

TEST(F32ToFloat16Reference, KnownValues) {
  // The reference itself, on values whose answers are known by hand.
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(nearest(kF16, 0.0f), 0x0000);
  EXPECT_EQ(nearest(kF16, -0.0f), 0x8000);
  EXPECT_EQ(nearest(kF16, 1.0f), 0x3c00);
  EXPECT_EQ(nearest(kF16, -inf), 0xfc00);
  EXPECT_EQ(nearest(kF16, 65504.0f), 0x7bff);
  EXPECT_EQ(nearest(kF16, std::nextafter(65520.0f, 0.0f)), 0x7bff);  // 65519.996: 65504
  EXPECT_EQ(nearest(kF16, 65520.0f), 0x7c00);  // the tie goes to the even pattern, inf
  EXPECT_EQ(nearest(kF16, 2049.0f), 0x6800);   // tie between 2048 and 2050: 2048 (even)
  EXPECT_EQ(nearest(kF16, 2051.0f), 0x6802);   // tie between 2050 and 2052: 2052
  EXPECT_EQ(nearest(kF16, 0x1p-24f), 0x0001);  // the smallest subnormal
  EXPECT_EQ(nearest(kF16, 0x1p-25f), 0x0000);  // tie with 0: 0
  EXPECT_EQ(nearest(kF16, -0x1.000002p-25f), 0x8001);
  EXPECT_EQ(nearest(kF16, 0x1.ffcp-15f),
            0x0400);  // between the largest subnormal and 2^-14: the even one
  EXPECT_EQ(nearest(kF16, 1e-45f), 0x0000);
  EXPECT_EQ(nearest(kBF16, 1.0f), 0x3f80);
  EXPECT_EQ(nearest(kBF16, std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(nearest(kBF16, 0x1.fep127f), 0x7f7f);  // the largest finite bf16
  EXPECT_EQ(nearest(kBF16, 0x1.01p0f), 0x3f80);    // tie: the even one
  EXPECT_EQ(nearest(kBF16, 0x1.03p0f), 0x3f82);
  EXPECT_EQ(nearest(kBF16, 1e-45f), 0x0000);      // 2^-149: far below half of 2^-133
  EXPECT_EQ(nearest(kBF16, 0x1p-133f), 0x0001);   // the smallest bf16 subnormal
  EXPECT_EQ(nearest(kBF16, -0x1p-134f), 0x8000);  // tie with 0
  EXPECT_TRUE(right_nan(kF16, 0x7fc00000u, 0x7e00));
  EXPECT_TRUE(right_nan(kBF16, 0xff800001u, 0xffc0));   // signalling: quieted, sign kept
  EXPECT_FALSE(right_nan(kBF16, 0x7fa00000u, 0x7fa0));  // not quiet
}

// One conversion path: fills `out` with the bits of the floats `x` converted to `to`; `to` is
// one of `dtypes`.
struct Path {
  std::string name;
  std::function<void(const Tensor& x, DType to, uint16_t* out)> run;
  std::vector<DType> dtypes = {f16, bf16};
};

void copy_bits(const Tensor& t, uint16_t* out) {
  ASSERT_EQ(dtype_size(t.dtype()), 2);
  std::memcpy(out, t.raw_data(), t.size() * 2);
}

constexpr int64_t kChunk = int64_t{1} << 20;
constexpr int64_t kSmall = 16384;  // under compiler::kEagerCompileMinElements: reference kernels

// The tensor-level paths. The CPU code generator's convert is one of them only if it accepts
// f16/bf16 (today it computes and stores f32, f64, integers and bool only, so compiled graphs
// run convert's reference kernel); the test notices when that changes.
std::vector<Path> tensor_paths() {
  std::vector<Path> paths;
  paths.push_back({"convert, eager on 2^20 elements", [](const Tensor& x, DType to, uint16_t* out) {
                     copy_bits(convert(x, to), out);
                   }});
  paths.push_back(
      {"convert, eager on 16384 elements", [](const Tensor& x, DType to, uint16_t* out) {
         for (int64_t b = 0; b < x.size(); b += kSmall)
           copy_bits(convert(slice(x, {b}, {b + kSmall}), to), out + b);
       }});
  for (ExecutionMode mode : {ExecutionMode::kInterpreted, ExecutionMode::kCompiled}) {
    auto to_f16 = function([](const Tensor& x) { return convert(x, f16); }, {.mode = mode});
    auto to_bf16 = function([](const Tensor& x) { return convert(x, bf16); }, {.mode = mode});
    paths.push_back({std::string("convert, ") + execution_mode_name(mode),
                     [to_f16, to_bf16](const Tensor& x, DType to, uint16_t* out) {
                       copy_bits(to == f16 ? to_f16(x) : to_bf16(x), out);
                     }});
  }
  for (DType to : {f16, bf16}) {
    std::optional<compiler::cpu::FusedKernel> kernel;
    try {
      compiler::FusedSubgraph sg;
      sg.add_output(sg.add(compiler::EltOp::kConvert, {sg.add_input(f32, {kChunk})}, to));
      kernel.emplace(compiler::cpu::compile_elementwise(sg));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnimplemented) << e.what();
      continue;
    }
    paths.push_back({std::string("JIT'd convert"),
                     [k = std::make_shared<compiler::cpu::FusedKernel>(std::move(*kernel))](
                         const Tensor& x, DType, uint16_t* out) { copy_bits(k->run({x})[0], out); },
                     {to}});
  }
  return paths;
}

bool applies(const Path& p, int fmt) {
  return std::count(p.dtypes.begin(), p.dtypes.end(), fmt == 0 ? f16 : bf16) > 0;
}

// Mismatches of one path against the reference.
struct Tally {
  std::atomic<int64_t> count{0};
  std::atomic<uint32_t> first{0};
  std::atomic<uint16_t> first_got{0};
  void add(uint32_t u, uint16_t got) {
    if (count.fetch_add(1) == 0) first = u, first_got = got;
  }
};

// All floats whose top five bits are `top`: 2^27 of them.
void check_range(uint32_t top) {
  const ExecutionMode before = default_execution_mode();
  set_default_execution_mode(ExecutionMode::kCompiled);  // large eager tensors JIT where they can
  const std::vector<Path> paths = tensor_paths();
  // Per format: the scalar paths, then each tensor path.
  const size_t n_checks = 2 + paths.size();
  std::vector<Tally> tallies(2 * n_checks);
  std::vector<std::string> names = {"half(float)", "half_from(double)"};
  for (const Path& p : paths) names.push_back(p.name);

  std::vector<char> applicable;
  for (const Path& p : paths)
    applicable.push_back(applies(p, 0)), applicable.push_back(applies(p, 1));
  Tensor x = Tensor::empty(f32, {kChunk});
  double path_s = 0, check_s = 0;
  std::vector<uint16_t> got(2 * paths.size() * kChunk);
  const uint32_t first = top << 27;
  for (uint64_t base = first; base < uint64_t{first} + (uint64_t{1} << 27); base += kChunk) {
    float* xs = x.mutable_data<float>().data();
    for (int64_t i = 0; i < kChunk; ++i)
      xs[i] = std::bit_cast<float>(static_cast<uint32_t>(base + i));
    auto t0 = std::chrono::steady_clock::now();
    for (size_t p = 0; p < paths.size(); ++p)
      for (int fmt = 0; fmt < 2; ++fmt)
        if (applies(paths[p], fmt))
          paths[p].run(x, fmt == 0 ? f16 : bf16, &got[(2 * p + fmt) * kChunk]);
    auto t1 = std::chrono::steady_clock::now();
    path_s += std::chrono::duration<double>(t1 - t0).count();
    runtime::parallel_for(kChunk, 1 << 15, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const uint32_t u = static_cast<uint32_t>(base + i);
        const float v = xs[i];
        for (int fmt = 0; fmt < 2; ++fmt) {
          const Format& f = fmt == 0 ? kF16 : kBF16;
          const uint16_t want = nearest(f, v);
          auto check = [&](size_t c, uint16_t g) {
            const bool ok = std::isnan(v) ? right_nan(f, u, g) : g == want;
            if (!ok) tallies[fmt * n_checks + c].add(u, g);
          };
          check(0, fmt == 0 ? bits_of(half(v)) : bits_of(bfloat16(v)));
          const double d = v;
          check(1, fmt == 0 ? half_from(d).bits : bfloat16_from(d).bits);
          for (size_t p = 0; p < paths.size(); ++p)
            if (applicable[2 * p + fmt]) check(2 + p, got[(2 * p + fmt) * kChunk + i]);
        }
      }
    });
    check_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
  set_default_execution_mode(before);
  std::printf("  paths %.1f s, checks %.1f s\n", path_s, check_s);
  for (int fmt = 0; fmt < 2; ++fmt) {
    const Format& f = fmt == 0 ? kF16 : kBF16;
    for (size_t c = 0; c < n_checks; ++c) {
      const Tally& t = tallies[fmt * n_checks + c];
      const std::string name = c == 0 && fmt == 1   ? "bfloat16(float)"
                               : c == 1 && fmt == 1 ? "bfloat16_from(double)"
                                                    : names[c];
      const float at = std::bit_cast<float>(t.first.load());
      EXPECT_EQ(t.count.load(), 0) << f.name << " by " << name << ": first at 0x" << std::hex
                                   << t.first.load() << " (" << std::hexfloat << at << "): got 0x"
                                   << t.first_got.load() << ", want 0x" << nearest(f, at);
    }
  }
}

// One case per value of the top five bits (the sign and four exponent bits): 2^27 floats each,
// about 10 s on 2 cores.
class F32ToFloat16EveryFloat : public testing::TestWithParam<uint32_t> {};

TEST_P(F32ToFloat16EveryFloat, RoundsToNearestEvenOnEveryPath) { check_range(GetParam()); }

INSTANTIATE_TEST_SUITE_P(TopBits, F32ToFloat16EveryFloat, testing::Range(0u, 32u),
                         [](const testing::TestParamInfo<uint32_t>& info) {
                           char name[16];
                           std::snprintf(name, sizeof name, "0x%x", info.param);
                           return std::string(name);
                         });

}  // namespace
}  // namespace kiln
