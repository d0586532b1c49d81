// The layout pass (compiler/passes/layout.h): which transposes fold into dot and fused_dot
// operands, the refusals and their notes, and results against a hand-written triple loop.
// Tolerance: a folded dot reads its operand through a transposed Eigen map, which packs and so
// sums in another order than the materialised transpose. Any order of a K-term sum is within
// K*u*sum_k |a_k b_k| of the exact sum (u = 2^-24 for f32, 2^-53 for f64; to first order), so
// two orders differ by at most 2*K*u*sum_k |a_k b_k|; integer dots are exact in any order.
#include "compiler/passes/layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "compiler/passes/dce.h"
#include "compiler/passes/epilogue_fusion.h"
#include "compiler/pipeline.h"
#include "kiln/kiln.h"
#include "tests/compiler/compiler_test_util.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;
using testing::ops_of;
using testing::run_module;

Tensor random(Shape s, uint32_t seed, DType t = f32) {
  std::mt19937 rng(seed);
  // Small integers (quarters for f32/f64): short sums of their products are exact in every
  // dtype (|sum| <= 54 for f16/bf16, whose 8-bit bf16 mantissa holds integers up to 256).
  const bool half = t == f16 || t == bf16;
  std::uniform_int_distribution<int> pick(half ? -3 : -8, half ? 3 : 8);
  std::vector<double> v(num_elements(s));
  for (double& x : v) x = pick(rng) / (t == f32 || t == f64 ? 4.0 : 1.0);
  return Tensor::from_vector(v, s).to(t);
}

std::string notes_of(const Pass& p) {
  std::string s;
  for (const std::string& n : p.notes()) s += n + "\n";
  return s;
}

const detail::Node& only(const Module& m, const std::string& op) {
  const detail::Node* found = nullptr;
  for (const auto& n : nodes_of(m.graph)) {
    if (n.op != op) continue;
    EXPECT_EQ(found, nullptr) << "two " << op << " nodes: " << ops_of(m);
    found = &n;
  }
  if (found == nullptr) ADD_FAILURE() << "no " << op << " node: " << ops_of(m);
  static detail::Node none;
  return found ? *found : none;
}

bool runs_layout_then_dce(Module& m, LayoutFolding& pass) {
  bool changed = pass.run(m);
  Dce().run(m);
  return changed;
}

// want[i, j] = sum_k a(i, k) * b(k, j) for an [M, K] x [K, N] product given by accessors, and
// the tolerance of a reordered f32 sum for each element.
template <class A, class B>
void expect_product(const Tensor& got, int64_t m, int64_t k, int64_t n, A a, B b) {
  ASSERT_EQ(got.shape(), (Shape{m, n}));
  std::vector<double> g = got.to(f64).to_vector<double>();
  const bool exact = !is_floating(got.dtype());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0, magnitude = 0;
      for (int64_t q = 0; q < k; ++q) {
        want += a(i, q) * b(q, j);
        magnitude += std::abs(a(i, q) * b(q, j));
      }
      double tol = exact ? 0 : 1e-5 * magnitude;
      EXPECT_LE(std::abs(g[i * n + j] - want), tol) << "element [" << i << ", " << j << "]";
    }
  }
}

std::vector<double> values(const Tensor& t) { return t.to(f64).to_vector<double>(); }

TEST(LayoutTest, TransposedLhsFoldsIntoTheDotsContractingDimension) {
  Graph g{"lhs"};
  Tensor x = g.placeholder(f32, {7, 5}, "x");  // stored [K, M]
  Tensor w = g.placeholder(f32, {7, 3}, "w");
  Tensor y = matmul(transpose(x, {1, 0}), w);
  Module m = make_module(g, {y});
  LayoutFolding pass;
  EXPECT_TRUE(runs_layout_then_dce(m, pass));
  EXPECT_EQ(ops_of(m), "placeholder placeholder dot");
  const detail::Node& dot = only(m, "dot");
  EXPECT_EQ(dot.attrs.get_ints("lhs_contract"), (std::vector<int64_t>{0}));
  EXPECT_EQ(dot.inputs[0].node, 0);  // x itself
  FeedList feeds = {{x, random({7, 5}, 1)}, {w, random({7, 3}, 2)}};
  auto xv = values(feeds[0].second), wv = values(feeds[1].second);
  expect_product(
      run_module(m, feeds)[0], 5, 7, 3, [&](auto i, auto q) { return xv[q * 5 + i]; },
      [&](auto q, auto j) { return wv[q * 3 + j]; });
}

TEST(LayoutTest, TransposedRhsFoldsAndBatchDimensionsAreRenamed) {
  {
    Graph g{"rhs"};  // x [M, K] times w^T with w stored [N, K]: a tied embedding's logits
    Tensor x = g.placeholder(f32, {4, 6}, "x");
    Tensor w = g.placeholder(f32, {9, 6}, "w");
    Tensor y = matmul(x, transpose(w, {-1, 0}));  // a negative axis in the permutation
    Module m = make_module(g, {y});
    LayoutFolding pass;
    EXPECT_TRUE(runs_layout_then_dce(m, pass));
    EXPECT_EQ(ops_of(m), "placeholder placeholder dot");
    EXPECT_EQ(only(m, "dot").attrs.get_ints("rhs_contract"), (std::vector<int64_t>{1}));
    FeedList feeds = {{x, random({4, 6}, 3)}, {w, random({9, 6}, 4)}};
    auto xv = values(feeds[0].second), wv = values(feeds[1].second);
    expect_product(
        run_module(m, feeds)[0], 4, 6, 9, [&](auto i, auto q) { return xv[i * 6 + q]; },
        [&](auto q, auto j) { return wv[j * 6 + q]; });
  }
  {
    Graph g{"batched"};  // a stored [K, B, M]: transpose {1, 2, 0} gives [B, M, K]
    Tensor a = g.placeholder(f32, {5, 2, 3}, "a");
    Tensor b = g.placeholder(f32, {2, 5, 4}, "b");
    Tensor y = matmul(transpose(a, {1, 2, 0}), b);
    Module m = make_module(g, {y});
    LayoutFolding pass;
    runs_layout_then_dce(m, pass);
    // Folded, a would read as batch 1, rows 2, contract 0: neither [B, M, K] nor [B, K, M] in
    // memory, so the kernel would copy it: the transpose stays.
    EXPECT_EQ(ops_of(m), "placeholder placeholder transpose dot");
    EXPECT_THAT(notes_of(pass), HasSubstr("keeps its lhs transpose: the kernel would copy"));
  }
  {
    Graph g{"batched_in_place"};  // a stored [B, K, M]: transpose {0, 2, 1} folds
    Tensor a = g.placeholder(f32, {2, 5, 3}, "a");
    Tensor b = g.placeholder(f32, {2, 5, 4}, "b");
    Tensor y = matmul(transpose(a, {0, 2, 1}), b);
    Module m = make_module(g, {y});
    LayoutFolding pass;
    EXPECT_TRUE(runs_layout_then_dce(m, pass));
    EXPECT_EQ(ops_of(m), "placeholder placeholder dot");
    const detail::Node& dot = only(m, "dot");
    EXPECT_EQ(dot.attrs.get_ints("lhs_batch"), (std::vector<int64_t>{0}));
    EXPECT_EQ(dot.attrs.get_ints("lhs_contract"), (std::vector<int64_t>{1}));
    FeedList feeds = {{a, random({2, 5, 3}, 5)}, {b, random({2, 5, 4}, 6)}};
    auto av = values(feeds[0].second), bv = values(feeds[1].second);
    Tensor got = run_module(m, feeds)[0];
    ASSERT_EQ(got.shape(), (Shape{2, 3, 4}));
    for (int64_t bi = 0; bi < 2; ++bi) {
      expect_product(
          reshape(slice(got, {bi, 0, 0}, {bi + 1, 3, 4}), {3, 4}), 3, 5, 4,
          [&](auto i, auto q) { return av[bi * 15 + q * 3 + i]; },
          [&](auto q, auto j) { return bv[bi * 20 + q * 4 + j]; });
    }
  }
}

// Random dots whose operands are stored in a random dimension order and transposed into place:
// the pass's result against the materialised transposes run by the interpreter.
TEST(LayoutTest, RandomTransposedOperandsMatchWithinAReorderedSumsRounding) {
  int folded = 0, cases = 0, inexact = 0;
  for (uint32_t seed = 0; seed < 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int64_t>(rng() % n); };
    const DType t = pick(4) == 0 ? (pick(2) ? f64 : i32) : f32;
    const bool batched = pick(2);
    const int64_t b = 1 + pick(3), m = 1 + pick(33), k = 1 + pick(70), n = 1 + pick(33);
    Graph g{"random"};
    FeedList feeds;
    // An operand of logical shape `logical`, stored in a random order then transposed back.
    auto operand = [&](Shape logical, const char* name) {
      const int64_t r = static_cast<int64_t>(logical.size());
      std::vector<int64_t> perm(r);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      Shape stored(r);
      for (int64_t i = 0; i < r; ++i) stored[perm[i]] = logical[i];
      Tensor x = g.placeholder(t, stored, name);
      // Normal values (integers for i32): sums that round, unlike random()'s short exact ones.
      std::normal_distribution<double> normal(0, 1);
      std::vector<double> v(num_elements(stored));
      for (double& e : v) e = t == i32 ? std::round(8 * normal(rng)) : normal(rng);
      feeds.push_back({x, Tensor::from_vector(v, stored).to(t)});
      return transpose(x, perm);
    };
    Tensor lhs = operand(batched ? Shape{b, m, k} : Shape{m, k}, "a");
    Tensor rhs = operand(batched ? Shape{b, k, n} : Shape{k, n}, "b");
    const int64_t o = batched ? 1 : 0;
    Axes batch = batched ? Axes{0} : Axes{};
    Tensor y = dot(lhs, rhs, {o + 1}, {o}, batch, batch);
    Tensor bound = dot(abs(lhs), abs(rhs), {o + 1}, {o}, batch, batch);  // sum_k |a_k b_k|
    Module mod = make_module(g, {y});
    LayoutFolding pass;
    folded += runs_layout_then_dce(mod, pass);
    ++cases;
    std::vector<double> got = values(run_module(mod, feeds)[0]);
    std::vector<Tensor> want = g.run(feeds, std::vector<Tensor>{y, bound});
    std::vector<double> w = values(want[0]), mag = values(want[1]);
    const double u = t == f32 ? 0x1p-24 : t == f64 ? 0x1p-53 : 0;
    inexact += got != w;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_LE(std::abs(got[i] - w[i]), 2 * k * u * mag[i])
          << "element " << i << " of " << TensorType{t, want[0].shape()}.str() << "\n"
          << mod.graph.to_text();
    }
  }
  std::printf("[ layout ] folded a transpose in %d of %d random dots; %d results not bit-exact\n",
              folded, cases, inexact);
  EXPECT_GT(folded, cases / 3);
}

TEST(LayoutTest, RefusesWhenTheOutputWouldBeReordered) {
  Graph g{"reorder"};
  Tensor x = g.placeholder(f32, {3, 2, 6}, "x");
  Tensor w = g.placeholder(f32, {6, 4}, "w");
  // The two free dimensions swap: folding would give [2, 3, 4]-ordered rows as [3, 2, 4].
  Tensor y = dot(transpose(x, {1, 0, 2}), w, {2}, {0});
  Module m = make_module(g, {y});
  LayoutFolding pass;
  EXPECT_FALSE(pass.run(m));
  EXPECT_THAT(notes_of(pass), HasSubstr("reorder the dot's output dimensions"));
  EXPECT_THAT(notes_of(pass), HasSubstr("(dot)"));
}

TEST(LayoutTest, TransposeWithOtherUsersStaysForThem) {
  Graph g{"shared"};
  Tensor x = g.placeholder(f32, {4, 3}, "x");
  Tensor w = g.placeholder(f32, {4, 2}, "w");
  Tensor t = transpose(x, {1, 0});
  Tensor y = matmul(t, w);
  Tensor z = t * t;
  Module m = make_module(g, {y, z});
  LayoutFolding pass;
  EXPECT_TRUE(runs_layout_then_dce(m, pass));
  EXPECT_EQ(only(m, "dot").inputs[0].node, 0);        // the dot reads x
  EXPECT_EQ(only(m, "transpose").inputs[0].node, 0);  // z still needs the transpose
  FeedList feeds = {{x, random({4, 3}, 7)}, {w, random({4, 2}, 8)}};
  std::vector<Tensor> got = run_module(m, feeds);
  auto xv = values(feeds[0].second), wv = values(feeds[1].second);
  expect_product(
      got[0], 3, 4, 2, [&](auto i, auto q) { return xv[q * 3 + i]; },
      [&](auto q, auto j) { return wv[q * 2 + j]; });
  EXPECT_TRUE(testing::bitwise_equal(got[1], g.run(feeds, std::vector<Tensor>{z})[0]));
}

TEST(LayoutTest, IntegersFoldOnlyIntoTheLayoutTheyReadInPlace) {
  Graph g{"ints"};
  Tensor x = g.placeholder(i32, {5, 3}, "x");
  Tensor w = g.placeholder(i32, {3, 2}, "w");
  Tensor u = g.placeholder(i32, {4, 3}, "u");
  // transpose(x) is [3, 5] contracted over its dim 0: folded, x reads as [M=5, K=3]: in place.
  Tensor y = dot(transpose(x, {1, 0}), w, {0}, {0});
  // transpose(u) is [3, 4] as a [K, N] rhs: folded, u would read as [N, K]: integers copy it.
  Tensor z = matmul(x, transpose(u, {1, 0}));
  Module m = make_module(g, {y, z});
  LayoutFolding pass;
  EXPECT_TRUE(runs_layout_then_dce(m, pass));
  EXPECT_EQ(ops_of(m), "placeholder placeholder placeholder dot transpose dot");
  EXPECT_THAT(notes_of(pass), HasSubstr("keeps its rhs transpose: the kernel would copy i32[4,3]"));
  FeedList feeds = {
      {x, random({5, 3}, 9, i32)}, {w, random({3, 2}, 10, i32)}, {u, random({4, 3}, 11, i32)}};
  std::vector<Tensor> got = run_module(m, feeds);
  auto xv = values(feeds[0].second), wv = values(feeds[1].second);
  EXPECT_EQ(got[0].dtype(), i32);
  expect_product(
      got[0], 5, 3, 2, [&](auto i, auto q) { return xv[i * 3 + q]; },
      [&](auto q, auto j) { return wv[q * 2 + j]; });
}

TEST(LayoutTest, HalfPrecisionAndF64AndUnknownBatch) {
  for (DType t : {f16, bf16, f64}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g{"dtypes"};
    Tensor x = g.placeholder(t, {kUnknownDim, 6}, "x");
    Tensor w = g.placeholder(t, {4, 6}, "w");
    Tensor y = matmul(x, transpose(w, {1, 0}));
    Module m = make_module(g, {y});
    LayoutFolding pass;
    EXPECT_TRUE(runs_layout_then_dce(m, pass));
    EXPECT_EQ(ops_of(m), "placeholder placeholder dot");
    FeedList feeds = {{x, random({3, 6}, 12, t)}, {w, random({4, 6}, 13, t)}};
    auto xv = values(feeds[0].second), wv = values(feeds[1].second);
    Tensor got = run_module(m, feeds)[0];
    EXPECT_EQ(got.dtype(), t);
    expect_product(
        got, 3, 6, 4, [&](auto i, auto q) { return xv[i * 6 + q]; },
        [&](auto q, auto j) { return wv[j * 6 + q]; });
  }
}

TEST(LayoutTest, FoldsIntoFusedDot) {
  Graph g{"fused"};
  Tensor x = g.placeholder(f32, {8, 5}, "x");
  Tensor w = g.placeholder(f32, {3, 5}, "w");  // stored [N, K]
  Tensor b = g.placeholder(f32, {3}, "b");
  Tensor y = relu(matmul(x, transpose(w, {1, 0})) + b);
  Module m = make_module(g, {y});
  ASSERT_TRUE(EpilogueFusion().run(m));
  Dce().run(m);
  ASSERT_EQ(ops_of(m), "placeholder placeholder placeholder transpose fused_dot");
  LayoutFolding pass;
  EXPECT_TRUE(runs_layout_then_dce(m, pass));
  EXPECT_EQ(ops_of(m), "placeholder placeholder placeholder fused_dot");
  EXPECT_EQ(only(m, "fused_dot").attrs.get_ints("rhs_contract"), (std::vector<int64_t>{1}));
  FeedList feeds = {{x, random({8, 5}, 14)}, {w, random({3, 5}, 15)}, {b, random({3}, 16)}};
  auto xv = values(feeds[0].second), wv = values(feeds[1].second), bv = values(feeds[2].second);
  std::vector<double> got = values(run_module(m, feeds)[0]);
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      double want = bv[j];
      for (int64_t q = 0; q < 5; ++q) want += xv[i * 5 + q] * wv[j * 5 + q];
      EXPECT_EQ(got[i * 3 + j], std::max(want, 0.0)) << i << ", " << j;  // exact: few terms
    }
  }
}

TEST(LayoutTest, TransposedDotResultBecomesTheSwappedDot) {
  {
    Graph g{"output"};
    Tensor x = g.placeholder(f32, {4, 6}, "x");
    Tensor w = g.placeholder(f32, {6, 5}, "w");
    Tensor y = transpose(matmul(x, w), {1, 0});  // [5, 4] = w^T x^T
    Module m = make_module(g, {y});
    LayoutFolding pass;
    EXPECT_TRUE(runs_layout_then_dce(m, pass));
    EXPECT_EQ(ops_of(m), "placeholder placeholder dot");
    const detail::Node& dot = only(m, "dot");
    EXPECT_EQ(dot.inputs[0].node, 1);  // w first
    EXPECT_EQ(dot.attrs.get_ints("lhs_contract"), (std::vector<int64_t>{0}));
    EXPECT_EQ(dot.attrs.get_ints("rhs_contract"), (std::vector<int64_t>{1}));
    FeedList feeds = {{x, random({4, 6}, 17)}, {w, random({6, 5}, 18)}};
    auto xv = values(feeds[0].second), wv = values(feeds[1].second);
    expect_product(
        run_module(m, feeds)[0], 5, 6, 4, [&](auto i, auto q) { return wv[q * 5 + i]; },
        [&](auto q, auto j) { return xv[j * 6 + q]; });
  }
  {
    Graph g{"batched"};  // [B, M, N] -> [B, N, M]: the batch dimension stays first
    Tensor a = g.placeholder(f32, {2, 3, 4}, "a");
    Tensor b = g.placeholder(f32, {2, 4, 5}, "b");
    Tensor y = transpose(matmul(a, b), {0, 2, 1});
    Tensor other = transpose(matmul(a, b), {1, 0, 2});  // moves the batch: stays
    Module m = make_module(g, {y, other});
    LayoutFolding pass;
    EXPECT_TRUE(runs_layout_then_dce(m, pass));
    EXPECT_EQ(ops_of(m), "placeholder placeholder dot dot transpose");  // swapped; other
    FeedList feeds = {{a, random({2, 3, 4}, 19)}, {b, random({2, 4, 5}, 20)}};
    auto av = values(feeds[0].second), bv = values(feeds[1].second);
    Tensor got = run_module(m, feeds)[0];
    ASSERT_EQ(got.shape(), (Shape{2, 5, 3}));
    for (int64_t bi = 0; bi < 2; ++bi) {
      expect_product(
          reshape(slice(got, {bi, 0, 0}, {bi + 1, 5, 3}), {5, 3}), 5, 4, 3,
          [&](auto i, auto q) { return bv[bi * 20 + q * 5 + i]; },
          [&](auto q, auto j) { return av[bi * 12 + j * 4 + q]; });
    }
  }
  {
    Graph g{"shared_dot"};  // the dot's result is also fetched: one dot, one transpose
    Tensor x = g.placeholder(f32, {4, 6}, "x");
    Tensor w = g.placeholder(f32, {6, 5}, "w");
    Tensor z = matmul(x, w);
    Module m = make_module(g, {transpose(z, {1, 0}), z});
    LayoutFolding pass;
    EXPECT_FALSE(pass.run(m));
    EXPECT_THAT(notes_of(pass), HasSubstr("(transpose): stays: its dot has other users"));
  }
  {
    Graph g{"ints"};  // integers: w would be read as lhs [K, N]^T: a copy
    Tensor x = g.placeholder(i32, {4, 6}, "x");
    Tensor w = g.placeholder(i32, {6, 5}, "w");
    Module m = make_module(g, {transpose(matmul(x, w), {1, 0})});
    LayoutFolding pass;
    EXPECT_FALSE(pass.run(m));
    EXPECT_THAT(notes_of(pass), HasSubstr("stays: the swapped dot would copy an operand"));
  }
}

// A dense layer whose weight is stored [out, in] (y = x . w^T, as tied embeddings are written):
// the forward transpose folds into the dot, and so does the backward one (dw = (x^T dz)^T).
TEST(LayoutTest, TransposedWeightLosesBothTransposesInTheTrainingGraph) {
  Graph g{"tied"};
  Tensor x = g.placeholder(f32, {8, 6}, "x");
  Tensor w = g.placeholder(f32, {5, 6}, "w");
  Tensor y = matmul(x, transpose(w, {1, 0}));
  std::vector<Tensor> grads = gradients(sum(y * y), {x, w});
  auto count = [](const Graph& graph, const char* op) {
    int k = 0;
    for (const auto& n : nodes_of(graph)) k += n.op == op;
    return k;
  };
  Pipeline exact = default_pipeline(Rewrites::kExact);
  CompiledGraph kept = optimize(g, grads, exact);
  CompiledGraph folded = optimize(g, grads);
  EXPECT_EQ(count(kept.graph, "transpose"), 2) << kept.graph.to_text();
  EXPECT_EQ(count(folded.graph, "transpose"), 0) << folded.graph.to_text();
  // dw[o, i] = sum_b 2 y[b, o] x[b, i], y = x w^T, by hand.
  FeedList feeds = {{x, random({8, 6}, 21)}, {w, random({5, 6}, 22)}};
  auto xv = values(feeds[0].second), wv = values(feeds[1].second);
  std::vector<double> yv(8 * 5, 0);
  for (int b = 0; b < 8; ++b)
    for (int o = 0; o < 5; ++o)
      for (int i = 0; i < 6; ++i) yv[b * 5 + o] += xv[b * 6 + i] * wv[o * 6 + i];
  expect_product(
      folded.run(feeds)[1], 5, 8, 6, [&](auto o, auto b) { return 2 * yv[b * 5 + o]; },
      [&](auto b, auto i) { return xv[b * 6 + i]; });
}

TEST(LayoutTest, IsNotExactAndRunsOnlyInTheFullPipeline) {
  EXPECT_FALSE(LayoutFolding().exact());
  Pipeline all = default_pipeline();
  Pipeline exact = default_pipeline(Rewrites::kExact);
  EXPECT_FALSE(all.exact());
  EXPECT_TRUE(exact.exact());
  // After the exact fixed-point group, before the dot epilogue fusion.
  EXPECT_EQ(all.pass_names(),
            "verify constant_folding algebraic_simplifier cse merge_augmented_scans unroll_loops "
            "dce layout "
            "epilogue_fusion conv_pool_grad_fusion dce drop_conv_outputs verify");
  EXPECT_EQ(
      exact.pass_names(),
      "verify constant_folding algebraic_simplifier cse merge_augmented_scans unroll_loops dce "
      "epilogue_fusion dce drop_conv_outputs verify");

  Graph g{"pipeline"};
  Tensor x = g.placeholder(f32, {6, 4}, "x");
  Tensor w = g.placeholder(f32, {6, 4}, "w");
  Tensor y = matmul(transpose(x, {1, 0}), w);
  CompiledGraph folded = optimize(g, {y});
  CompiledGraph kept = optimize(g, {y}, exact);
  EXPECT_EQ(folded.graph.num_nodes(), 3);
  EXPECT_EQ(kept.graph.num_nodes(), 4);
}

}  // namespace
}  // namespace kiln::compiler
