// gather (numpy.take), scatter_add and one_hot: hand-computed cases, axes, index dtypes,
// zero-sized shapes, bounds errors and graphs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/testing/values.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
using test_values::error_of;

// ---- gather -----------------------------------------------------------------------------

TEST(Gather, RowsAlongAxis0) {
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor y = gather(x, Tensor::from_list<int64_t>({2, 0, 2}));
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{5, 6, 1, 2, 5, 6}));
}

TEST(Gather, ColumnsWithNegativeAxis) {
  Tensor x = Tensor::from_list<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = gather(x, Tensor::from_list<int32_t>({2, 0}), -1);
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(y.to_vector<int32_t>(), (std::vector<int32_t>{3, 1, 6, 4}));
}

TEST(Gather, MiddleAxisOfRank3) {
  // x[i, j, k] = 100 i + 10 j + k, shape [2, 3, 2]; take j in [1, 1, 0].
  std::vector<double> v;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) v.push_back(100 * i + 10 * j + k);
  Tensor y = gather(Tensor::from_vector(v, {2, 3, 2}), Tensor::from_list<int64_t>({1, 1, 0}), 1);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(y.to_vector<double>(),
            (std::vector<double>{10, 11, 10, 11, 0, 1, 110, 111, 110, 111, 100, 101}));
}

TEST(Gather, TwoDimensionalIndicesReplaceTheAxis) {
  Tensor x = Tensor::from_list<float>({10, 20, 30, 40});
  Tensor y = gather(x, Tensor::from_list<int64_t>({3, 0, 1, 1}, {2, 2}));
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{40, 10, 20, 20}));

  Tensor m = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor z = gather(m, Tensor::from_list<int32_t>({0, 2}, {1, 2}));
  EXPECT_EQ(z.shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{1, 2, 5, 6}));
}

TEST(Gather, ScalarIndexDropsTheAxis) {
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor y = gather(x, Tensor::scalar<int64_t>(1));
  EXPECT_EQ(y.shape(), (Shape{2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{3, 4}));
  Tensor c = gather(x, Tensor::scalar<int32_t>(1), 1);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{2, 4, 6}));
}

TEST(Gather, OtherDtypes) {
  Tensor idx = Tensor::from_list<int32_t>({1, 0, 1});
  EXPECT_EQ(gather(Tensor::from_list<bool>({true, false}), idx).to_vector<bool>(),
            (std::vector<bool>{false, true, false}));
  EXPECT_EQ(gather(Tensor::from_list<int64_t>({7, -8}), idx).to_vector<int64_t>(),
            (std::vector<int64_t>{-8, 7, -8}));
  Tensor h = gather(Tensor::from_list<float>({0.5f, 1.5f}).to(f16), idx);
  EXPECT_EQ(h.dtype(), f16);
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{1.5f, 0.5f, 1.5f}));
}

TEST(Gather, ZeroSizedIndicesAndRows) {
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor none = gather(x, Tensor::from_vector<int64_t>({}, {0}));
  EXPECT_EQ(none.shape(), (Shape{0, 2}));
  Tensor empty_rows = gather(Tensor::empty(f32, {2, 0}), Tensor::from_list<int64_t>({1}));
  EXPECT_EQ(empty_rows.shape(), (Shape{1, 0}));
}

TEST(Gather, LargeGatherMatchesElementwiseDefinition) {
  std::vector<float> v(1000 * 64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  std::vector<int64_t> idx(5000);
  for (size_t j = 0; j < idx.size(); ++j) idx[j] = (j * 7) % 1000;
  Tensor y = gather(Tensor::from_vector(v, {1000, 64}), Tensor::from_vector(idx));
  ASSERT_EQ(y.shape(), (Shape{5000, 64}));
  auto out = y.data<float>();
  for (size_t j = 0; j < idx.size(); j += 123) {
    for (int k = 0; k < 64; k += 9) ASSERT_EQ(out[j * 64 + k], idx[j] * 64 + k);
  }
}

TEST(Gather, OutOfRangeIndexNamesValuePositionAndDimension) {
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  std::string msg = error_of([&] { gather(x, Tensor::from_list<int64_t>({0, 1, 2, 3}, {2, 2})); });
  EXPECT_THAT(msg, HasSubstr("gather"));
  EXPECT_THAT(msg, HasSubstr("index 3 at position [1,1]"));
  EXPECT_THAT(msg, HasSubstr("out of range [0, 3)"));
  EXPECT_THAT(msg, HasSubstr("f32[3,2]"));
  msg = error_of([&] { gather(x, Tensor::from_list<int32_t>({-1}), 1); });
  EXPECT_THAT(msg, HasSubstr("index -1 at position [0]"));
  EXPECT_THAT(msg, HasSubstr("[0, 2) for axis 1"));
  try {
    gather(x, Tensor::from_list<int32_t>({5}));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
  }
}

TEST(Gather, InvalidArguments) {
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_THAT(error_of([&] { gather(x, Tensor::from_list<float>({0})); }),
              HasSubstr("gather: indices must be i32 or i64, got f32[1]"));
  EXPECT_THAT(error_of([&] { gather(x, Tensor::from_list<int64_t>({0}), 2); }),
              HasSubstr("axis 2 is out of range for shape [3,2]"));
  EXPECT_THAT(error_of([&] { gather(Tensor::scalar(1.0f), Tensor::from_list<int64_t>({0})); }),
              HasSubstr("rank >= 1"));
}

TEST(Gather, InAGraph) {
  Graph g;
  Tensor x = g.placeholder(f32, {kUnknownDim, 2}, "x");
  Tensor idx = g.placeholder(i64, {kUnknownDim}, "idx");
  Tensor y = gather(x, idx);
  EXPECT_EQ(y.shape(), (Shape{kUnknownDim, 2}));
  Tensor out = g.run({{x, Tensor::from_list<float>({1, 2, 3, 4}, {2, 2})},
                      {idx, Tensor::from_list<int64_t>({1, 1, 0})}},
                     y);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{3, 4, 3, 4, 1, 2}));
  // A bad index is found at run time and names the node.
  std::string msg = error_of([&] {
    g.run({{x, Tensor::from_list<float>({1, 2, 3, 4}, {2, 2})},
           {idx, Tensor::from_list<int64_t>({2})}},
          y);
  });
  EXPECT_THAT(msg, HasSubstr("gather: index 2 at position [0]"));
}

// ---- scatter_add ------------------------------------------------------------------------

TEST(ScatterAdd, DuplicateIndicesAccumulate) {
  Tensor y =
      scatter_add(Tensor::from_list<float>({0, 0, 0, 0}), Tensor::from_list<int64_t>({1, 3, 1}),
                  Tensor::from_list<float>({1, 2, 10}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 11, 0, 2}));
}

TEST(ScatterAdd, RowsAlongAxis0KeepX) {
  Tensor x = Tensor::from_list<int32_t>({1, 1, 1, 1, 1, 1}, {3, 2});
  Tensor y = scatter_add(x, Tensor::from_list<int32_t>({2, 0}),
                         Tensor::from_list<int32_t>({10, 20, 30, 40}, {2, 2}));
  EXPECT_EQ(y.dtype(), i32);
  EXPECT_EQ(y.to_vector<int32_t>(), (std::vector<int32_t>{31, 41, 1, 1, 11, 21}));
  EXPECT_EQ(x.to_vector<int32_t>(), (std::vector<int32_t>(6, 1)));  // x is unchanged
}

TEST(ScatterAdd, NegativeAxis) {
  Tensor x = Tensor::from_list<double>({1, 1, 1, 1, 1, 1}, {2, 3});
  Tensor y = scatter_add(x, Tensor::from_list<int64_t>({0, 2, 0}),
                         Tensor::from_list<double>({1, 2, 3, 4, 5, 6}, {2, 3}), -1);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{5, 1, 3, 11, 1, 6}));
}

TEST(ScatterAdd, TwoDimensionalIndices) {
  Tensor y = scatter_add(Tensor::from_list<float>({0, 0, 0}),
                         Tensor::from_list<int64_t>({0, 1, 1, 2}, {2, 2}),
                         Tensor::from_list<float>({1, 2, 3, 4}, {2, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 5, 4}));
}

TEST(ScatterAdd, PromotesUpdatesToTheCommonType) {
  Tensor y = scatter_add(Tensor::from_list<float>({0.5f, 0.5f}), Tensor::from_list<int32_t>({1}),
                         Tensor::from_list<int32_t>({2}));
  EXPECT_EQ(y.dtype(), f32);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0.5f, 2.5f}));
}

TEST(ScatterAdd, ZeroSizedUpdatesReturnX) {
  Tensor x = Tensor::from_list<float>({1, 2});
  Tensor y = scatter_add(x, Tensor::from_vector<int64_t>({}, {0}), Tensor::empty(f32, {0}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2}));
}

TEST(ScatterAdd, LargeScatterIsExactAndDeterministic) {
  // 3 rows of 20000 columns, each row scattered into row 0 and row 2 of x.
  const int64_t n = 20000;
  std::vector<float> updates(3 * n);
  for (int64_t i = 0; i < 3 * n; ++i) updates[i] = static_cast<float>(i % 7);
  Tensor idx = Tensor::from_list<int64_t>({0, 2, 0});
  Tensor u = Tensor::from_vector(updates, {3, n});
  Tensor y = scatter_add(Tensor::from_vector(std::vector<float>(3 * n, 0), {3, n}), idx, u);
  auto out = y.data<float>();
  for (int64_t k = 0; k < n; k += 97) {
    ASSERT_EQ(out[k], static_cast<float>(k % 7 + (2 * n + k) % 7));
    ASSERT_EQ(out[n + k], 0.0f);
    ASSERT_EQ(out[2 * n + k], static_cast<float>((n + k) % 7));
  }
}

TEST(ScatterAdd, ErrorsNameShapesAndIndices) {
  Tensor x = Tensor::from_list<float>({0, 0, 0, 0, 0, 0}, {3, 2});
  std::string msg = error_of([&] {
    scatter_add(x, Tensor::from_list<int64_t>({0, 1}), Tensor::from_list<float>({1, 2}));
  });
  EXPECT_THAT(msg, HasSubstr("scatter_add: updates must have shape [2,2]"));
  EXPECT_THAT(msg, HasSubstr("f32[2]"));
  msg = error_of([&] {
    scatter_add(x, Tensor::from_list<int64_t>({3}), Tensor::from_list<float>({1, 2}, {1, 2}));
  });
  EXPECT_THAT(msg, HasSubstr("scatter_add: index 3 at position [0]"));
  msg = error_of([&] {
    call_op("scatter_add",
            {x, Tensor::from_list<int64_t>({0}), Tensor::from_list<double>({1, 2}, {1, 2})});
  });
  EXPECT_THAT(msg, HasSubstr("updates must have the dtype of x"));
}

TEST(ScatterAdd, InAGraph) {
  Graph g;
  Tensor x = g.placeholder(f32, {3}, "x");
  Tensor idx = g.placeholder(i32, {kUnknownDim}, "idx");
  Tensor u = g.placeholder(f32, {kUnknownDim}, "u");
  Tensor y = scatter_add(x, idx, u);
  Tensor out = g.run({{x, Tensor::from_list<float>({1, 2, 3})},
                      {idx, Tensor::from_list<int32_t>({2, 2})},
                      {u, Tensor::from_list<float>({10, 20})}},
                     y);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2, 33}));
}

// ---- one_hot ----------------------------------------------------------------------------

TEST(OneHot, RowsOfTheIdentity) {
  Tensor y = one_hot(Tensor::from_list<int64_t>({0, 2, 1}), 3);
  EXPECT_EQ(y.dtype(), f32);
  EXPECT_EQ(y.shape(), (Shape{3, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 0, 1, 0, 1, 0}));
}

TEST(OneHot, OutOfRangeIndicesGiveZeroRows) {
  Tensor y = one_hot(Tensor::from_list<int32_t>({-1, 3, 1}), 3, i32);
  EXPECT_EQ(y.dtype(), i32);
  EXPECT_EQ(y.to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 0, 1, 0}));
}

TEST(OneHot, TwoDimensionalIndicesAddALastAxis) {
  Tensor y = one_hot(Tensor::from_list<int64_t>({1, 0, 0, 1}, {2, 2}), 2, bool_);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(y.to_vector<bool>(),
            (std::vector<bool>{false, true, true, false, true, false, false, true}));
}

TEST(OneHot, ScalarIndex) {
  Tensor y = one_hot(Tensor::scalar<int64_t>(2), 4);
  EXPECT_EQ(y.shape(), (Shape{4}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 0, 1, 0}));
}

TEST(OneHot, RejectsFloatIndicesAndNegativeDepth) {
  EXPECT_THAT(error_of([] { one_hot(Tensor::from_list<float>({1}), 3); }),
              HasSubstr("one_hot: indices must be an integer tensor, got f32[1]"));
  EXPECT_THAT(error_of([] { one_hot(Tensor::from_list<int64_t>({1}), -2); }),
              HasSubstr("one_hot: depth must be non-negative, got -2"));
}

TEST(OneHot, InAGraph) {
  Graph g;
  Tensor labels = g.placeholder(i64, {kUnknownDim}, "labels");
  Tensor y = one_hot(labels, 3);
  Tensor out = g.run({{labels, Tensor::from_list<int64_t>({2, 0})}}, y);
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{0, 0, 1, 1, 0, 0}));
}

}  // namespace
}  // namespace kiln
