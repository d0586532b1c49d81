// f32 dot on oneDNN's sgemm (ops::gemm_rows through ops/onednn_matmul.h: sgemm_rows) against
// Eigen's GEMM (the same blocks with oneDNN switched off) and an f64 reference, on random shapes
// with transposed and batched operands; the compiled fused_dot (matmul + bias + relu) gives the
// reference kernel's bits on either path, since both multiply through gemm_rows.
//
// The bound: each output is a sum of K f32 products, each rounded (relative u = 2^-24) and
// added in some order, so |c - sum ab| <= g S with g = K u / (1 - K u) + u and S = sum |a||b|
// (the f64 reference's own error, K 2^-53 S, is added). Both kernels meet it, whatever order
// they add in; a kernel that dropped or doubled a term, or read a wrong stride, misses it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "ops/onednn_conv.h"
#include "ops/onednn_matmul.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/testing/onednn.h"

namespace kiln {
namespace {

using testing::with_onednn;

std::vector<float> random_values(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Checks c = a . b (a [B, M, K] or stored [B, K, M], b [B, K, N] or stored [B, N, K]).
void expect_within_bound(const std::vector<float>& a, const std::vector<float>& b,
                         const std::vector<float>& c, int64_t batch, int64_t m, int64_t k,
                         int64_t n, bool ta, bool tb, const char* path) {
  const double u = std::ldexp(1.0, -24);
  const double g = k * u / (1 - k * u) + u + k * std::ldexp(1.0, -53);
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, s = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = ta ? a[(bi * k + p) * m + i] : a[(bi * m + i) * k + p];
          const double y = tb ? b[(bi * n + j) * k + p] : b[(bi * k + p) * n + j];
          sum += x * y;
          s += std::abs(x * y);
        }
        const double got = c[(bi * m + i) * n + j];
        ASSERT_LE(std::abs(got - sum), g * s)
            << path << ": element (" << bi << ", " << i << ", " << j << ") of [" << batch << ", "
            << m << ", " << k << "] x [" << k << ", " << n << "], ta " << ta << " tb " << tb;
      }
}

TEST(OnednnSgemm, F32DotMeetsTheRoundingBoundOnEitherPath) {
  if (!ops::onednn::built()) GTEST_SKIP() << "Kiln is built without oneDNN: Eigen serves f32";
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> size(1, 90);
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t batch = trial % 3 == 0 ? 2 : 1, m = size(rng), k = size(rng),
                  n = trial % 4 == 0 ? 128 : size(rng) + 10;
    const bool ta = trial % 2 == 1, tb = trial % 5 >= 3;
    const std::vector<float> av = random_values(batch * m * k, rng);
    const std::vector<float> bv = random_values(batch * k * n, rng);
    Tensor a = Tensor::from_vector(av, ta ? Shape{batch, k, m} : Shape{batch, m, k});
    Tensor b = Tensor::from_vector(bv, tb ? Shape{batch, n, k} : Shape{batch, k, n});
    // dot with batch dimension 0, contracting a's k and b's k wherever they are stored.
    auto product = [&] {
      return dot(a, b, {ta ? 1 : 2}, {tb ? 2 : 1}, {0}, {0}).to_vector<float>();
    };
    const int64_t before = ops::onednn::sgemm_count();
    const std::vector<float> on = with_onednn(true, product);
    EXPECT_EQ(ops::onednn::sgemm_count() > before, n >= ops::onednn::kSgemmMinColumns)
        << "which path served [" << m << ", " << k << "] x [" << k << ", " << n << "]";
    const std::vector<float> off = with_onednn(false, product);
    expect_within_bound(av, bv, on, batch, m, k, n, ta, tb, "oneDNN");
    expect_within_bound(av, bv, off, batch, m, k, n, ta, tb, "Eigen");
  }
}

// The compiled matmul + bias + relu (fused_dot) and the interpreter's dot, add, relu round
// alike on both paths.
TEST(OnednnSgemm, FusedDotGivesTheReferenceKernelsBitsOnEitherPath) {
  for (bool on : {true, false}) {
    with_onednn(on, [&] {
      Graph g{"dense"};
      Tensor x = g.placeholder(f32, {70, 33}, "x");
      Tensor w = g.placeholder(f32, {33, 40}, "w");
      Tensor bias = g.placeholder(f32, {40}, "bias");
      Tensor y = relu(matmul(x, w) + bias);
      std::mt19937 rng(11);
      FeedList feeds = {{x, Tensor::from_vector(random_values(70 * 33, rng), {70, 33})},
                        {w, Tensor::from_vector(random_values(33 * 40, rng), {33, 40})},
                        {bias, Tensor::from_vector(random_values(40, rng), {40})}};
      compiler::Executable e = compiler::compile(g, {y}, feeds);
      EXPECT_TRUE(compiler::testing::bitwise_equal(e.run(feeds)[0], g.run(feeds, std::vector<Tensor>{y})[0]))
          << "oneDNN " << (on ? "on" : "off") << "\n" << e.fusion_log();
      return 0;
    });
  }
}

}  // namespace
}  // namespace kiln
