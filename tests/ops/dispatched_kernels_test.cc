// The kernels compiled once per x86-64 level (cpu::dispatch): pooling and its gradients, the
// random ops, the fused kernels' epilogue and the f32 <-> bf16/f16 array conversions give the same
// bits at every level this host has as at the baseline, on random inputs. Each test prints the
// levels it ran.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "compiler/cpu/epilogue.h"
#include "kiln/kiln.h"
#include "ops/narrow.h"
#include "ops/philox.h"
#include "src/core/cpu_isa.h"

namespace kiln {
namespace {

using cpu::Isa;

// The levels at or below the host's, baseline first.
std::vector<Isa> host_levels() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kX86_64, Isa::kX86_64V3, Isa::kX86_64V4}) {
    if (isa <= cpu::host_isa()) out.push_back(isa);
  }
  return out;
}

// The levels compared with the baseline, for the tests' reports.
std::string levels_str() {
  std::string s;
  for (Isa isa : host_levels()) {
    if (isa != Isa::kX86_64) s += std::string(s.empty() ? "" : ", ") + cpu::isa_name(isa);
  }
  return s.empty() ? "no level above the baseline" : s;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.raw_data());
  return {p, p + t.nbytes()};
}

// Runs `run` at every level the host has; each level's output tensors must equal the
// baseline's bit for bit. Returns how many levels ran.
int expect_same_bits_at_every_level(const std::string& what,
                                    const std::function<std::vector<Tensor>()>& run) {
  std::vector<std::vector<uint8_t>> want;
  int ran = 0;
  for (Isa isa : host_levels()) {
    cpu::ScopedIsa level(isa);
    const std::vector<Tensor> got = run();
    ++ran;
    if (isa == Isa::kX86_64) {
      for (const Tensor& t : got) want.push_back(bytes_of(t));
      continue;
    }
    EXPECT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
      const std::vector<uint8_t> b = bytes_of(got[i]);
      size_t first = 0;
      while (first < b.size() && first < want[i].size() && b[first] == want[i][first]) ++first;
      EXPECT_TRUE(b == want[i]) << what << ": output " << i << " at " << cpu::isa_name(isa)
                                << " differs from the baseline's, first at byte " << first << " of "
                                << b.size();
    }
  }
  return ran;
}

void print_levels(const char* what) {
  std::printf("%s: compared %s against x86-64 (host %s)\n", what, levels_str().c_str(),
              cpu::isa_name(cpu::host_isa()));
}

// Continuous values with ties and NaNs sprinkled in.
Tensor random_input(std::mt19937& rng, const Shape& shape, DType dtype) {
  std::vector<double> v(num_elements(shape));
  std::normal_distribution<double> normal(0, 3);
  std::uniform_int_distribution<int> kind(0, 29);
  for (double& x : v) {
    const int k = kind(rng);
    x = k == 0 ? std::nan("") : k < 6 ? std::round(normal(rng)) : normal(rng);
  }
  return Tensor::from_vector(v, shape).to(dtype);
}

Attrs window(Axes w, Axes strides, Axes low, Axes high) {
  return {{"window", w}, {"strides", strides}, {"padding_low", low}, {"padding_high", high}};
}

// NHWC pooling cases with channel counts that leave vector tails: disjoint 2x2 windows (also
// padded, so that some element lies in no window), overlapping padded 3x3 windows with stride 2,
// and windows over every dimension.
const std::vector<std::pair<Shape, Attrs>>& pooling_cases() {
  static const std::vector<std::pair<Shape, Attrs>> cases = {
      {{3, 12, 10, 37}, window({1, 2, 2, 1}, {1, 2, 2, 1}, {0, 0, 0, 0}, {0, 0, 0, 0})},
      {{2, 13, 9, 19}, window({1, 2, 2, 1}, {1, 2, 2, 1}, {0, 1, 0, 0}, {0, 0, 1, 0})},
      {{2, 11, 9, 19}, window({1, 3, 3, 1}, {1, 2, 2, 1}, {0, 1, 1, 0}, {0, 1, 1, 0})},
      {{4, 7, 6, 33}, window({2, 2, 3, 2}, {1, 1, 2, 2}, {1, 0, 1, 0}, {0, 1, 1, 1})},
  };
  return cases;
}

TEST(DispatchedKernels, PoolingAndItsGradientsGiveTheBaselinesBits) {
  std::mt19937 rng(7);
  int ran = 0;
  for (DType dtype : {f32, f64, bf16}) {
    for (const auto& [shape, w] : pooling_cases()) {
      const Tensor x = random_input(rng, shape, dtype);
      const Shape out = call_op("reduce_window_max", {x}, w)[0].shape();
      const Tensor dy = random_input(rng, out, dtype);
      const Tensor v = random_input(rng, shape, dtype);
      Attrs masked = w;
      masked.set("relu_mask", true);
      Attrs sum_grad = w;
      sum_grad.set("operand_shape", shape);
      ran = expect_same_bits_at_every_level(
          std::string(dtype_name(dtype)) + " " + shape_str(shape), [&] {
            return std::vector<Tensor>{
                call_op("reduce_window_max", {x}, w)[0],
                call_op("reduce_window_sum", {x}, w)[0],
                call_op("reduce_window_max_grad", {x, dy}, w)[0],
                call_op("reduce_window_max_grad", {x, dy}, masked)[0],
                call_op("reduce_window_max_select", {x, v}, w)[0],
                call_op("reduce_window_sum_grad", {dy}, sum_grad)[0],
            };
          });
    }
  }
  EXPECT_EQ(ran, static_cast<int>(host_levels().size()));
  print_levels("pooling");
}

TEST(DispatchedKernels, RandomOpsGiveTheBaselinesBits) {
  const Shape shape = {10007};
  int ran = 0;
  for (DType dtype : {f32, f64, bf16, f16}) {
    ran = expect_same_bits_at_every_level(dtype_name(dtype), [&] {
      return std::vector<Tensor>{random_uniform(shape, 11, -2.5, 7.0, dtype),
                                 random_normal(shape, 12, 0.5, 3.0, dtype),
                                 random_bernoulli(shape, 13, 0.3, dtype)};
    });
  }
  expect_same_bits_at_every_level("bool", [&] {
    return std::vector<Tensor>{random_bernoulli(shape, 14, 0.3), random_bernoulli(shape, 14, 0.0),
                               random_bernoulli(shape, 14, 1.0)};
  });
  EXPECT_EQ(ran, static_cast<int>(host_levels().size()));
  print_levels("random ops");
}

// Element i of random_bernoulli(p) is the 53-bit uniform of Philox(i) below p, exactly, also
// for a p just above or at such a uniform.
TEST(DispatchedKernels, BernoulliIsTheTop53BitUniformBelowP) {
  const uint64_t seed = 99;
  const int64_t n = 4096;
  auto uniform = [&](uint32_t i) {
    ops::PhiloxCounter r = ops::philox4x32_10({i, 0, 0, 0}, {99, 0});
    return std::ldexp(static_cast<double>(((uint64_t{r[0]} << 32) | r[1]) >> 11), -53);
  };
  const double u7 = uniform(7);
  for (double p : {0.3, 0.5, 1e-300, u7, std::nextafter(u7, 1.0), 1.0 - 0x1p-53}) {
    for (Isa isa : host_levels()) {
      cpu::ScopedIsa level(isa);
      const std::vector<bool> hits = random_bernoulli({n}, seed, p).to_vector<bool>();
      for (uint32_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[i], uniform(i) < p)
            << "p " << p << " element " << i << " at " << cpu::isa_name(isa);
      }
    }
  }
  print_levels("random_bernoulli's threshold");
}

TEST(DispatchedKernels, TheEpilogueGivesTheBaselinesBits) {
  std::mt19937 rng(3);
  const int64_t rows = 19, n = 37;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const DType dtype = std::is_same_v<T, float> ? f32 : f64;
    std::normal_distribution<double> normal(0, 4);
    std::vector<T> c0(rows * n), bias(rows * n);
    for (T& x : c0) x = static_cast<T>(normal(rng));
    for (T& x : bias) x = static_cast<T>(normal(rng));
    c0[5] = std::numeric_limits<T>::quiet_NaN();
    c0[6] = static_cast<T>(-120);
    c0[7] = static_cast<T>(95);
    using compiler::Activation;
    using compiler::BiasKind;
    for (Activation act :
         {Activation::kNone, Activation::kRelu, Activation::kTanh, Activation::kLogistic}) {
      for (int kind = -1; kind < 3; ++kind) {
        compiler::Epilogue<T> e;
        e.act = act;
        e.bias_len = n;
        if (kind >= 0) {
          e.kind = static_cast<BiasKind>(kind);
          e.bias = bias.data();
        }
        expect_same_bits_at_every_level(
            std::string(dtype_name(dtype)) + " " + compiler::activation_name(act) + " bias " +
                std::to_string(kind),
            [&] {
              std::vector<T> c = c0;
              e.apply(c.data(), 0, rows, n);
              std::vector<T> d = c0;
              compiler::apply_epilogue_pass(e, d.data(), rows * n, n);
              return std::vector<Tensor>{Tensor::from_vector(c, {rows, n}),
                                         Tensor::from_vector(d, {rows, n})};
            });
      }
    }
  };
  run(float{});
  run(double{});
  print_levels("epilogue");
}

// The array conversions (ops/narrow.h) give the scalar conversions' bits (kiln/dtype.h) at every
// level: rounding on a sweep of f32 bit patterns with every exponent and the edges (zeros,
// subnormals of both narrow types, ties, the f16 overflow threshold, infinities, NaNs),
// widening on every 16-bit pattern; serial and split over the pool, at odd lengths and offsets.
TEST(DispatchedKernels, NarrowConversionsAreTheScalarConversions) {
  std::vector<uint32_t> bits;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 9973) bits.push_back(static_cast<uint32_t>(b));
  for (uint32_t edge :
       {0x00000000u, 0x00000001u, 0x00008000u, 0x00018000u, 0x007fffffu, 0x33000000u,
        0x33000001u, 0x337fffffu, 0x387fc000u, 0x387fe000u, 0x387fffffu, 0x38800000u,
        0x3f808000u, 0x3f818000u, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0x7f7f8000u,
        0x7f7fffffu, 0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu})
    for (uint32_t sign : {0u, 0x80000000u}) bits.push_back(edge | sign);
  bits.push_back(0x3f800000u);  // an odd length
  std::vector<float> src(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) src[i] = std::bit_cast<float>(bits[i]);
  const int64_t n = static_cast<int64_t>(src.size());
  std::vector<uint16_t> narrow(65536);
  for (size_t i = 0; i < narrow.size(); ++i) narrow[i] = static_cast<uint16_t>(i);

  for (Isa isa : host_levels()) {
    cpu::ScopedIsa level(isa);
    const std::string at = std::string(" at ") + cpu::isa_name(isa);
    for (bool parallel : {false, true}) {
      std::vector<bfloat16> b(n);
      std::vector<half> h(n);
      // From offset 1: the vector loops start unaligned.
      if (parallel) {
        ops::parallel_round_into(src.data() + 1, n - 1, b.data() + 1);
        ops::parallel_round_into(src.data() + 1, n - 1, h.data() + 1);
      } else {
        ops::round_into(src.data() + 1, n - 1, b.data() + 1);
        ops::round_into(src.data() + 1, n - 1, h.data() + 1);
      }
      int bad = 0;
      for (int64_t i = 1; i < n; ++i) {
        if (b[i].bits != bfloat16(src[i]).bits && bad++ < 5)
          ADD_FAILURE() << std::hex << "bf16 of 0x" << bits[i] << at << ": 0x" << b[i].bits
                        << ", bfloat16 gives 0x" << bfloat16(src[i]).bits;
        if (h[i].bits != half(src[i]).bits && bad++ < 5)
          ADD_FAILURE() << std::hex << "f16 of 0x" << bits[i] << at << ": 0x" << h[i].bits
                        << ", half gives 0x" << half(src[i]).bits;
      }
      std::vector<bfloat16> nb(narrow.size());
      std::vector<half> nh(narrow.size());
      std::memcpy(nb.data(), narrow.data(), narrow.size() * 2);
      std::memcpy(nh.data(), narrow.data(), narrow.size() * 2);
      std::vector<float> wb(narrow.size()), wh(narrow.size());
      const int64_t m = static_cast<int64_t>(narrow.size()) - 1;
      if (parallel) {
        ops::parallel_widen_into(nb.data() + 1, m, wb.data() + 1);
        ops::parallel_widen_into(nh.data() + 1, m, wh.data() + 1);
      } else {
        ops::widen_into(nb.data() + 1, m, wb.data() + 1);
        ops::widen_into(nh.data() + 1, m, wh.data() + 1);
      }
      for (int64_t i = 1; i <= m; ++i) {
        const uint32_t gb = std::bit_cast<uint32_t>(wb[i]), gh = std::bit_cast<uint32_t>(wh[i]);
        const uint32_t eb = std::bit_cast<uint32_t>(static_cast<float>(nb[i]));
        const uint32_t eh = std::bit_cast<uint32_t>(static_cast<float>(nh[i]));
        if (gb != eb && bad++ < 5)
          ADD_FAILURE() << std::hex << "bf16 0x" << i << " widened" << at << ": 0x" << gb
                        << ", float(bfloat16) gives 0x" << eb;
        if (gh != eh && bad++ < 5)
          ADD_FAILURE() << std::hex << "f16 0x" << i << " widened" << at << ": 0x" << gh
                        << ", float(half) gives 0x" << eh;
      }
    }
  }
  print_levels("narrow conversions");
}

// relu on stored bf16/f16 values (ops/narrow.h) is Kiln's relu, select(x <= 0, +0, x), on every
// 16-bit pattern at every level: -0 and the negatives to -inf become +0, NaNs of either sign stay.
TEST(DispatchedKernels, ReluKeepingNanIsKilnsReluOnEveryPattern) {
  for (Isa isa : host_levels()) {
    cpu::ScopedIsa level(isa);
    for (bool is_bf16 : {true, false}) {
      std::vector<uint16_t> v(65537);
      v[0] = 0x8001u;  // before the range: untouched
      for (uint32_t b = 0; b < 65536; ++b) v[b + 1] = static_cast<uint16_t>(b);
      ops::relu_keeping_nan(v.data() + 1, 65536, is_bf16);  // unaligned
      EXPECT_EQ(v[0], 0x8001u);
      int bad = 0;
      for (uint32_t b = 0; b < 65536; ++b) {
        const uint16_t in = static_cast<uint16_t>(b);
        float x;
        if (is_bf16) {
          bfloat16 t;
          t.bits = in;
          x = t;
        } else {
          half t;
          t.bits = in;
          x = t;
        }
        const uint16_t want = x <= 0.0f ? uint16_t{0} : in;
        if (v[b + 1] != want && bad++ < 5)
          ADD_FAILURE() << std::hex << (is_bf16 ? "bf16 0x" : "f16 0x") << in << " at "
                        << cpu::isa_name(isa) << ": 0x" << v[b + 1] << ", want 0x" << want;
      }
    }
  }
  print_levels("relu on stored 16-bit values");
}

// The reductions (sum, prod, max, min) over kept and reduced runs of every kind, the split long
// reductions included, give the baseline's bits at every level, for the float types and i32.
TEST(DispatchedKernels, ReductionsGiveTheBaselinesBits) {
  std::mt19937 rng(11);
  const std::vector<std::pair<Shape, Axes>> cases = {
      {{37, 45}, {0}}, {{37, 45}, {1}},     {{6, 300, 19}, {0, 2}}, {{6, 300, 19}, {1}},
      {{70001}, {0}},  {{3, 5000, 7}, {1}}, {{2, 3, 4, 5}, {}},     {{64, 13, 13, 33}, {0, 1, 2}},
  };
  int ran = 0;
  for (DType dtype : {f32, f64, bf16, f16, i32}) {
    for (const auto& [shape, axes] : cases) {
      std::vector<double> v(num_elements(shape));
      std::uniform_real_distribution<double> u(0.5, 1.5);  // products stay finite for a while
      for (double& x : v) x = dtype == i32 ? std::round(u(rng) * 40 - 40) : u(rng) - 0.9;
      const Tensor x = Tensor::from_vector(v, shape).to(dtype);
      std::vector<double> p(num_elements(shape));
      for (double& y : p) y = u(rng);
      const Tensor positive = Tensor::from_vector(p, shape).to(dtype);
      ran = expect_same_bits_at_every_level(
          std::string(dtype_name(dtype)) + " " + shape_str(shape) + " over " + shape_str(axes),
          [&] {
            return std::vector<Tensor>{sum(x, axes), max(x, axes), min(x, axes),
                                       prod(positive, axes)};
          });
    }
  }
  EXPECT_EQ(ran, static_cast<int>(host_levels().size()));
  print_levels("reductions");
}

// The bf16/f16 pooling kernels (which write disjoint windows' maxima and gradients straight into
// the narrow output) give the f32 kernels' results on the widened inputs, rounded once, bit for
// bit: NaNs and padding included, for disjoint, overlapping and masked windows.
TEST(DispatchedKernels, NarrowPoolingIsTheF32PoolingRounded) {
  std::mt19937 rng(5);
  for (DType dtype : {bf16, f16}) {
    for (const auto& [shape, w] : pooling_cases()) {
      const Tensor x = random_input(rng, shape, dtype);
      const Shape out = call_op("reduce_window_max", {x}, w)[0].shape();
      const Tensor dy = random_input(rng, out, dtype);
      Attrs masked = w;
      masked.set("relu_mask", true);
      Attrs sum_grad = w;
      sum_grad.set("operand_shape", shape);
      auto run = [&](DType t) {
        const Tensor xt = x.to(t), dyt = dy.to(t);
        return std::vector<Tensor>{
            call_op("reduce_window_max", {xt}, w)[0],
            call_op("reduce_window_sum", {xt}, w)[0],
            call_op("reduce_window_max_grad", {xt, dyt}, w)[0],
            call_op("reduce_window_max_grad", {xt, dyt}, masked)[0],
            call_op("reduce_window_sum_grad", {dyt}, sum_grad)[0],
        };
      };
      const std::vector<Tensor> narrow = run(dtype), wide = run(f32);
      for (size_t i = 0; i < narrow.size(); ++i) {
        EXPECT_EQ(narrow[i].dtype(), dtype);
        EXPECT_TRUE(bytes_of(narrow[i]) == bytes_of(wide[i].to(dtype)))
            << dtype_name(dtype) << " " << shape_str(shape) << ": output " << i
            << " is not the f32 kernel's rounded";
      }
    }
  }
}

}  // namespace
}  // namespace kiln
