// The kernels compiled once per x86-64 level (cpu::dispatch): pooling and its gradients, the
// random ops and the fused kernels' epilogue give the same bits at every level this host has as
// at the baseline, on random inputs. Each test prints the levels it ran.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "compiler/epilogue.h"
#include "kiln/kiln.h"
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

TEST(DispatchedKernels, PoolingAndItsGradientsGiveTheBaselinesBits) {
  std::mt19937 rng(7);
  // NHWC with channel counts that leave vector tails: disjoint 2x2 windows, overlapping padded
  // 3x3 windows with stride 2, and windows over every dimension.
  const std::vector<std::pair<Shape, Attrs>> cases = {
      {{3, 12, 10, 37}, window({1, 2, 2, 1}, {1, 2, 2, 1}, {0, 0, 0, 0}, {0, 0, 0, 0})},
      {{2, 11, 9, 19}, window({1, 3, 3, 1}, {1, 2, 2, 1}, {0, 1, 1, 0}, {0, 1, 1, 0})},
      {{4, 7, 6, 33}, window({2, 2, 3, 2}, {1, 1, 2, 2}, {1, 0, 1, 0}, {0, 1, 1, 1})},
  };
  int ran = 0;
  for (DType dtype : {f32, f64, bf16}) {
    for (const auto& [shape, w] : cases) {
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

}  // namespace
}  // namespace kiln
