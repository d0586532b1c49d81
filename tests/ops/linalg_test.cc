// Linear algebra: dot (XLA dot_general semantics) and matmul (numpy.matmul semantics).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

using testing::ElementsAre;
using testing::HasSubstr;

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A = [[1, 2, 3], [4, 5, 6]], B = [[7, 8], [9, 10], [11, 12]], A B = [[58, 64], [139, 154]].
template <class T>
Tensor mat_a() {
  return Tensor::from_vector(std::vector<T>{T(1), T(2), T(3), T(4), T(5), T(6)}, {2, 3});
}
template <class T>
Tensor mat_b() {
  return Tensor::from_vector(std::vector<T>{T(7), T(8), T(9), T(10), T(11), T(12)}, {3, 2});
}
// Their transposes, stored as such.
template <class T>
Tensor mat_a_t() {
  return Tensor::from_vector(std::vector<T>{T(1), T(4), T(2), T(5), T(3), T(6)}, {3, 2});
}
template <class T>
Tensor mat_b_t() {
  return Tensor::from_vector(std::vector<T>{T(7), T(9), T(11), T(8), T(10), T(12)}, {2, 3});
}

// Row-major values v[i] = (i * step) % mod - offset: small integers, exact in any float type.
std::vector<float> pattern(int64_t n, int step, int mod, int offset) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * step) % mod - offset);
  return v;
}

// ---- dot --------------------------------------------------------------------------------------

TEST(Dot, MatrixProduct) {
  Tensor c = dot(mat_a<float>(), mat_b<float>(), {1}, {0});
  EXPECT_EQ(c.dtype(), f32);
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  EXPECT_THAT(c.to_vector<float>(), ElementsAre(58, 64, 139, 154));
}

TEST(Dot, EveryDtype) {
  EXPECT_THAT(dot(mat_a<double>(), mat_b<double>(), {1}, {0}).to_vector<double>(),
              ElementsAre(58, 64, 139, 154));
  EXPECT_THAT(dot(mat_a<int32_t>(), mat_b<int32_t>(), {1}, {0}).to_vector<int32_t>(),
              ElementsAre(58, 64, 139, 154));
  EXPECT_THAT(dot(mat_a<int64_t>(), mat_b<int64_t>(), {1}, {0}).to_vector<int64_t>(),
              ElementsAre(58, 64, 139, 154));
  EXPECT_THAT(dot(mat_a<uint8_t>(), mat_b<uint8_t>(), {1}, {0}).to_vector<int32_t>(),
              ElementsAre(58, 64, 139, 154));
  Tensor h = dot(mat_a<half>(), mat_b<half>(), {1}, {0});
  EXPECT_EQ(h.dtype(), f16);
  EXPECT_THAT(h.to_vector<float>(), ElementsAre(58, 64, 139, 154));
  Tensor bf = dot(mat_a<bfloat16>(), mat_b<bfloat16>(), {1}, {0});
  EXPECT_EQ(bf.dtype(), bf16);
  EXPECT_THAT(bf.to_vector<float>(), ElementsAre(58, 64, 139, 154));
}

TEST(Dot, IntegersWrapOnOverflow) {
  Tensor a = Tensor::from_list<int8_t>({100, 100}, {1, 2});
  Tensor b = Tensor::from_list<int8_t>({1, 1}, {2, 1});
  EXPECT_EQ(dot(a, b, {1}, {0}).item<int32_t>(), -56);  // 200 wraps in i8
}

TEST(Dot, TransposedOperands) {
  // Contracting a's first or b's last dimension: read in place (floats) or copied (ints).
  EXPECT_THAT(dot(mat_a_t<float>(), mat_b<float>(), {0}, {0}).to_vector<float>(),
              ElementsAre(58, 64, 139, 154));
  EXPECT_THAT(dot(mat_a<float>(), mat_b_t<float>(), {1}, {1}).to_vector<float>(),
              ElementsAre(58, 64, 139, 154));
  EXPECT_THAT(dot(mat_a_t<float>(), mat_b_t<float>(), {0}, {1}).to_vector<float>(),
              ElementsAre(58, 64, 139, 154));
  EXPECT_THAT(dot(mat_a_t<int32_t>(), mat_b_t<int32_t>(), {0}, {1}).to_vector<int32_t>(),
              ElementsAre(58, 64, 139, 154));
  EXPECT_THAT(dot(mat_a_t<half>(), mat_b_t<half>(), {0}, {1}).to_vector<float>(),
              ElementsAre(58, 64, 139, 154));
  EXPECT_THAT(dot(mat_a_t<double>(), mat_b_t<double>(), {-2}, {-1}).to_vector<double>(),
              ElementsAre(58, 64, 139, 154));
}

TEST(Dot, VectorsGiveAScalar) {
  Tensor a = Tensor::from_list<float>({1, 2, 3});
  Tensor b = Tensor::from_list<float>({4, 5, 6});
  Tensor c = dot(a, b, {0}, {0});
  EXPECT_EQ(c.shape(), Shape{});
  EXPECT_EQ(c.item<float>(), 32.0f);
}

TEST(Dot, NoContractionIsAnOuterProduct) {
  Tensor a = Tensor::from_list<float>({1, 2});
  Tensor b = Tensor::from_list<float>({3, 4, 5});
  Tensor c = dot(a, b, {}, {});
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_THAT(c.to_vector<float>(), ElementsAre(3, 4, 5, 6, 8, 10));
}

TEST(Dot, BatchDimensions) {
  // Batch 0: [[1,2],[3,4]] [[5,6],[7,8]] = [[19,22],[43,50]]; batch 1: I [[9,8],[7,6]].
  Tensor a = Tensor::from_list<float>({1, 2, 3, 4, 1, 0, 0, 1}, {2, 2, 2});
  Tensor b = Tensor::from_list<float>({5, 6, 7, 8, 9, 8, 7, 6}, {2, 2, 2});
  Tensor c = dot(a, b, {2}, {1}, {0}, {0});
  EXPECT_EQ(c.shape(), (Shape{2, 2, 2}));
  EXPECT_THAT(c.to_vector<float>(), ElementsAre(19, 22, 43, 50, 9, 8, 7, 6));
  // The same with a's batch dimension in the middle: a2[m, b, k] = a[b, m, k].
  Tensor a2 = Tensor::from_list<float>({1, 2, 1, 0, 3, 4, 0, 1}, {2, 2, 2});
  EXPECT_THAT(dot(a2, b, {2}, {1}, {1}, {0}).to_vector<float>(),
              ElementsAre(19, 22, 43, 50, 9, 8, 7, 6));
  Tensor ci = dot(a.to(i32), b.to(i32), {2}, {1}, {0}, {0});
  EXPECT_THAT(ci.to_vector<int32_t>(), ElementsAre(19, 22, 43, 50, 9, 8, 7, 6));
}

TEST(Dot, OutputOrderIsBatchThenLhsFreeThenRhsFree) {
  // a [2, 3] with b [4, 3, 5], contracting the 3s: out [2, 4, 5].
  std::vector<float> av = pattern(6, 1, 100, 0), bv = pattern(60, 1, 100, 0);
  Tensor c = dot(Tensor::from_vector(av, {2, 3}), Tensor::from_vector(bv, {4, 3, 5}), {1}, {1});
  EXPECT_EQ(c.shape(), (Shape{2, 4, 5}));
  std::vector<float> got = c.to_vector<float>();
  for (int i = 0; i < 2; ++i)
    for (int p = 0; p < 4; ++p)
      for (int q = 0; q < 5; ++q) {
        float want = 0;
        for (int k = 0; k < 3; ++k) want += av[i * 3 + k] * bv[p * 15 + k * 5 + q];
        ASSERT_EQ(got[(i * 4 + p) * 5 + q], want) << i << "," << p << "," << q;
      }
}

TEST(Dot, SeveralContractingDimensions) {
  // a [2, 2, 3] = 0..11 contracted over both trailing dims with ones [2, 3]: row sums.
  std::vector<float> av = pattern(12, 1, 100, 0);
  Tensor c = dot(Tensor::from_vector(av, {2, 2, 3}),
                 Tensor::from_vector(std::vector<float>(6, 1.0f), {2, 3}), {1, 2}, {0, 1});
  EXPECT_EQ(c.shape(), Shape{2});
  EXPECT_THAT(c.to_vector<float>(), ElementsAre(15, 51));
  // Contracting pairs follow the listed order: a's (2, 1) with b's (1, 0) pairs a dim 2 with
  // b dim 1. With b[j, k] = k, out[i] = sum_jk a[i, j, k] * k.
  Tensor b = Tensor::from_list<float>({0, 1, 2, 0, 1, 2}, {2, 3});
  EXPECT_THAT(dot(Tensor::from_vector(av, {2, 2, 3}), b, {2, 1}, {1, 0}).to_vector<float>(),
              ElementsAre(1 + 2 * 2 + 4 + 2 * 5, 7 + 2 * 8 + 10 + 2 * 11));
}

TEST(Dot, ZeroSizedDimensions) {
  Tensor empty_k = dot(Tensor::from_vector(std::vector<float>{}, {2, 0}),
                       Tensor::from_vector(std::vector<float>{}, {0, 3}), {1}, {0});
  EXPECT_EQ(empty_k.shape(), (Shape{2, 3}));
  EXPECT_THAT(empty_k.to_vector<float>(), ElementsAre(0, 0, 0, 0, 0, 0));
  Tensor empty_ki = dot(Tensor::from_vector(std::vector<int32_t>{}, {2, 0}),
                        Tensor::from_vector(std::vector<int32_t>{}, {0, 1}), {1}, {0});
  EXPECT_THAT(empty_ki.to_vector<int32_t>(), ElementsAre(0, 0));
  EXPECT_EQ(
      dot(Tensor::from_vector(std::vector<float>{}, {0, 3}), mat_b<float>(), {1}, {0}).shape(),
      (Shape{0, 2}));
  EXPECT_EQ(
      dot(mat_a<float>(), Tensor::from_vector(std::vector<float>{}, {3, 0}), {1}, {0}).shape(),
      (Shape{2, 0}));
}

TEST(Dot, PromotesDtypes) {
  Tensor c = dot(mat_a<int32_t>(), mat_b<float>(), {1}, {0});
  EXPECT_EQ(c.dtype(), f32);
  EXPECT_THAT(c.to_vector<float>(), ElementsAre(58, 64, 139, 154));
  EXPECT_EQ(dot(mat_a<float>(), mat_b<double>(), {1}, {0}).dtype(), f64);
}

TEST(Dot, LargeProductsMatchANaiveLoop) {
  // Enough rows, batches and columns to split over the thread pool; values are small
  // integers so every product is exact in f32.
  for (auto [batch, m, k, n] :
       {std::array<int64_t, 4>{1, 300, 200, 100}, std::array<int64_t, 4>{3, 70, 50, 40},
        std::array<int64_t, 4>{100, 5, 7, 3}}) {
    std::vector<float> av = pattern(batch * m * k, 7, 11, 5);
    std::vector<float> bv = pattern(batch * k * n, 5, 13, 6);
    Tensor a = Tensor::from_vector(av, {batch, m, k});
    Tensor b = Tensor::from_vector(bv, {batch, k, n});
    std::vector<float> got = dot(a, b, {2}, {1}, {0}, {0}).to_vector<float>();
    std::vector<double> got64 = dot(a.to(f64), b.to(f64), {2}, {1}, {0}, {0}).to_vector<double>();
    std::vector<int64_t> goti = dot(a.to(i64), b.to(i64), {2}, {1}, {0}, {0}).to_vector<int64_t>();
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (int64_t p = 0; p < k; ++p)
            want += double(av[(bi * m + i) * k + p]) * bv[(bi * k + p) * n + j];
          int64_t at = (bi * m + i) * n + j;
          ASSERT_EQ(got[at], want) << batch << " " << bi << " " << i << " " << j;
          ASSERT_EQ(got64[at], want);
          ASSERT_EQ(goti[at], static_cast<int64_t>(want));
        }
  }
}

TEST(Dot, ContractingSizeMismatchNamesShapes) {
  Tensor a = Tensor::empty(f32, {64, 784});
  Tensor b = Tensor::empty(f32, {128, 10});
  EXPECT_EQ(error_of([&] { dot(a, b, {1}, {0}); }),
            "dot: contracting dimensions differ: a is f32[64,784] (dim 1 = 784), b is "
            "f32[128,10] (dim 0 = 128)");
}

TEST(Dot, OtherErrors) {
  Tensor a = Tensor::empty(f32, {2, 3, 4});
  Tensor b = Tensor::empty(f32, {5, 4, 6});
  EXPECT_THAT(error_of([&] { dot(a, b, {2}, {1}, {0}, {0}); }),
              HasSubstr("dot: batch dimensions differ: a is f32[2,3,4] (dim 0 = 2), b is "
                        "f32[5,4,6] (dim 0 = 5)"));
  EXPECT_THAT(error_of([&] { dot(a, b, {3}, {1}); }),
              HasSubstr("dot: axis 3 is out of range for a: f32[2,3,4]"));
  EXPECT_THAT(error_of([&] {
                dot(a, b, {2, 2}, {1, 0});
              }),
              HasSubstr("dimension 2 of f32[2,3,4] is used twice"));
  EXPECT_THAT(error_of([&] {
                dot(a, b, {2}, {1, 0});
              }),
              HasSubstr("has 0 batch and 1 contracting dimensions"));
  Attrs attrs{{"lhs_contract", Axes{1}}, {"rhs_contract", Axes{0}}};
  EXPECT_THAT(error_of([&] {
                call_op("dot", {mat_a<float>(), mat_b<double>()}, attrs);
              }),
              HasSubstr("dot: dtype mismatch: a is f32[2,3], b is f64[3,2]"));
  Tensor bools = Tensor::from_vector(std::vector<bool>{true, false});
  EXPECT_THAT(error_of([&] { dot(bools, bools, {0}, {0}); }),
              HasSubstr("dot: expects a numeric input, got bool[2]"));
}

// ---- matmul ----------------------------------------------------------------------------------

TEST(Matmul, Matrices) {
  Tensor c = matmul(mat_a<float>(), mat_b<float>());
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  EXPECT_THAT(c.to_vector<float>(), ElementsAre(58, 64, 139, 154));
  EXPECT_EQ(matmul(mat_a<int32_t>(), mat_b<double>()).dtype(), f64);
}

TEST(Matmul, VectorOperandsArePromotedThenDropped) {
  Tensor v3 = Tensor::from_list<float>({1, 0, -1});
  Tensor v2 = Tensor::from_list<float>({1, 2});
  Tensor vm = matmul(v3, mat_b<float>());  // [3] x [3, 2] -> [2]
  EXPECT_EQ(vm.shape(), Shape{2});
  EXPECT_THAT(vm.to_vector<float>(), ElementsAre(-4, -4));
  Tensor mv = matmul(mat_a<float>(), v3);  // [2, 3] x [3] -> [2]
  EXPECT_EQ(mv.shape(), Shape{2});
  EXPECT_THAT(mv.to_vector<float>(), ElementsAre(-2, -2));
  Tensor vv = matmul(v3, Tensor::from_list<float>({4, 5, 6}));
  EXPECT_EQ(vv.shape(), Shape{});
  EXPECT_EQ(vv.item<float>(), -2.0f);
  Tensor vb = matmul(v2, Tensor::from_list<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}));
  EXPECT_EQ(vb.shape(), (Shape{2, 2}));  // [2] x [2, 2, 2] -> [2, 2]
  EXPECT_THAT(vb.to_vector<float>(), ElementsAre(7, 10, 19, 22));
  Tensor bv = matmul(Tensor::from_list<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}), v2);
  EXPECT_EQ(bv.shape(), (Shape{2, 2}));  // [2, 2, 2] x [2] -> [2, 2]
  EXPECT_THAT(bv.to_vector<float>(), ElementsAre(5, 11, 17, 23));
}

TEST(Matmul, BatchedTimesMatrixIsOneDot) {
  Tensor a = Tensor::from_list<float>({1, 2, 3, 4, 1, 0, 0, 1}, {2, 2, 2});
  Tensor b = Tensor::from_list<float>({5, 6, 7, 8}, {2, 2});
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 2, 2}));
  EXPECT_THAT(c.to_vector<float>(), ElementsAre(19, 22, 43, 50, 5, 6, 7, 8));
  // Recorded, it is a single dot node on the two inputs: no broadcast, no reshape.
  Graph g("batched");
  Tensor x = g.placeholder(f32, {2, 2, 2}, "x");
  Tensor w = g.placeholder(f32, {2, 2}, "w");
  int before = g.num_nodes();
  Tensor y = matmul(x, w);
  EXPECT_EQ(g.num_nodes(), before + 1);
  EXPECT_EQ(g.node(g.num_nodes() - 1).op, "dot");
  EXPECT_THAT(g.run({{x, a}, {w, b}}, y).to_vector<float>(),
              ElementsAre(19, 22, 43, 50, 5, 6, 7, 8));
}

TEST(Matmul, EqualBatchDimensions) {
  Tensor a = Tensor::from_list<float>({1, 2, 3, 4, 1, 0, 0, 1}, {2, 2, 2});
  Tensor b = Tensor::from_list<float>({5, 6, 7, 8, 9, 8, 7, 6}, {2, 2, 2});
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 2, 2}));
  EXPECT_THAT(c.to_vector<float>(), ElementsAre(19, 22, 43, 50, 9, 8, 7, 6));
}

TEST(Matmul, BroadcastsBatchDimensions) {
  Tensor a = Tensor::from_list<float>({1, 2, 3, 4, 1, 0, 0, 1}, {2, 2, 2});
  Tensor b1 = Tensor::from_list<float>({5, 6, 7, 8}, {1, 2, 2});
  EXPECT_THAT(matmul(a, b1).to_vector<float>(), ElementsAre(19, 22, 43, 50, 5, 6, 7, 8));
  // A 2-d a against a batch of b: [2, 2] x [2, 2, 2] -> [2, 2, 2].
  Tensor m = Tensor::from_list<float>({1, 2, 3, 4}, {2, 2});
  Tensor bb = Tensor::from_list<float>({5, 6, 7, 8, 1, 0, 0, 1}, {2, 2, 2});
  Tensor c = matmul(m, bb);
  EXPECT_EQ(c.shape(), (Shape{2, 2, 2}));
  EXPECT_THAT(c.to_vector<float>(), ElementsAre(19, 22, 43, 50, 1, 2, 3, 4));
  // [2, 1, 1, 2] x [3, 2, 1] -> [2, 3, 1, 1]: out[i, j] = a_i . b_j.
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4}, {2, 1, 1, 2});
  Tensor y = Tensor::from_list<float>({1, 0, 0, 1, 1, 1}, {3, 2, 1});
  Tensor z = matmul(x, y);
  EXPECT_EQ(z.shape(), (Shape{2, 3, 1, 1}));
  EXPECT_THAT(z.to_vector<float>(), ElementsAre(1, 2, 3, 3, 4, 7));
}

TEST(Matmul, InnerDimensionMismatchNamesShapes) {
  Tensor a = Tensor::empty(f32, {64, 784});
  Tensor b = Tensor::empty(f32, {128, 10});
  EXPECT_EQ(error_of([&] { matmul(a, b); }),
            "matmul: inner dimensions differ: a is f32[64,784], b is f32[128,10]");
  EXPECT_THAT(error_of([&] { matmul(Tensor::empty(f32, {3}), Tensor::empty(f32, {4})); }),
              HasSubstr("matmul: inner dimensions differ: a is f32[3], b is f32[4]"));
}

TEST(Matmul, OtherErrors) {
  EXPECT_THAT(error_of([] {
                matmul(Tensor::empty(f32, {2, 3, 4}), Tensor::empty(f32, {5, 4, 6}));
              }),
              HasSubstr("matmul: batch dimensions cannot be broadcast: a is f32[2,3,4], b is "
                        "f32[5,4,6]"));
  EXPECT_THAT(error_of([] { matmul(Tensor::scalar(1.0f), Tensor::empty(f32, {2})); }),
              HasSubstr("matmul: operands must have at least one dimension"));
}

// ---- inside a graph ----------------------------------------------------------------------------

TEST(LinalgGraph, DenseLayerRecordsAndRuns) {
  Graph g("dense");
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  Tensor w = g.constant(mat_b<float>(), "w");
  Tensor y;
  {
    auto scope = g.name_scope("dense_1");
    y = matmul(x, w);
  }
  EXPECT_EQ(y.shape(), (Shape{kUnknownDim, 2}));
  EXPECT_EQ(y.name(), "dense_1/dot:0");
  Tensor out = g.run({{x, mat_a<float>()}}, y);
  EXPECT_THAT(out.to_vector<float>(), ElementsAre(58, 64, 139, 154));
}

TEST(LinalgGraph, MismatchesAreCaughtWhenRecordingAndRunning) {
  Graph g("bad");
  Tensor x = g.placeholder(f32, {kUnknownDim, 4}, "x");
  EXPECT_THAT(error_of([&] { matmul(x, mat_b<float>()); }),
              HasSubstr("matmul: inner dimensions differ: a is f32[?,4], b is f32[3,2]"));
  // An unknown contracting size is checked when the graph runs.
  Tensor u = g.placeholder(f32, {2, kUnknownDim}, "u");
  Tensor y;
  {
    auto scope = g.name_scope("dense_2");
    y = dot(u, mat_b<float>(), {1}, {0});
  }
  std::string msg = error_of([&] { g.run({{u, Tensor::empty(f32, {2, 4})}}, y); });
  EXPECT_THAT(msg, HasSubstr("dot: contracting dimensions differ: a is f32[2,4] (dim 1 = 4)"));
  EXPECT_THAT(msg, HasSubstr("(in dense_2/dot)"));
}

}  // namespace
}  // namespace kiln
