// maximum/minimum, clamp and max/min reductions order -0 below +0 (max(-0, +0) = +0,
// min(-0, +0) = -0, as XLA), eagerly (small and JIT-sized tensors), interpreted and compiled:
// fused row and column reductions, split into chunks or not.
#include "ops/max_min.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/function.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

TEST(SignedZeros, ScalarRulesOrderNegativeZeroBelowPositiveZero) {
  for (double a : {-0.0, 0.0})
    for (double b : {-0.0, 0.0}) {
      EXPECT_EQ(std::signbit(ops::max_of(a, b)), std::signbit(a) && std::signbit(b)) << a << b;
      EXPECT_EQ(std::signbit(ops::min_of(a, b)), std::signbit(a) || std::signbit(b)) << a << b;
      EXPECT_EQ(std::signbit(ops::max_of(float(a), float(b))), std::signbit(a) && std::signbit(b));
    }
  EXPECT_TRUE(std::isnan(ops::max_of(0.0, std::nan(""))));
  EXPECT_TRUE(std::isnan(ops::min_of(std::nanf(""), -1.0f)));
  EXPECT_EQ(ops::max_of(3, -4), 3);
}

// The sign bits of a float tensor, as 0/1 per element.
std::vector<int> signs(const Tensor& t) {
  std::vector<int> out;
  for (float v : t.to_vector<float>()) out.push_back(std::signbit(v) ? 1 : 0);
  return out;
}

// Runs `f` eagerly, interpreted and compiled; every result must have the expected signs (and
// be zero).
template <class F>
void expect_signs(const std::string& what, F f, const std::vector<Tensor>& args,
                  const std::vector<int>& want) {
  SCOPED_TRACE(what);
  auto check = [&](const Tensor& got, const char* mode) {
    EXPECT_EQ(signs(got), want) << mode;
    for (float v : got.to_vector<float>()) ASSERT_EQ(v, 0.0f) << mode;
  };
  check(f(args), "eager");
  for (ExecutionMode mode : {ExecutionMode::kInterpreted, ExecutionMode::kCompiled})
    check(function(f, {.mode = mode}).call(args)[0], execution_mode_name(mode));
}

// `n` copies of `pattern`, as a tensor of `shape` (n * pattern.size() elements).
Tensor tiled(const std::vector<float>& pattern, int64_t n, Shape shape) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) v.insert(v.end(), pattern.begin(), pattern.end());
  return Tensor::from_vector(v, std::move(shape));
}

TEST(SignedZeros, ElementwiseMaximumAndMinimumOfSignedZeros) {
  const std::vector<float> a = {-0.0f, 0.0f, -0.0f, 0.0f}, b = {0.0f, -0.0f, -0.0f, 0.0f};
  // 4 elements, and 40,000 (large enough for eager to run a JIT'd kernel).
  for (int64_t n : {1, 10000}) {
    Tensor x = tiled(a, n, {4 * n}), y = tiled(b, n, {4 * n});
    std::vector<int> max_signs, min_signs, clamp_signs;
    for (int64_t i = 0; i < n; ++i) {
      max_signs.insert(max_signs.end(), {0, 0, 1, 0});
      min_signs.insert(min_signs.end(), {1, 1, 1, 0});
      clamp_signs.insert(clamp_signs.end(), {1, 1, 1, 0});  // min(max(x, x), y)
    }
    const std::string size = std::to_string(4 * n) + " elements";
    auto maximum_of = [](const std::vector<Tensor>& t) { return maximum(t[0], t[1]); };
    auto minimum_of = [](const std::vector<Tensor>& t) { return minimum(t[0], t[1]); };
    auto clamp_of = [](const std::vector<Tensor>& t) { return clamp(t[0], t[0], t[1]); };
    expect_signs("maximum, " + size, maximum_of, {x, y}, max_signs);
    expect_signs("minimum, " + size, minimum_of, {x, y}, min_signs);
    expect_signs("clamp, " + size, clamp_of, {x, y}, clamp_signs);
  }
}

// Rows of zeros: mixed -0/+0 in both orders, all -0, all +0.
const std::vector<std::vector<float>> kRows = {
    {-0.0f, 0.0f}, {0.0f, -0.0f}, {-0.0f, -0.0f}, {0.0f, 0.0f}};
const std::vector<int> kMaxSigns = {0, 0, 1, 0}, kMinSigns = {1, 1, 1, 0};

// The rows, each repeated to `length` (pairs), as [4, length * 2]; transposed for columns.
Tensor zero_rows(int64_t length) {
  std::vector<float> v;
  for (const auto& row : kRows)
    for (int64_t i = 0; i < length; ++i) v.insert(v.end(), row.begin(), row.end());
  return Tensor::from_vector(v, {4, 2 * length});
}

TEST(SignedZeros, ReductionsOfRowsHoldingBothZeros) {
  // Multiplying by a fed tensor of ones gives the reduction a producer, so compiled code fuses
  // it (a lone reduction runs the reference kernel).
  auto reduced = [](bool is_max, int64_t axis) {
    return [is_max, axis](const std::vector<Tensor>& t) {
      Tensor p = t[0] * t[1];
      return is_max ? max(p, {axis}) : min(p, {axis});
    };
  };
  // Short rows, and rows long enough for compiled code to split them into chunks.
  for (int64_t length : {int64_t{1}, int64_t{3}, int64_t{100000}}) {
    Tensor rows = zero_rows(length);
    Tensor ones_r = ones(rows.shape());
    Tensor cols = transpose(rows, {1, 0}) * 1.0f;  // [2 * length, 4], materialised
    Tensor ones_c = ones(cols.shape());
    const std::string n = std::to_string(2 * length) + " terms";
    expect_signs("max over rows, " + n, reduced(true, 1), {rows, ones_r}, kMaxSigns);
    expect_signs("min over rows, " + n, reduced(false, 1), {rows, ones_r}, kMinSigns);
    expect_signs("max over columns, " + n, reduced(true, 0), {cols, ones_c}, kMaxSigns);
    expect_signs("min over columns, " + n, reduced(false, 0), {cols, ones_c}, kMinSigns);
  }
}

TEST(SignedZeros, ZeroExtremesBesideOtherNumbers) {
  // The zeros are the extremes among negative (max) or positive (min) numbers.
  Tensor x = Tensor::from_vector<float>({-1.0f, -0.0f, 0.0f, -3.0f, -0.0f, -2.0f}, {2, 3});
  auto f = [](const std::vector<Tensor>& t) { return max(t[0] * t[1], {1}); };
  expect_signs("max", f, {x, ones({2, 3})}, {0, 1});
  Tensor y = Tensor::from_vector<float>({1.0f, 0.0f, -0.0f, 3.0f, 0.0f, 2.0f}, {2, 3});
  auto g = [](const std::vector<Tensor>& t) { return min(t[0] * t[1], {1}); };
  expect_signs("min", g, {y, ones({2, 3})}, {1, 0});
}

}  // namespace
}  // namespace kiln
