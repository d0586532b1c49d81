// Helpers of the convolution tests: the op attributes of ConvOptions, small-integer tensors
// (whose products sum exactly in any order, so two kernels' results must agree bit for bit),
// and the bound between two sums of the same products in different orders.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::testing {

// The convolution ops' attributes for `o` (one value per spatial dimension in each list).
inline Attrs conv_attrs_of(const ConvOptions& o) {
  return Attrs{{"strides", o.strides},
               {"padding_low", o.padding_low},
               {"padding_high", o.padding_high},
               {"dilation", o.dilation},
               {"lhs_dilation", Axes(o.strides.size(), 1)},
               {"groups", o.groups}};
}

// Small integers in [lo, hi], as f32: sums of their products are exact in any order.
inline Tensor small_integers(Shape shape, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<float> v(num_elements(shape));
  for (float& x : v) x = static_cast<float>(d(rng));
  return Tensor::from_vector(v, shape);
}

// Expects |got - want| <= round (|want| + 2 gamma(K) |terms|) + 2 gamma(K) |terms| elementwise:
// both are sums of the same K products in some order, each within gamma(K) |terms| of the exact
// value (gamma(K) = K u / (1 - K u), u = 2^-24); `round` is the unit roundoff of got's final
// rounding beyond f32 (0 for f32 results). `got_path` and `want_path` name the two kernels.
inline void expect_within_sum_bound(const Tensor& got, const Tensor& want, const Tensor& terms,
                                    int64_t k, const std::string& what, double round = 0,
                                    const std::string& got_path = "oneDNN",
                                    const std::string& want_path = "Kiln's kernel") {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const double u = std::ldexp(1.0, -24), gamma = k * u / (1 - k * u);
  const auto g = got.to_vector<float>(), w = want.to_vector<float>();
  const auto t = terms.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    const double sums = 2 * gamma * t[i];
    const double bound = round * (std::abs(double(w[i])) + sums) + sums;
    if (!(std::abs(double(g[i]) - double(w[i])) <= bound)) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << " on " << got_path << ", "
                    << w[i] << " on " << want_path << "; bound " << bound << " (K = " << k
                    << ")";
      ++bad;
    }
  }
}

}  // namespace kiln::testing
