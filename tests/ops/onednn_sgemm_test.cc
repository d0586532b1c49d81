// f32 dot on oneDNN's sgemm (ops::gemm_block through ops/onednn_matmul.h: sgemm_block) against
// Eigen's GEMM (the same blocks with oneDNN switched off) and an f64 reference, on random shapes
// with transposed and batched operands; the compiled fused_dot (matmul + bias + relu) gives the
// reference kernel's bits on either path, since both multiply through ops::gemm, which cuts a
// short product over a large B along B (GemmSplit.*).
//
// The bound: each output is a sum of K f32 products, each rounded (relative u = 2^-24) and
// added in some order, so |c - sum ab| <= g S with g = K u / (1 - K u) + u and S = sum |a||b|
// (the f64 reference's own error, K 2^-53 S, is added). Both kernels meet it, whatever order
// they add in; a kernel that dropped or doubled a term, or read a wrong stride, misses it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "ops/onednn_conv.h"
#include "ops/dot_util.h"
#include "ops/onednn_matmul.h"
#include "runtime/thread_pool.h"
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

// How ops::gemm cuts a product across threads (ops/dot_util.h: gemm_split): B is cut when it is
// large and the output is small, along the rows B is stored in.
TEST(GemmSplit, CutsLargeWeightsAlongTheirStoredRows) {
  using ops::GemmSplit;
  auto expect = [](GemmSplit got, GemmSplit::Kind kind, int64_t parts, int64_t step,
                   const char* what) {
    EXPECT_EQ(got.kind, kind) << what;
    EXPECT_EQ(got.parts, parts) << what;
    if (kind != GemmSplit::kRows) EXPECT_EQ(got.step, step) << what;
  };
  // The MLP's first layer at batch 64: each thread multiplies 392 of W's 784 rows, the rows
  // its half of the Adam update writes.
  expect(ops::gemm_split(1, 64, 784, 128, false, 2), GemmSplit::kDepth, 2, 392, "x W, 2 threads");
  expect(ops::gemm_split(1, 64, 784, 128, false, 3), GemmSplit::kDepth, 3, 262, "x W, 3 threads");
  // dx = dy W^T (W stored [1600, 128], the CNN's dense layer): output columns, 16-aligned.
  expect(ops::gemm_split(1, 128, 128, 1600, true, 2), GemmSplit::kColumns, 2, 800, "dy W^T");
  expect(ops::gemm_split(1, 128, 128, 1000, true, 3), GemmSplit::kColumns, 3, 336, "3 threads");
  // Row blocks: one thread, a batch of products, a small B, an output as large as B, a
  // transposed B with few columns, a plain B too shallow to cut.
  expect(ops::gemm_split(1, 64, 784, 128, false, 1), GemmSplit::kRows, 1, 0, "1 thread");
  expect(ops::gemm_split(2, 64, 784, 128, false, 2), GemmSplit::kRows, 1, 0, "batch 2");
  expect(ops::gemm_split(1, 64, 128, 10, false, 2), GemmSplit::kRows, 1, 0, "small B");
  expect(ops::gemm_split(1, 1024, 784, 128, false, 2), GemmSplit::kRows, 1, 0, "k < 2m");
  expect(ops::gemm_split(1, 784, 64, 128, false, 2), GemmSplit::kRows, 1, 0, "x^T dy");
  expect(ops::gemm_split(1, 64, 1600, 100, true, 2), GemmSplit::kRows, 1, 0, "n < 2m");
  expect(ops::gemm_split(1, 8, 200, 400, false, 2), GemmSplit::kRows, 1, 0, "k < 2 x 128");
}

// Products cut along B (partial products over ranges of k added in order, or ranges of output
// columns) meet the same bound on both paths, transposed operands included.
TEST(GemmSplit, CutProductsMeetTheRoundingBoundOnEitherPath) {
  if (runtime::ThreadPool::global().num_threads() < 2)
    GTEST_SKIP() << "the pool has one thread: no product is cut (KILN_NUM_THREADS)";
  std::mt19937 rng(13);
  struct Case {
    int64_t m, k, n;
    bool ta, tb;
    ops::GemmSplit::Kind kind;
  };
  const Case cases[] = {{64, 784, 128, false, false, ops::GemmSplit::kDepth},
                        {5, 601, 77, true, false, ops::GemmSplit::kDepth},
                        {33, 1000, 40, false, false, ops::GemmSplit::kDepth},
                        {20, 300, 1500, false, true, ops::GemmSplit::kColumns},
                        {7, 257, 999, true, true, ops::GemmSplit::kColumns}};
  for (const Case& c : cases) {
    ASSERT_EQ(ops::gemm_split(1, c.m, c.k, c.n, c.tb).kind, c.kind)
        << "[" << c.m << ", " << c.k << "] x [" << c.k << ", " << c.n << "]";
    const std::vector<float> av = random_values(c.m * c.k, rng);
    const std::vector<float> bv = random_values(c.k * c.n, rng);
    Tensor a = Tensor::from_vector(av, c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k});
    Tensor b = Tensor::from_vector(bv, c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n});
    auto product = [&] { return dot(a, b, {c.ta ? 0 : 1}, {c.tb ? 1 : 0}).to_vector<float>(); };
    expect_within_bound(av, bv, with_onednn(true, product), 1, c.m, c.k, c.n, c.ta, c.tb,
                        "oneDNN");
    expect_within_bound(av, bv, with_onednn(false, product), 1, c.m, c.k, c.n, c.ta, c.tb,
                        "Eigen");
  }
}

// The compiled matmul + bias + relu (fused_dot) and the interpreter's dot, add, relu round
// alike on both paths: with row blocks, and with B cut by depth or by columns (the epilogue
// then runs on rows once they are final).
TEST(OnednnSgemm, FusedDotGivesTheReferenceKernelsBitsOnEitherPath) {
  struct Case {
    int64_t m, k, n;
    bool tb;
  };
  for (const Case& c : {Case{70, 33, 40, false}, Case{64, 784, 128, false},
                        Case{32, 128, 1600, true}}) {
    for (bool on : {true, false}) {
      with_onednn(on, [&] {
        Graph g{"dense"};
        Tensor x = g.placeholder(f32, {c.m, c.k}, "x");
        Tensor w = g.placeholder(f32, c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, "w");
        Tensor bias = g.placeholder(f32, {c.n}, "bias");
        Tensor y = relu(dot(x, w, {1}, {c.tb ? 1 : 0}) + bias);
        std::mt19937 rng(11);
        FeedList feeds = {{x, Tensor::from_vector(random_values(c.m * c.k, rng), {c.m, c.k})},
                          {w, Tensor::from_vector(random_values(c.k * c.n, rng),
                                                  c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n})},
                          {bias, Tensor::from_vector(random_values(c.n, rng), {c.n})}};
        compiler::Executable e = compiler::compile(g, {y}, feeds);
        const std::vector<std::string> thunks = e.thunk_descriptions();
        EXPECT_NE(std::find(thunks.begin(), thunks.end(), "kernel fused_dot"), thunks.end());
        EXPECT_TRUE(compiler::testing::bitwise_equal(e.run(feeds)[0],
                                                     g.run(feeds, std::vector<Tensor>{y})[0]))
            << "oneDNN " << (on ? "on" : "off") << ", [" << c.m << ", " << c.k << "] x ["
            << c.k << ", " << c.n << "]" << (c.tb ? " (B stored transposed)" : "") << "\n"
            << e.fusion_log();
        return 0;
      });
    }
  }
}

}  // namespace
}  // namespace kiln
